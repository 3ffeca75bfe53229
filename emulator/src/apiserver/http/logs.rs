//! `GET pods/<name>/log`: kube-apiserver's log subresource (`pkg/registry/core/pod/rest/
//! log.go`, `LogLocation` in `pkg/registry/core/pod/strategy.go`): the options are
//! validated, the container picked (the only one, or the one named), and the request
//! proxied to the `/containerLogs` endpoint of the kubelet of the pod's node, found in the
//! Node's address and `status.daemonEndpoints`; a pod on no node yet answers 204 and no
//! body, as upstream returns no location for it. The kubelet's errors come back as 400
//! with its words.

use super::*;
use crate::apiserver::error::FieldCause;

pub(super) async fn pod_log(
    shared: &Arc<Shared>,
    target: &Target,
    query: &HashMap<String, String>,
) -> ApiResult<Response<Body>> {
    let name = target.name.clone().unwrap_or_default();
    let pod = shared.lock().get(&Target {
        subresource: None,
        ..target.clone()
    })?;
    validate_options(&name, query)?;
    let container = pick_container(&pod, &name, query.get("container").map(String::as_str))?;
    let Some(node) = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
    else {
        let mut response = Response::new(full(Bytes::new()));
        *response.status_mut() = StatusCode::NO_CONTENT;
        return Ok(response);
    };
    let node_object = shared.lock().get(&Target {
        key: super::super::ResourceKey {
            group: String::new(),
            plural: "nodes".into(),
        },
        version: "v1".into(),
        namespace: None,
        name: Some(node.to_string()),
        subresource: None,
    })?;
    let address = node_object
        .pointer("/status/addresses")
        .and_then(Value::as_array)
        .and_then(|a| {
            a.iter()
                .find(|x| x.get("type").and_then(Value::as_str) == Some("InternalIP"))
        })
        .and_then(|x| x.get("address").and_then(Value::as_str));
    let port = node_object
        .pointer("/status/daemonEndpoints/kubeletEndpoint/Port")
        .and_then(Value::as_u64);
    let (Some(address), Some(port)) = (address, port) else {
        return Err(ApiError::internal(format!(
            "node {node:?} reports no kubelet address (status.addresses InternalIP and status.daemonEndpoints.kubeletEndpoint.Port): it has no kubelet to read logs from"
        )));
    };
    let params = kubelet_query(query);
    let namespace = target.namespace.as_deref().unwrap_or_default();
    let path = format!(
        "/containerLogs/{namespace}/{name}/{container}?{}",
        params.join("&")
    );
    let unreachable = |e: &dyn std::fmt::Display| {
        ApiError::internal(format!("Get \"http://{address}:{port}{path}\": {e}"))
    };
    let stream = tokio::net::TcpStream::connect((address, port as u16))
        .await
        .map_err(|e| unreachable(&e))?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| unreachable(&e))?;
    tokio::spawn(connection);
    let request = hyper::Request::get(&path)
        .header(hyper::header::HOST, format!("{address}:{port}"))
        .body(Full::new(Bytes::new()))
        .map_err(|e| unreachable(&e))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| unreachable(&e))?;
    if response.status() != StatusCode::OK {
        let body = response
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        return Err(ApiError::bad_request(
            String::from_utf8_lossy(&body).trim().to_string(),
        ));
    }
    // The kubelet's stream, passed on as it comes (`kubectl logs -f`); a broken one ends it.
    let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, Infallible>>(64);
    let mut incoming = response.into_body();
    tokio::spawn(async move {
        while let Some(frame) = incoming.frame().await {
            match frame {
                Ok(frame) => {
                    if tx.send(Ok(frame)).await.is_err() {
                        return;
                    }
                }
                Err(e) => {
                    tracing::debug!("the kubelet's log stream broke: {e}");
                    return;
                }
            }
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|frame| (frame, rx))
    });
    let mut out = Response::new(BodyExt::boxed(StreamBody::new(stream)));
    out.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain"),
    );
    Ok(out)
}

