use super::*;
use serde_json::json;

#[test]
fn apply_conflicts_with_an_updater_and_force_takes_over() {
    let plain = Shape::untyped();
    let mut fields = ManagedFields::default();
    let obj = json!({"spec": {"holder": "a", "renew": 1}});
    fields.record_update("a", None, &obj, &plain);
    let applied = json!({"spec": {"holder": "b"}});
    let conflicts = fields.conflicts("b", &obj, &applied, &plain);
    assert_eq!(
        conflicts,
        vec![Conflict {
            manager: "a".into(),
            path: vec![Step::Field("spec".into()), Step::Field("holder".into())]
        }]
    );
    // Same value: shared ownership, no conflict.
    assert!(
        fields
            .conflicts("b", &obj, &json!({"spec": {"holder": "a"}}), &plain)
            .is_empty()
    );
    let merged = fields.apply("b", &obj, &applied, &plain);
    assert_eq!(merged, json!({"spec": {"holder": "b", "renew": 1}}));
    assert!(
        fields
            .conflicts("a", &merged, &json!({"spec": {"holder": "c"}}), &plain)
            .len()
            == 1
    );
}

#[test]
fn apply_removes_fields_the_manager_dropped() {
    let plain = Shape::untyped();
    let mut fields = ManagedFields::default();
    let first = fields.apply("m", &json!({}), &json!({"spec": {"x": 1, "y": 2}}), &plain);
    let second = fields.apply("m", &first, &json!({"spec": {"x": 1}}), &plain);
    assert_eq!(second, json!({"spec": {"x": 1}}));
}

/// The `status.nodes` of a DeviceFault: `x-kubernetes-list-type: map` keyed by `node`.
fn fault_schema() -> Value {
    json!({"type": "object", "properties": {"status": {"type": "object", "properties": {
        "nodes": {"type": "array", "x-kubernetes-list-type": "map",
                  "x-kubernetes-list-map-keys": ["node"],
                  "items": {"type": "object", "properties": {
                      "node": {"type": "string"}, "phase": {"type": "string"}}}},
        "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
        "atomic": {"type": "array", "items": {"type": "string"}}}}}})
}

fn nodes(entries: &[(&str, &str)]) -> Value {
    let items: Vec<Value> = entries
        .iter()
        .map(|(node, phase)| json!({"node": node, "phase": phase}))
        .collect();
    json!({"status": {"nodes": items}})
}

#[test]
fn map_list_items_belong_to_their_appliers() {
    let schema = fault_schema();
    let shape = Shape::custom(&schema);
    let mut fields = ManagedFields::default();
    let one = fields.apply("a", &json!({}), &nodes(&[("n1", "Applied")]), &shape);
    assert!(
        fields
            .conflicts("b", &one, &nodes(&[("n2", "Applied")]), &shape)
            .is_empty()
    );
    let two = fields.apply("b", &one, &nodes(&[("n2", "Applied")]), &shape);
    assert_eq!(two, nodes(&[("n1", "Applied"), ("n2", "Applied")]));
    // b changes its own entry: no conflict with a.
    let three = fields.apply("b", &two, &nodes(&[("n2", "Failed")]), &shape);
    assert_eq!(three, nodes(&[("n1", "Applied"), ("n2", "Failed")]));
    // b writing a's entry's phase conflicts with a, by key.
    let conflicts = fields.conflicts(
        "b",
        &three,
        &nodes(&[("n1", "Failed"), ("n2", "Failed")]),
        &shape,
    );
    assert_eq!(conflicts.len(), 1, "{conflicts:?}");
    assert_eq!(
        render(&conflicts[0].path),
        ".status.nodes[node=\"n1\"].phase"
    );
    // a applies without its entry: only its entry goes.
    let four = fields.apply("a", &three, &json!({"status": {"nodes": []}}), &shape);
    assert_eq!(four, nodes(&[("n2", "Failed")]));
}

