//! HTTP front of the emulator: routes Kubernetes REST paths onto [`Store`] calls and streams watches.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};
use tokio::sync::{Notify, broadcast, mpsc, watch};

use super::error::{ApiError, ApiResult};
use super::fields::{self, FieldValidation};
use super::registry::ResourceType;
use super::selectors::{FieldSelector, LabelSelector, Selectors};
use super::store::{DeleteOptions, PatchType, Store, Target, WriteOptions};
use super::table::{IncludeObject, Representation};

mod discovery;
mod logs;
mod watch_stream;

use discovery::{api_group, group_list, resource_list};
use watch_stream::watch_response;

/// kube-apiserver's limit on a request body.
const MAX_BODY_BYTES: usize = super::store::MAX_REQUEST_BODY_BYTES;
/// How much of a refused body is read and dropped so the client gets to read the 413.
const DRAIN_LIMIT_BYTES: usize = 64 * 1024 * 1024;
/// How often a watch that asked for bookmarks gets one.
const BOOKMARK_INTERVAL: Duration = Duration::from_secs(1);

/// What the HTTP handlers share: the store and the signals around it.
#[derive(Debug)]
pub struct Shared {
    pub store: Mutex<Store>,
    /// Bumped to end every open watch (a test's stand-in for an apiserver restart).
    pub watch_epoch: watch::Sender<u64>,
    /// Woken after writes so the garbage collector runs.
    pub gc: Notify,
    /// The version `/version` reports.
    pub server_version: (u32, u32),
    /// The gates it was started with ([`super::ApiServerOptions::feature_gates`]).
    pub feature_gates: super::gates::FeatureGates,
}

impl Shared {
    pub fn lock(&self) -> MutexGuard<'_, Store> {
        // A panic while holding the lock is a bug in the emulator; keep serving what is left.
        self.store
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

pub type Body = BoxBody<Bytes, Infallible>;

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed()
}

