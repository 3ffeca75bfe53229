//! Conversion between the structured `resource.k8s.io` versions: objects are stored once,
//! in `v1`'s layout, and converted on every read and write through `v1beta1`, as
//! kube-apiserver converts through its internal version
//! (`pkg/apis/resource/v1beta1/conversion.go`). Defaults of `v1` are applied on write
//! (`pkg/apis/resource/v1/defaults.go`).
//!
//! What differs between the two versions for the kinds served here:
//!
//! - ResourceClaim / ResourceClaimTemplate: a request's `exactly{deviceClassName, selectors,
//!   allocationMode, count, adminAccess, tolerations, capacity}` (`v1`) sits directly on the
//!   request in `v1beta1`; `firstAvailable` and its subrequests are the same in both.
//! - ResourceSlice: `devices[].basic{attributes, capacity, …}` (`v1beta1`) is flat in `v1`.
//! - DeviceClass and every status: identical.
//!
//! `events.k8s.io/v1` Events are stored as core/v1 Events (kube-apiserver stores the
//! internal Event, whose layout is core's) and renamed field by field as
//! `pkg/apis/events/v1/conversion.go` does: `regarding` ↔ `involvedObject`, `note` ↔
//! `message`, `reportingController` ↔ `reportingComponent`, `deprecatedSource` ↔
//! `source`, `deprecatedFirstTimestamp`/`deprecatedLastTimestamp`/`deprecatedCount` ↔
//! `firstTimestamp`/`lastTimestamp`/`count`; `eventTime`, `series`, `action`, `reason`,
//! `related`, `reportingInstance` and `type` are the same in both.

use serde_json::{Map, Value};

use super::error::{ApiError, ApiResult};
use super::registry::ResourceKey;

/// `(events.k8s.io/v1 name, core/v1 name)` of the Event fields that differ by name only.
const EVENT_RENAMES: [(&str, &str); 7] = [
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

/// The fields of `v1`'s `ExactDeviceRequest`, which `v1beta1` keeps on the request itself.
const EXACT_FIELDS: [&str; 7] = [
    "deviceClassName",
    "selectors",
    "allocationMode",
    "count",
    "adminAccess",
    "tolerations",
    "capacity",
];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Claim,
    Template,
    Slice,
}

fn is_events_k8s_io(key: &ResourceKey) -> bool {
    key.group == "events.k8s.io" && key.plural == "events"
}

/// Renames an Event's fields from one layout's names to the other's; a field whose new
/// name is taken already is dropped (it cannot be in a valid object of the old layout).
fn rename_event_fields(obj: &mut Value, to_core: bool) {
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    for (events, core) in EVENT_RENAMES {
        let (from, to) = if to_core {
            (events, core)
        } else {
            (core, events)
        };
        // A field of the other layout is unknown in this one: the decoder drops it.
        map.remove(to);
        if let Some(value) = map.remove(from) {
            map.insert(to.into(), value);
        }
    }
}

fn kind_of(key: &ResourceKey) -> Option<Kind> {
    if key.group != "resource.k8s.io" {
        return None;
    }
    match key.plural.as_str() {
        "resourceclaims" => Some(Kind::Claim),
        "resourceclaimtemplates" => Some(Kind::Template),
        "resourceslices" => Some(Kind::Slice),
        _ => None,
    }
}

fn requests_mut(obj: &mut Value, kind: Kind) -> Option<&mut Vec<Value>> {
    let pointer = match kind {
        Kind::Claim => "/spec/devices/requests",
        Kind::Template => "/spec/spec/devices/requests",
        Kind::Slice => return None,
    };
    obj.pointer_mut(pointer).and_then(Value::as_array_mut)
}

