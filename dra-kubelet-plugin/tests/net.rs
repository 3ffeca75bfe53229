//! The guarded accept loop over real sockets: quiet connections close, a full pool makes
//! room for a newcomer, and the health server answers through both.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use dra_kubelet_plugin::net::conn::{self, Limits, Pool};
use dra_kubelet_plugin::net::health::{self, Endpoints};
use futures::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};

fn limits(max_connections: usize, idle: Duration) -> Limits {
    Limits {
        max_connections,
        idle_timeout: idle,
    }
}

/// Serves `listener` by echoing; returns how each server-side connection ended.
fn echo(
    listener: UnixListener,
    pool: Pool,
) -> tokio::sync::mpsc::UnboundedReceiver<std::io::ErrorKind> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut incoming = std::pin::pin!(conn::incoming(listener, pool));
        while let Some(Ok(mut stream)) = incoming.next().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 64];
                loop {
                    match stream.read(&mut buf).await {
                        Ok(0) => {
                            let _ = tx.send(std::io::ErrorKind::UnexpectedEof);
                            return;
                        }
                        Ok(n) => {
                            if stream.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                        Err(e) => {
                            let _ = tx.send(e.kind());
                            return;
                        }
                    }
                }
            });
        }
    });
    rx
}

async fn roundtrip(stream: &mut UnixStream) -> bool {
    if stream.write_all(b"ping").await.is_err() {
        return false;
    }
    let mut buf = [0u8; 4];
    stream.read_exact(&mut buf).await.is_ok() && &buf == b"ping"
}

#[tokio::test]
async fn a_quiet_connection_is_closed_and_a_talking_one_stays() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.sock");
    let pool = Pool::new(limits(16, Duration::from_millis(300)));
    let mut ended = echo(UnixListener::bind(&path).unwrap(), pool.clone());
    let _quiet = UnixStream::connect(&path).await.unwrap();
    let mut talking = UnixStream::connect(&path).await.unwrap();
    // The talking client keeps the connection busy past several idle timeouts.
    for _ in 0..12 {
        assert!(roundtrip(&mut talking).await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(ended.recv().await, Some(std::io::ErrorKind::TimedOut));
    assert!(roundtrip(&mut talking).await, "the busy connection stays");
    assert_eq!(pool.open_connections(), 1);
}

#[tokio::test]
async fn a_full_pool_closes_the_quietest_connection_for_a_newcomer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.sock");
    let pool = Pool::new(limits(2, Duration::from_secs(3600)));
    let mut ended = echo(UnixListener::bind(&path).unwrap(), pool.clone());
    let mut oldest = UnixStream::connect(&path).await.unwrap();
    assert!(roundtrip(&mut oldest).await);
    let mut second = UnixStream::connect(&path).await.unwrap();
    assert!(roundtrip(&mut second).await);
    // `second` was active last, so `oldest` is the quietest.
    let mut newcomer = UnixStream::connect(&path).await.unwrap();
    assert!(roundtrip(&mut newcomer).await);
    assert_eq!(
        ended.recv().await,
        Some(std::io::ErrorKind::ConnectionAborted)
    );
    assert!(!roundtrip(&mut oldest).await, "the quietest was closed");
    assert!(roundtrip(&mut second).await);
    assert_eq!(pool.open_connections(), 2);
}

#[tokio::test]
async fn health_answers_while_idle_clients_hold_every_slot() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let pool = Pool::new(limits(4, Duration::from_secs(3600)));
    let ready = Arc::new(AtomicBool::new(false));
    let endpoints = Endpoints {
        ready: ready.clone(),
        not_ready: "warming up",
        metrics: Arc::new(|| "# EOF\n".to_string()),
    };
    tokio::spawn(health::serve(listener, pool.clone(), endpoints));
    let mut idle = Vec::new();
    for _ in 0..20 {
        idle.push(TcpStream::connect(addr).await.unwrap());
    }
    let get = |path: &'static str| async move {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
        let mut response = String::new();
        s.read_to_string(&mut response).await.unwrap();
        response
    };
    assert!(get("/healthz").await.starts_with("HTTP/1.1 200"));
    let not_ready = get("/readyz").await;
    assert!(not_ready.starts_with("HTTP/1.1 503"), "{not_ready}");
    assert!(not_ready.ends_with("warming up\n"), "{not_ready}");
    ready.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(get("/readyz").await.starts_with("HTTP/1.1 200"));
    assert!(get("/metrics").await.ends_with("# EOF\n"));
    assert!(get("/nope").await.starts_with("HTTP/1.1 404"));
    assert!(pool.open_connections() <= 4);
}

#[test]
fn limits_follow_the_open_files_limit_or_the_flag() {
    let auto = Limits::from_flags(0, 30);
    assert!(auto.max_connections >= 4, "{auto:?}");
    assert_eq!(auto.idle_timeout, Duration::from_secs(30));
    assert_eq!(Limits::from_flags(7, 0).max_connections, 7);
    assert_eq!(
        Limits::from_flags(7, 0).idle_timeout,
        Duration::from_secs(1)
    );
}