fn json_response(code: u16, body: &Value) -> Response<Body> {
    let mut response = Response::new(full(body.to_string()));
    *response.status_mut() =
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

fn error_response(err: &ApiError) -> Response<Body> {
    json_response(err.code, &err.to_status())
}

/// A query value as Go's `url.ParseQuery` reads it (`+` is a space). A `%` not followed by
/// two hex digits stays as it is; the digits are read as bytes, so a `%` before a
/// multi-byte character cannot split it.
pub(crate) fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let hex = |b: u8| (b as char).to_digit(16);
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(high), Some(low)) => {
                    out.push((high * 16 + low) as u8);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Every byte but the unreserved ones (RFC 3986) as `%XX`: a value in a URI we build.
pub(crate) fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn parse_query(query: Option<&str>) -> HashMap<String, String> {
    query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

/// An `int64` query parameter (`timeoutSeconds`, `limit`, `gracePeriodSeconds`), read as
/// kube-apiserver's parameter codec reads it (apimachinery `runtime.string_to_int64`,
/// `strconv.ParseInt(in, 10, 64)`), refused with its words as a 400 (`DecodeParameters`
/// errors become `NewBadRequest`, apiserver `endpoints/handlers/get.go`).
fn int64_param(query: &HashMap<String, String>, key: &str) -> ApiResult<Option<i64>> {
    let Some(text) = query.get(key) else {
        return Ok(None);
    };
    text.parse::<i64>().map(Some).map_err(|e| {
        let why = match e.kind() {
            std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => {
                "value out of range"
            }
            _ => "invalid syntax",
        };
        ApiError::bad_request(format!("strconv.ParseInt: parsing {text:?}: {why}"))
    })
}

fn flag(query: &HashMap<String, String>, key: &str) -> bool {
    matches!(query.get(key).map(String::as_str), Some("true" | "1"))
}

/// The request headers the handlers read.
#[derive(Debug, Default)]
struct Headers {
    content_type: String,
    user_agent: String,
    accept: String,
    /// `Impersonate-User` and every `Impersonate-Group` (`kubectl --as`, `--as-group`).
    impersonate_user: Option<String>,
    impersonate_groups: Vec<String>,
}

/// Entry point for one request.
pub async fn handle(
    shared: Arc<Shared>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let query = parse_query(req.uri().query());
    let header = |name: hyper::header::HeaderName| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let headers = Headers {
        content_type: header(hyper::header::CONTENT_TYPE),
        user_agent: header(hyper::header::USER_AGENT),
        accept: header(hyper::header::ACCEPT),
        impersonate_user: req
            .headers()
            .get("impersonate-user")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
        impersonate_groups: req
            .headers()
            .get_all("impersonate-group")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::to_string)
            .collect(),
    };
    let body = match read_body(req.into_body()).await {
        Ok(body) => body,
        Err(too_large) => return Ok(too_large.response()),
    };
    let response = route(&shared, &method, &path, &query, &headers, body).await;
    tracing::debug!(%method, %path, status = response.status().as_u16(), "emulated apiserver request");
    if method != Method::GET {
        shared.gc.notify_one();
    }
    Ok(response)
}

/// Reads the request body, refusing one over [`MAX_BODY_BYTES`] as kube-apiserver does
/// (k8s.io/apiserver endpoints/handlers `limitedReadBody`: 413 RequestEntityTooLarge,
/// `Request entity too large: limit is 3145728`).
///
/// A refused body is still read to its end, up to [`DRAIN_LIMIT_BYTES`], before the answer
/// goes out: a server that answers and closes while the client is still sending resets the
/// connection, and the client sees a broken pipe instead of the 413 (Go's net/http drains
/// what it can after the handler for the same reason).
async fn read_body(mut body: Incoming) -> Result<Bytes, BodyTooLarge> {
    let mut collected = Vec::new();
    let mut seen = 0usize;
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else {
            // The client went away mid-body; nobody reads an answer.
            break;
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        seen = seen.saturating_add(data.len());
        if seen <= MAX_BODY_BYTES {
            collected.extend_from_slice(&data);
        } else if seen > DRAIN_LIMIT_BYTES {
            return Err(BodyTooLarge { drained: false });
        } else {
            collected = Vec::new();
        }
    }
    if seen > MAX_BODY_BYTES {
        return Err(BodyTooLarge { drained: true });
    }
    Ok(Bytes::from(collected))
}

/// A request body over [`MAX_BODY_BYTES`]; `drained` when it was read to its end.
#[derive(Debug)]
struct BodyTooLarge {
    drained: bool,
}

impl BodyTooLarge {
    fn response(&self) -> Response<Body> {
        let mut response = error_response(&super::store::request_too_large());
        // The connection ends after the answer (what is left of an undrained body cannot
        // be skipped reliably), as Go's server closes after an unread large body.
        response.headers_mut().insert(
            hyper::header::CONNECTION,
            hyper::header::HeaderValue::from_static("close"),
        );
        tracing::debug!(
            drained = self.drained,
            "emulated apiserver: request body over the limit refused"
        );
        response
    }
}

async fn route(
    shared: &Arc<Shared>,
    method: &Method,
    path: &str,
    query: &HashMap<String, String>,
    headers: &Headers,
    body: Bytes,
) -> Response<Body> {
    let segments: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let discovery = match segments.as_slice() {
        ["version"] => {
            let (major, minor) = shared.server_version;
            Some(Ok(
                json!({"major": major.to_string(), "minor": minor.to_string(), "gitVersion": format!("v{major}.{minor}.0-fake-dra-emulator"), "platform": "linux/amd64"}),
            ))
        }
        ["healthz" | "livez" | "readyz"] => return Response::new(full("ok")),
        ["api"] => Some(Ok(
            json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}),
        )),
        ["apis"] => Some(Ok(group_list(&shared.lock()))),
        ["apis", group] => Some(api_group(&shared.lock(), group)),
        ["api", "v1"] => Some(resource_list(&shared.lock(), "", "v1")),
        ["apis", group, version] => Some(resource_list(&shared.lock(), group, version)),
        ["openapi", "v3"] => Some(Ok(super::openapi::v3_discovery(&shared.lock()))),
        ["openapi", "v3", "api", version] => Some(
            super::openapi::v3_group_version(&shared.lock(), "", version)
                .ok_or_else(|| ApiError::no_route(path)),
        ),
        ["openapi", "v3", "apis", group, version] => Some(
            super::openapi::v3_group_version(&shared.lock(), group, version)
                .ok_or_else(|| ApiError::no_route(path)),
        ),
        _ => None,
    };
    if let Some(result) = discovery {
        if method != Method::GET {
            return error_response(&ApiError::method_not_allowed());
        }
        return match result {
            Ok(v) => json_response(200, &v),
            Err(e) => error_response(&e),
        };
    }
    let (group, version, rest) = match segments.as_slice() {
        ["api", "v1", rest @ ..] => ("", "v1", rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return error_response(&ApiError::no_route(path)),
    };
    let target = match resolve_target(&shared.lock(), group, version, rest) {
        Ok(t) => t,
        Err(e) => return error_response(&e),
    };
    if let Some(answer) = review(shared, method, &target, headers, &body) {
        return match answer {
            Ok(v) => json_response(201, &v),
            Err(e) => error_response(&e),
        };
    }
    match serve_resource(shared, method, &target, query, headers, body).await {
        Ok(response) => response,
        Err(e) => error_response(&e),
    }
}

