//! The kubelet's `GET /containerLogs/<namespace>/<pod>/<container>` (`pkg/kubelet/server`
//! `getContainerLogs`), which kube-apiserver's `pods/log` subresource proxies to: the
//! container is picked from the pod's status as `validateContainerLogStatus` does (its
//! error words included), and its log file — the CRI format the runtime writes, one file
//! per run — is read as `kuberuntime/logs.ReadLogs` reads it: `sinceTime`/`sinceSeconds`,
//! `tailLines`, `timestamps`, `limitBytes`, and `follow` until that run has ended.

use std::collections::HashMap;
use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response, StatusCode};
use kube::api::{Api, DynamicObject};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use super::NodeContext;

/// How often a follower looks for more output.
const FOLLOW_POLL: Duration = Duration::from_millis(100);

type Body = BoxBody<Bytes, Infallible>;

/// Serves until the task is aborted (the kubelet's server outlives a kubelet restart here,
/// as its port stays the node's).
pub(super) async fn serve(ctx: Arc<NodeContext>, listener: TcpListener) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let ctx = ctx.clone();
                connections.spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let ctx = ctx.clone();
                        async move { Ok::<_, Infallible>(handle(&ctx, req).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

fn text(code: StatusCode, message: String) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(message)).boxed());
    *response.status_mut() = code;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

async fn handle(ctx: &NodeContext, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path().to_string();
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let ["containerLogs", namespace, pod, container] = segments.as_slice() else {
        return text(StatusCode::NOT_FOUND, format!("no route {path}"));
    };
    let options = match LogOptions::parse(req.uri().query().unwrap_or_default()) {
        Ok(options) => options,
        Err(e) => return text(StatusCode::BAD_REQUEST, e),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(
        ctx.client.clone(),
        namespace,
        &kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&()),
    );
    let found = match api.get_opt(pod).await {
        Ok(found) => found,
        Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    let Some(found) = found.filter(|p| {
        p.data.pointer("/spec/nodeName").and_then(Value::as_str) == Some(ctx.node.as_str())
    }) else {
        return text(
            StatusCode::NOT_FOUND,
            format!("pod {pod:?} cannot be found - no logs available"),
        );
    };
    let uid = found.metadata.uid.clone().unwrap_or_default();
    let run = match run_to_read(&found.data, pod, container, options.previous) {
        Ok(run) => run,
        Err(e) => return text(StatusCode::BAD_REQUEST, e),
    };
    let file = ctx.dirs.container_log(namespace, pod, &uid, container, run);
    let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, Infallible>>(64);
    let ended = ctx.ended_runs.clone();
    tokio::spawn(async move {
        read_logs(&file, &options, &ended, tx).await;
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|frame| (frame, rx))
    });
    let body = StreamBody::new(stream).boxed();
    let mut response = Response::new(body);
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain"),
    );
    response
}

/// Which run of the container to read (the `<run>` of its log file, the suffix of the
/// container id the status names), or the kubelet's error, as `validateContainerLogStatus`.
fn run_to_read(
    pod: &Value,
    pod_name: &str,
    container: &str,
    previous: bool,
) -> Result<u32, String> {
    let status = pod
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .and_then(|all| {
            all.iter()
                .find(|c| c.get("name").and_then(Value::as_str) == Some(container))
        })
        .ok_or_else(|| format!("container {container:?} in pod {pod_name:?} is not available"))?;
    let id_of = |pointer: &str| {
        status
            .pointer(pointer)
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty())
            .and_then(run_of_container_id)
    };
    let last = id_of("/lastState/terminated/containerID");
    if previous {
        return last.ok_or_else(|| {
            format!("previous terminated container {container:?} in pod {pod_name:?} not found")
        });
    }
    if status.pointer("/state/running").is_some() {
        return id_of("/containerID").ok_or_else(|| {
            format!("container {container:?} in pod {pod_name:?} is waiting to start - no logs yet")
        });
    }
    if status.pointer("/state/terminated").is_some() {
        return id_of("/state/terminated/containerID")
            .or(last)
            .ok_or_else(|| format!("container {container:?} in pod {pod_name:?} is terminated"));
    }
    if let Some(last) = last {
        return Ok(last);
    }
    match status
        .pointer("/state/waiting/reason")
        .and_then(Value::as_str)
    {
        Some(reason) => Err(format!(
            "container {container:?} in pod {pod_name:?} is waiting to start: {reason}"
        )),
        None => Err(format!(
            "container {container:?} in pod {pod_name:?} is waiting to start - no logs yet"
        )),
    }
}