#[test]
fn an_item_someone_else_also_owns_stays() {
    let schema = fault_schema();
    let shape = Shape::custom(&schema);
    let mut fields = ManagedFields::default();
    let one = fields.apply("a", &json!({}), &nodes(&[("n1", "Applied")]), &shape);
    let two = fields.apply("b", &one, &nodes(&[("n1", "Applied")]), &shape);
    let three = fields.apply("a", &two, &json!({"status": {}}), &shape);
    assert_eq!(three, nodes(&[("n1", "Applied")]), "b still applies it");
}

#[test]
fn set_lists_merge_by_value_and_other_lists_are_atomic() {
    let schema = fault_schema();
    let shape = Shape::custom(&schema);
    let mut fields = ManagedFields::default();
    let one = fields.apply(
        "a",
        &json!({}),
        &json!({"status": {"tags": ["x"], "atomic": ["x"]}}),
        &shape,
    );
    let conflicts = fields.conflicts(
        "b",
        &one,
        &json!({"status": {"tags": ["y"], "atomic": ["y"]}}),
        &shape,
    );
    assert_eq!(
        conflicts
            .iter()
            .map(|c| render(&c.path))
            .collect::<Vec<_>>(),
        vec![".status.atomic".to_string()]
    );
    let two = fields.apply("b", &one, &json!({"status": {"tags": ["y"]}}), &shape);
    assert_eq!(
        two,
        json!({"status": {"tags": ["x", "y"], "atomic": ["x"]}})
    );
    let three = fields.apply("a", &two, &json!({"status": {"atomic": ["x"]}}), &shape);
    assert_eq!(three, json!({"status": {"tags": ["y"], "atomic": ["x"]}}));
}

#[test]
fn finalizers_are_a_set_for_every_type() {
    let plain = Shape::untyped();
    let mut fields = ManagedFields::default();
    let obj = json!({"metadata": {"finalizers": ["a/x"]}});
    fields.record_update("ctl", None, &obj, &plain);
    let applied = json!({"metadata": {"finalizers": ["b/y"]}});
    assert!(fields.conflicts("b", &obj, &applied, &plain).is_empty());
    let merged = fields.apply("b", &obj, &applied, &plain);
    assert_eq!(merged, json!({"metadata": {"finalizers": ["a/x", "b/y"]}}));
}

#[test]
fn repeated_keys_of_map_and_set_lists_are_found_as_smd_words_them() {
    let schema = fault_schema();
    let shape = Shape::custom(&schema);
    let obj = json!({"status": {
        "nodes": [{"node": "a"}, {"node": "b"}, {"node": "a", "phase": "x"}],
        "tags": ["x", "y", "x", "x"],
        "atomic": ["z", "z"],
    }});
    assert_eq!(
        duplicate_entries(&obj, &shape),
        [
            ".status.nodes: duplicate entries for key [node=\"a\"]",
            ".status.tags: duplicate entries for key [=\"x\"]",
            ".status.tags: duplicate entries for key [=\"x\"]",
        ]
    );
    assert!(duplicate_entries(&nodes(&[("a", "1"), ("b", "1")]), &shape).is_empty());
    // Built-in lists too, keys sorted by name, and lists inside a map list's items.
    let device = json!({"driver": "d", "pool": "p", "device": "g0",
        "conditions": [{"type": "Ready"}, {"type": "Ready"}]});
    let claim = json!({"status": {"devices": [device, device]},
        "metadata": {"finalizers": ["f", "f"]}});
    assert_eq!(
        duplicate_entries(
            &claim,
            &Shape::built_in("resource.k8s.io", "resourceclaims")
        ),
        [
            ".metadata.finalizers: duplicate entries for key [=\"f\"]",
            // Item by item, as SMD walks: the first item's inside, then the second.
            ".status.devices[device=\"g0\",driver=\"d\",pool=\"p\"].conditions: duplicate entries for key [type=\"Ready\"]",
            ".status.devices: duplicate entries for key [device=\"g0\",driver=\"d\",pool=\"p\"]",
            ".status.devices[device=\"g0\",driver=\"d\",pool=\"p\"].conditions: duplicate entries for key [type=\"Ready\"]",
        ]
    );
}
