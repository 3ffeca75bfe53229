use super::*;
use crate::apiserver::registry::builtin_types;

fn paths(found: &[FieldPath]) -> Vec<String> {
    found.iter().map(ToString::to_string).collect()
}

fn rt(group: &str, plural: &str, server_version: (u32, u32)) -> ResourceType {
    builtin_types(server_version)
        .unwrap()
        .into_iter()
        .find(|t| t.group == group && t.plural == plural)
        .unwrap()
}

#[test]
fn duplicates_are_found_with_their_paths() {
    let body = br#"{"metadata": {"name": "a", "name": "b"}, "spec": {"containers": [{"name": "c", "image": "x", "image": "y"}]}}"#;
    assert_eq!(
        paths(&duplicate_fields(body)),
        vec!["metadata.name", "spec.containers[0].image"]
    );
    assert!(duplicate_fields(b"{not json").is_empty());
    assert_eq!(
        paths(&duplicate_fields_yaml(
            b"data:\n  a: 1\n  a: 2\nlist:\n- {x: 1, x: 2}\n"
        )),
        vec!["data.a", "list[0].x"]
    );
}

#[test]
fn unknown_fields_of_a_typed_kind() {
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "d", "unknownMeta": 1, "creationTimestamp": null},
        "spec": {"unknown1": "v", "selector": {"matchLabels": {"app": "x"}}, "template": {"spec": {"containers": [
            {"name": "c", "image": "i", "unknownNested": true, "resources": {"limits": {"cpu": 1}}, "args": []}
        ]}}},
    });
    let found = unknown_fields(
        &rt("apps", "deployments", (1, 30)),
        "v1",
        (1, 30),
        &deployment,
    );
    assert_eq!(
        paths(&found),
        vec![
            "metadata.unknownMeta",
            "spec.template.spec.containers[0].unknownNested",
            "spec.unknown1"
        ]
    );
    let mut pruned = deployment.clone();
    remove_fields(&mut pruned, &found);
    assert!(unknown_fields(&rt("apps", "deployments", (1, 30)), "v1", (1, 30), &pruned).is_empty());
    assert_eq!(
        pruned["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"],
        1
    );
}

#[test]
fn pod_claims_by_release() {
    let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}], "resourceClaims": [
        {"name": "a", "source": {"resourceClaimTemplateName": "t", "typo": 1}},
        {"name": "b", "resourceClaimName": "c"},
    ]}});
    let classic = unknown_fields(&rt("", "pods", (1, 30)), "v1", (1, 30), &pod);
    assert_eq!(
        paths(&classic),
        vec![
            "spec.resourceClaims[0].source.typo",
            "spec.resourceClaims[1].resourceClaimName"
        ]
    );
    let structured = unknown_fields(&rt("", "pods", (1, 34)), "v1", (1, 34), &pod);
    assert_eq!(paths(&structured), vec!["spec.resourceClaims[0].source"]);
    let deployment = json!({"metadata": {"name": "d"}, "spec": {"selector": {}, "template": {"spec": {
        "containers": [{"name": "c"}],
        "resourceClaims": [{"name": "a", "source": {"resourceClaimTemplateName": "t"}}],
    }}}});
    assert!(
        unknown_fields(
            &rt("apps", "deployments", (1, 30)),
            "v1",
            (1, 30),
            &deployment
        )
        .is_empty()
    );
    assert_eq!(
        paths(&unknown_fields(
            &rt("apps", "deployments", (1, 34)),
            "v1",
            (1, 34),
            &deployment
        )),
        vec!["spec.template.spec.resourceClaims[0].source"]
    );
}

#[test]
fn classic_claims_have_their_1_30_shape() {
    let template = json!({"apiVersion": "resource.k8s.io/v1alpha2", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "t"},
            "spec": {"metadata": {"labels": {"a": "b"}, "bogus": 1}, "spec": {"resourceClassName": "c", "parametersRef": {"kind": "K", "name": "n", "namespace": "x"}, "allocationMod": "Immediate"}}});
    let found = unknown_fields(
        &rt("resource.k8s.io", "resourceclaimtemplates", (1, 30)),
        "v1alpha2",
        (1, 30),
        &template,
    );
    assert_eq!(
        paths(&found),
        vec![
            "spec.metadata.bogus",
            "spec.spec.allocationMod",
            "spec.spec.parametersRef.namespace"
        ]
    );
    let claim = json!({"metadata": {"name": "c"}, "spec": {"resourceClassName": "c"}, "status": {
            "driverName": "d", "allocation": {"resourceHandles": [{"driverName": "d", "data": "{}", "structuredData": {"anything": 1}}],
            "availableOnNodes": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n"]}]}]}, "shareable": true},
            "reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}], "deallocationRequested": false}});
    assert!(
        unknown_fields(
            &rt("resource.k8s.io", "resourceclaims", (1, 30)),
            "v1alpha2",
            (1, 30),
            &claim
        )
        .is_empty()
    );
}

#[test]
fn events_of_both_apis() {
    let new = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e"},
            "eventTime": "2024-01-01T00:00:00.000000Z", "regarding": {"kind": "Pod"}, "note": "n", "message": "core's"});
    let found = unknown_fields(&rt("events.k8s.io", "events", (1, 30)), "v1", (1, 30), &new);
    assert_eq!(paths(&found), vec!["message"]);
}

#[test]
fn messages_and_strict_error() {
    let issues = FieldIssues {
        duplicate: vec![
            FieldPath::default().key("metadata").key("name"),
            FieldPath::default().key("spec").key("x"),
        ],
        unknown: vec![FieldPath::default().key("spec").key("x")],
        patch_ops: Vec::new(),
    };
    assert_eq!(
        issues.strict_error("ConfigMap", "v1").message,
        "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: duplicate field \"metadata.name\", unknown field \"spec.x\""
    );
    assert_eq!(
            json_patch_op_issues(br#"[{"op": "add", "path": "/a", "value": 1, "foo": 2}, {"op": "add", "path": "/b", "path": "/c"}]"#),
            vec!["json patch duplicate field \"[1].path\"", "json patch unknown field \"[0].foo\""]
        );
}
