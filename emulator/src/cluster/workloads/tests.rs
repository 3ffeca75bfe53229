use super::deployment::max_unavailable;
use super::*;

/// Why templates are copied as raw JSON: the 1.34 types drop the classic claim source.
#[test]
fn typed_pod_template_drops_the_classic_claim_source() {
    let classic = json!({"spec": {"containers": [], "resourceClaims": [{"name": "gpu", "source": {"resourceClaimTemplateName": "t"}}]}});
    let typed: k8s_openapi::api::core::v1::PodTemplateSpec =
        serde_json::from_value(classic.clone()).unwrap();
    let back = serde_json::to_value(typed).unwrap();
    assert_eq!(back.pointer("/spec/resourceClaims/0/source"), None);
    let pod = pod_from_template(
        &classic,
        "ns",
        owner_reference("apps/v1", "ReplicaSet", "rs", "uid"),
    )
    .unwrap();
    assert_eq!(
        serde_json::to_value(pod)
            .unwrap()
            .pointer("/spec/resourceClaims/0/source/resourceClaimTemplateName"),
        Some(&json!("t"))
    );
}

#[test]
fn template_hash_is_stable_and_safe() {
    let a = json!({"metadata": {"labels": {"app": "x", "tier": "y"}}, "spec": {"containers": [{"name": "c"}]}});
    let b = json!({"spec": {"containers": [{"name": "c"}]}, "metadata": {"labels": {"tier": "y", "app": "x"}}});
    let c = json!({"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c"}]}});
    assert_eq!(template_hash(&a), template_hash(&b));
    assert_ne!(template_hash(&a), template_hash(&c));
    assert!(
        template_hash(&a)
            .chars()
            .all(|ch| "bcdfghjklmnpqrstvwxz2456789".contains(ch))
    );
}

#[test]
fn max_unavailable_follows_the_strategy() {
    let deployment = |strategy: Value, replicas: i32| -> (Deployment, i32) {
        let d = serde_json::from_value(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {}, "spec": {"selector": {}, "template": {}, "strategy": strategy}})).unwrap();
        (d, replicas)
    };
    let (d, r) = deployment(json!({"type": "Recreate"}), 4);
    assert_eq!(max_unavailable(&d, r), 0);
    let (d, r) = deployment(json!({}), 4);
    assert_eq!(max_unavailable(&d, r), 1);
    let (d, r) = deployment(
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 0}}),
        4,
    );
    assert_eq!(max_unavailable(&d, r), 1);
    let (d, r) = deployment(
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "50%"}}),
        3,
    );
    assert_eq!(max_unavailable(&d, r), 1);
}