/// A flag of the query as apimachinery's `Convert_Slice_string_To_bool` reads it: absent,
/// `0` and `false` (any case) are false; anything else, the empty value included, is true.
fn query_flag(query: &HashMap<String, String>, key: &str) -> bool {
    query
        .get(key)
        .is_some_and(|v| v != "0" && !v.eq_ignore_ascii_case("false"))
}

/// The kubelet's query, built from the decoded options as `LogLocation` builds it (flags
/// as `true`, values percent-encoded), never from the user's text as it came.
fn kubelet_query(query: &HashMap<String, String>) -> Vec<String> {
    let mut params = Vec::new();
    for key in ["follow", "previous", "timestamps"] {
        if query_flag(query, key) {
            params.push(format!("{key}=true"));
        }
    }
    for key in ["sinceSeconds", "sinceTime", "tailLines", "limitBytes"] {
        if let Some(value) = query.get(key) {
            params.push(format!("{key}={}", crate::apiserver::percent_encode(value)));
        }
    }
    params
}

/// `ValidatePodLogOptions`: the limits it checks, and `stream`, which needs the
/// PodLogsQuerySplitStreams gate (off); before it, `sinceTime` decoded as `metav1.Time`
/// reads a query (RFC 3339; empty or `null` is the zero time), a 400 when it is not one.
fn validate_options(name: &str, query: &HashMap<String, String>) -> ApiResult<()> {
    if let Some(time) = query.get("sinceTime")
        && !time.is_empty()
        && time != "null"
    {
        crate::apiserver::parse_rfc3339(time).map_err(ApiError::bad_request)?;
    }
    let number = |key: &str| -> ApiResult<Option<i64>> {
        query
            .get(key)
            .map(|v| {
                v.parse::<i64>()
                    .map_err(|_| ApiError::bad_request(format!("{key}: {v:?} is not an integer")))
            })
            .transpose()
    };
    let mut causes = Vec::new();
    if let Some(n) = number("tailLines")?
        && n < 0
    {
        causes.push(FieldCause::invalid(
            "tailLines",
            &json!(n),
            "must be greater than or equal to 0",
        ));
    }
    if let Some(n) = number("limitBytes")?
        && n < 1
    {
        causes.push(FieldCause::invalid(
            "limitBytes",
            &json!(n),
            "must be greater than 0",
        ));
    }
    if let Some(n) = number("sinceSeconds")?
        && n < 1
    {
        causes.push(FieldCause::invalid(
            "sinceSeconds",
            &json!(n),
            "must be greater than 0",
        ));
    }
    if query.contains_key("sinceSeconds") && query.contains_key("sinceTime") {
        causes.push(FieldCause::forbidden(
            "[]",
            "at most one of `sinceTime` or `sinceSeconds` may be specified",
        ));
    }
    if query.contains_key("stream") {
        causes.push(FieldCause::forbidden("stream", "may not be specified"));
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid("PodLogOptions", name, causes))
    }
}

/// `validateContainer`: the container named must be the pod's; none named is the only one.
fn pick_container(pod: &Value, name: &str, asked: Option<&str>) -> ApiResult<String> {
    let names: Vec<&str> = [
        "/spec/initContainers",
        "/spec/containers",
        "/spec/ephemeralContainers",
    ]
    .iter()
    .filter_map(|p| pod.pointer(p).and_then(Value::as_array))
    .flatten()
    .filter_map(|c| c.get("name").and_then(Value::as_str))
    .collect();
    match asked.filter(|c| !c.is_empty()) {
        Some(asked) if names.contains(&asked) => Ok(asked.to_string()),
        Some(asked) => Err(ApiError::bad_request(format!(
            "container {asked} is not valid for pod {name}"
        ))),
        None => {
            let app: Vec<&str> = pod
                .pointer("/spec/containers")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|c| c.get("name").and_then(Value::as_str))
                .collect();
            match app.as_slice() {
                [only] => Ok((*only).to_string()),
                [] => Err(ApiError::bad_request(format!(
                    "a container name must be specified for pod {name}"
                ))),
                _ => Err(ApiError::bad_request(format!(
                    "a container name must be specified for pod {name}, choose one of: [{}]",
                    names.join(" ")
                ))),
            }
        }
    }
}