/// The run number at the end of an emulated container id (`podman://<uid>-<name>-<run>`).
pub(super) fn run_of_container_id(id: &str) -> Option<u32> {
    id.rsplit('-').next()?.parse().ok()
}

/// The query of `/containerLogs`, as kube-apiserver passes `PodLogOptions` on.
#[derive(Debug, Default)]
struct LogOptions {
    follow: bool,
    previous: bool,
    timestamps: bool,
    since: Option<jiff::Timestamp>,
    tail: Option<usize>,
    limit: Option<usize>,
}

impl LogOptions {
    fn parse(query: &str) -> Result<Self, String> {
        let query: HashMap<&str, String> = query
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k, crate::apiserver::percent_decode(v)))
            .collect();
        // apimachinery's `Convert_Slice_string_To_bool`, as the kubelet decodes the query.
        let flag = |k: &str| {
            query
                .get(k)
                .is_some_and(|v| v != "0" && !v.eq_ignore_ascii_case("false"))
        };
        let number = |k: &str| -> Result<Option<i64>, String> {
            query
                .get(k)
                .map(|v| {
                    v.parse::<i64>()
                        .map_err(|_| format!("{k}: {v:?} is not a number"))
                })
                .transpose()
        };
        let since = match (number("sinceSeconds")?, query.get("sinceTime")) {
            // 10^12 s is before the first instant jiff knows (it panicked the kubelet's
            // task and kube-apiserver answered 500): so long ago is everything.
            (Some(seconds), _) => Some(
                jiff::Timestamp::now()
                    .checked_sub(jiff::SignedDuration::from_secs(seconds))
                    .unwrap_or(jiff::Timestamp::MIN),
            ),
            (None, Some(time)) => Some(since_time(time)?),
            (None, None) => None,
        };
        Ok(Self {
            follow: flag("follow"),
            previous: flag("previous"),
            timestamps: flag("timestamps"),
            since,
            tail: number("tailLines")?.map(|n| n.max(0) as usize),
            limit: number("limitBytes")?.map(|n| n.max(0) as usize),
        })
    }
}

/// `sinceTime` as the kubelet decodes it (`metav1.Time` in a query): empty or `null` is the
/// zero time, so everything.
fn since_time(text: &str) -> Result<jiff::Timestamp, String> {
    if text.is_empty() || text == "null" {
        return Ok(jiff::Timestamp::MIN);
    }
    crate::apiserver::parse_rfc3339(text).map_err(|e| format!("sinceTime: {e}"))
}

/// One record of a CRI log file.
struct Record<'a> {
    time: &'a str,
    full: bool,
    text: &'a str,
}

fn parse_record(line: &str) -> Option<Record<'_>> {
    let mut parts = line.splitn(4, ' ');
    let time = parts.next()?;
    let _stream = parts.next()?;
    let tag = parts.next()?;
    let text = parts.next().unwrap_or_default();
    Some(Record {
        time,
        full: tag == "F",
        text,
    })
}

/// What one record prints: its text (with the newline a full line had), after its time
/// when `timestamps`.
fn render(record: &Record<'_>, options: &LogOptions) -> String {
    let mut out = String::new();
    if options.timestamps {
        out.push_str(record.time);
        out.push(' ');
    }
    out.push_str(record.text);
    if record.full {
        out.push('\n');
    }
    out
}