/// Brings a body written through `version` into the stored (`v1`) layout and applies the
/// `v1` defaults. `v1alpha2` and the other groups pass through unchanged.
pub fn to_storage(key: &ResourceKey, version: &str, obj: &mut Value) -> ApiResult<()> {
    if is_events_k8s_io(key) {
        rename_event_fields(obj, true);
        return Ok(());
    }
    let Some(kind) = kind_of(key) else {
        return Ok(());
    };
    match version {
        "v1" => {}
        "v1beta1" => match kind {
            Kind::Claim | Kind::Template => {
                for request in requests_mut(obj, kind).into_iter().flatten() {
                    request_from_v1beta1(request)?;
                }
            }
            Kind::Slice => {
                for device in slice_devices_mut(obj) {
                    device_from_v1beta1(device)?;
                }
            }
        },
        // v1alpha2 objects are classic DRA's and never converted.
        _ => return Ok(()),
    }
    if matches!(kind, Kind::Claim | Kind::Template) {
        for request in requests_mut(obj, kind).into_iter().flatten() {
            default_request(request);
        }
    }
    Ok(())
}

/// Renders a stored (`v1`) object in `version`.
pub fn from_storage(key: &ResourceKey, version: &str, obj: &mut Value) {
    if is_events_k8s_io(key) {
        rename_event_fields(obj, false);
        return;
    }
    let Some(kind) = kind_of(key) else { return };
    if version != "v1beta1" {
        return;
    }
    match kind {
        Kind::Claim | Kind::Template => {
            for request in requests_mut(obj, kind).into_iter().flatten() {
                request_to_v1beta1(request);
            }
        }
        Kind::Slice => {
            for device in slice_devices_mut(obj) {
                device_to_v1beta1(device);
            }
        }
    }
}

fn slice_devices_mut(obj: &mut Value) -> impl Iterator<Item = &mut Value> {
    obj.pointer_mut("/spec/devices")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
}

fn request_from_v1beta1(request: &mut Value) -> ApiResult<()> {
    let Some(map) = request.as_object_mut() else {
        return Err(ApiError::bad_request(
            "spec.devices.requests: every entry must be an object",
        ));
    };
    if map.contains_key("exactly") {
        // Not a v1beta1 field: the decoder drops it, as it drops every unknown field.
        map.remove("exactly");
    }
    let mut exactly = Map::new();
    for field in EXACT_FIELDS {
        if let Some(v) = map.remove(field) {
            exactly.insert(field.into(), v);
        }
    }
    // A request with firstAvailable has no exact fields in v1 (v1beta1 validation forbids
    // both; converting them under `exactly` lets v1 validation report it).
    if !exactly.is_empty() || !map.contains_key("firstAvailable") {
        map.insert("exactly".into(), Value::Object(exactly));
    }
    Ok(())
}

fn request_to_v1beta1(request: &mut Value) {
    let Some(map) = request.as_object_mut() else {
        return;
    };
    if let Some(Value::Object(exactly)) = map.remove("exactly") {
        for (field, v) in exactly {
            map.insert(field, v);
        }
    }
}

/// `SetDefaults_ExactDeviceRequest` / `SetDefaults_DeviceSubRequest`: `allocationMode`
/// defaults to `ExactCount`, and `count` to 1 in that mode.
fn default_request(request: &mut Value) {
    let defaults = |target: &mut Value| {
        let Some(map) = target.as_object_mut() else {
            return;
        };
        if map.get("allocationMode").is_none_or(Value::is_null) {
            map.insert("allocationMode".into(), Value::from("ExactCount"));
        }
        if map.get("allocationMode").and_then(Value::as_str) == Some("ExactCount")
            && map.get("count").is_none_or(Value::is_null)
        {
            map.insert("count".into(), Value::from(1));
        }
    };
    if let Some(exactly) = request.get_mut("exactly") {
        defaults(exactly);
    }
    if let Some(subs) = request
        .get_mut("firstAvailable")
        .and_then(Value::as_array_mut)
    {
        subs.iter_mut().for_each(defaults);
    }
}

fn device_from_v1beta1(device: &mut Value) -> ApiResult<()> {
    let Some(map) = device.as_object_mut() else {
        return Err(ApiError::bad_request(
            "spec.devices: every entry must be an object",
        ));
    };
    let basic = map.remove("basic");
    // Fields of v1's flat device are unknown to v1beta1 and dropped, like any unknown field.
    map.retain(|k, _| k == "name");
    match basic {
        None | Some(Value::Null) => {}
        Some(Value::Object(basic)) => map.extend(basic),
        Some(_) => {
            return Err(ApiError::bad_request(
                "spec.devices[].basic must be an object",
            ));
        }
    }
    Ok(())
}

