//! Both binaries' `/metrics`, scraped on the no-cluster demo and parsed by Prometheus' own
//! parser (hack/promcheck: `textparse.New` picks the parser from the Content-Type, as
//! Prometheus 3 does, and refuses a response without a valid one), every series of the
//! controller there before anything failed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// promcheck: `$FAKE_DRA_PROMCHECK`, else the one hack/promcheck.sh builds (Go and the Go
/// module proxy; cached under target/promcheck). FAKE_DRA_SKIP_PROMCHECK=1 skips, loudly.
fn promcheck() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("FAKE_DRA_PROMCHECK") {
        return Some(PathBuf::from(path));
    }
    let out = Command::new(repo().join("hack/promcheck.sh")).output();
    match out {
        Ok(out) if out.status.success() => {
            let stdout = String::from_utf8_lossy(&out.stdout);
            Some(PathBuf::from(
                stdout.lines().last().unwrap_or_default().trim(),
            ))
        }
        _ if std::env::var("FAKE_DRA_SKIP_PROMCHECK").is_ok_and(|v| v == "1") => {
            eprintln!("!!!!!!!! SKIPPED: no promcheck (FAKE_DRA_SKIP_PROMCHECK=1) !!!!!!!!");
            None
        }
        other => panic!(
            "hack/promcheck.sh failed ({other:?}): it builds Prometheus' parser with Go from the Go \
             module proxy; set FAKE_DRA_PROMCHECK=<path> or FAKE_DRA_SKIP_PROMCHECK=1"
        ),
    }
}

/// The address a driver process serves /metrics on, from its log's first
/// `serving /healthz, /readyz, /metrics` line.
fn metrics_address(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap();
    text.lines()
        .filter(|l| l.contains("serving /healthz, /readyz, /metrics"))
        .find_map(|l| {
            let at = l.find("\"addr\":\"")? + 8;
            Some(l[at..].split('"').next()?.to_string())
        })
        .unwrap_or_else(|| panic!("{}: no serving line with addr:\n{text}", log.display()))
}

fn scrape(promcheck: &Path, address: &str) -> std::process::Output {
    Command::new(promcheck)
        .arg(format!("http://{address}/metrics"))
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn both_metrics_endpoints_parse_as_prometheus_scrapes_them() {
    let Some(promcheck) = promcheck() else { return };
    let sim = start_default().await;
    sim.apply(&example("4-count-4.yaml")).await.unwrap();
    env_of(&sim, "test4", "pod0", "ctr0").await;
    let logs = sim.work_dir().join("logs");
    for (log, families) in [
        (
            "controller.log",
            &[
                "fake_dra_controller_allocations_total 1",
                "fake_dra_controller_reconcile_failures_total",
                "fake_dra_controller_claims",
            ][..],
        ),
        ("kubelet-plugin-kind-worker.log", &[][..]),
    ] {
        let out = scrape(&promcheck, &metrics_address(&logs.join(log)));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{log}: {}{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.starts_with("Content-Type: application/openmetrics-text; version=1.0.0"),
            "{log}: {stdout}"
        );
        for family in families {
            assert!(stdout.contains(family), "{log}: no {family} in {stdout}");
        }
    }
    sim.shutdown().await;
}

/// The check bites: a /metrics answer without a Content-Type is refused, as Prometheus 3
/// refuses the scrape.
#[test]
fn a_scrape_without_content_type_is_refused() {
    let Some(promcheck) = promcheck() else { return };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let server = std::thread::spawn(move || {
        use std::io::{Read, Write};
        let (mut stream, _) = listener.accept().unwrap();
        let mut request = [0u8; 1024];
        let _ = stream.read(&mut request);
        let body = "# TYPE up gauge\nup 1\n# EOF\n";
        write!(
            stream,
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
    });
    let out = scrape(&promcheck, &address);
    server.join().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("Content-Type \"\""), "{stderr}");
}
