//! Pod log parameters (`GET pods/NAME/log`), through the emulated apiserver to the
//! emulated kubelet that holds the container's log: `follow`, `previous`, `timestamps`,
//! `sinceSeconds`, `sinceTime`, `tailLines`, `limitBytes` and `container`, with values at
//! and past their edges (D16, D28: a kubelet task panicked at `sinceSeconds=1000000000000`,
//! a date in year 9999 was a 400). Each answer must come in time, below 500 (a refusal a
//! `Status` saying why), and an answer that streams a log must keep to `limitBytes` and
//! `tailLines`. A streamed log (`follow`) is read for a moment and dropped.

use super::api::{get, percent};
use super::json::tricky_string;
use super::{CASE_DEADLINE, run};
use crate::common;
use fake_dra_emulator::manifests;
use fake_dra_emulator::sim::SimConfig;
use http_body_util::BodyExt;
use proptest::prelude::*;
use serde_json::Value;
use std::time::Duration;

const NS: &str = "default";
const POD: &str = "fuzz-logs";
/// Lines each container prints before it sleeps.
const LINES: usize = 40;
/// The most a refusal may say (kube-apiserver quotes the value it refuses).
const MAX_STATUS_MESSAGE_BYTES: usize = 4096;

/// A number as a user could type one: small, at the i64/u64 edges, past them, or text.
fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        (-3i64..60).prop_map(|n| n.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        Just(i64::MAX.to_string()),
        Just("1000000000000".to_string()),
        Just("18446744073709551616".to_string()),
        "-?[0-9]{1,25}",
        tricky_string(),
    ]
}

/// RFC 3339 times at the edges of the calendar and the formats near it.
fn time() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("9999-12-31T23:59:59Z".to_string()),
        Just("0001-01-01T00:00:00Z".to_string()),
        Just("1970-01-01T00:00:00Z".to_string()),
        Just("2026-12-06T12:00:00.123456789+14:00".to_string()),
        Just("2026-02-30T00:00:00Z".to_string()),
        Just("2026-12-06 12:00:00".to_string()),
        "[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(Z|[+-][0-9]{2}:[0-9]{2})",
        tricky_string(),
    ]
}

fn flag() -> impl Strategy<Value = String> {
    prop::sample::select(&["true", "false", "1", "0", "yes", "", "TRUE"][..]).prop_map(String::from)
}

/// The pod (usually ours, sometimes one that does not exist) and the query.
fn log_request() -> impl Strategy<Value = (String, Vec<(&'static str, String)>)> {
    let pod = prop_oneof![8 => Just(POD.to_string()), 1 => "[a-z0-9-]{1,20}"];
    let container = prop_oneof![
        Just("a".to_string()),
        Just("b".to_string()),
        tricky_string()
    ];
    let params = (
        prop::option::of(flag()),
        prop::option::of(flag()),
        prop::option::of(flag()),
        prop::option::of(number()),
        prop::option::of(time()),
        prop::option::of(number()),
        prop::option::of(number()),
        prop::option::of(container),
    )
        .prop_map(
            |(follow, previous, timestamps, since_seconds, since_time, tail, limit, container)| {
                let mut q = Vec::new();
                let mut put = |k: &'static str, v: Option<String>| {
                    if let Some(v) = v {
                        q.push((k, v.chars().take(4000).collect()));
                    }
                };
                put("follow", follow);
                put("previous", previous);
                put("timestamps", timestamps);
                put("sinceSeconds", since_seconds);
                put("sinceTime", since_time);
                put("tailLines", tail);
                put("limitBytes", limit);
                put("container", container);
                q
            },
        );
    (pod, params)
}

fn pod_manifest() -> String {
    let container = |name: &str| {
        format!(
            "    - name: {name}\n      image: busybox:1.36\n      command: [\"sh\", \"-c\", \
             \"i=0; while [ $i -lt {LINES} ]; do echo {name} line $i; i=$((i+1)); done; \
             trap 'exit 0' TERM; sleep infinity & wait\"]\n"
        )
    };
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{namespace: {NS}, name: {POD}}}\nspec:\n  \
         terminationGracePeriodSeconds: 1\n  containers:\n{}{}",
        container("a"),
        container("b")
    )
}

