//! Wire checks: every message is encoded by hand from its field numbers and decoded with
//! the generated types, and the generated encoding is compared with the hand-made bytes.
//! A wrong field number or type in a .proto file fails here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;

use dra_kubelet_proto::{dra_v1, dra_v1beta1, pluginregistration as reg, v1alpha2, v1alpha3};
use prost::Message;

const VARINT: u64 = 0;
const LEN: u64 = 2;

fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A protobuf message built field by field.
#[derive(Default, Clone)]
struct Raw(Vec<u8>);

impl Raw {
    fn string(mut self, field: u64, s: &str) -> Self {
        self.bytes(field, s.as_bytes());
        self
    }
    fn message(mut self, field: u64, m: &Raw) -> Self {
        let inner = m.0.clone();
        self.bytes(field, &inner);
        self
    }
    fn bool(mut self, field: u64, b: bool) -> Self {
        varint(field << 3 | VARINT, &mut self.0);
        varint(u64::from(b), &mut self.0);
        self
    }
    /// A map entry: a nested message with key = 1, value = 2.
    fn map_entry(self, field: u64, key: &str, value: &Raw) -> Self {
        self.message(field, &Raw::default().string(1, key).message(2, value))
    }
    fn bytes(&mut self, field: u64, b: &[u8]) {
        varint(field << 3 | LEN, &mut self.0);
        varint(b.len() as u64, &mut self.0);
        self.0.extend_from_slice(b);
    }
}

/// Decodes the hand-made bytes into `M`, checks it equals `expected`, and checks the
/// generated encoder produces the same bytes (prost writes fields in number order, as the
/// hand-made messages do).
fn check<M: Message + Default + PartialEq + std::fmt::Debug>(raw: &Raw, expected: &M) {
    let decoded = M::decode(raw.0.as_slice()).unwrap();
    assert_eq!(&decoded, expected);
    assert_eq!(expected.encode_to_vec(), raw.0, "encoding of {expected:?}");
}

#[test]
fn registration_messages() {
    check(&Raw::default(), &reg::InfoRequest {});
    check(&Raw::default(), &reg::RegistrationStatusResponse {});
    check(
        &Raw::default()
            .string(1, "DRAPlugin")
            .string(2, "fake.resource.3-shake.com")
            .string(
                3,
                "/var/lib/kubelet/plugins/fake.resource.3-shake.com/plugin.sock",
            )
            .string(4, "1.0.0")
            .string(4, "v1beta1.DRAPlugin"),
        &reg::PluginInfo {
            r#type: "DRAPlugin".into(),
            name: "fake.resource.3-shake.com".into(),
            endpoint: "/var/lib/kubelet/plugins/fake.resource.3-shake.com/plugin.sock".into(),
            supported_versions: vec!["1.0.0".into(), "v1beta1.DRAPlugin".into()],
        },
    );
    check(
        &Raw::default().bool(1, true).string(2, "boom"),
        &reg::RegistrationStatus {
            plugin_registered: true,
            error: "boom".into(),
        },
    );
}

fn v1alpha2_request_fields() -> Raw {
    Raw::default()
        .string(1, "ns")
        .string(2, "uid-1")
        .string(3, "claim")
        .string(4, "{\"handle\":1}")
}

#[test]
fn v1alpha2_messages() {
    check(
        &v1alpha2_request_fields(),
        &v1alpha2::NodePrepareResourceRequest {
            namespace: "ns".into(),
            claim_uid: "uid-1".into(),
            claim_name: "claim".into(),
            resource_handle: "{\"handle\":1}".into(),
        },
    );
    check(
        &v1alpha2_request_fields(),
        &v1alpha2::NodeUnprepareResourceRequest {
            namespace: "ns".into(),
            claim_uid: "uid-1".into(),
            claim_name: "claim".into(),
            resource_handle: "{\"handle\":1}".into(),
        },
    );
    check(
        &Raw::default().string(1, "a/b=c").string(1, "a/b=d"),
        &v1alpha2::NodePrepareResourceResponse {
            cdi_devices: vec!["a/b=c".into(), "a/b=d".into()],
        },
    );
    check(&Raw::default(), &v1alpha2::NodeUnprepareResourceResponse {});
}

fn claim_raw(uid: &str) -> Raw {
    Raw::default()
        .string(1, "ns")
        .string(2, uid)
        .string(3, "claim")
        .string(4, "h")
}

