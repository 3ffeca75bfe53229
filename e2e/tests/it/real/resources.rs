//! `resource.k8s.io` objects read and deleted in `v1`'s types on a cluster that serves
//! `v1` (1.34+) or only `v1beta1` (1.32/1.33). The `v1beta1` objects are moved into
//! `v1`'s layout: a request's `deviceClassName`, `selectors`, `allocationMode`, `count`,
//! `adminAccess`, `tolerations` and `capacity` into its `exactly`, and a slice device's
//! `basic` flattened into the device (k8s.io/api resource/v1beta1 against v1: the only
//! differences for the kinds read here; statuses and DeviceClasses are the same).

use k8s_openapi::NamespaceResourceScope;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::backend::Backend;

/// The fields of `v1`'s `ExactDeviceRequest`, which `v1beta1` has on the request itself.
const EXACT_FIELDS: [&str; 7] = [
    "deviceClassName",
    "selectors",
    "allocationMode",
    "count",
    "adminAccess",
    "tolerations",
    "capacity",
];

fn api<K, B>(b: &B, namespace: Option<&str>) -> (Api<DynamicObject>, bool)
where
    K: kube::Resource<DynamicType = ()>,
    B: Backend,
{
    let mut resource = ApiResource::erase::<K>(&());
    let beta = resource.group == "resource.k8s.io" && !b.release().serves_v1();
    if beta {
        resource.version = "v1beta1".into();
        resource.api_version = "resource.k8s.io/v1beta1".into();
    }
    let api = match namespace {
        Some(ns) => Api::namespaced_with(b.client(), ns, &resource),
        None => Api::all_with(b.client(), &resource),
    };
    (api, beta)
}

/// A `v1beta1` object of kind `kind` in `v1`'s layout.
fn to_v1(kind: &str, mut obj: Value) -> Value {
    obj["apiVersion"] = Value::String("resource.k8s.io/v1".into());
    match kind {
        "ResourceClaim" => requests_to_v1(obj.pointer_mut("/spec/devices/requests")),
        "ResourceClaimTemplate" => requests_to_v1(obj.pointer_mut("/spec/spec/devices/requests")),
        "ResourceSlice" => {
            for device in obj
                .pointer_mut("/spec/devices")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                let basic = device
                    .as_object_mut()
                    .and_then(|d| d.remove("basic"))
                    .and_then(|b| match b {
                        Value::Object(m) => Some(m),
                        _ => None,
                    });
                if let (Some(basic), Some(d)) = (basic, device.as_object_mut()) {
                    d.extend(basic);
                }
            }
        }
        _ => {}
    }
    obj
}

/// A `v1` object of kind `kind` in `v1beta1`'s layout (the inverse of [`to_v1`]).
fn to_v1beta1(kind: &str, mut obj: Value) -> Value {
    obj["apiVersion"] = Value::String("resource.k8s.io/v1beta1".into());
    let requests = match kind {
        "ResourceClaim" => obj.pointer_mut("/spec/devices/requests"),
        "ResourceClaimTemplate" => obj.pointer_mut("/spec/spec/devices/requests"),
        _ => None,
    };
    for request in requests.and_then(Value::as_array_mut).into_iter().flatten() {
        let exactly = request.as_object_mut().and_then(|r| r.remove("exactly"));
        if let (Some(Value::Object(exactly)), Some(r)) = (exactly, request.as_object_mut()) {
            r.extend(exactly);
        }
    }
    if kind == "ResourceSlice" {
        for device in obj
            .pointer_mut("/spec/devices")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            let Some(d) = device.as_object_mut() else {
                continue;
            };
            let basic: Map<String, Value> = d
                .keys()
                .filter(|k| *k != "name")
                .cloned()
                .collect::<Vec<_>>()
                .into_iter()
                .filter_map(|k| d.remove(&k).map(|v| (k, v)))
                .collect();
            d.insert("basic".into(), Value::Object(basic));
        }
    }
    obj
}

fn requests_to_v1(requests: Option<&mut Value>) {
    for request in requests.and_then(Value::as_array_mut).into_iter().flatten() {
        let Some(r) = request.as_object_mut() else {
            continue;
        };
        if r.contains_key("firstAvailable") {
            continue;
        }
        let exactly: Map<String, Value> = EXACT_FIELDS
            .iter()
            .filter_map(|f| r.remove(*f).map(|v| (f.to_string(), v)))
            .collect();
        r.insert("exactly".into(), Value::Object(exactly));
    }
}

fn typed<K: kube::Resource<DynamicType = ()> + DeserializeOwned>(
    obj: DynamicObject,
    beta: bool,
) -> K {
    let value = serde_json::to_value(&obj).unwrap_or_else(|e| panic!("{e}"));
    let value = if beta {
        to_v1(&K::kind(&()), value)
    } else {
        value
    };
    serde_json::from_value(value.clone())
        .unwrap_or_else(|e| panic!("reading {} as v1: {e}: {value}", K::kind(&())))
}

