//! Hand-written fixtures shaped like what a Kubernetes 1.30 API server returns:
//! deserializing and serializing again must give back the same JSON, or a read-modify-
//! write by the controller would change fields it never meant to touch.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use fake_dra_api::handle::AllocationHandle;
use fake_dra_api::upstream::pod::DraPod;
use fake_dra_api::upstream::v1alpha2::{
    AllocationMode, PodSchedulingContext, ResourceClaim, ResourceClaimTemplate, ResourceClass,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

fn fixture(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let text = std::fs::read_to_string(&path).expect("fixture is readable");
    serde_json::from_str(&text).expect("fixture is JSON")
}

/// Parses the fixture as `T`, checks it serializes back to the same JSON, returns it.
fn round_trip<T: DeserializeOwned + Serialize>(name: &str) -> T {
    let original = fixture(name);
    let typed: T = serde_json::from_value(original.clone())
        .unwrap_or_else(|e| panic!("{name} does not deserialize: {e}"));
    let back = serde_json::to_value(&typed).unwrap();
    assert_eq!(
        back,
        original,
        "{name} changed in a round trip:\n{}",
        serde_json::to_string_pretty(&back).unwrap()
    );
    typed
}

#[test]
fn allocated_claim() {
    let claim: ResourceClaim = round_trip("resourceclaim-allocated.json");
    assert!(claim.is_allocated());
    assert!(claim.is_reserved_for("9d8c7b6a-5f4e-4d3c-8b2a-1f0e9d8c7b6a"));
    assert!(claim.has_finalizer("fake.resource.3-shake.com/deletion-protection"));
    let data = claim
        .handle_for_driver("fake.resource.3-shake.com")
        .unwrap();
    let handle = AllocationHandle::parse(data).unwrap();
    assert_eq!(handle.node_name, "kind-worker");
    assert_eq!(handle.child_count(), 4);
    // The fixture's handle is exactly what to_json writes.
    assert_eq!(handle.to_json(), data);
}

#[test]
fn claim_with_structured_data_of_another_driver() {
    let claim: ResourceClaim = round_trip("resourceclaim-structured.json");
    assert_eq!(claim.spec.allocation_mode(), AllocationMode::Immediate);
    assert!(claim.deallocation_requested());
    assert_eq!(claim.handle_for_driver("fake.resource.3-shake.com"), None);
    assert_eq!(
        claim.handle_for_driver("other.example.com"),
        None,
        "no data"
    );
}

#[test]
fn class_with_suitable_nodes() {
    let class: ResourceClass = round_trip("resourceclass.json");
    assert_eq!(class.driver_name, "fake.resource.3-shake.com");
    let terms = &class.suitable_nodes.unwrap().node_selector_terms;
    assert_eq!(terms.len(), 1);
}

#[test]
fn claim_template() {
    let template: ResourceClaimTemplate = round_trip("resourceclaimtemplate.json");
    assert_eq!(template.spec.spec.resource_class_name, "fake.3-shake.com");
    assert_eq!(
        template.spec.spec.allocation_mode(),
        AllocationMode::WaitForFirstConsumer
    );
}

#[test]
fn pod_scheduling_context() {
    let ctx: PodSchedulingContext = round_trip("podschedulingcontext.json");
    assert_eq!(ctx.selected_node(), Some("kind-worker"));
    assert_eq!(ctx.potential_nodes().len(), 3);
    let fake = ctx.claim_status("fake").unwrap();
    assert_eq!(fake.unsuitable_nodes.as_deref().unwrap(), ["kind-worker3"]);
    assert_eq!(ctx.claim_status("other").unwrap().unsuitable_nodes, None);
}

#[test]
fn pod_of_kubernetes_1_30() {
    let pod: DraPod = round_trip("pod-1.30.json");
    assert_eq!(pod.node_name(), Some("kind-worker"));
    assert_eq!(pod.claim_name("fake"), Some("pod0-fake-x7k2q"));
    assert_eq!(pod.claim_name("shared"), Some("shared"));
    let used: Vec<_> = pod
        .all_containers()
        .map(|c| c.claim_names().collect::<Vec<_>>())
        .collect();
    assert_eq!(used, [vec!["shared"], vec!["fake", "shared"], vec![]]);
}

#[test]
fn pod_edit_keeps_unknown_fields() {
    let mut pod: DraPod = round_trip("pod-1.30.json");
    pod.status.as_mut().unwrap().resource_claim_statuses = None;
    let mut expected = fixture("pod-1.30.json");
    expected["status"]
        .as_object_mut()
        .unwrap()
        .remove("resourceClaimStatuses");
    assert_eq!(serde_json::to_value(&pod).unwrap(), expected);
}
