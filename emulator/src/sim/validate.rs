//! Every manifest checked before anything starts, the way the API server will take it:
//! each object is created, in order and after the driver's own objects, in a scratch
//! store of the same Kubernetes version with `fieldValidation=Strict` — what `kubectl
//! apply` asks for — so an unknown field, a kind the emulator does not serve or an
//! object the API server refuses stops `fake-dra-sim run` before the cluster is up.

use super::*;
use crate::apiserver::fields::FieldValidation;
use crate::apiserver::{Store, Target, WriteOptions};

/// A manifest as the emulated API server serves its kind: Kubernetes 1.32/1.33 serve
/// resource.k8s.io/v1beta1 only, and the v1 manifests of deploy/ are applied there as
/// v1beta1, as hack/deploy.sh does. Returns `(group, version, object)`.
pub(super) fn served_form(store: &Store, m: &Manifest) -> (String, String, Value) {
    let (group, version) = match m.api_version().split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (String::new(), m.api_version().to_string()),
    };
    let mut object = m.object.clone();
    if group == "resource.k8s.io" && version == "v1" {
        let older = store
            .types()
            .find(|t| {
                t.group == group && t.kind == m.kind() && !t.serves("v1") && t.serves("v1beta1")
            })
            .map(|t| t.key());
        if let Some(key) = older {
            crate::apiserver::conversion::from_storage(&key, "v1beta1", &mut object);
            object["apiVersion"] = Value::String("resource.k8s.io/v1beta1".into());
            return (group, "v1beta1".into(), object);
        }
    }
    (group, version, object)
}

/// Creates `deployed` then `manifests` in a scratch store of `server_version` and `gates` with strict
/// field validation; the first refusal is the error, named by the manifest's origin.
pub fn check_manifests(
    server_version: (u32, u32),
    gates: &FeatureGates,
    deployed: &[Manifest],
    manifests: &[Manifest],
) -> Result<(), SimError> {
    let mut store = Store::for_version(server_version).map_err(|message| SimError::Deploy {
        overlay: String::new(),
        message,
    })?;
    store.feature_gates = gates.clone();
    let strict = WriteOptions {
        field_validation: FieldValidation::Strict,
        user_agent: "fake-dra-sim".into(),
        ..WriteOptions::default()
    };
    for m in deployed.iter().chain(manifests) {
        let refuse = |message: String| SimError::Apply {
            origin: m.origin.clone(),
            kind: m.kind().into(),
            name: m.name().into(),
            message,
        };
        let (group, version, object) = served_form(&store, m);
        let Some(rt) = store
            .types()
            .find(|t| t.group == group && t.kind == m.kind() && t.serves(&version))
            .cloned()
        else {
            return Err(refuse(format!(
                "no resource type serves kind {} in {} (the emulator refuses what it does not implement)",
                m.kind(),
                m.api_version()
            )));
        };
        // The request first, as kube-apiserver reads it (`limitedReadBody`): a body over
        // 3 MiB is refused before it is decoded; then the store holds the object to etcd's
        // 1.5 MiB.
        let size = crate::apiserver::json_size(&object);
        if size > crate::apiserver::MAX_REQUEST_BODY_BYTES {
            return Err(refuse(format!(
                "{} (the object is {size} bytes as JSON; kube-apiserver reads at most {} bytes of a request, and etcd stores objects of at most 1572864)",
                crate::apiserver::request_too_large().message,
                crate::apiserver::MAX_REQUEST_BODY_BYTES
            )));
        }
        let mut target = Target {
            key: rt.key(),
            version,
            namespace: rt
                .namespaced
                .then(|| m.namespace().unwrap_or("default").to_string()),
            name: None,
            subresource: None,
        };
        match store.create(&target, object.clone(), &strict) {
            Ok(_) => {}
            // Given twice: the later one replaces it, as the apply does.
            Err(e) if e.code == 409 && !m.name().is_empty() => {
                target.name = Some(m.name().to_string());
                let mut current = store.get(&target).map_err(|e| refuse(e.message))?;
                let mut desired = object;
                desired["metadata"]["resourceVersion"] =
                    current["metadata"]["resourceVersion"].take();
                store
                    .update(&target, desired, &strict)
                    .map_err(|e| refuse(e.message))?;
            }
            Err(e) => return Err(refuse(e.message)),
        }
    }
    Ok(())
}
