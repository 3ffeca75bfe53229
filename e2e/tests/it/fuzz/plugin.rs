//! The plugin's inputs: inventory files (`--inventory`: YAML with node-name patterns) and
//! the opaque `FakeClaimParameters` of claims and classes, decoded and checked as the
//! plugin does before it prepares a claim.

use super::json::{any_json, or_any, tricky_string};
use super::{bounded_refusal, run, within_deadline};
use dra_kubelet_plugin::claim::{ConfigEntry, ConfigSource};
use dra_kubelet_plugin::config::{OpaqueConfig, decode};
use fake_dra_kubelet_plugin::fake::structured::FakeConfig;
use fake_dra_kubelet_plugin::inventory;
use proptest::prelude::*;
use serde_json::{Value, json};

/// Node-name patterns: globs with many stars (a backtracking matcher is exponential in
/// them), long ones, and names.
fn pattern() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z*?-]{0,16}",
        (1usize..60).prop_map(|n| format!("{}b", "*a".repeat(n))),
        (1usize..20_000).prop_map(|n| "n".repeat(n)),
        tricky_string(),
    ]
}

fn node_entry() -> impl Strategy<Value = Value> {
    (
        or_any(prop::collection::vec(pattern(), 0..3).prop_map(|p| json!(p))),
        or_any(prop::sample::select(&["fake", "gpu", "nvidia", "none", ""][..]).prop_map(|p| json!(p))),
        or_any((-2i64..300).prop_map(|n| json!(n))),
        or_any(prop::collection::vec(prop::sample::select(&["ULTRA_10", "ULTRA_100", "X"][..]), 0..3).prop_map(|m| json!(m))),
        or_any(Just(json!([{"model": "A100-80GB", "count": 2, "sharing": "partitioned"}]))),
    )
        .prop_map(|(names, profile, num, models, gpus)| {
            json!({"names": names, "profile": profile, "numDevices": num, "models": models, "gpus": gpus})
        })
}

/// An inventory file's text and a node to look up in it.
fn inventory_text() -> impl Strategy<Value = (String, String)> {
    let file = (
        or_any(Just(json!("fake.resource.3-shake.com/v1alpha1"))),
        or_any(Just(json!("Inventory"))),
        or_any(prop::collection::vec(node_entry(), 0..4).prop_map(Value::Array)),
        or_any(Just(
            json!([{"name": "X1", "productName": "X1", "memory": "48Gi", "slices": 4}]),
        )),
        any::<bool>(),
    )
        .prop_map(|(api_version, kind, nodes, models, twice)| {
            let value =
                json!({"apiVersion": api_version, "kind": kind, "nodes": nodes, "models": models});
            let mut text = serde_yaml_ng::to_string(&value).unwrap_or_default();
            if twice {
                // A key given twice (serde would keep the last).
                text.push_str("kind: Inventory\n");
            }
            text
        });
    (file, prop_oneof!["[a-z0-9-]{1,20}", pattern()])
}

/// Parse (depth, unique keys, structure, every profile's fields) and match a node against
/// every entry: within the deadline, no panic, a bounded message.
#[test]
fn plugin_inventory_files() {
    let registry = fake_dra_kubelet_plugin::registry().expect("the profile registry");
    let registry = std::sync::Arc::new(registry);
    run(
        "plugin_inventory_files",
        inventory_text(),
        |(text, node)| {
            let (text, node, registry) = (text.clone(), node.clone(), registry.clone());
            let outcome = within_deadline("parse and match", move || {
                match inventory::parse(&text, "fuzz.yaml", &registry) {
                    Ok(file) => {
                        let _ = file.nodes.iter().filter(|n| n.matches(&node)).count();
                        Ok(())
                    }
                    Err(e) => Err(e.to_string()),
                }
            })?;
            bounded_refusal(outcome)
        },
    );
}

/// An opaque config entry: usually a FakeClaimParameters object with fields of any type.
fn opaque_config() -> impl Strategy<Value = Value> {
    let spec = (
        or_any(prop_oneof![
            (-5i64..70).prop_map(|c| json!(c)),
            any::<i64>().prop_map(|c| json!(c))
        ]),
        or_any(prop_oneof![
            (-5i64..20).prop_map(|c| json!(c)),
            any::<i64>().prop_map(|c| json!(c))
        ]),
        or_any(tricky_string().prop_map(|m| json!({"model": m}))),
        prop::option::of(tricky_string()),
    )
        .prop_map(|(count, split, selector, unknown)| {
            let mut spec = json!({"count": count, "split": split, "selector": selector});
            if let Some(field) = unknown {
                spec[field] = json!(1);
            }
            spec
        });
    prop_oneof![
        6 => (
            or_any(Just(json!("fake.resource.3-shake.com/v1alpha1"))),
            or_any(Just(json!("FakeClaimParameters"))),
            or_any(spec),
        )
            .prop_map(|(a, k, spec)| json!({"apiVersion": a, "kind": k, "spec": spec})),
        1 => any_json(),
    ]
}

/// Decode, validate and read each config as the plugin does before preparing: within the
/// deadline, no panic, a message naming the field, of bounded size.
#[test]
fn plugin_opaque_configs() {
    run("plugin_opaque_configs", opaque_config(), |config| {
        let config = config.clone();
        let outcome = within_deadline("decode and validate", move || {
            let entry = ConfigEntry::new(ConfigSource::FromClaim, config, 0);
            match decode::<FakeConfig>("fake.resource.3-shake.com", entry) {
                Ok(entry) => match entry.config.validate() {
                    Ok(()) => {
                        let _ = entry.config.parameters();
                        Ok(())
                    }
                    Err(e) => Err(e.to_string()),
                },
                Err(e) => Err(e.to_string()),
            }
        })?;
        bounded_refusal(outcome)
    });
}