/// A review's answer (`kubectl auth can-i`, `whoami`), or `None` when the target is not
/// a review. Reviews are created and never stored: every other verb answers 405.
fn review(
    shared: &Arc<Shared>,
    method: &Method,
    target: &Target,
    headers: &Headers,
    body: &Bytes,
) -> Option<ApiResult<Value>> {
    let store = shared.lock();
    let rt = store.resolve(&target.key.group, &target.version, &target.key.plural)?;
    if !rt.review {
        return None;
    }
    if *method != Method::POST || target.name.is_some() {
        return Some(Err(ApiError::method_not_allowed()));
    }
    let who = match super::reviews::Requester::from_headers(
        headers.impersonate_user.as_deref(),
        &headers.impersonate_groups,
    ) {
        Ok(who) => who,
        Err(e) => return Some(Err(e)),
    };
    let protobuf = headers
        .content_type
        .starts_with("application/vnd.kubernetes.protobuf");
    let body = if protobuf {
        super::protobuf::review_as_json(&rt.kind, body)
    } else {
        decode_json(body)
    };
    match body {
        Ok(body) => super::reviews::answer(&store, rt, &who, &body),
        Err(e) => Some(Err(e)),
    }
}

/// What a user can do instead of a pod subresource the emulator refuses, named after the
/// kubectl command that asked for it.
fn subresource_advice(pod: bool, subresource: &str) -> &'static str {
    match (pod, subresource) {
        (true, "exec") => {
            " (kubectl exec): the sim runs containers without an exec channel; put the command in the container's `command` and read its output with kubectl logs"
        }
        (true, "attach") => {
            " (kubectl attach): read the container's output with kubectl logs -f instead"
        }
        (true, "portforward") => {
            " (kubectl port-forward): the sim's containers share the host's network, so a port they listen on is reachable on 127.0.0.1 directly"
        }
        (true, "eviction") => " (kubectl drain): delete the pods instead (kubectl delete pod)",
        (true, "proxy") => {
            " (kubectl proxy to a pod): the sim's containers share the host's network; connect to 127.0.0.1"
        }
        _ => "",
    }
}