fn claim(uid: &str) -> v1alpha3::Claim {
    v1alpha3::Claim {
        namespace: "ns".into(),
        uid: uid.into(),
        name: "claim".into(),
        resource_handle: "h".into(),
    }
}

#[test]
fn v1alpha3_claims() {
    check(&claim_raw("u1"), &claim("u1"));
    let raw = Raw::default()
        .message(1, &claim_raw("u1"))
        .message(1, &claim_raw("u2"));
    check(
        &raw,
        &v1alpha3::NodePrepareResourcesRequest {
            claims: vec![claim("u1"), claim("u2")],
        },
    );
    check(
        &raw,
        &v1alpha3::NodeUnprepareResourcesRequest {
            claims: vec![claim("u1"), claim("u2")],
        },
    );
}

#[test]
fn v1alpha3_claim_from_1_30_skips_structured_handle() {
    // Field 5 (structured_resource_handle) as a 1.30 kubelet sends it: a nested message.
    let raw = claim_raw("u1").message(5, &Raw::default().string(1, "x"));
    let decoded = v1alpha3::Claim::decode(raw.0.as_slice()).unwrap();
    assert_eq!(decoded, claim("u1"));
}

#[test]
fn v1alpha3_responses() {
    let ok = Raw::default().string(1, "a/b=c");
    let failed = Raw::default().string(2, "bad handle");
    check(
        &ok,
        &v1alpha3::NodePrepareResourceResponse {
            cdi_devices: vec!["a/b=c".into()],
            error: String::new(),
        },
    );
    check(
        &failed,
        &v1alpha3::NodePrepareResourceResponse {
            cdi_devices: vec![],
            error: "bad handle".into(),
        },
    );
    // The upstream map, written as its entry messages (the same bytes), in the order added.
    let mut answers = v1alpha3::NodePrepareResourcesResponse::default();
    answers.insert(
        "u1".into(),
        v1alpha3::NodePrepareResourceResponse {
            cdi_devices: vec!["a/b=c".into()],
            error: String::new(),
        },
    );
    check(&Raw::default().map_entry(1, "u1", &ok), &answers);
    let two = Raw::default()
        .map_entry(1, "u1", &ok)
        .map_entry(1, "u2", &failed);
    let decoded = v1alpha3::NodePrepareResourcesResponse::decode(two.0.as_slice())
        .unwrap()
        .into_map();
    assert_eq!(decoded.len(), 2);
    assert_eq!(decoded["u2"].error, "bad handle");
    assert_eq!(decoded["u1"].cdi_devices, vec!["a/b=c".to_string()]);

    let unprep_failed = Raw::default().string(1, "cannot remove");
    check(
        &unprep_failed,
        &v1alpha3::NodeUnprepareResourceResponse {
            error: "cannot remove".into(),
        },
    );
    let mut unprepared = v1alpha3::NodeUnprepareResourcesResponse::default();
    unprepared.insert(
        "u1".into(),
        v1alpha3::NodeUnprepareResourceResponse {
            error: "cannot remove".into(),
        },
    );
    check(
        &Raw::default().map_entry(1, "u1", &unprep_failed),
        &unprepared,
    );
    // A successful unprepare is an empty value, and still on the wire: gogo code (kubelet
    // 1.28) turns an entry without one into a nil pointer.
    let mut success = v1alpha3::NodeUnprepareResourcesResponse::default();
    success.insert("u1".into(), Default::default());
    check(
        &Raw::default().map_entry(1, "u1", &Raw::default()),
        &success,
    );
    // A peer's entry without a value reads as the empty answer, as a map's would.
    let bare = Raw::default().message(1, &Raw::default().string(1, "u1"));
    let read = v1alpha3::NodeUnprepareResourcesResponse::decode(bare.0.as_slice())
        .unwrap()
        .into_map();
    assert_eq!(read["u1"], Default::default());
    check(
        &Raw::default(),
        &v1alpha3::NodeListAndWatchResourcesRequest {},
    );
    check(
        &Raw::default(),
        &v1alpha3::NodeListAndWatchResourcesResponse {},
    );
}