/// Streams the file into `tx` by `options`; with `follow`, until the run has ended (the
/// kubelet marks it in `ended`) or the file is gone (the pod was removed).
async fn read_logs(
    file: &Path,
    options: &LogOptions,
    ended: &std::sync::Mutex<std::collections::HashSet<PathBuf>>,
    tx: mpsc::Sender<Result<Frame<Bytes>, Infallible>>,
) {
    let is_ended = || {
        ended
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(file)
    };
    let mut budget = options.limit.unwrap_or(usize::MAX);
    let send = |text: String, budget: &mut usize| {
        let text = if text.len() > *budget {
            text.as_bytes()[..*budget].to_vec()
        } else {
            text.into_bytes()
        };
        *budget -= text.len();
        let tx = tx.clone();
        async move { tx.send(Ok(Frame::data(Bytes::from(text)))).await.is_ok() }
    };
    let content = tokio::fs::read_to_string(file).await.unwrap_or_default();
    // Only whole lines: a line still being written is read on the next poll.
    let complete = content.rfind('\n').map_or(0, |i| i + 1);
    let records: Vec<Record<'_>> = content[..complete]
        .lines()
        .filter_map(parse_record)
        .filter(|r| {
            options
                .since
                .is_none_or(|since| r.time.parse::<jiff::Timestamp>().is_ok_and(|t| t >= since))
        })
        .collect();
    let skip = options
        .tail
        .map_or(0, |tail| records.len().saturating_sub(tail));
    let mut out = String::new();
    for record in &records[skip..] {
        out.push_str(&render(record, options));
    }
    if !out.is_empty() && !send(out, &mut budget).await {
        return;
    }
    if !options.follow {
        return;
    }
    let mut offset = complete;
    loop {
        if budget == 0 {
            return;
        }
        let finished = is_ended();
        let Ok(content) = tokio::fs::read(file).await else {
            return;
        };
        if content.len() < offset {
            // Rotated (runtime::CriLog): the path is a new file, read from its start, as
            // the kubelet's follow reopens a rotated log.
            offset = 0;
        }
        let complete = content[offset..]
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(offset, |i| offset + i + 1);
        if complete > offset {
            let fresh = String::from_utf8_lossy(&content[offset..complete]).into_owned();
            offset = complete;
            let out: String = fresh
                .lines()
                .filter_map(parse_record)
                .map(|r| render(&r, options))
                .collect();
            if !send(out, &mut budget).await {
                return;
            }
            continue;
        }
        if finished {
            return;
        }
        if tx.is_closed() {
            return;
        }
        tokio::time::sleep(FOLLOW_POLL).await;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_run_read_follows_the_status_as_the_kubelet_does() {
        let pod = |status: Value| json!({"status": {"containerStatuses": [status]}});
        let running = pod(
            json!({"name": "c", "containerID": "podman://u-c-2", "state": {"running": {}},
            "lastState": {"terminated": {"containerID": "podman://u-c-1", "exitCode": 1}}}),
        );
        assert_eq!(run_to_read(&running, "p", "c", false), Ok(2));
        assert_eq!(run_to_read(&running, "p", "c", true), Ok(1));
        let fresh =
            pod(json!({"name": "c", "containerID": "podman://u-c-0", "state": {"running": {}}}));
        assert_eq!(
            run_to_read(&fresh, "p", "c", true),
            Err("previous terminated container \"c\" in pod \"p\" not found".into())
        );
        let creating =
            pod(json!({"name": "c", "state": {"waiting": {"reason": "ContainerCreating"}}}));
        assert_eq!(
            run_to_read(&creating, "p", "c", false),
            Err("container \"c\" in pod \"p\" is waiting to start: ContainerCreating".into())
        );
        let backoff = pod(
            json!({"name": "c", "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"containerID": "podman://u-c-3"}}}),
        );
        assert_eq!(run_to_read(&backoff, "p", "c", false), Ok(3));
        assert_eq!(
            run_to_read(&pod(json!({"name": "other"})), "p", "c", false),
            Err("container \"c\" in pod \"p\" is not available".into())
        );
    }

    /// D16: `sinceSeconds=1000000000000` panicked the kubelet's task (500 from the API
    /// server); D28: `sinceTime=9999-12-31T23:59:59Z`, a valid time upstream, was a 400.
    #[test]
    fn since_far_in_the_past_or_future_is_an_edge_not_an_error() {
        let options = LogOptions::parse("sinceSeconds=1000000000000").unwrap();
        assert_eq!(options.since, Some(jiff::Timestamp::MIN));
        let options = LogOptions::parse(&format!("sinceSeconds={}", i64::MAX)).unwrap();
        assert_eq!(options.since, Some(jiff::Timestamp::MIN));
        let options = LogOptions::parse("sinceTime=9999-12-31T23%3A59%3A59Z").unwrap();
        assert_eq!(options.since, Some(jiff::Timestamp::MAX));
        let options = LogOptions::parse("sinceTime=2026-01-01T00%3A00%3A00Z").unwrap();
        assert_eq!(options.since, Some("2026-01-01T00:00:00Z".parse().unwrap()));
        assert!(
            LogOptions::parse("sinceTime=yesterday")
                .unwrap_err()
                .starts_with("sinceTime: parsing time \"yesterday\"")
        );
    }

    #[test]
    fn records_render_as_kubectl_logs_prints_them() {
        let options = LogOptions {
            timestamps: true,
            ..LogOptions::default()
        };
        let full = parse_record("2026-01-01T00:00:00.1Z stdout F hello world").unwrap();
        assert_eq!(render(&full, &LogOptions::default()), "hello world\n");
        assert_eq!(
            render(&full, &options),
            "2026-01-01T00:00:00.1Z hello world\n"
        );
        let part = parse_record("2026-01-01T00:00:00.1Z stderr P no newline").unwrap();
        assert_eq!(render(&part, &LogOptions::default()), "no newline");
        let empty = parse_record("2026-01-01T00:00:00.1Z stdout F ").unwrap();
        assert_eq!(render(&empty, &LogOptions::default()), "\n");
    }
}