fn resolve_target(store: &Store, group: &str, version: &str, rest: &[&str]) -> ApiResult<Target> {
    let lookup = |plural: &str| -> ApiResult<ResourceType> {
        store
            .resolve(group, version, plural)
            .cloned()
            .ok_or_else(|| ApiError::no_route(&format!("{group}/{version}/{plural}")))
    };
    // `namespaces/<ns>/<plural>...` names a namespaced resource; `namespaces/<name>[/status]`
    // is the Namespace object itself.
    let (namespace, rest) = match rest {
        ["namespaces", ns, plural, more @ ..]
            if !(group.is_empty()
                && more.is_empty()
                && matches!(*plural, "status" | "finalize")) =>
        {
            (Some(ns.to_string()), {
                let mut v = vec![*plural];
                v.extend_from_slice(more);
                v
            })
        }
        other => (None, other.to_vec()),
    };
    let (plural, name, subresource) = match rest.as_slice() {
        [plural] => (*plural, None, None),
        [plural, name] => (*plural, Some(name.to_string()), None),
        [plural, name, sub] => (*plural, Some(name.to_string()), Some(sub.to_string())),
        _ => return Err(ApiError::no_route(&rest.join("/"))),
    };
    let rt = lookup(plural)?;
    if namespace.is_some() && !rt.namespaced {
        return Err(ApiError::no_route(&format!(
            "{} is cluster-scoped and has no namespaced path",
            rt.qualified()
        )));
    }
    if namespace.is_none() && rt.namespaced && name.is_some() {
        return Err(ApiError::no_route(&format!(
            "{} is namespaced: name a namespace in the path",
            rt.qualified()
        )));
    }
    if let Some(sub) = &subresource {
        let pod_sub = rt.group.is_empty() && rt.plural == "pods";
        let known = (sub == "status" && rt.status_subresource)
            || (matches!(sub.as_str(), "binding" | "log") && pod_sub);
        if !known {
            return Err(ApiError::not_implemented(format!(
                "the {sub:?} subresource of {}{}",
                rt.qualified(),
                subresource_advice(pod_sub, sub)
            )));
        }
    }
    Ok(Target {
        key: rt.key(),
        version: version.to_string(),
        namespace,
        name,
        subresource,
    })
}

fn selectors(target: &Target, query: &HashMap<String, String>) -> ApiResult<Selectors> {
    Ok(Selectors {
        labels: LabelSelector::parse(
            query
                .get("labelSelector")
                .map(String::as_str)
                .unwrap_or_default(),
        )?,
        fields: FieldSelector::parse(
            query
                .get("fieldSelector")
                .map(String::as_str)
                .unwrap_or_default(),
            &target.key.group,
            &target.key.plural,
        )?,
    })
}

fn decode_json(body: &Bytes) -> ApiResult<Value> {
    serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!("couldn't decode the request body as JSON: {e}"))
    })
}

/// The media type of a create's, update's or delete's body must be JSON. kube-apiserver
/// also reads YAML and protobuf (`NegotiateInputSerializer`) and answers any other type
/// 415 with `NewUnsupportedMediaTypeError`'s words; the emulator decodes JSON only, and says
/// so with the same status, naming the type it got. Protobuf is what typed Go clients send:
/// kubectl's `create namespace|configmap|secret|deployment|...` (JSON would need the
/// upstream .proto schemas of every built-in kind, and no client-go falls back from
/// protobuf on a 415: only CBOR requests do, `requestClientContentConfigProvider`).
fn check_body_media_type(content_type: &str) -> ApiResult<()> {
    let media = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    if media.is_empty() || media == "application/json" || media == "*/*" {
        return Ok(());
    }
    let advice = if media == "application/vnd.kubernetes.protobuf" {
        "; kubectl's create namespace/configmap/secret/deployment/job/service send protobuf: run them as 'kubectl create ... --dry-run=client -o yaml | kubectl apply -f -' (or kubectl apply -f a file), which sends JSON"
    } else {
        ""
    };
    Err(ApiError::unsupported_media_type(format!(
        "the body of the request was in an unknown format - accepted media types include: application/json (emulator: {media} bodies are not decoded{advice})"
    )))
}

