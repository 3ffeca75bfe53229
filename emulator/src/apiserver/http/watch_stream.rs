//! Watches: the event lines, bookmarks and the streamed response of a `?watch=true`.

use super::*;

pub(super) fn event_line(kind: &str, object: &Value) -> Bytes {
    let mut line = json!({"type": kind, "object": object}).to_string();
    line.push('\n');
    Bytes::from(line)
}

pub(super) fn bookmark(
    target: &Target,
    store: &Store,
    revision: u64,
    initial_events_end: bool,
) -> Bytes {
    let (api_version, kind) = store
        .types()
        .find(|t| t.key() == target.key)
        .map(|t| (t.api_version(&target.version), t.kind.clone()))
        .unwrap_or_default();
    let mut metadata = json!({"resourceVersion": revision.to_string()});
    if initial_events_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    event_line(
        "BOOKMARK",
        &json!({"apiVersion": api_version, "kind": kind, "metadata": metadata}),
    )
}

/// A watch: a chunked stream of JSON lines, as `?watch=true` gives.
pub(super) fn watch_response(
    shared: &Arc<Shared>,
    target: &Target,
    query: &HashMap<String, String>,
    view: View,
) -> ApiResult<Response<Body>> {
    let sel = selectors(target, query)?;
    let bookmarks = flag(query, "allowWatchBookmarks");
    let send_initial_events = flag(query, "sendInitialEvents");
    if send_initial_events
        && !(bookmarks
            && query
                .get("resourceVersionMatch")
                .is_some_and(|m| m == "NotOlderThan"))
    {
        let cause = crate::apiserver::error::FieldCause::forbidden(
            "sendInitialEvents",
            "sendInitialEvents requires allowWatchBookmarks=true and resourceVersionMatch=NotOlderThan",
        );
        return Err(ApiError::invalid(
            "ListOptions.meta.k8s.io",
            "",
            vec![cause],
        ));
    }
    // `int64` upstream: 10000000000000000000 is a 400, not an overflow (it panicked here
    // adding 1e19 s to the clock, after the 200 had gone out). 0 is no timeout; a negative
    // one ends the watch at once, as Go's context.WithTimeout does with it.
    let timeout = int64_param(query, "timeoutSeconds")?
        .filter(|t| *t != 0)
        .map(|t| Duration::from_secs(t.max(0).unsigned_abs()));
    let rv = if send_initial_events {
        None
    } else {
        query.get("resourceVersion").map(String::as_str)
    };
    let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, Infallible>>(256);
    let start = shared.lock().watch(target, &sel, rv);
    let mut epoch = shared.watch_epoch.subscribe();
    let shared = shared.clone();
    let target = target.clone();
    tokio::spawn(async move {
        let send = |bytes: Bytes| {
            let tx = tx.clone();
            async move { tx.send(Ok(Frame::data(bytes))).await.is_ok() }
        };
        let mut start = match start {
            Ok(start) => start,
            // A watch from a compacted resourceVersion gets its 410 as an ERROR event (watch cache behaviour).
            Err(err) => {
                send(event_line("ERROR", &err.to_status())).await;
                return;
            }
        };
        let mut last_revision = start.revision;
        for (kind, object) in std::mem::take(&mut start.initial) {
            if !send(event_line(kind.as_str(), &view.render(&object))).await {
                return;
            }
        }
        if send_initial_events {
            let line = bookmark(&target, &shared.lock(), last_revision, true);
            if !send(line).await {
                return;
            }
        }
        // Past the clock's end there is no deadline to keep.
        let deadline = timeout.and_then(|t| tokio::time::Instant::now().checked_add(t));
        let mut ticker = tokio::time::interval(BOOKMARK_INTERVAL);
        ticker.tick().await;
        loop {
            let until_deadline = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                event = start.live.recv() => match event {
                    Ok(event) => {
                        if event.revision <= start.revision {
                            continue;
                        }
                        last_revision = event.revision;
                        let rendered = shared.lock().render_event(&event, &target, &sel);
                        if let Some((kind, object)) = rendered
                            && !send(event_line(kind.as_str(), &view.render(&object))).await
                        {
                            return;
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        // The apiserver closes a watcher that cannot keep up; it relists.
                        send(event_line("ERROR", &ApiError::gone("watch fell too far behind; relist").to_status())).await;
                        return;
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                _ = ticker.tick(), if bookmarks => {
                    let line = bookmark(&target, &shared.lock(), last_revision, false);
                    if !send(line).await {
                        return;
                    }
                }
                _ = epoch.changed() => return,
                () = until_deadline => return,
                () = tx.closed() => return,
            }
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|frame| (frame, rx))
    });
    let mut response = Response::new(BodyExt::boxed(StreamBody::new(stream)));
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    Ok(response)
}
