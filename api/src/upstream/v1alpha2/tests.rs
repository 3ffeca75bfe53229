use super::*;
use kube::Resource as _;

/// Compiles only if the types work with `kube::Api`; never called.
#[allow(dead_code)]
fn usable_with_kube_api(client: kube::Client) {
    let _: kube::Api<ResourceClaim> = kube::Api::namespaced(client.clone(), "ns");
    let _: kube::Api<ResourceClaimTemplate> = kube::Api::namespaced(client.clone(), "ns");
    let _: kube::Api<PodSchedulingContext> = kube::Api::namespaced(client.clone(), "ns");
    let _: kube::Api<ResourceClass> = kube::Api::all(client);
}

#[test]
fn kube_sees_the_right_urls() {
    assert_eq!(ResourceClaim::api_version(&()), "resource.k8s.io/v1alpha2");
    assert_eq!(ResourceClaim::plural(&()), "resourceclaims");
    assert_eq!(ResourceClass::kind(&()), "ResourceClass");
    assert_eq!(
        <PodSchedulingContext as k8s_openapi::ListableResource>::LIST_KIND,
        "PodSchedulingContextList"
    );
    assert_eq!(
        ResourceClaimTemplate::url_path(&(), Some("ns")),
        "/apis/resource.k8s.io/v1alpha2/namespaces/ns/resourceclaimtemplates"
    );
    assert_eq!(
        ResourceClass::url_path(&(), None),
        "/apis/resource.k8s.io/v1alpha2/resourceclasses"
    );
}

#[test]
fn writes_type_meta_and_reads_without_it() {
    let claim = ResourceClaim::default();
    let json = serde_json::to_value(&claim).unwrap();
    assert_eq!(json["apiVersion"], API_VERSION);
    assert_eq!(json["kind"], "ResourceClaim");
    assert!(json.get("status").is_none());

    let read: ResourceClaim =
        serde_json::from_str(r#"{"metadata":{"name":"c"},"spec":{"resourceClassName":"x"}}"#)
            .unwrap();
    assert_eq!(read.spec.resource_class_name, "x");
}

#[test]
fn claim_helpers() {
    let mut claim = ResourceClaim::default();
    assert!(!claim.is_allocated());
    assert_eq!(claim.handle_for_driver("d"), None);
    assert_eq!(
        claim.spec.allocation_mode(),
        AllocationMode::WaitForFirstConsumer
    );
    claim.status = Some(ResourceClaimStatus {
        allocation: Some(AllocationResult {
            resource_handles: Some(vec![
                ResourceHandle {
                    driver_name: Some("other".into()),
                    data: Some("no".into()),
                    structured_data: None,
                },
                ResourceHandle {
                    driver_name: Some("d".into()),
                    data: Some("yes".into()),
                    structured_data: None,
                },
            ]),
            ..Default::default()
        }),
        reserved_for: Some(vec![ResourceClaimConsumerReference {
            resource: "pods".into(),
            name: "p".into(),
            uid: "u1".into(),
            ..Default::default()
        }]),
        deallocation_requested: Some(true),
        ..Default::default()
    });
    assert!(claim.is_allocated());
    assert_eq!(claim.handle_for_driver("d"), Some("yes"));
    assert_eq!(claim.handle_for_driver("nobody"), None);
    assert!(claim.is_reserved_for("u1"));
    assert!(!claim.is_reserved_for("u2"));
    assert!(claim.deallocation_requested());
}

#[test]
fn clearing_is_distinct_from_leaving_alone() {
    let status = ResourceClaimStatus {
        reserved_for: Some(vec![]),
        deallocation_requested: Some(false),
        ..Default::default()
    };
    let json = serde_json::to_value(&status).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"reservedFor": [], "deallocationRequested": false})
    );
}