fn refuse_unimplemented_params(query: &HashMap<String, String>) -> ApiResult<()> {
    if query.contains_key("dryRun") {
        return Err(ApiError::not_implemented("dryRun"));
    }
    Ok(())
}

/// A `Warning` response header (RFC 7234 `warn-code warn-agent "warn-text"`), as the
/// apiserver sends them: code 299, agent `-`.
fn with_warnings(mut response: Response<Body>, warnings: &[String]) -> Response<Body> {
    for warning in warnings {
        let text = warning.replace('\\', "\\\\").replace('"', "\\\"");
        match hyper::header::HeaderValue::from_str(&format!("299 - \"{text}\"")) {
            Ok(value) => {
                response.headers_mut().append(hyper::header::WARNING, value);
            }
            Err(_) => tracing::debug!(
                warning,
                "a warning that is no valid header value was not sent"
            ),
        }
    }
    response
}

async fn serve_resource(
    shared: &Arc<Shared>,
    method: &Method,
    target: &Target,
    query: &HashMap<String, String>,
    headers: &Headers,
    body: Bytes,
) -> ApiResult<Response<Body>> {
    refuse_unimplemented_params(query)?;
    let content_type = headers.content_type.as_str();
    let user_agent = headers.user_agent.as_str();
    // The verbs each subresource's REST storage serves (status: get, update, patch;
    // pods/binding: create; pods/log: get); any other answers 405, as go-restful does for
    // a path without a route for the method.
    let allowed: &[Method] = match target.subresource.as_deref() {
        None => &[],
        Some("status") => &[Method::GET, Method::PUT, Method::PATCH],
        Some("binding") => &[Method::POST],
        Some(_) => &[Method::GET],
    };
    if target.subresource.is_some() && !allowed.contains(method) {
        return Err(ApiError::method_not_allowed());
    }
    // What the body is to be (a Table for `kubectl get`), settled before anything is done.
    let view = View::negotiate(shared, target, &headers.accept, query)?;
    let mut opts = WriteOptions {
        field_manager: query.get("fieldManager").cloned(),
        user_agent: user_agent.to_string(),
        force: flag(query, "force"),
        field_validation: FieldValidation::from_query(
            query.get("fieldValidation").map(String::as_str),
        )?,
        duplicate_fields: Vec::new(),
        patch_op_issues: Vec::new(),
    };
    if matches!(*method, Method::POST | Method::PUT)
        || (*method == Method::DELETE && !body.is_empty())
    {
        check_body_media_type(content_type)?;
    }
    let options_kind = match *method {
        Method::POST => Some("CreateOptions.meta.k8s.io"),
        Method::PUT => Some("UpdateOptions.meta.k8s.io"),
        Method::PATCH => Some("PatchOptions.meta.k8s.io"),
        _ => None,
    };
    if let (Some(kind), Some(manager)) = (options_kind, opts.field_manager.as_deref()) {
        validate_field_manager(kind, manager)?;
    }
    let is_collection = target.name.is_none();
    match (method.clone(), is_collection) {
        (Method::GET, true) if flag(query, "watch") => watch_response(shared, target, query, view),
        (Method::GET, true) => {
            let sel = selectors(target, query)?;
            let mut store = shared.lock();
            check_list_resource_version(&store, query)?;
            // A limit of 0 or less asks for everything, as upstream's storage reads it.
            let limit = int64_param(query, "limit")?
                .and_then(|l| usize::try_from(l).ok())
                .filter(|l| *l > 0);
            let list = store.list(
                target,
                &sel,
                limit,
                query.get("continue").map(String::as_str),
            )?;
            Ok(json_response(200, &view.render(&list)))
        }
        (Method::GET, false) if target.subresource.as_deref() == Some("log") => {
            logs::pod_log(shared, target, query).await
        }
        (Method::GET, false) => Ok(json_response(
            200,
            &view.render(&shared.lock().get(target)?),
        )),
        (Method::POST, true) => {
            let object = decode_json(&body)?;
            opts.duplicate_fields = fields::duplicate_fields(&body);
            let mut store = shared.lock();
            store.take_warnings();
            let created = store.create(target, object, &opts)?;
            Ok(with_warnings(
                json_response(201, &view.render(&created)),
                &store.take_warnings(),
            ))
        }
        (Method::POST, false) if target.subresource.as_deref() == Some("binding") => Ok(
            json_response(201, &shared.lock().bind_pod(target, &decode_json(&body)?)?),
        ),
        (Method::PUT, false) => {
            let object = decode_json(&body)?;
            opts.duplicate_fields = fields::duplicate_fields(&body);
            let mut store = shared.lock();
            store.take_warnings();
            let updated = store.update(target, object, &opts)?;
            Ok(with_warnings(
                json_response(200, &view.render(&updated)),
                &store.take_warnings(),
            ))
        }
        (Method::PATCH, false) => {
            let patch_type = match content_type.split(';').next().unwrap_or_default().trim() {
                "application/merge-patch+json" => PatchType::Merge,
                "application/json-patch+json" => PatchType::Json,
                "application/strategic-merge-patch+json" => PatchType::Strategic,
                "application/apply-patch+yaml" => PatchType::Apply,
                other => {
                    return Err(ApiError::unsupported_media_type(format!(
                        "the body of the request was in an unknown format ({other:?}) - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
                    )));
                }
            };
            if patch_type != PatchType::Apply && query.contains_key("force") {
                return Err(ApiError::bad_request(
                    "force may only be set for apply patches",
                ));
            }
            match patch_type {
                PatchType::Merge | PatchType::Strategic => {
                    opts.duplicate_fields = fields::duplicate_fields(&body);
                }
                PatchType::Json => opts.patch_op_issues = fields::json_patch_op_issues(&body),
                PatchType::Apply => opts.duplicate_fields = fields::duplicate_fields_yaml(&body),
            }
            let mut store = shared.lock();
            store.take_warnings();
            let patched = store.patch(target, patch_type, &body, &opts)?;
            Ok(with_warnings(
                json_response(200, &view.render(&patched)),
                &store.take_warnings(),
            ))
        }
        (Method::DELETE, collection) => {
            let opts = delete_options(query, &body)?;
            let mut store = shared.lock();
            if collection {
                let sel = selectors(target, query)?;
                Ok(json_response(
                    200,
                    &store.delete_collection(target, &sel, &opts)?,
                ))
            } else {
                Ok(json_response(200, &store.delete(target, &opts)?))
            }
        }
        _ => Err(ApiError::method_not_allowed()),
    }
}

