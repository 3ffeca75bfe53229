//! The API server's HTTP side: routes, list and watch responses, Status errors.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tracing::debug;

use super::ApiVersion;
use super::store::{Kind, Refused, Store};

type Body = BoxBody<Bytes, Infallible>;

/// The most bytes of a request body read (a ResourceSlice of 128 devices is far less).
const MAX_BODY: usize = 3 << 20;

/// Serves until the task is aborted.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    store: Arc<Store>,
    version: ApiVersion,
) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let store = store.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let store = store.clone();
                async move { Ok::<_, Infallible>(route(req, store, version).await) }
            });
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                debug!(error = %e, "test API server connection ended");
            }
        });
    }
}

fn json_response(code: StatusCode, body: &Value) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())).boxed());
    *response.status_mut() = code;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

fn status(refused: &Refused) -> Response<Body> {
    json_response(
        StatusCode::from_u16(refused.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        &json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": refused.message, "reason": refused.reason, "code": refused.code,
        }),
    )
}

fn refused(code: u16, reason: &'static str, message: impl Into<String>) -> Response<Body> {
    status(&Refused {
        code,
        reason,
        message: message.into(),
    })
}

/// A request's path as a resource: `/api/v1/...` or `/apis/<group>/<version>/...`, then
/// `[namespaces/<ns>/]<resource>[/<name>[/<subresource>]]`.
#[derive(Debug)]
struct Target {
    kind: Kind,
    api_version: String,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
}

fn target(path: &str) -> Option<Target> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match parts.as_slice() {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some((*ns).to_owned()), rest),
        rest => (None, rest),
    };
    let (resource, name, subresource) = match rest {
        [resource] => (*resource, None, None),
        [resource, name] => (*resource, Some((*name).to_owned()), None),
        [resource, name, sub] => (*resource, Some((*name).to_owned()), Some((*sub).to_owned())),
        _ => return None,
    };
    Some(Target {
        kind: Kind::new(group, version, resource),
        api_version: if group.is_empty() {
            version.to_owned()
        } else {
            format!("{group}/{version}")
        },
        namespace,
        name,
        subresource,
    })
}

/// `k=v`, `k==v` and `k!=v` terms of a field selector, each a dotted path into the object.
fn matches_fields(obj: &Value, selector: &str) -> bool {
    selector.split(',').filter(|t| !t.is_empty()).all(|term| {
        let (path, want, equal) = if let Some((p, v)) = term.split_once("!=") {
            (p, v, false)
        } else if let Some((p, v)) = term.split_once("==") {
            (p, v, true)
        } else if let Some((p, v)) = term.split_once('=') {
            (p, v, true)
        } else {
            return false;
        };
        let found = path
            .split('.')
            .try_fold(obj, |v, key| v.get(key))
            .map(|v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .unwrap_or_default();
        (found == want) == equal
    })
}

fn query(req: &Request<Incoming>, key: &str) -> Option<String> {
    req.uri().query().and_then(|q| {
        q.split('&').find_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (k == key).then(|| percent_decode(v))
        })
    })
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The object as a reader through `api_version` sees it.
fn as_version(mut obj: Value, api_version: &str) -> Value {
    obj["apiVersion"] = json!(api_version);
    obj
}

async fn route(req: Request<Incoming>, store: Arc<Store>, version: ApiVersion) -> Response<Body> {
    let path = req.uri().path().to_owned();
    match path.as_str() {
        "/version" => {
            return json_response(
                StatusCode::OK,
                &json!({
                    "major": "1", "minor": version.minor.to_string(),
                    "gitVersion": format!("v1.{}.0", version.minor), "platform": "linux/amd64",
                }),
            );
        }
        "/apis" => {
            let versions: Vec<Value> = version
                .resource_versions()
                .iter()
                .map(|v| json!({"groupVersion": format!("resource.k8s.io/{v}"), "version": v}))
                .collect();
            return json_response(
                StatusCode::OK,
                &json!({
                    "kind": "APIGroupList", "apiVersion": "v1",
                    "groups": [{"name": "resource.k8s.io", "versions": versions, "preferredVersion": versions[0]}],
                }),
            );
        }
        "/api" => {
            return json_response(
                StatusCode::OK,
                &json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}),
            );
        }
        _ => {}
    }
    let Some(t) = target(&path) else {
        return refused(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
        );
    };
    if t.kind.group == "resource.k8s.io"
        && !version
            .resource_versions()
            .contains(&t.api_version.trim_start_matches("resource.k8s.io/"))
    {
        return refused(
            404,
            "NotFound",
            format!(
                "the server (Kubernetes 1.{}) does not serve {}",
                version.minor, t.api_version
            ),
        );
    }
    let namespace = t.namespace.clone().unwrap_or_default();
    let method = req.method().clone();
    match (method, &t.name) {
        (Method::GET, None) => list_or_watch(req, store, t).await,
        (Method::GET, Some(name)) => match store.get(&t.kind, &namespace, name) {
            Some(obj) => json_response(StatusCode::OK, &as_version(obj, &t.api_version)),
            None => status(&Refused::not_found(&t.kind, name)),
        },
        (Method::POST, None) => match body(req).await {
            Ok(obj) => match store.create(&t.kind, &namespace, obj) {
                Ok(created) => {
                    json_response(StatusCode::CREATED, &as_version(created, &t.api_version))
                }
                Err(e) => status(&e),
            },
            Err(e) => e,
        },
        (Method::PUT, Some(name)) => {
            let status_only = t.subresource.as_deref() == Some("status");
            let name = name.clone();
            match body(req).await {
                Ok(obj) => match store.replace(&t.kind, &namespace, &name, obj, status_only) {
                    Ok(replaced) => {
                        json_response(StatusCode::OK, &as_version(replaced, &t.api_version))
                    }
                    Err(e) => status(&e),
                },
                Err(e) => e,
            }
        }
        (Method::DELETE, Some(name)) => match store.delete(&t.kind, &namespace, name) {
            Ok(gone) => json_response(StatusCode::OK, &as_version(gone, &t.api_version)),
            Err(e) => status(&e),
        },
        (method, _) => refused(
            405,
            "MethodNotAllowed",
            format!("the test API server does not support {method} {path}"),
        ),
    }
}

