//! The DRA feature gates of a default cluster of each release, and the fields
//! kube-apiserver drops on write while a gate is off.
//!
//! Defaults: `defaultVersionedKubernetesFeatureGates` in pkg/features/kube_features.go of
//! Kubernetes 1.33.13, 1.34.4, 1.35.4, 1.36.3 and 1.37.2 (a gate is on from the first
//! release whose entry has `Default: true`; `DRADeviceTaintRules`: alpha 1.35, beta and
//! off 1.36, GA and on 1.37). Dropping: the registry strategies'
//! `PrepareForCreate`/`PrepareForUpdate` (pkg/registry/resource/{resourceslice,
//! deviceclass,resourceclaim}/strategy.go and pkg/api/resourceclaimspec/util.go) remove a
//! disabled feature's fields from the object written, unless the stored object already
//! uses the feature; the write then succeeds without them, silently. The objects here are
//! in `resource.k8s.io/v1`'s layout (the emulator's storage layout).

use serde_json::Value;

/// The DRA features behind a gate that a driver or its users can trip over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Gate {
    /// `firstAvailable` (prioritized list of subrequests).
    PrioritizedList,
    /// `adminAccess` in requests.
    AdminAccess,
    /// `extendedResourceName` of DeviceClasses.
    ExtendedResource,
    /// `sharedCounters`, `consumesCounters`, per-device node selection.
    PartitionableDevices,
    /// `allowMultipleAllocations`, capacity request policies and requests.
    ConsumableCapacity,
    /// Device taints and tolerations.
    DeviceTaints,
    /// DeviceTaintRules (served in `resource.k8s.io/v1` from 1.37, where the gate is GA;
    /// the emulator serves no earlier version of the kind).
    DeviceTaintRules,
    /// `bindingConditions`, `bindingFailureConditions`, `bindsToNode`.
    DeviceBindingConditions,
    /// `status.devices` of claims.
    ResourceClaimDeviceStatus,
    /// The kubelet's device health stream and `allocatedResourcesStatus`.
    ResourceHealthStatus,
}

impl Gate {
    pub const ALL: [Gate; 10] = [
        Gate::PrioritizedList,
        Gate::AdminAccess,
        Gate::ExtendedResource,
        Gate::PartitionableDevices,
        Gate::ConsumableCapacity,
        Gate::DeviceTaints,
        Gate::DeviceTaintRules,
        Gate::DeviceBindingConditions,
        Gate::ResourceClaimDeviceStatus,
        Gate::ResourceHealthStatus,
    ];

    /// The gate's name, as `--feature-gates` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Gate::PrioritizedList => "DRAPrioritizedList",
            Gate::AdminAccess => "DRAAdminAccess",
            Gate::ExtendedResource => "DRAExtendedResource",
            Gate::PartitionableDevices => "DRAPartitionableDevices",
            Gate::ConsumableCapacity => "DRAConsumableCapacity",
            Gate::DeviceTaints => "DRADeviceTaints",
            Gate::DeviceTaintRules => "DRADeviceTaintRules",
            Gate::DeviceBindingConditions => "DRADeviceBindingConditions",
            Gate::ResourceClaimDeviceStatus => "DRAResourceClaimDeviceStatus",
            Gate::ResourceHealthStatus => "ResourceHealthStatus",
        }
    }

    /// The first Kubernetes 1 minor release where the gate is on by default.
    pub fn default_on_since(self) -> u32 {
        match self {
            Gate::ResourceClaimDeviceStatus => 33,
            Gate::PrioritizedList | Gate::AdminAccess => 34,
            Gate::ExtendedResource
            | Gate::PartitionableDevices
            | Gate::ConsumableCapacity
            | Gate::DeviceTaints
            | Gate::DeviceBindingConditions
            | Gate::ResourceHealthStatus => 36,
            Gate::DeviceTaintRules => 37,
        }
    }

    /// Whether a default cluster of `server_version` has the gate on.
    pub fn enabled(self, server_version: (u32, u32)) -> bool {
        server_version.0 > 1 || server_version.1 >= self.default_on_since()
    }
}

