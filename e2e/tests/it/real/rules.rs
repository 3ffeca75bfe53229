//! What the API server of the release does with the fields of each DRA feature a driver
//! publishes or a user asks for: created as an administrator (no plugin, no scheduler
//! involved) and read back, each object records whether the API server refused it (and
//! how), or stored it with the feature's fields kept or dropped. A default cluster drops
//! the fields of a gate that is off (`dropDisabled*Fields`), and the rules of
//! `pkg/apis/resource/validation` change between releases (device taint effects, counter
//! sets beside or apart from their devices, 64 devices per slice with taints). These are
//! the inputs a driver that follows the serving release must get right.

use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use serde_json::{Value, json};

use super::backend::Backend;
use super::protocol::Protocol;
use super::resources;
use super::scenarios::{apply, delete_namespaces, namespace_yaml};

/// The driver of the probe slices: nobody's, so neither the plugin nor a DeviceClass
/// cares about them.
const PROBE_DRIVER: &str = "probe.example.com";
const NAMESPACE: &str = "api-rules";

fn slice(node: &str, name: &str, spec: Value) -> Value {
    let mut spec = spec;
    spec["driver"] = json!(PROBE_DRIVER);
    spec["nodeName"] = json!(node);
    spec["pool"] = json!({"name": name, "generation": 1, "resourceSliceCount": 1});
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name}, "spec": spec})
}

fn tainted(n: usize, effect: &str) -> Value {
    let devices: Vec<Value> = (0..n)
        .map(|i| json!({"name": format!("d{i}"), "taints": [{"key": "example.com/probe", "effect": effect}]}))
        .collect();
    json!({"devices": devices})
}

fn claim(name: &str, request: Value) -> Value {
    json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"devices": {"requests": [request]}}
    })
}

/// `accepted; <field> kept|dropped, ...` for the fields (JSON pointers into the stored
/// object, named) of interest, or `refused: <message>`.
fn outcome(result: Result<Value, String>, fields: &[(&str, &str)]) -> String {
    match result {
        Err(message) => format!("refused: {message}"),
        Ok(stored) => {
            let seen: Vec<String> = fields
                .iter()
                .map(|(name, pointer)| {
                    let kept = stored.pointer(pointer).is_some_and(|v| !v.is_null());
                    format!("{name} {}", if kept { "kept" } else { "dropped" })
                })
                .collect();
            format!("accepted; {}", seen.join(", "))
        }
    }
}

/// An object to write, named for the protocol, with the fields whose fate is recorded
/// (name, JSON pointer in the stored object).
type Probe<'a> = (&'a str, Value, &'a [(&'a str, &'a str)]);

pub async fn api_rules<B: Backend>(b: &mut B, p: &mut Protocol) {
    p.scenario("api-rules");
    let node = b.node();
    let slices: [Probe; 7] = [
        (
            "taint NoSchedule",
            tainted(1, "NoSchedule"),
            &[("taints", "/spec/devices/0/taints")],
        ),
        (
            "taint None",
            tainted(1, "None"),
            &[("taints", "/spec/devices/0/taints")],
        ),
        (
            "65 devices with a taint",
            tainted(65, "NoSchedule"),
            &[("taints", "/spec/devices/64/taints")],
        ),
        (
            "counter set with its devices",
            json!({
                "sharedCounters": [{"name": "gpu-0", "counters": {"memory": {"value": "80Gi"}}}],
                "devices": [{"name": "p0", "consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory": {"value": "40Gi"}}}]}]
            }),
            &[
                ("sharedCounters", "/spec/sharedCounters"),
                ("consumesCounters", "/spec/devices/0/consumesCounters"),
            ],
        ),
        (
            "counter set alone",
            json!({"sharedCounters": [{"name": "gpu-0", "counters": {"memory": {"value": "80Gi"}}}]}),
            &[("sharedCounters", "/spec/sharedCounters")],
        ),
        (
            "binding conditions",
            json!({"devices": [{"name": "d0", "bindingConditions": ["example.com/ready"], "bindingFailureConditions": ["example.com/failed"]}]}),
            &[("bindingConditions", "/spec/devices/0/bindingConditions")],
        ),
        (
            "multiple allocations",
            json!({"devices": [{"name": "d0", "allowMultipleAllocations": true, "capacity": {"memory": {"value": "24Gi"}}}]}),
            &[(
                "allowMultipleAllocations",
                "/spec/devices/0/allowMultipleAllocations",
            )],
        ),
    ];
    for (i, (case, spec, fields)) in slices.into_iter().enumerate() {
        let name = format!("probe-{i}");
        let result =
            resources::create::<ResourceSlice, B>(b, None, slice(&node, &name, spec)).await;
        let created = result.is_ok();
        p.record(
            format!("slice: {case}"),
            outcome(result, fields).replace(&name, "<probe>"),
        );
        if created {
            resources::delete::<ResourceSlice, B>(b, None, &name).await;
        }
    }

    apply(b, &namespace_yaml(NAMESPACE)).await;
    let class = "fake.3-shake.com";
    let claims: [Probe; 4] = [
        (
            "firstAvailable",
            json!({"name": "r", "firstAvailable": [{"name": "a", "deviceClassName": class}]}),
            &[("firstAvailable", "/spec/devices/requests/0/firstAvailable")],
        ),
        (
            "adminAccess in a namespace without the label",
            json!({"name": "r", "exactly": {"deviceClassName": class, "adminAccess": true}}),
            &[(
                "adminAccess",
                "/spec/devices/requests/0/exactly/adminAccess",
            )],
        ),
        (
            "a capacity request",
            json!({"name": "r", "exactly": {"deviceClassName": class, "capacity": {"requests": {"memory": "1Gi"}}}}),
            &[("capacity", "/spec/devices/requests/0/exactly/capacity")],
        ),
        (
            "tolerations",
            json!({"name": "r", "exactly": {"deviceClassName": class, "tolerations": [{"key": "example.com/probe", "operator": "Exists"}]}}),
            &[(
                "tolerations",
                "/spec/devices/requests/0/exactly/tolerations",
            )],
        ),
    ];
    for (i, (case, request, fields)) in claims.into_iter().enumerate() {
        let name = format!("probe-{i}");
        let result =
            resources::create::<ResourceClaim, B>(b, Some(NAMESPACE), claim(&name, request)).await;
        p.record(
            format!("claim: {case}"),
            outcome(result, fields).replace(&name, "<probe>"),
        );
    }
    delete_namespaces(b, &[NAMESPACE]).await;

    let result = resources::create::<DeviceClass, B>(
        b,
        None,
        json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": "probe.example.com"},
            "spec": {"extendedResourceName": "example.com/probe"}
        }),
    )
    .await;
    let created = result.is_ok();
    p.record(
        "device class: extendedResourceName",
        outcome(
            result,
            &[("extendedResourceName", "/spec/extendedResourceName")],
        ),
    );
    if created {
        super::features::delete_device_class(b, "probe.example.com").await;
    }
}