/// Creates `obj` (in `v1`'s layout) as kind `K`: what the API server stored, in `v1`'s
/// layout, or the message it refused it with.
pub async fn create<K, B>(b: &B, namespace: Option<&str>, obj: Value) -> Result<Value, String>
where
    K: kube::Resource<DynamicType = ()>,
    B: Backend,
{
    let (api, beta) = api::<K, B>(b, namespace);
    let kind = K::kind(&()).to_string();
    let obj = if beta { to_v1beta1(&kind, obj) } else { obj };
    let obj: DynamicObject = serde_json::from_value(obj).unwrap_or_else(|e| panic!("{kind}: {e}"));
    match api.create(&kube::api::PostParams::default(), &obj).await {
        Ok(stored) => {
            let value = serde_json::to_value(&stored).unwrap_or_else(|e| panic!("{e}"));
            Ok(if beta { to_v1(&kind, value) } else { value })
        }
        Err(kube::Error::Api(status)) => Err(status.message),
        Err(e) => panic!("create {kind}: {e}"),
    }
}

/// The objects of kind `K` (in a namespace, or all).
pub async fn list<K, B>(b: &B, namespace: Option<&str>) -> Vec<K>
where
    K: kube::Resource<DynamicType = ()> + DeserializeOwned,
    B: Backend,
{
    let (api, beta) = api::<K, B>(b, namespace);
    api.list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("list {}: {e}", K::plural(&())))
        .items
        .into_iter()
        .map(|o| typed(o, beta))
        .collect()
}

/// One namespaced object, if it exists.
pub async fn get_opt<K, B>(b: &B, namespace: &str, name: &str) -> Option<K>
where
    K: kube::Resource<DynamicType = (), Scope = NamespaceResourceScope> + DeserializeOwned,
    B: Backend,
{
    let (api, beta) = api::<K, B>(b, Some(namespace));
    api.get_opt(name)
        .await
        .unwrap_or_else(|e| panic!("get {} {namespace}/{name}: {e}", K::kind(&())))
        .map(|o| typed(o, beta))
}

/// Deletes an object (`namespace` `None`: cluster-scoped); gone already is fine.
pub async fn delete<K, B>(b: &B, namespace: Option<&str>, name: &str)
where
    K: kube::Resource<DynamicType = ()>,
    B: Backend,
{
    let (api, _) = api::<K, B>(b, namespace);
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => panic!("delete {} {name}: {e}", K::kind(&())),
    }
}

/// Whether a cluster-scoped object exists.
pub async fn exists<K, B>(b: &B, name: &str) -> bool
where
    K: kube::Resource<DynamicType = ()>,
    B: Backend,
{
    let (api, _) = api::<K, B>(b, None);
    api.get_opt(name)
        .await
        .unwrap_or_else(|e| panic!("get {} {name}: {e}", K::kind(&())))
        .is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn v1beta1_objects_take_v1_layout() {
        let claim = to_v1(
            "ResourceClaim",
            json!({"apiVersion": "resource.k8s.io/v1beta1", "spec": {"devices": {"requests": [
                {"name": "a", "deviceClassName": "c", "count": 2, "allocationMode": "ExactCount"},
                {"name": "b", "firstAvailable": [{"name": "x", "deviceClassName": "c"}]}
            ]}}}),
        );
        assert_eq!(
            claim,
            json!({"apiVersion": "resource.k8s.io/v1", "spec": {"devices": {"requests": [
                {"name": "a", "exactly": {"deviceClassName": "c", "count": 2, "allocationMode": "ExactCount"}},
                {"name": "b", "firstAvailable": [{"name": "x", "deviceClassName": "c"}]}
            ]}}})
        );
        let slice = to_v1(
            "ResourceSlice",
            json!({"spec": {"devices": [{"name": "d", "basic": {"attributes": {"a": {"int": 1}}}}]}}),
        );
        assert_eq!(
            slice["spec"]["devices"][0],
            json!({"name": "d", "attributes": {"a": {"int": 1}}})
        );
    }

    #[test]
    fn v1_objects_take_v1beta1_layout_and_back() {
        let claim = json!({"apiVersion": "resource.k8s.io/v1", "spec": {"devices": {"requests": [
            {"name": "a", "exactly": {"deviceClassName": "c", "count": 2}}
        ]}}});
        let beta = to_v1beta1("ResourceClaim", claim.clone());
        assert_eq!(
            beta["spec"]["devices"]["requests"][0],
            json!({"name": "a", "deviceClassName": "c", "count": 2})
        );
        assert_eq!(to_v1("ResourceClaim", beta), claim);
        let slice = json!({"apiVersion": "resource.k8s.io/v1", "spec": {"devices": [
            {"name": "d", "attributes": {"a": {"int": 1}}, "taints": [{"key": "k", "effect": "NoSchedule"}]}
        ]}});
        let beta = to_v1beta1("ResourceSlice", slice.clone());
        assert_eq!(
            beta["spec"]["devices"][0],
            json!({"name": "d", "basic": {"attributes": {"a": {"int": 1}}, "taints": [{"key": "k", "effect": "NoSchedule"}]}})
        );
        assert_eq!(to_v1("ResourceSlice", beta), slice);
    }
}
