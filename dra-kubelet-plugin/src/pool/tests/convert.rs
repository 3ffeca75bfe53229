//! The `v1` and `v1beta1` objects of a pool's slices, and back.

use super::*;

#[test]
fn v1_layout() {
    let d = desired(2);
    let owner = OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: "node-1".into(),
        uid: "n-uid".into(),
        ..Default::default()
    };
    let content = pack(&d).unwrap().remove(0);
    let slice = to_v1(&d, None, &content, 3, 1, Some(&owner));
    let json = serde_json::to_value(&slice).unwrap();
    assert_eq!(json["apiVersion"], "resource.k8s.io/v1");
    assert_eq!(json["kind"], "ResourceSlice");
    assert_eq!(
        json["metadata"]["generateName"],
        "node-1-fake.resource.3-shake.com-"
    );
    assert_eq!(json["metadata"]["ownerReferences"][0]["uid"], "n-uid");
    assert_eq!(json["spec"]["nodeName"], "node-1");
    assert_eq!(
        json["spec"]["pool"],
        json!({"name": "node-1", "generation": 3, "resourceSliceCount": 1})
    );
    let dev = &json["spec"]["devices"][1];
    assert_eq!(dev["name"], "counter-1");
    assert_eq!(dev["attributes"]["width"], json!({"int": 64}));
    // A device with attributes only has nothing else.
    assert_eq!(
        dev.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["attributes", "name"]
    );
    assert!(json["spec"].get("sharedCounters").is_none());
    assert_eq!(from_v1(&slice).content.devices, d.devices);
}

#[test]
fn v1beta1_nests_under_basic() {
    let d = desired(2);
    let content = pack(&d).unwrap().remove(0);
    let slice = to_v1beta1(
        &d,
        Some(&("s1".into(), Some("5".into()))),
        &content,
        1,
        1,
        None,
    );
    let json = serde_json::to_value(&slice).unwrap();
    assert_eq!(json["apiVersion"], "resource.k8s.io/v1beta1");
    assert_eq!(json["metadata"]["name"], "s1");
    assert_eq!(json["metadata"]["resourceVersion"], "5");
    assert!(json["metadata"].get("generateName").is_none());
    assert_eq!(
        json["spec"]["devices"][0]["basic"]["attributes"]["width"],
        json!({"int": 64})
    );
    assert!(json["spec"]["devices"][0].get("attributes").is_none());
    let back = from_v1beta1(&slice);
    assert_eq!(back.content.devices, d.devices);
    assert!(is_ours(&back, &d.driver, "node-1", "node-1"));
    assert!(!is_ours(&back, &d.driver, "node-1", "node-1/nics"));
    assert!(!is_ours(&back, &d.driver, "node-2", "node-1"));
}

#[test]
fn every_field_survives_both_versions() {
    let mut d = partitioned(1, 1, CounterLayout::WithDevices);
    d.devices[0].capacity = BTreeMap::from([
        ("memory".to_owned(), Capacity::from("10Gi")),
        (
            "bandwidth".to_owned(),
            Capacity {
                value: "100G".into(),
                request_policy: Some(RequestPolicy {
                    default: Some("10G".into()),
                    valid_values: vec![],
                    valid_range: Some(ValidRange {
                        min: "1G".into(),
                        max: Some("100G".into()),
                        step: Some("1G".into()),
                    }),
                }),
            },
        ),
    ]);
    d.devices[0].allow_multiple_allocations = true;
    d.devices[0].taints = vec![DeviceTaint {
        key: "fake.resource.3-shake.com/unhealthy".into(),
        value: Some("ecc".into()),
        effect: TaintEffect::NoExecute,
    }];
    d.devices[0].binding = Some(crate::model::BindingConditions {
        conditions: vec!["attached".into()],
        failure_conditions: vec!["failed".into()],
        binds_to_node: true,
    });
    let content = pack(&d).unwrap().remove(0);
    let v1 = to_v1(&d, None, &content, 1, 1, None);
    let json = serde_json::to_value(&v1).unwrap();
    let dev = &json["spec"]["devices"][0];
    assert_eq!(dev["capacity"]["memory"], json!({"value": "10Gi"}));
    assert_eq!(
        dev["capacity"]["bandwidth"]["requestPolicy"],
        json!({"default": "10G", "validRange": {"min": "1G", "max": "100G", "step": "1G"}})
    );
    assert_eq!(dev["allowMultipleAllocations"], true);
    assert_eq!(
        dev["consumesCounters"],
        json!([{"counterSet": "gpu-0-counters", "counters": {"slices": {"value": "1"}}}])
    );
    assert_eq!(
        dev["taints"],
        json!([{"key": "fake.resource.3-shake.com/unhealthy", "value": "ecc", "effect": "NoExecute"}])
    );
    assert_eq!(dev["bindingConditions"], json!(["attached"]));
    assert_eq!(dev["bindingFailureConditions"], json!(["failed"]));
    assert_eq!(dev["bindsToNode"], true);
    assert_eq!(
        json["spec"]["sharedCounters"][0]["counters"]["memory"],
        json!({"value": "80Gi"})
    );
    assert_eq!(from_v1(&v1).content, content);
    let beta = to_v1beta1(&d, None, &content, 1, 1, None);
    let json = serde_json::to_value(&beta).unwrap();
    assert_eq!(json["spec"]["devices"][0]["basic"]["bindsToNode"], true);
    assert_eq!(from_v1beta1(&beta).content, content);
}

#[test]
fn the_api_servers_spelling_of_a_quantity_is_the_same_slice() {
    let d = partitioned(1, 1, CounterLayout::Separate);
    let packed = pack(&d).unwrap();
    let mut stored = packed.clone();
    // kube-apiserver stores 80Gi as it is, but 1024Mi as 1Gi: equal amounts are equal.
    stored[0].counter_sets[0]
        .counters
        .insert("memory".into(), Quantity::from("81920Mi"));
    let existing: Vec<_> = stored
        .into_iter()
        .enumerate()
        .map(|(i, c)| published(&format!("s{i}"), &d, c, 1, 2))
        .collect();
    assert_eq!(
        plan(&d, &packed, &packed, &existing, 1),
        SlicePlan::UpToDate
    );
}

#[test]
fn a_taints_time_added_is_not_compared() {
    let mut d = desired(1);
    d.devices[0].taints = vec![DeviceTaint {
        key: "k".into(),
        value: None,
        effect: TaintEffect::NoSchedule,
    }];
    let content = pack(&d).unwrap().remove(0);
    let mut slice = to_v1(&d, Some(&("a".into(), None)), &content, 1, 1, None);
    let taints = slice.spec.devices.as_mut().unwrap()[0]
        .taints
        .as_mut()
        .unwrap();
    taints[0].time_added = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        "2026-12-03T00:00:00Z".parse().unwrap(),
    ));
    taints[0].value = Some(String::new());
    assert_eq!(plan_of(&d, &[from_v1(&slice)], 1), SlicePlan::UpToDate);
}