/// The first number of `query[key]` as kube-apiserver would read it, when it is one.
fn int(query: &[(&str, String)], key: &str) -> Option<i64> {
    query
        .iter()
        .find(|(k, _)| *k == key)
        .and_then(|(_, v)| v.parse().ok())
}

#[test]
fn pod_log_queries() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let sim = rt.block_on(common::start(SimConfig::default()));
    let client = {
        let _runtime = rt.enter();
        sim.client().expect("a client of the sim")
    };
    rt.block_on(async {
        sim.apply(&manifests::parse(&pod_manifest(), "fuzz").expect("the pod's manifest"))
            .await
            .expect("apply the pod");
        common::eventually("both containers printed their lines", || async {
            let lines = |c: &'static str| sim.logs().lines(NS, POD, c).len();
            (lines("a") >= LINES && lines("b") >= LINES).then_some(())
        })
        .await;
    });
    // How often each status came back, to show the inputs reach the kubelet's log.
    let statuses = std::sync::Mutex::new(std::collections::BTreeMap::<u16, u64>::new());
    run("pod_log_queries", log_request(), |(pod, query)| {
        let mut uri = format!("/api/v1/namespaces/{NS}/pods/{pod}/log?");
        for (k, v) in query {
            uri.push_str(&format!("{k}={}&", percent(v)));
        }
        // apimachinery's Convert_Slice_string_To_bool, as kube-apiserver reads the flag:
        // anything but `0` and `false` follows.
        let follow = query
            .iter()
            .any(|(k, v)| *k == "follow" && v != "0" && !v.eq_ignore_ascii_case("false"));
        let case = async {
            let response = get(&client, &uri).await?;
            let status = response.status().as_u16();
            if let Ok(mut s) = statuses.lock() {
                *s.entry(status).or_default() += 1;
            }
            let mut body = response.into_body();
            if follow && status < 300 {
                // The log streams until the container ends: a moment of it is the answer.
                let _ = tokio::time::timeout(Duration::from_millis(200), body.frame()).await;
                return Ok(());
            }
            let bytes = body
                .collect()
                .await
                .map_err(|e| format!("GET {uri}: the body broke off: {e}"))?
                .to_bytes();
            check(status, &bytes, query).map_err(|e| format!("GET {uri}: {e}"))
        };
        rt.block_on(async { tokio::time::timeout(CASE_DEADLINE, case).await })
            .map_err(|_| format!("GET {uri}: no answer within {} s", CASE_DEADLINE.as_secs()))?
    });
    let statuses = statuses.into_inner().unwrap_or_default();
    eprintln!("pod_log_queries: answers by status {statuses:?}");
    rt.block_on(sim.shutdown());
}

/// Below 500, a refusal a `Status` with a bounded message, a log within its limits.
fn check(status: u16, bytes: &[u8], query: &[(&str, String)]) -> Result<(), String> {
    if status >= 500 {
        return Err(format!("{status} {}", String::from_utf8_lossy(bytes)));
    }
    if status >= 400 {
        let body: Value = serde_json::from_slice(bytes).unwrap_or(Value::Null);
        let message = body["message"].as_str().unwrap_or_default();
        if body["kind"] != "Status" || message.trim().is_empty() {
            return Err(format!("{status} without a Status message: {body}"));
        }
        if message.len() > MAX_STATUS_MESSAGE_BYTES {
            return Err(format!("{status}: a message of {} bytes", message.len()));
        }
        return Ok(());
    }
    if let Some(limit) = int(query, "limitBytes").filter(|l| *l > 0)
        && bytes.len() as i64 > limit
    {
        return Err(format!("{} bytes for limitBytes={limit}", bytes.len()));
    }
    let lines = bytes
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .count();
    if let Some(tail) = int(query, "tailLines").filter(|t| *t >= 0)
        && lines as i64 > tail
    {
        return Err(format!("{lines} lines for tailLines={tail}"));
    }
    Ok(())
}
