//! The `:authority` rewriter between a real tonic client and a real tonic server on a
//! unix socket: what h2 refuses without it, what passes with it, and what a misbehaving
//! client can do to other clients (nothing).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use dra_kubelet_proto::authority::{RewriteIo, grpc_go_encoded_authority};
use dra_kubelet_proto::pluginregistration as reg;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio_stream::StreamExt;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status};

#[derive(Debug)]
struct Registration;

#[tonic::async_trait]
impl reg::registration_server::Registration for Registration {
    async fn get_info(
        &self,
        _: Request<reg::InfoRequest>,
    ) -> Result<Response<reg::PluginInfo>, Status> {
        Ok(Response::new(reg::PluginInfo {
            r#type: "DRAPlugin".into(),
            name: "test".into(),
            endpoint: "/x".into(),
            supported_versions: vec!["1.0.0".into()],
        }))
    }

    async fn notify_registration_status(
        &self,
        _: Request<reg::RegistrationStatus>,
    ) -> Result<Response<reg::RegistrationStatusResponse>, Status> {
        Ok(Response::new(reg::RegistrationStatusResponse {}))
    }
}

/// Serves the registration service on `path`, with or without the rewriter.
fn serve(path: &Path, rewrite: bool) -> tokio::task::JoinHandle<()> {
    let listener = UnixListener::bind(path).unwrap();
    let service = reg::registration_server::RegistrationServer::new(Registration);
    let server = tonic::transport::Server::builder().add_service(service);
    tokio::spawn(async move {
        let incoming = UnixListenerStream::new(listener);
        let result = if rewrite {
            server
                .serve_with_incoming(incoming.map(|s| s.map(RewriteIo::server)))
                .await
        } else {
            server.serve_with_incoming(incoming).await
        };
        result.unwrap();
    })
}

async fn get_info(path: &Path, authority: &str) -> Result<String, Status> {
    let channel = dra_kubelet_proto::connect_unix_with_authority(path, authority)
        .await
        .unwrap();
    let mut client = reg::registration_client::RegistrationClient::new(channel);
    client
        .get_info(reg::InfoRequest {})
        .await
        .map(|r| r.into_inner().name)
}

fn socket(dir: &tempfile::TempDir, name: &str) -> PathBuf {
    dir.path().join(name)
}

fn authorities(path: &Path) -> Vec<(&'static str, String)> {
    let raw = path.to_string_lossy().into_owned();
    vec![
        ("raw path", raw.clone()),
        ("%-encoded path", grpc_go_encoded_authority(&raw)),
        ("localhost", "localhost".into()),
        ("empty", String::new()),
        ("10 KiB", "a".repeat(10 * 1024)),
        ("@ : [", "user@[fe80::1]:x".into()),
    ]
}

#[tokio::test]
async fn without_the_rewriter_h2_refuses_path_authorities() {
    let dir = tempfile::tempdir().unwrap();
    let path = socket(&dir, "plain.sock");
    let _server = serve(&path, false);
    for (form, authority) in authorities(&path) {
        let result = get_info(&path, &authority).await;
        match form {
            "localhost" => assert_eq!(result.unwrap(), "test"),
            "raw path" | "%-encoded path" | "empty" => {
                let status = result.expect_err(form);
                assert_eq!(status.code(), tonic::Code::Internal, "{form}: {status}");
            }
            _ => {}
        }
    }
}

#[tokio::test]
async fn with_the_rewriter_every_authority_passes() {
    let dir = tempfile::tempdir().unwrap();
    let path = socket(&dir, "rewritten.sock");
    let _server = serve(&path, true);
    for (form, authority) in authorities(&path) {
        assert_eq!(
            get_info(&path, &authority).await.map_err(|s| s.to_string()),
            Ok("test".to_string()),
            "{form}"
        );
    }
}

#[tokio::test]
async fn a_connection_carries_many_calls() {
    let dir = tempfile::tempdir().unwrap();
    let path = socket(&dir, "many.sock");
    let _server = serve(&path, true);
    let channel =
        dra_kubelet_proto::connect_unix_with_authority(&path, path.to_string_lossy().into_owned())
            .await
            .unwrap();
    let mut client = reg::registration_client::RegistrationClient::new(channel);
    for _ in 0..200 {
        client.get_info(reg::InfoRequest {}).await.unwrap();
    }
}

#[tokio::test]
async fn garbage_closes_only_its_own_connection() {
    let dir = tempfile::tempdir().unwrap();
    let path = socket(&dir, "garbage.sock");
    let _server = serve(&path, true);
    let mut garbage = UnixStream::connect(&path).await.unwrap();
    garbage
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    // The server closes the connection; reading ends (EOF or reset) instead of hanging.
    let _ = garbage.read_to_end(&mut buf).await;
    assert_eq!(get_info(&path, "localhost").await.unwrap(), "test");
}

#[tokio::test]
async fn a_client_stopped_mid_frame_blocks_nobody() {
    let dir = tempfile::tempdir().unwrap();
    let path = socket(&dir, "stalled.sock");
    let _server = serve(&path, true);
    let mut stalled = UnixStream::connect(&path).await.unwrap();
    stalled
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0\0\0\x40\x01\x04")
        .await
        .unwrap();
    // Half a HEADERS frame stays unsent forever; other clients go on.
    for _ in 0..5 {
        assert_eq!(
            get_info(&path, &path.to_string_lossy()).await.unwrap(),
            "test"
        );
    }
    drop(stalled);
    assert_eq!(get_info(&path, "localhost").await.unwrap(), "test");
}