fn device_to_v1beta1(device: &mut Value) {
    let Some(map) = device.as_object_mut() else {
        return;
    };
    let fields: Map<String, Value> = std::mem::take(map);
    let mut basic = Map::new();
    for (k, v) in fields {
        if k == "name" {
            map.insert(k, v);
        } else {
            basic.insert(k, v);
        }
    }
    map.insert("basic".into(), Value::Object(basic));
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(plural: &str) -> ResourceKey {
        ResourceKey {
            group: "resource.k8s.io".into(),
            plural: plural.into(),
        }
    }

    #[test]
    fn claim_requests_round_trip() {
        let beta = json!({"spec": {"devices": {"requests": [
            {"name": "r", "deviceClassName": "c", "selectors": [{"cel": {"expression": "true"}}], "count": 2},
            {"name": "a", "deviceClassName": "c", "allocationMode": "All"},
        ]}}});
        let mut stored = beta.clone();
        to_storage(&key("resourceclaims"), "v1beta1", &mut stored).unwrap();
        assert_eq!(
            stored,
            json!({"spec": {"devices": {"requests": [
                {"name": "r", "exactly": {"deviceClassName": "c", "selectors": [{"cel": {"expression": "true"}}], "count": 2, "allocationMode": "ExactCount"}},
                {"name": "a", "exactly": {"deviceClassName": "c", "allocationMode": "All"}},
            ]}}})
        );
        let mut back = stored.clone();
        from_storage(&key("resourceclaims"), "v1beta1", &mut back);
        assert_eq!(back["spec"]["devices"]["requests"][0]["count"], 2);
        assert_eq!(
            back["spec"]["devices"]["requests"][0]["allocationMode"],
            "ExactCount"
        );
        assert!(
            back["spec"]["devices"]["requests"][0]
                .get("exactly")
                .is_none()
        );
    }

    #[test]
    fn events_convert_like_upstream() {
        let key = ResourceKey {
            group: "events.k8s.io".into(),
            plural: "events".into(),
        };
        let events = json!({
            "metadata": {"name": "e"}, "eventTime": "2024-01-01T00:00:00.000000Z",
            "series": {"count": 2, "lastObservedTime": "2024-01-01T00:00:01.000000Z"},
            "reportingController": "c", "reportingInstance": "i", "action": "A", "reason": "R",
            "regarding": {"kind": "Pod", "name": "p"}, "note": "n", "type": "Warning",
            "deprecatedSource": {"component": "x"}, "deprecatedCount": 3,
            "deprecatedFirstTimestamp": "2024-01-01T00:00:00Z", "deprecatedLastTimestamp": "2024-01-01T00:00:02Z",
        });
        let mut core = events.clone();
        to_storage(&key, "v1", &mut core).unwrap();
        assert_eq!(
            core,
            json!({
                "metadata": {"name": "e"}, "eventTime": "2024-01-01T00:00:00.000000Z",
                "series": {"count": 2, "lastObservedTime": "2024-01-01T00:00:01.000000Z"},
                "reportingComponent": "c", "reportingInstance": "i", "action": "A", "reason": "R",
                "involvedObject": {"kind": "Pod", "name": "p"}, "message": "n", "type": "Warning",
                "source": {"component": "x"}, "count": 3,
                "firstTimestamp": "2024-01-01T00:00:00Z", "lastTimestamp": "2024-01-01T00:00:02Z",
            })
        );
        from_storage(&key, "v1", &mut core);
        assert_eq!(core, events);
    }

    #[test]
    fn slice_devices_round_trip() {
        let beta = json!({"spec": {"devices": [{"name": "fake-0", "basic": {"attributes": {"model": {"string": "m"}}}}]}});
        let mut stored = beta.clone();
        to_storage(&key("resourceslices"), "v1beta1", &mut stored).unwrap();
        assert_eq!(
            stored,
            json!({"spec": {"devices": [{"name": "fake-0", "attributes": {"model": {"string": "m"}}}]}})
        );
        from_storage(&key("resourceslices"), "v1beta1", &mut stored);
        assert_eq!(stored, beta);
    }
}
