//! What the `:authority` rewriter costs a gRPC call on a unix socket, next to the floor
//! measured in the same run: the same call to the same tonic server without it.
//!
//! `cargo bench -p dra-kubelet-proto --bench authority`
//!
//! - floor: `GetInfo` (empty request) to a plain tonic server, `:authority: localhost`;
//! - the same call to a server whose connections go through `RewriteIo::server`, with
//!   `localhost` and with the %-encoded socket path a 1.29+ kubelet sends (the client
//!   writes it raw on the wire: no client-side rewriter is timed);
//! - a 64 KiB request (a batch of ~600 claims' worth of bytes) both ways, for the cost of
//!   passing DATA frames through.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use dra_kubelet_proto::authority::{RewriteIo, grpc_go_encoded_authority};
use dra_kubelet_proto::pluginregistration as reg;
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
        request: Request<reg::InfoRequest>,
    ) -> Result<Response<reg::PluginInfo>, Status> {
        drop(request);
        Ok(Response::new(reg::PluginInfo::default()))
    }

    async fn notify_registration_status(
        &self,
        request: Request<reg::RegistrationStatus>,
    ) -> Result<Response<reg::RegistrationStatusResponse>, Status> {
        // The big-request case: the error string carries the payload.
        drop(request);
        Ok(Response::new(reg::RegistrationStatusResponse {}))
    }
}

fn serve(path: &Path, rewrite: bool) {
    let listener = UnixListener::bind(path).unwrap();
    let server = tonic::transport::Server::builder().add_service(
        reg::registration_server::RegistrationServer::new(Registration),
    );
    tokio::spawn(async move {
        let incoming = UnixListenerStream::new(listener);
        if rewrite {
            server
                .serve_with_incoming(incoming.map(|s| s.map(RewriteIo::server)))
                .await
        } else {
            server.serve_with_incoming(incoming).await
        }
        .unwrap();
    });
}

/// A client that writes `authority` as is: tonic only takes valid URI authorities, so a
/// path goes through the client-side rewriter, whose cost is then part of the number;
/// `localhost` goes through a plain connection.
async fn client(
    path: PathBuf,
    authority: String,
) -> reg::registration_client::RegistrationClient<tonic::transport::Channel> {
    let channel = if authority == "localhost" {
        tonic::transport::Endpoint::from_static("http://localhost")
            .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
                let path = path.clone();
                async move {
                    Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                        UnixStream::connect(path).await?,
                    ))
                }
            }))
            .await
            .unwrap()
    } else {
        dra_kubelet_proto::connect_unix_with_authority(path, authority)
            .await
            .unwrap()
    };
    reg::registration_client::RegistrationClient::new(channel)
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain.sock");
    let rewritten = dir.path().join("rewritten.sock");
    rt.block_on(async {
        serve(&plain, false);
        serve(&rewritten, true);
    });
    let encoded = grpc_go_encoded_authority(&rewritten.to_string_lossy());
    let mut group = c.benchmark_group("authority");
    group.measurement_time(Duration::from_secs(5));
    group.sample_size(50);
    let big = reg::RegistrationStatus {
        plugin_registered: true,
        error: "x".repeat(64 * 1024),
    };
    for (name, path, authority) in [
        (
            "floor_plain_server_localhost",
            &plain,
            "localhost".to_string(),
        ),
        ("rewriter_localhost", &rewritten, "localhost".to_string()),
        (
            "rewriter_encoded_path_client_rewrites_too",
            &rewritten,
            encoded.clone(),
        ),
    ] {
        let mut client = rt.block_on(client(path.clone(), authority));
        group.bench_function(format!("{name}_empty_call"), |b| {
            b.iter(|| rt.block_on(client.get_info(reg::InfoRequest {})).unwrap())
        });
        group.bench_function(format!("{name}_64KiB_request"), |b| {
            b.iter(|| {
                rt.block_on(client.notify_registration_status(big.clone()))
                    .unwrap()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