/// apimachinery's `FieldManagerMaxLength`.
const FIELD_MANAGER_MAX_LENGTH: usize = 128;

/// `ValidateFieldManager` (apimachinery `pkg/apis/meta/v1/validation`): at most 128 bytes,
/// printable characters only; refused as the create, update or patch handler refuses its
/// options (`NewInvalid` of `CreateOptions`/`UpdateOptions`/`PatchOptions`, 422).
fn validate_field_manager(options_kind: &str, manager: &str) -> ApiResult<()> {
    let mut causes = Vec::new();
    if manager.len() > FIELD_MANAGER_MAX_LENGTH {
        causes.push(super::error::FieldCause::too_long(
            "fieldManager",
            FIELD_MANAGER_MAX_LENGTH,
        ));
    }
    // Go's unicode.IsPrint: no control, format or separator character but the ASCII space.
    for (i, c) in manager.char_indices() {
        if c.is_control() || (c.is_whitespace() && c != ' ') {
            causes.push(super::error::FieldCause::invalid(
                "fieldManager",
                &Value::String(manager.to_string()),
                format!("invalid character U+{:04X} (at position {i})", u32::from(c)),
            ));
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(options_kind, "", causes))
    }
}

/// How a response body is rendered: as stored, or as the Table / metadata the `Accept`
/// header asked for ([`super::table`]).
#[derive(Debug, Clone)]
pub(super) struct View {
    representation: Representation,
    resource: Option<(ResourceType, String, (u32, u32))>,
    include: IncludeObject,
}