async fn body(req: Request<Incoming>) -> Result<Value, Response<Body>> {
    let limited = http_body_util::Limited::new(req.into_body(), MAX_BODY);
    let bytes = limited
        .collect()
        .await
        .map_err(|e| {
            refused(
                413,
                "RequestEntityTooLarge",
                format!("reading the body: {e}"),
            )
        })?
        .to_bytes();
    serde_json::from_slice(&bytes)
        .map_err(|e| refused(400, "BadRequest", format!("the body is not JSON: {e}")))
}

async fn list_or_watch(req: Request<Incoming>, store: Arc<Store>, t: Target) -> Response<Body> {
    let fields = query(&req, "fieldSelector").unwrap_or_default();
    let watch = query(&req, "watch").is_some_and(|w| w == "true" || w == "1");
    let namespace = t.namespace.clone();
    if !watch {
        let (items, rv) = store.list(&t.kind, namespace.as_deref());
        let items: Vec<Value> = items
            .into_iter()
            .filter(|o| matches_fields(o, &fields))
            .map(|o| as_version(o, &t.api_version))
            .collect();
        return json_response(
            StatusCode::OK,
            &json!({
                "apiVersion": t.api_version, "kind": "List",
                "metadata": {"resourceVersion": rv.to_string()}, "items": items,
            }),
        );
    }
    let since: u64 = query(&req, "resourceVersion")
        .and_then(|rv| rv.parse().ok())
        .unwrap_or_else(|| store.resource_version());
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(64);
    tokio::spawn(async move {
        let mut changes = store.subscribe();
        let mut sent = since;
        loop {
            for e in store.events_after(sent) {
                sent = e.resource_version;
                let in_scope = e.kind == t.kind
                    && namespace.as_deref().is_none_or(|ns| ns == e.namespace)
                    && matches_fields(&e.object, &fields);
                if !in_scope {
                    continue;
                }
                let line = json!({"type": e.kind_of_change, "object": as_version(e.object, &t.api_version)});
                if tx
                    .send(Ok(Frame::data(Bytes::from(format!("{line}\n")))))
                    .await
                    .is_err()
                {
                    return;
                }
            }
            tokio::select! {
                changed = changes.changed() => if changed.is_err() { return },
                () = tx.closed() => return,
            }
        }
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
    let mut response = Response::new(StreamBody::new(stream).boxed());
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_the_resource() {
        let t = target("/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c/status").unwrap();
        assert_eq!(t.kind.resource, "resourceclaims");
        assert_eq!(t.namespace.as_deref(), Some("ns"));
        assert_eq!(t.name.as_deref(), Some("c"));
        assert_eq!(t.subresource.as_deref(), Some("status"));
        let t = target("/api/v1/nodes/n").unwrap();
        assert_eq!((t.kind.group.as_str(), t.api_version.as_str()), ("", "v1"));
        assert!(target("/healthz").is_none());
    }

    #[test]
    fn field_selectors_follow_dotted_paths() {
        let obj = json!({"spec": {"nodeName": "n1", "driver": "d"}, "metadata": {"name": "x"}});
        assert!(matches_fields(&obj, "spec.nodeName=n1,spec.driver=d"));
        assert!(matches_fields(&obj, "spec.nodeName==n1"));
        assert!(!matches_fields(&obj, "spec.nodeName=n2"));
        assert!(matches_fields(&obj, "spec.nodeName!=n2"));
        assert!(matches_fields(&obj, ""));
        assert_eq!(
            percent_decode("spec.nodeName%3Dn1%2Cx"),
            "spec.nodeName=n1,x"
        );
    }
}