/// DRAFractionalCapacityRange (KEP-5075, capacity ranges counted in milli-units): beta in
/// 1.37, on only where the components' minimum compatibility version is 1.37
/// (`kube_features.go` v1.37.2), which by default is one release below the binary's. So
/// it is off on a default cluster of every release the emulator serves.
pub fn fractional_capacity_range(_server_version: (u32, u32)) -> bool {
    false
}

fn items_mut<'a>(v: &'a mut Value, pointer: &str) -> impl Iterator<Item = &'a mut Value> {
    v.pointer_mut(pointer)
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
}

fn items<'a>(v: Option<&'a Value>, pointer: &str) -> impl Iterator<Item = &'a Value> {
    v.and_then(|v| v.pointer(pointer))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

fn set(v: &Value, field: &str) -> bool {
    v.get(field).is_some_and(|f| !f.is_null())
}

fn non_empty(v: &Value, field: &str) -> bool {
    match v.get(field) {
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(m)) => !m.is_empty(),
        Some(Value::Null) | None => false,
        Some(_) => true,
    }
}

fn remove(v: &mut Value, fields: &[&str]) {
    if let Some(map) = v.as_object_mut() {
        for f in fields {
            map.remove(*f);
        }
    }
}

/// What a write of `group`/`plural` keeps of `new` given the stored `old` (none on
/// create) on a default cluster of `server_version`: the fields of disabled gates are
/// removed from `new` (when `old` does not use the feature), as kube-apiserver does.
pub fn drop_disabled_fields(
    group: &str,
    plural: &str,
    old: Option<&Value>,
    new: &mut Value,
    server_version: (u32, u32),
) {
    if group != "resource.k8s.io" {
        return;
    }
    let on = |g: Gate| g.enabled(server_version);
    match plural {
        "resourceslices" => slice(old, new, &on),
        "resourceclaims" => {
            claim_spec(
                old.and_then(|o| o.get("spec")),
                new.get_mut("spec"),
                server_version,
            );
            claim_status(old, new, &on);
        }
        "resourceclaimtemplates" => claim_spec(
            old.and_then(|o| o.pointer("/spec/spec")),
            new.pointer_mut("/spec/spec"),
            server_version,
        ),
        "deviceclasses" => {
            let in_use = old.is_some_and(|o| o.pointer("/spec/extendedResourceName").is_some());
            if !on(Gate::ExtendedResource)
                && !in_use
                && let Some(spec) = new.get_mut("spec")
            {
                remove(spec, &["extendedResourceName"]);
            }
        }
        _ => {}
    }
}

