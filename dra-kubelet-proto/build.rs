//! Compiles our .proto files with protox (pure Rust, no system `protoc`) and generates the
//! prost messages plus tonic clients and servers.

use std::path::PathBuf;

const PROTOS: &[&str] = &[
    "proto/pluginregistration/v1/api.proto",
    "proto/dra/v1alpha2/api.proto",
    "proto/dra/v1alpha3/api.proto",
    "proto/dra/v1beta1/api.proto",
    "proto/dra/v1/api.proto",
    "proto/dra-health/v1alpha1/api.proto",
    "proto/dra-health/v1/api.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let includes = [root.join("proto")];
    let files: Vec<PathBuf> = PROTOS.iter().map(|p| root.join(p)).collect();
    for file in &files {
        println!("cargo:rerun-if-changed={}", file.display());
    }
    let fds = protox::compile(&files, &includes)?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
