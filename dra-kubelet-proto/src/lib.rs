//! The kubelet's gRPC APIs for Kubernetes Dynamic Resource Allocation (DRA) plugins,
//! generated from the .proto files under `proto/` (compiled at build time with protox: no
//! system `protoc` needed).
//!
//! Wire compatibility rests on the proto package, service and rpc names and the field
//! numbers; those are taken from the Kubernetes releases listed per module: the classic
//! node services (`v1alpha2`, `v1alpha3`) and the structured-DRA `DRAPlugin` services
//! (`k8s.io.kubelet.pkg.apis.dra.v1beta1` / `.v1`).
//!
//! The batched answers are maps on the wire; they are built and read as such:
//!
//! ```
//! use dra_kubelet_proto::dra_v1;
//!
//! let mut answer = dra_v1::NodePrepareResourcesResponse::default();
//! answer.insert(
//!     "0b7c1c6e-2f55-4a53-9a1e-0a6a4c3e7c11".into(),
//!     dra_v1::NodePrepareResourceResponse { error: "device busy".into(), ..Default::default() },
//! );
//! let by_uid = answer.into_map();
//! assert_eq!(by_uid["0b7c1c6e-2f55-4a53-9a1e-0a6a4c3e7c11"].error, "device busy");
//! ```
//!
//! A server on a unix socket that a kubelet dials wraps each accepted connection in
//! [`authority::RewriteIo::server`]; [`connect_unix`] dials one as a kubelet does.

#![warn(missing_docs)]

pub mod authority;

/// `pluginregistration` (all kubelets): how a plugin announces itself.
pub mod pluginregistration {
    #![allow(missing_docs, missing_debug_implementations, clippy::all)]
    tonic::include_proto!("pluginregistration");
}

/// `v1alpha2.Node` (kubelet 1.27; the fallback of 1.28–1.30): one claim per call.
pub mod v1alpha2 {
    #![allow(missing_docs, missing_debug_implementations, clippy::all)]
    tonic::include_proto!("v1alpha2");
}

/// `v1alpha3.Node` (kubelets 1.28–1.30): batched calls, per-claim errors.
pub mod v1alpha3 {
    #![allow(missing_docs, missing_debug_implementations, clippy::all)]
    tonic::include_proto!("v1alpha3");
}

/// `k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin` (kubelets 1.32+): structured DRA; the
/// plugin gets the claim's identity and reads its allocation from the API.
pub mod dra_v1beta1 {
    #![allow(missing_docs, missing_debug_implementations, clippy::all)]
    tonic::include_proto!("k8s.io.kubelet.pkg.apis.dra.v1beta1");
}

/// `k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin` (kubelets 1.34+): the same messages as
/// [`dra_v1beta1`] under the GA package name.
pub mod dra_v1 {
    #![allow(missing_docs, missing_debug_implementations, clippy::all)]
    tonic::include_proto!("k8s.io.kubelet.pkg.apis.dra.v1");
}

/// `v1alpha1.DRAResourceHealth` (kubelets 1.34 with ResourceHealthStatus, 1.36+): the
/// plugin streams its devices' health.
pub mod dra_health_v1alpha1 {
    #![allow(missing_docs, missing_debug_implementations, clippy::all)]
    tonic::include_proto!("v1alpha1");
}

/// `v1.DRAResourceHealth` (kubelets 1.37+): the same messages as [`dra_health_v1alpha1`].
pub mod dra_health_v1 {
    #![allow(missing_docs, missing_debug_implementations, clippy::all)]
    tonic::include_proto!("v1");
}

/// The per-claim answer maps of the batched services, written as their entry messages
/// (see the .proto files): building them and reading them as maps.
macro_rules! claim_answers {
    ($module:ident, $response:ident, $entries:ident, $value:ident) => {
        impl $module::$response {
            /// Adds the answer for claim `uid`, its value always on the wire.
            pub fn insert(&mut self, uid: String, value: $module::$value) {
                self.claims.push($module::$entries::ClaimsEntry {
                    key: uid,
                    value: Some(value),
                });
            }

            /// The answers by claim uid, as a protobuf map reads them: an entry without a
            /// value is the empty answer, a repeated key keeps its last value.
            pub fn into_map(self) -> std::collections::HashMap<String, $module::$value> {
                self.claims
                    .into_iter()
                    .map(|e| (e.key, e.value.unwrap_or_default()))
                    .collect()
            }
        }
    };
}