/// `dropDisabledFields` of pkg/registry/resource/resourceslice/strategy.go.
fn slice(old: Option<&Value>, new: &mut Value, on: &impl Fn(Gate) -> bool) {
    let devices = |o: Option<&Value>| items(o, "/spec/devices").cloned().collect::<Vec<_>>();
    let old_devices = devices(old);
    let uses = |check: &dyn Fn(&Value) -> bool| old_devices.iter().any(check);
    if !on(Gate::DeviceTaints) && !uses(&|d| non_empty(d, "taints")) {
        for d in items_mut(new, "/spec/devices") {
            remove(d, &["taints"]);
        }
    }
    let node_selection = ["nodeName", "nodeSelector", "allNodes"];
    let partitionable_in_use = old.is_some_and(|o| {
        o.pointer("/spec/sharedCounters")
            .is_some_and(|c| c.as_array().is_some_and(|a| !a.is_empty()))
            || o.pointer("/spec/perDeviceNodeSelection")
                .is_some_and(|v| !v.is_null())
    }) || uses(&|d| {
        non_empty(d, "consumesCounters") || node_selection.iter().any(|f| set(d, f))
    });
    if !on(Gate::PartitionableDevices) && !partitionable_in_use {
        if let Some(spec) = new.get_mut("spec") {
            remove(spec, &["sharedCounters", "perDeviceNodeSelection"]);
        }
        for d in items_mut(new, "/spec/devices") {
            remove(
                d,
                &["consumesCounters", "nodeName", "nodeSelector", "allNodes"],
            );
        }
    }
    let binding = [
        "bindingConditions",
        "bindingFailureConditions",
        "bindsToNode",
    ];
    let binding_on = on(Gate::DeviceBindingConditions) && on(Gate::ResourceClaimDeviceStatus);
    if !binding_on && !uses(&|d| binding.iter().any(|f| non_empty(d, f))) {
        for d in items_mut(new, "/spec/devices") {
            remove(d, &binding);
        }
    }
    let consumable_in_use = uses(&|d| {
        set(d, "allowMultipleAllocations")
            || d.get("capacity")
                .and_then(Value::as_object)
                .is_some_and(|c| c.values().any(|v| set(v, "requestPolicy")))
    });
    if !on(Gate::ConsumableCapacity) && !consumable_in_use {
        for d in items_mut(new, "/spec/devices") {
            remove(d, &["allowMultipleAllocations"]);
            if let Some(capacity) = d.get_mut("capacity").and_then(Value::as_object_mut) {
                for c in capacity.values_mut() {
                    remove(c, &["requestPolicy"]);
                }
            }
        }
    }
}