impl View {
    fn negotiate(
        shared: &Shared,
        target: &Target,
        accept: &str,
        query: &HashMap<String, String>,
    ) -> ApiResult<Self> {
        let representation = super::table::negotiate(accept)?;
        let resource = shared
            .lock()
            .types()
            .find(|t| t.key() == target.key && t.serves(&target.version))
            .cloned()
            .map(|t| (t, target.version.clone(), shared.server_version));
        Ok(Self {
            representation,
            resource,
            include: IncludeObject::from_query(query.get("includeObject").map(String::as_str))?,
        })
    }

    pub(super) fn render(&self, body: &Value) -> Value {
        match (&self.resource, self.representation) {
            (_, Representation::Object) | (None, _) => body.clone(),
            (Some((rt, version, server)), representation) => {
                super::table::represent(representation, rt, version, *server, body, self.include)
            }
        }
    }
}

/// `resourceVersion` on a list: unset, "0" and NotOlderThan are served from the current
/// state (always at least as new as asked); an Exact older version would need history the
/// store does not keep as snapshots, so it is refused.
fn check_list_resource_version(store: &Store, query: &HashMap<String, String>) -> ApiResult<()> {
    let Some(rv) = query
        .get("resourceVersion")
        .filter(|rv| !rv.is_empty() && *rv != "0")
    else {
        return Ok(());
    };
    let asked: u64 = rv
        .parse()
        .map_err(|_| ApiError::bad_request(format!("invalid resource version {rv:?}")))?;
    if asked > store.revision() {
        return Err(ApiError::resource_version_too_large(
            asked,
            store.revision(),
        ));
    }
    if query
        .get("resourceVersionMatch")
        .is_some_and(|m| m == "Exact")
        && asked != store.revision()
    {
        return Err(ApiError::not_implemented(
            "resourceVersionMatch=Exact for a past resourceVersion",
        ));
    }
    Ok(())
}

fn delete_options(query: &HashMap<String, String>, body: &Bytes) -> ApiResult<DeleteOptions> {
    let from_body: Value = if body.is_empty() {
        Value::Null
    } else {
        decode_json(body)?
    };
    let grace = int64_param(query, "gracePeriodSeconds")?
        .or_else(|| from_body.get("gracePeriodSeconds").and_then(Value::as_i64));
    if from_body
        .get("dryRun")
        .is_some_and(|d| d.as_array().is_some_and(|a| !a.is_empty()))
    {
        return Err(ApiError::not_implemented("dryRun"));
    }
    let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
    Ok(DeleteOptions {
        grace_period_seconds: grace,
        propagation_policy: query
            .get("propagationPolicy")
            .cloned()
            .or_else(|| text(from_body.get("propagationPolicy"))),
        precondition_uid: text(from_body.pointer("/preconditions/uid")),
        precondition_resource_version: text(from_body.pointer("/preconditions/resourceVersion")),
    })
}

#[cfg(test)]
mod tests {
    use super::{percent_decode, percent_encode};

    #[test]
    fn percent_coding_round_trips_and_never_splits_a_character() {
        let text = "2026-12-06 12:00:00+14:00 é/?&=%";
        assert_eq!(percent_decode(&percent_encode(text)), text);
        assert_eq!(percent_decode("%aé%zz%4"), "%aé%zz%4");
        assert_eq!(percent_decode("a+b%3A"), "a b:");
    }
}