#[test]
fn service_paths_match_the_kubelet() {
    // The generated clients address methods by "/package.Service/Method"; the kubelet uses
    // the same paths, so check the names the server will route on.
    use dra_kubelet_proto::services;
    assert_eq!(
        <reg::registration_server::RegistrationServer<Dummy> as tonic::server::NamedService>::NAME,
        services::REGISTRATION
    );
    assert_eq!(
        <v1alpha2::node_server::NodeServer<Dummy> as tonic::server::NamedService>::NAME,
        services::V1ALPHA2_NODE
    );
    assert_eq!(
        <v1alpha3::node_server::NodeServer<Dummy> as tonic::server::NamedService>::NAME,
        services::V1ALPHA3_NODE
    );
    assert_eq!(
        <dra_v1beta1::dra_plugin_server::DraPluginServer<Dummy> as tonic::server::NamedService>::NAME,
        services::DRA_V1BETA1
    );
    assert_eq!(
        <dra_v1::dra_plugin_server::DraPluginServer<Dummy> as tonic::server::NamedService>::NAME,
        services::DRA_V1
    );
    // The registration entries name the service by its last two package segments.
    assert!(services::DRA_V1.ends_with(dra_kubelet_proto::SUPPORTED_V1));
    assert!(services::DRA_V1BETA1.ends_with(dra_kubelet_proto::SUPPORTED_V1BETA1));
}

struct Dummy;

#[tonic::async_trait]
impl reg::registration_server::Registration for Dummy {
    async fn get_info(
        &self,
        _: tonic::Request<reg::InfoRequest>,
    ) -> Result<tonic::Response<reg::PluginInfo>, tonic::Status> {
        Err(tonic::Status::unimplemented(""))
    }
    async fn notify_registration_status(
        &self,
        _: tonic::Request<reg::RegistrationStatus>,
    ) -> Result<tonic::Response<reg::RegistrationStatusResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented(""))
    }
}

#[tonic::async_trait]
impl v1alpha2::node_server::Node for Dummy {
    async fn node_prepare_resource(
        &self,
        _: tonic::Request<v1alpha2::NodePrepareResourceRequest>,
    ) -> Result<tonic::Response<v1alpha2::NodePrepareResourceResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented(""))
    }
    async fn node_unprepare_resource(
        &self,
        _: tonic::Request<v1alpha2::NodeUnprepareResourceRequest>,
    ) -> Result<tonic::Response<v1alpha2::NodeUnprepareResourceResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented(""))
    }
}

#[tonic::async_trait]
impl v1alpha3::node_server::Node for Dummy {
    type NodeListAndWatchResourcesStream =
        tonic::codegen::BoxStream<v1alpha3::NodeListAndWatchResourcesResponse>;
    async fn node_prepare_resources(
        &self,
        _: tonic::Request<v1alpha3::NodePrepareResourcesRequest>,
    ) -> Result<tonic::Response<v1alpha3::NodePrepareResourcesResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented(""))
    }
    async fn node_unprepare_resources(
        &self,
        _: tonic::Request<v1alpha3::NodeUnprepareResourcesRequest>,
    ) -> Result<tonic::Response<v1alpha3::NodeUnprepareResourcesResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented(""))
    }
    async fn node_list_and_watch_resources(
        &self,
        _: tonic::Request<v1alpha3::NodeListAndWatchResourcesRequest>,
    ) -> Result<tonic::Response<Self::NodeListAndWatchResourcesStream>, tonic::Status> {
        Err(tonic::Status::unimplemented(""))
    }
}