/// `DropDisabledFields` of pkg/api/resourceclaimspec/util.go (1.35+; before, the claim
/// and template strategies' own `dropDisabledFields`), on a claim's `spec` (or a
/// template's `spec.spec`). Requests' `tolerations` are dropped from 1.35 only: 1.33 and
/// 1.34 keep them with `DRADeviceTaints` off. 1.32's `v1beta1.DeviceRequest` has no
/// `tolerations` (device taints came in 1.33), so its decoder drops them as an unknown
/// field, as it drops `firstAvailable` (`DRAPrioritizedList` is off there too).
fn claim_spec(old: Option<&Value>, new: Option<&mut Value>, server_version: (u32, u32)) {
    let on = |g: Gate| g.enabled(server_version);
    let Some(new) = new else { return };
    let old_requests: Vec<Value> = items(old, "/devices/requests").cloned().collect();
    let old_uses = |check: &dyn Fn(&Value) -> bool| old_requests.iter().any(check);
    let subrequests = |r: &Value| -> Vec<Value> {
        r.get("firstAvailable")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    if !on(Gate::PrioritizedList) && !old_uses(&|r| non_empty(r, "firstAvailable")) {
        for r in items_mut(new, "/devices/requests") {
            remove(r, &["firstAvailable"]);
        }
    }
    let tolerations_in_use = old_uses(&|r| {
        r.get("exactly")
            .is_some_and(|e| non_empty(e, "tolerations"))
            || subrequests(r).iter().any(|s| non_empty(s, "tolerations"))
    });
    let release_drops_tolerations = !((1, 33)..(1, 35)).contains(&server_version);
    if !on(Gate::DeviceTaints) && release_drops_tolerations && !tolerations_in_use {
        for r in items_mut(new, "/devices/requests") {
            if let Some(exactly) = r.get_mut("exactly") {
                remove(exactly, &["tolerations"]);
            }
            for s in items_mut(r, "/firstAvailable") {
                remove(s, &["tolerations"]);
            }
        }
    }
    let admin_in_use = old_uses(&|r| r.get("exactly").is_some_and(|e| set(e, "adminAccess")));
    if !on(Gate::AdminAccess) && !admin_in_use {
        for r in items_mut(new, "/devices/requests") {
            if let Some(exactly) = r.get_mut("exactly") {
                remove(exactly, &["adminAccess"]);
            }
        }
    }
    let capacity_in_use = items(old, "/devices/constraints").any(|c| set(c, "distinctAttribute"))
        || old_uses(&|r| {
            r.get("exactly").is_some_and(|e| set(e, "capacity"))
                || subrequests(r).iter().any(|s| set(s, "capacity"))
        });
    if !on(Gate::ConsumableCapacity) && !capacity_in_use {
        for c in items_mut(new, "/devices/constraints") {
            remove(c, &["distinctAttribute"]);
        }
        for r in items_mut(new, "/devices/requests") {
            if let Some(exactly) = r.get_mut("exactly") {
                remove(exactly, &["capacity"]);
            }
            for s in items_mut(r, "/firstAvailable") {
                remove(s, &["capacity"]);
            }
        }
    }
}

/// `dropDisabledDRAResourceClaimDeviceStatusFields` of the claim's status strategy.
fn claim_status(old: Option<&Value>, new: &mut Value, on: &impl Fn(Gate) -> bool) {
    let in_use = old.is_some_and(|o| o.pointer("/status/devices").is_some_and(|d| !d.is_null()));
    if !on(Gate::ResourceClaimDeviceStatus)
        && !in_use
        && let Some(status) = new.get_mut("status").and_then(Value::as_object_mut)
    {
        status.remove("devices");
    }
}

/// The paths of the fields `drop_disabled_fields` took out of `before` (now `after`), for
/// the log.
pub fn dropped(before: &Value, after: &Value) -> Vec<String> {
    let mut paths = Vec::new();
    missing_paths(before, after, String::new(), &mut paths);
    paths
}

fn missing_paths(before: &Value, after: &Value, at: String, out: &mut Vec<String>) {
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => {
            for (k, v) in b {
                let path = if at.is_empty() {
                    k.clone()
                } else {
                    format!("{at}.{k}")
                };
                match a.get(k) {
                    Some(w) => missing_paths(v, w, path, out),
                    None => out.push(path),
                }
            }
        }
        (Value::Array(b), Value::Array(a)) => {
            for (i, (v, w)) in b.iter().zip(a).enumerate() {
                missing_paths(v, w, format!("{at}[{i}]"), out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn slice_with_everything() -> Value {
        json!({"spec": {
            "driver": "d", "nodeName": "n", "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
            "sharedCounters": [{"name": "gpu-0", "counters": {"memory": {"value": "80Gi"}}}],
            "devices": [{
                "name": "a",
                "taints": [{"key": "k", "effect": "NoSchedule"}],
                "consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory": {"value": "40Gi"}}}],
                "bindingConditions": ["c"], "bindingFailureConditions": ["f"],
                "allowMultipleAllocations": true,
                "capacity": {"memory": {"value": "80Gi", "requestPolicy": {"default": "1Gi"}}}
            }]
        }})
    }

    #[test]
    fn a_default_1_34_server_drops_every_beta_and_alpha_field_of_a_slice() {
        let mut s = slice_with_everything();
        drop_disabled_fields("resource.k8s.io", "resourceslices", None, &mut s, (1, 34));
        assert_eq!(
            s["spec"]["devices"][0],
            json!({"name": "a", "capacity": {"memory": {"value": "80Gi"}}})
        );
        assert!(s["spec"].get("sharedCounters").is_none());
    }

    #[test]
    fn a_default_1_36_server_keeps_them() {
        let mut s = slice_with_everything();
        let before = s.clone();
        drop_disabled_fields("resource.k8s.io", "resourceslices", None, &mut s, (1, 36));
        assert_eq!(s, before);
    }

    #[test]
    fn fields_in_use_by_the_stored_object_are_kept() {
        let old = slice_with_everything();
        let mut s = slice_with_everything();
        drop_disabled_fields(
            "resource.k8s.io",
            "resourceslices",
            Some(&old),
            &mut s,
            (1, 35),
        );
        assert_eq!(s, old);
    }

    #[test]
    fn claims_lose_fields_of_disabled_gates() {
        let spec = json!({"devices": {"requests": [
            {"name": "a", "firstAvailable": [{"name": "x", "deviceClassName": "c", "tolerations": [{"operator": "Exists"}]}]},
            {"name": "b", "exactly": {"deviceClassName": "c", "adminAccess": true, "capacity": {"requests": {"memory": "1Gi"}}}}
        ]}});
        let mut claim = json!({"spec": spec, "status": {"devices": [{"driver": "d"}]}});
        drop_disabled_fields(
            "resource.k8s.io",
            "resourceclaims",
            None,
            &mut claim,
            (1, 32),
        );
        assert_eq!(
            claim,
            json!({"spec": {"devices": {"requests": [{"name": "a"}, {"name": "b", "exactly": {"deviceClassName": "c"}}]}}, "status": {}})
        );
        let tolerations = json!({"spec": {"devices": {"requests": [
            {"name": "b", "exactly": {"deviceClassName": "c", "tolerations": [{"operator": "Exists"}]}}
        ]}}});
        let mut kept = tolerations.clone();
        drop_disabled_fields(
            "resource.k8s.io",
            "resourceclaims",
            None,
            &mut kept,
            (1, 34),
        );
        assert_eq!(
            kept, tolerations,
            "1.34 keeps tolerations with the gate off"
        );
        let mut dropped = tolerations.clone();
        drop_disabled_fields(
            "resource.k8s.io",
            "resourceclaims",
            None,
            &mut dropped,
            (1, 35),
        );
        assert!(
            dropped
                .pointer("/spec/devices/requests/0/exactly/tolerations")
                .is_none()
        );
        let mut unknown_to_1_32 = tolerations.clone();
        drop_disabled_fields(
            "resource.k8s.io",
            "resourceclaims",
            None,
            &mut unknown_to_1_32,
            (1, 32),
        );
        assert_eq!(unknown_to_1_32, dropped, "1.32 has no request tolerations");
        let mut template = json!({"spec": {"spec": spec}});
        drop_disabled_fields(
            "resource.k8s.io",
            "resourceclaimtemplates",
            None,
            &mut template,
            (1, 34),
        );
        assert_eq!(
            template["spec"]["spec"]["devices"]["requests"],
            json!([
                {"name": "a", "firstAvailable": [{"name": "x", "deviceClassName": "c", "tolerations": [{"operator": "Exists"}]}]},
                {"name": "b", "exactly": {"deviceClassName": "c", "adminAccess": true}}
            ])
        );
    }

    #[test]
    fn device_classes_lose_the_extended_resource_name_before_1_36() {
        let mut class = json!({"spec": {"extendedResourceName": "example.com/gpu"}});
        drop_disabled_fields(
            "resource.k8s.io",
            "deviceclasses",
            None,
            &mut class,
            (1, 35),
        );
        assert_eq!(class, json!({"spec": {}}));
        let mut class = json!({"spec": {"extendedResourceName": "example.com/gpu"}});
        drop_disabled_fields(
            "resource.k8s.io",
            "deviceclasses",
            None,
            &mut class,
            (1, 36),
        );
        assert_eq!(class["spec"]["extendedResourceName"], "example.com/gpu");
    }

    #[test]
    fn dropped_names_the_paths() {
        let before = slice_with_everything();
        let mut after = before.clone();
        drop_disabled_fields(
            "resource.k8s.io",
            "resourceslices",
            None,
            &mut after,
            (1, 35),
        );
        let paths = dropped(&before, &after);
        assert!(
            paths.contains(&"spec.sharedCounters".to_string()),
            "{paths:?}"
        );
        assert!(
            paths.contains(&"spec.devices[0].taints".to_string()),
            "{paths:?}"
        );
    }

    #[test]
    fn gates_follow_the_upstream_defaults() {
        assert!(!Gate::DeviceTaints.enabled((1, 35)));
        assert!(Gate::DeviceTaints.enabled((1, 36)));
        assert!(!Gate::PrioritizedList.enabled((1, 33)));
        assert!(Gate::PrioritizedList.enabled((1, 34)));
        assert!(Gate::ResourceClaimDeviceStatus.enabled((1, 33)));
        assert!(!Gate::ResourceClaimDeviceStatus.enabled((1, 32)));
    }
}