claim_answers!(
    v1alpha3,
    NodePrepareResourcesResponse,
    node_prepare_resources_response,
    NodePrepareResourceResponse
);
claim_answers!(
    v1alpha3,
    NodeUnprepareResourcesResponse,
    node_unprepare_resources_response,
    NodeUnprepareResourceResponse
);
claim_answers!(
    dra_v1beta1,
    NodePrepareResourcesResponse,
    node_prepare_resources_response,
    NodePrepareResourceResponse
);
claim_answers!(
    dra_v1beta1,
    NodeUnprepareResourcesResponse,
    node_unprepare_resources_response,
    NodeUnprepareResourceResponse
);
claim_answers!(
    dra_v1,
    NodePrepareResourcesResponse,
    node_prepare_resources_response,
    NodePrepareResourceResponse
);
claim_answers!(
    dra_v1,
    NodeUnprepareResourcesResponse,
    node_unprepare_resources_response,
    NodeUnprepareResourceResponse
);

/// The `supported_versions` entry that tells a 1.34+ kubelet the plugin serves
/// [`services::DRA_V1`].
pub const SUPPORTED_V1: &str = "v1.DRAPlugin";
/// The `supported_versions` entry that tells a 1.32+ kubelet the plugin serves
/// [`services::DRA_V1BETA1`].
pub const SUPPORTED_V1BETA1: &str = "v1beta1.DRAPlugin";

/// The `supported_versions` entry that tells a 1.37+ kubelet the plugin streams device
/// health through [`services::DRA_HEALTH_V1`].
pub const SUPPORTED_HEALTH_V1: &str = "v1.DRAResourceHealth";
/// The same for [`services::DRA_HEALTH_V1ALPHA1`] (1.37 also takes it; 1.34 and 1.36 call
/// it without looking).
pub const SUPPORTED_HEALTH_V1ALPHA1: &str = "v1alpha1.DRAResourceHealth";

/// The `type` a DRA plugin reports in `PluginInfo`.
pub const DRA_PLUGIN_TYPE: &str = "DRAPlugin";

/// The gRPC service names, as the kubelet addresses them.
pub mod services {
    /// The registration service.
    pub const REGISTRATION: &str = "pluginregistration.Registration";
    /// The classic single-claim node service.
    pub const V1ALPHA2_NODE: &str = "v1alpha2.Node";
    /// The classic batched node service.
    pub const V1ALPHA3_NODE: &str = "v1alpha3.Node";
    /// The structured-DRA service of kubelets 1.32+.
    pub const DRA_V1BETA1: &str = "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin";
    /// The structured-DRA service of kubelets 1.34+.
    pub const DRA_V1: &str = "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin";
    /// The device health stream of kubelets 1.34 (gated) to 1.39.
    pub const DRA_HEALTH_V1ALPHA1: &str = "v1alpha1.DRAResourceHealth";
    /// The device health stream of kubelets 1.37+.
    pub const DRA_HEALTH_V1: &str = "v1.DRAResourceHealth";
}

/// Dials a gRPC server on a unix socket as kubelets 1.29–1.33 dial plugin sockets
/// (`grpc.Dial(<socket path>)`): `:authority` is the %-encoded socket path.
pub async fn connect_unix(
    path: impl AsRef<std::path::Path>,
) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    let authority = authority::grpc_go_encoded_authority(&path.as_ref().to_string_lossy());
    connect_unix_with_authority(path, authority).await
}

/// Dials a gRPC server on a unix socket, sending `authority` as `:authority` whatever it
/// is (tonic itself only sends valid URI authorities). The URI is a placeholder: every
/// connection goes to `path`.
pub async fn connect_unix_with_authority(
    path: impl AsRef<std::path::Path>,
    authority: impl Into<Vec<u8>>,
) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    let path = path.as_ref().to_owned();
    let authority = authority.into();
    tonic::transport::Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            let path = path.clone();
            let authority = authority.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(authority::RewriteIo::client(
                    stream, authority,
                )))
            }
        }))
        .await
}