/// The structured-DRA packages share their messages, so one set of checks runs per package.
macro_rules! structured_wire_tests {
    ($test:ident, $pkg:ident) => {
        // `..Default::default()` leaves v1's `share_id` unset; v1beta1 has no such field.
        #[allow(clippy::needless_update)]
        #[test]
        fn $test() {
            use $pkg as p;
            let claim_raw = |uid: &str| {
                Raw::default()
                    .string(1, "ns")
                    .string(2, uid)
                    .string(3, "claim")
            };
            let claim = |uid: &str| p::Claim {
                namespace: "ns".into(),
                uid: uid.into(),
                name: "claim".into(),
            };
            check(&claim_raw("u1"), &claim("u1"));
            let two = Raw::default()
                .message(1, &claim_raw("u1"))
                .message(1, &claim_raw("u2"));
            check(
                &two,
                &p::NodePrepareResourcesRequest {
                    claims: vec![claim("u1"), claim("u2")],
                },
            );
            check(
                &two,
                &p::NodeUnprepareResourcesRequest {
                    claims: vec![claim("u1"), claim("u2")],
                },
            );

            let device_raw = Raw::default()
                .string(1, "req-a")
                .string(1, "req-b")
                .string(2, "node-1")
                .string(3, "fake-3")
                .string(4, "k8s.fake.resource.3-shake.com/fake=common")
                .string(4, "k8s.fake.resource.3-shake.com/fake=claim-u1");
            let device = p::Device {
                request_names: vec!["req-a".into(), "req-b".into()],
                pool_name: "node-1".into(),
                device_name: "fake-3".into(),
                cdi_device_ids: vec![
                    "k8s.fake.resource.3-shake.com/fake=common".into(),
                    "k8s.fake.resource.3-shake.com/fake=claim-u1".into(),
                ],
                ..Default::default()
            };
            check(&device_raw, &device);

            let ok_raw = Raw::default().message(1, &device_raw);
            let ok = p::NodePrepareResourceResponse {
                devices: vec![device.clone()],
                error: String::new(),
            };
            check(&ok_raw, &ok);
            let failed_raw = Raw::default().string(2, "uid mismatch");
            let failed = p::NodePrepareResourceResponse {
                devices: vec![],
                error: "uid mismatch".into(),
            };
            check(&failed_raw, &failed);
            let mut answers = p::NodePrepareResourcesResponse::default();
            answers.insert("u1".into(), ok.clone());
            check(&Raw::default().map_entry(1, "u1", &ok_raw), &answers);
            let both = Raw::default()
                .map_entry(1, "u1", &ok_raw)
                .map_entry(1, "u2", &failed_raw);
            let decoded = p::NodePrepareResourcesResponse::decode(both.0.as_slice()).unwrap();
            assert_eq!(
                decoded.into_map(),
                HashMap::from([("u1".to_string(), ok), ("u2".to_string(), failed)])
            );

            let unprep_raw = Raw::default().string(1, "cannot remove");
            let unprep = p::NodeUnprepareResourceResponse {
                error: "cannot remove".into(),
            };
            check(&unprep_raw, &unprep);
            check(
                &Raw::default(),
                &p::NodeUnprepareResourceResponse::default(),
            );
            let mut unprepared = p::NodeUnprepareResourcesResponse::default();
            unprepared.insert("u1".into(), unprep);
            check(&Raw::default().map_entry(1, "u1", &unprep_raw), &unprepared);
            let mut success = p::NodeUnprepareResourcesResponse::default();
            success.insert("u1".into(), Default::default());
            check(
                &Raw::default().map_entry(1, "u1", &Raw::default()),
                &success,
            );
        }
    };
}

structured_wire_tests!(dra_v1beta1_messages, dra_v1beta1);
structured_wire_tests!(dra_v1_messages, dra_v1);

/// A v1alpha3 claim (with a resource handle) sent to a structured server: the handle
/// (field 4) is skipped, the identity decodes. Guards against renumbering the identity.
#[test]
fn structured_claim_skips_unknown_fields() {
    let raw = claim_raw("u1");
    let decoded = dra_v1::Claim::decode(raw.0.as_slice()).unwrap();
    assert_eq!(
        decoded,
        dra_v1::Claim {
            namespace: "ns".into(),
            uid: "u1".into(),
            name: "claim".into(),
        }
    );
}

macro_rules! dummy_dra_plugin {
    ($pkg:ident) => {
        #[tonic::async_trait]
        impl $pkg::dra_plugin_server::DraPlugin for Dummy {
            async fn node_prepare_resources(
                &self,
                _: tonic::Request<$pkg::NodePrepareResourcesRequest>,
            ) -> Result<tonic::Response<$pkg::NodePrepareResourcesResponse>, tonic::Status> {
                Err(tonic::Status::unimplemented(""))
            }
            async fn node_unprepare_resources(
                &self,
                _: tonic::Request<$pkg::NodeUnprepareResourcesRequest>,
            ) -> Result<tonic::Response<$pkg::NodeUnprepareResourcesResponse>, tonic::Status> {
                Err(tonic::Status::unimplemented(""))
            }
        }
    };
}

dummy_dra_plugin!(dra_v1beta1);
dummy_dra_plugin!(dra_v1);

#[test]
fn dra_v1_device_share_id_is_field_5_and_optional() {
    let raw = Raw::default()
        .string(2, "node-1")
        .string(3, "fake-0")
        .string(5, "share-1");
    check(
        &raw,
        &dra_v1::Device {
            pool_name: "node-1".into(),
            device_name: "fake-0".into(),
            share_id: Some("share-1".into()),
            ..Default::default()
        },
    );
    check(
        &Raw::default().string(5, ""),
        &dra_v1::Device {
            share_id: Some(String::new()),
            ..Default::default()
        },
    );
}
