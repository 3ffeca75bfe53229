//! kube-controller-manager's deployment and replicaset controllers
//! (`pkg/controller/deployment`, `pkg/controller/replicaset`), reduced to what the
//! scenarios need:
//!
//! - a Deployment owns one ReplicaSet per pod template, named `<deployment>-<hash>` and
//!   labelled `pod-template-hash`; a template change rolls out with Recreate semantics
//!   (old ReplicaSets go to zero and the new one grows once their Pods are gone), whatever
//!   `spec.strategy` says;
//! - a ReplicaSet keeps `spec.replicas` Pods it controls, created from its template;
//! - both report the status fields `kubectl get` / `kubectl rollout status` read.
//!
//! Left out: adopting and releasing Pods or ReplicaSets by selector (only controller
//! references count), rolling updates, pausing, rollbacks, `revisionHistoryLimit`, hash
//! collisions and the `Progressing` condition.
//!
//! Upstream's "expectations" (not re-creating Pods the informer has not seen yet) are not
//! needed: every pass lists from the apiserver, which already holds every earlier write.
//!
//! The apps objects and Pods are read and written as raw JSON (`DynamicObject`) and only
//! viewed through the k8s-openapi types: those model Kubernetes 1.34, whose pod template
//! has no `resourceClaims[].source`, so a typed round trip would drop the classic DRA claim
//! references (see the test at the bottom).

use std::cmp::Reverse;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use super::level_triggered;
use crate::apiserver::WatchEvent;

/// The label (and selector term) tying a ReplicaSet and its Pods to one template.
pub const POD_TEMPLATE_HASH_LABEL: &str = "pod-template-hash";
/// The rollout number upstream keeps on each ReplicaSet (`kubectl rollout history`).
pub const REVISION_ANNOTATION: &str = "deployment.kubernetes.io/revision";

/// Runs both controllers until the store goes away.
pub async fn run(client: kube::Client, changes: broadcast::Receiver<Arc<WatchEvent>>) {
    let rs_changes = changes.resubscribe();
    tokio::join!(
        level_triggered("deployment-controller", changes, || deployments_pass(
            &client
        )),
        level_triggered("replicaset-controller", rs_changes, || replica_sets_pass(
            &client
        )),
    );
}

#[derive(Debug, thiserror::Error)]
enum SyncError {
    #[error(transparent)]
    Api(#[from] kube::Error),
    #[error("decoding the object: {0}")]
    Decode(#[from] serde_json::Error),
}

fn resource<K: kube::Resource<DynamicType = ()>>() -> ApiResource {
    ApiResource::erase::<K>(&())
}

fn namespaced<K: kube::Resource<DynamicType = ()>>(
    client: &kube::Client,
    namespace: &str,
) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), namespace, &resource::<K>())
}

async fn list_all<K: kube::Resource<DynamicType = ()>>(
    client: &kube::Client,
) -> Result<Vec<DynamicObject>, kube::Error> {
    Ok(
        Api::<DynamicObject>::all_with(client.clone(), &resource::<K>())
            .list(&ListParams::default())
            .await?
            .items,
    )
}

/// The typed view of a raw object, for the fields k8s-openapi models faithfully.
fn typed<K: k8s_openapi::Resource + serde::de::DeserializeOwned>(
    object: &DynamicObject,
) -> Result<K, serde_json::Error> {
    let mut value = serde_json::to_value(object)?;
    if let Some(map) = value.as_object_mut() {
        map.insert("apiVersion".into(), K::API_VERSION.into());
        map.insert("kind".into(), K::KIND.into());
    }
    serde_json::from_value(value)
}

fn controller_uid(meta: &ObjectMeta) -> Option<&str> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.as_str())
}

fn owner_reference(api_version: &str, kind: &str, name: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: api_version.into(),
        kind: kind.into(),
        name: name.into(),
        uid: uid.into(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

fn phase(pod: &DynamicObject) -> Option<&str> {
    pod.data.pointer("/status/phase").and_then(Value::as_str)
}

fn is_terminal(pod: &DynamicObject) -> bool {
    matches!(phase(pod), Some("Succeeded" | "Failed"))
}

/// `controller.IsPodActive`: neither finished nor being deleted.
fn is_active(pod: &DynamicObject) -> bool {
    pod.metadata.deletion_timestamp.is_none() && !is_terminal(pod)
}

/// The pod's `Ready` condition, if it is `True`: `podutil.IsPodReady`.
fn ready_condition(pod: &DynamicObject) -> Option<&Value> {
    pod.data
        .pointer("/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|c| {
            c.get("type").and_then(Value::as_str) == Some("Ready")
                && c.get("status").and_then(Value::as_str) == Some("True")
        })
}

/// `podutil.IsPodAvailable`: ready for at least `minReadySeconds`.
fn is_available(pod: &DynamicObject, min_ready_seconds: i32, now: jiff::Timestamp) -> bool {
    let Some(ready) = ready_condition(pod) else {
        return false;
    };
    if min_ready_seconds <= 0 {
        return true;
    }
    let since = ready
        .get("lastTransitionTime")
        .and_then(Value::as_str)
        .and_then(|t| t.parse::<jiff::Timestamp>().ok());
    since.is_some_and(|since| {
        since + jiff::SignedDuration::from_secs(i64::from(min_ready_seconds)) <= now
    })
}

fn labels_of(template: &Value) -> Map<String, Value> {
    template
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------
// Deployment controller (pkg/controller/deployment)

async fn deployments_pass(client: &kube::Client) -> Result<(), kube::Error> {
    let deployments = list_all::<Deployment>(client).await?;
    let replica_sets = list_all::<ReplicaSet>(client).await?;
    let pods = list_all::<Pod>(client).await?;
    for deployment in deployments
        .iter()
        .filter(|d| d.metadata.deletion_timestamp.is_none())
    {
        if let Err(error) = sync_deployment(client, deployment, &replica_sets, &pods).await {
            tracing::debug!(deployment = ?deployment.metadata.name, %error, "syncing a deployment failed");
        }
    }
    Ok(())
}

/// `syncDeployment` with the Recreate strategy (`rolloutRecreate` in recreate.go): scale
/// the old ReplicaSets down, wait until none of their Pods runs, then create or scale the
/// new one; status last.
async fn sync_deployment(
    client: &kube::Client,
    object: &DynamicObject,
    replica_sets: &[DynamicObject],
    pods: &[DynamicObject],
) -> Result<(), SyncError> {
    let deployment: Deployment = typed(object)?;
    let meta = &deployment.metadata;
    let (Some(namespace), Some(name), Some(uid)) = (
        meta.namespace.as_deref(),
        meta.name.as_deref(),
        meta.uid.as_deref(),
    ) else {
        return Ok(());
    };
    let Some(template) = object.data.pointer("/spec/template") else {
        return Ok(());
    };
    let desired = deployment
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1);
    let hash = template_hash(template);
    let api = namespaced::<ReplicaSet>(client, namespace);

    let mut owned = Vec::new();
    for rs in replica_sets.iter().filter(|rs| {
        rs.metadata.namespace.as_deref() == Some(namespace)
            && controller_uid(&rs.metadata) == Some(uid)
    }) {
        owned.push((rs, typed::<ReplicaSet>(rs)?));
    }
    // Upstream finds the new ReplicaSet by comparing templates without the hash label;
    // the hash is a function of the template, so comparing hashes is the same test.
    let is_new = |rs: &ReplicaSet| {
        rs.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(POD_TEMPLATE_HASH_LABEL))
            == Some(&hash)
    };
    let new_rs = owned.iter().find(|(_, rs)| is_new(rs)).map(|(_, rs)| rs);
    let old: Vec<&ReplicaSet> = owned
        .iter()
        .filter(|(_, rs)| !is_new(rs))
        .map(|(_, rs)| rs)
        .collect();

    for rs in &old {
        if rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1) != 0 {
            scale(&api, &rs.metadata, 0).await?;
        }
    }
    // `oldPodsRunning`: any Pod of an old ReplicaSet not yet finished, terminating or not.
    let old_uids: Vec<&str> = old
        .iter()
        .filter_map(|rs| rs.metadata.uid.as_deref())
        .collect();
    let old_pods_running = pods.iter().any(|p| {
        controller_uid(&p.metadata).is_some_and(|u| old_uids.contains(&u)) && !is_terminal(p)
    });
    if !old_pods_running {
        match new_rs {
            None => {
                let revision = owned
                    .iter()
                    .filter_map(|(_, rs)| {
                        rs.metadata
                            .annotations
                            .as_ref()?
                            .get(REVISION_ANNOTATION)?
                            .parse::<u64>()
                            .ok()
                    })
                    .max()
                    .unwrap_or(0)
                    + 1;
                let rs = new_replica_set(
                    object, namespace, name, uid, template, &hash, desired, revision,
                )?;
                api.create(&PostParams::default(), &rs).await?;
            }
            Some(rs) if rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1) != desired => {
                scale(&api, &rs.metadata, desired).await?
            }
            Some(_) => {}
        }
    }
    update_deployment_status(
        client,
        &deployment,
        namespace,
        name,
        desired,
        new_rs,
        owned.iter().map(|(_, rs)| rs),
    )
    .await
}

/// `getNewReplicaSet`: the template plus the hash label, the Deployment's selector narrowed
/// by the hash, owned by the Deployment.
#[allow(clippy::too_many_arguments)]
fn new_replica_set(
    deployment: &DynamicObject,
    namespace: &str,
    name: &str,
    uid: &str,
    template: &Value,
    hash: &str,
    replicas: i32,
    revision: u64,
) -> Result<DynamicObject, serde_json::Error> {
    let mut template = template.clone();
    let mut labels = labels_of(&template);
    labels.insert(POD_TEMPLATE_HASH_LABEL.into(), hash.into());
    if let Some(t) = template.as_object_mut() {
        let metadata = t.entry("metadata").or_insert_with(|| json!({}));
        if let Some(m) = metadata.as_object_mut() {
            m.insert("labels".into(), Value::Object(labels.clone()));
        }
    }
    let mut selector = deployment
        .data
        .pointer("/spec/selector")
        .cloned()
        .unwrap_or_else(|| json!({}));
    if let Some(s) = selector.as_object_mut() {
        let match_labels = s.entry("matchLabels").or_insert_with(|| json!({}));
        if let Some(m) = match_labels.as_object_mut() {
            m.insert(POD_TEMPLATE_HASH_LABEL.into(), hash.into());
        }
    }
    let min_ready_seconds = deployment
        .data
        .pointer("/spec/minReadySeconds")
        .cloned()
        .unwrap_or_else(|| json!(0));
    serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": format!("{name}-{hash}"),
            "namespace": namespace,
            "labels": labels,
            "annotations": {REVISION_ANNOTATION: revision.to_string()},
            "ownerReferences": [owner_reference("apps/v1", "Deployment", name, uid)],
        },
        "spec": {"replicas": replicas, "minReadySeconds": min_ready_seconds, "selector": selector, "template": template},
    }))
}

/// Sets `spec.replicas`, guarded by the resourceVersion read (a conflict retries next pass).
async fn scale(
    api: &Api<DynamicObject>,
    meta: &ObjectMeta,
    replicas: i32,
) -> Result<(), SyncError> {
    let Some(name) = meta.name.as_deref() else {
        return Ok(());
    };
    let patch = json!({"metadata": {"resourceVersion": meta.resource_version}, "spec": {"replicas": replicas}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    Ok(())
}

/// `calculateStatus` (sync.go) and the `Available` condition.
async fn update_deployment_status<'a>(
    client: &kube::Client,
    deployment: &Deployment,
    namespace: &str,
    name: &str,
    desired: i32,
    new_rs: Option<&ReplicaSet>,
    all: impl Iterator<Item = &'a ReplicaSet>,
) -> Result<(), SyncError> {
    let (mut replicas, mut ready, mut available) = (0, 0, 0);
    for rs in all {
        let status = rs.status.as_ref();
        replicas += status.map_or(0, |s| s.replicas);
        ready += status.and_then(|s| s.ready_replicas).unwrap_or(0);
        available += status.and_then(|s| s.available_replicas).unwrap_or(0);
    }
    let updated = new_rs
        .and_then(|rs| rs.status.as_ref())
        .map_or(0, |s| s.replicas);
    let unavailable = (desired - available).max(0);
    let generation = deployment.metadata.generation;

    let current = deployment.status.clone().unwrap_or_default();
    let conditions = current.conditions.clone().unwrap_or_default();
    let min_available = desired - max_unavailable(deployment, desired);
    let (status, reason, message) = if available >= min_available {
        (
            "True",
            "MinimumReplicasAvailable",
            "Deployment has minimum availability.",
        )
    } else {
        (
            "False",
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.",
        )
    };
    let condition_changed = !conditions.iter().any(|c| {
        c.type_ == "Available" && c.status == status && c.reason.as_deref() == Some(reason)
    });
    let unchanged = current.replicas.unwrap_or(0) == replicas
        && current.updated_replicas.unwrap_or(0) == updated
        && current.ready_replicas.unwrap_or(0) == ready
        && current.available_replicas.unwrap_or(0) == available
        && current.unavailable_replicas.unwrap_or(0) == unavailable
        && current.observed_generation == generation
        && !condition_changed;
    if unchanged {
        return Ok(());
    }
    let mut patched_conditions: Vec<Value> = conditions
        .iter()
        .filter(|c| c.type_ != "Available")
        .map(serde_json::to_value)
        .collect::<Result<_, _>>()?;
    let now = jiff::Timestamp::now().to_string();
    let available_condition = match conditions.iter().find(|c| c.type_ == "Available") {
        Some(c) if !condition_changed => serde_json::to_value(c)?,
        _ => {
            json!({"type": "Available", "status": status, "reason": reason, "message": message, "lastUpdateTime": now, "lastTransitionTime": now})
        }
    };
    patched_conditions.insert(0, available_condition);
    let patch = json!({
        "metadata": {"resourceVersion": deployment.metadata.resource_version},
        "status": {
            "observedGeneration": generation,
            "replicas": replicas,
            "updatedReplicas": updated,
            "readyReplicas": ready,
            "availableReplicas": available,
            "unavailableReplicas": unavailable,
            "conditions": patched_conditions,
        },
    });
    namespaced::<Deployment>(client, namespace)
        .patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    Ok(())
}

/// `deploymentutil.MaxUnavailable`: 0 unless RollingUpdate; percentages of `replicas`
/// round down (maxSurge rounds up), and both being 0 makes maxUnavailable 1.
fn max_unavailable(deployment: &Deployment, replicas: i32) -> i32 {
    let strategy = deployment.spec.as_ref().and_then(|s| s.strategy.as_ref());
    if strategy
        .and_then(|s| s.type_.as_deref())
        .is_some_and(|t| t != "RollingUpdate")
        || replicas == 0
    {
        return 0;
    }
    let rolling = strategy.and_then(|s| s.rolling_update.as_ref());
    let resolve = |value: Option<&IntOrString>, round_up: bool| -> i32 {
        let percent = match value {
            Some(IntOrString::Int(n)) => return *n,
            Some(IntOrString::String(s)) => s.trim_end_matches('%').parse::<i64>().unwrap_or(25),
            None => 25,
        };
        let scaled = percent * i64::from(replicas);
        i32::try_from(if round_up {
            (scaled + 99) / 100
        } else {
            scaled / 100
        })
        .unwrap_or(i32::MAX)
    };
    let surge = resolve(rolling.and_then(|r| r.max_surge.as_ref()), true);
    let mut unavailable = resolve(rolling.and_then(|r| r.max_unavailable.as_ref()), false);
    if surge == 0 && unavailable == 0 {
        unavailable = 1;
    }
    unavailable.min(replicas)
}

/// `controller.ComputeHash`: FNV-1a (32 bit) over the template, encoded with
/// `rand.SafeEncodeString` so it never spells words. Upstream hashes the Go struct dump;
/// this hashes JSON with sorted keys, which is equally stable.
pub fn template_hash(template: &Value) -> String {
    let mut hash: u32 = 0x811c_9dc5;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            hash ^= u32::from(*b);
            hash = hash.wrapping_mul(0x0100_0193);
        }
    };
    hash_value(template, &mut feed);
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    hash.to_string()
        .bytes()
        .map(|b| char::from(ALPHANUMS[usize::from(b) % ALPHANUMS.len()]))
        .collect()
}

fn hash_value(value: &Value, feed: &mut impl FnMut(&[u8])) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            feed(b"{");
            for key in keys {
                feed(Value::from(key.as_str()).to_string().as_bytes());
                feed(b":");
                if let Some(v) = map.get(key) {
                    hash_value(v, feed);
                }
                feed(b",");
            }
            feed(b"}");
        }
        Value::Array(items) => {
            feed(b"[");
            for item in items {
                hash_value(item, feed);
                feed(b",");
            }
            feed(b"]");
        }
        other => feed(other.to_string().as_bytes()),
    }
}

// ---------------------------------------------------------------------------------------
// ReplicaSet controller (pkg/controller/replicaset)

async fn replica_sets_pass(client: &kube::Client) -> Result<(), kube::Error> {
    let replica_sets = list_all::<ReplicaSet>(client).await?;
    let pods = list_all::<Pod>(client).await?;
    for rs in &replica_sets {
        if let Err(error) = sync_replica_set(client, rs, &pods).await {
            tracing::debug!(replicaset = ?rs.metadata.name, %error, "syncing a replicaset failed");
        }
    }
    Ok(())
}

/// `syncReplicaSet`: count the active Pods it controls, create or delete the difference
/// (not while the ReplicaSet is being deleted), then report status from the Pods seen.
async fn sync_replica_set(
    client: &kube::Client,
    object: &DynamicObject,
    pods: &[DynamicObject],
) -> Result<(), SyncError> {
    let rs: ReplicaSet = typed(object)?;
    let meta = &rs.metadata;
    let (Some(namespace), Some(name), Some(uid)) = (
        meta.namespace.as_deref(),
        meta.name.as_deref(),
        meta.uid.as_deref(),
    ) else {
        return Ok(());
    };
    let Some(template) = object.data.pointer("/spec/template") else {
        return Ok(());
    };
    let spec = rs.spec.as_ref();
    let desired = spec.and_then(|s| s.replicas).unwrap_or(1);
    let active: Vec<&DynamicObject> = pods
        .iter()
        .filter(|p| {
            p.metadata.namespace.as_deref() == Some(namespace)
                && controller_uid(&p.metadata) == Some(uid)
                && is_active(p)
        })
        .collect();
    let pod_api = namespaced::<Pod>(client, namespace);

    if meta.deletion_timestamp.is_none() {
        let diff = active.len() as i64 - i64::from(desired);
        if diff < 0 {
            let pod = pod_from_template(template, namespace, name, uid)?;
            for _ in 0..-diff {
                pod_api.create(&PostParams::default(), &pod).await?;
            }
        } else if diff > 0 {
            for pod in pods_to_delete(&active, usize::try_from(diff).unwrap_or(0)) {
                let Some(pod_name) = pod.metadata.name.as_deref() else {
                    continue;
                };
                match pod_api.delete(pod_name, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(status)) if status.code == 404 => {}
                    Err(error) => return Err(error.into()),
                }
            }
        }
    }

    // `calculateStatus` (replica_set_utils.go), from the Pods as listed before this pass.
    let template_labels = labels_of(template);
    let min_ready_seconds = spec.and_then(|s| s.min_ready_seconds).unwrap_or(0);
    let now = jiff::Timestamp::now();
    let replicas = i32::try_from(active.len()).unwrap_or(i32::MAX);
    let count = |f: &dyn Fn(&DynamicObject) -> bool| {
        i32::try_from(active.iter().filter(|p| f(p)).count()).unwrap_or(i32::MAX)
    };
    let fully_labeled = count(&|p| {
        template_labels.iter().all(|(k, v)| {
            p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(k))
                .map(String::as_str)
                == v.as_str()
        })
    });
    let ready = count(&|p| ready_condition(p).is_some());
    let available = count(&|p| is_available(p, min_ready_seconds, now));
    let current = rs.status.clone().unwrap_or_default();
    if current.replicas == replicas
        && current.fully_labeled_replicas.unwrap_or(0) == fully_labeled
        && current.ready_replicas.unwrap_or(0) == ready
        && current.available_replicas.unwrap_or(0) == available
        && current.observed_generation == meta.generation
    {
        return Ok(());
    }
    let patch = json!({
        "metadata": {"resourceVersion": meta.resource_version},
        "status": {
            "replicas": replicas,
            "fullyLabeledReplicas": fully_labeled,
            "readyReplicas": ready,
            "availableReplicas": available,
            "observedGeneration": meta.generation,
        },
    });
    namespaced::<ReplicaSet>(client, namespace)
        .patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    Ok(())
}

/// `controller.GetPodFromTemplate`: labels, annotations and finalizers of the template's
/// metadata, its spec verbatim, `generateName: <rs>-`, controlled by the ReplicaSet.
fn pod_from_template(
    template: &Value,
    namespace: &str,
    rs_name: &str,
    rs_uid: &str,
) -> Result<DynamicObject, serde_json::Error> {
    let mut metadata = json!({
        "generateName": format!("{rs_name}-"),
        "namespace": namespace,
        "ownerReferences": [owner_reference("apps/v1", "ReplicaSet", rs_name, rs_uid)],
    });
    for field in ["labels", "annotations", "finalizers"] {
        if let (Some(value), Some(m)) = (
            template.pointer(&format!("/metadata/{field}")),
            metadata.as_object_mut(),
        ) {
            m.insert(field.into(), value.clone());
        }
    }
    let spec = template.get("spec").cloned().unwrap_or_else(|| json!({}));
    serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}),
    )
}

/// `getPodsToDelete` with the leading keys of `ActivePodsWithRanks.Less`: unscheduled
/// before scheduled, Pending before Unknown before Running, not ready before ready, then
/// the newest first.
fn pods_to_delete<'a>(active: &[&'a DynamicObject], count: usize) -> Vec<&'a DynamicObject> {
    let mut ranked = active.to_vec();
    ranked.sort_by_key(|p| {
        let scheduled = p
            .data
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty());
        let phase_rank = match phase(p) {
            Some("Pending") | None => 0,
            Some("Unknown") => 1,
            Some("Running") => 2,
            Some(_) => 3,
        };
        let created = p.metadata.creation_timestamp.as_ref().map(|t| t.0);
        (
            scheduled,
            phase_rank,
            ready_condition(p).is_some(),
            Reverse(created),
        )
    });
    ranked.truncate(count);
    ranked
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Why templates are copied as raw JSON: the 1.34 types drop the classic claim source.
    #[test]
    fn typed_pod_template_drops_the_classic_claim_source() {
        let classic = json!({"spec": {"containers": [], "resourceClaims": [{"name": "gpu", "source": {"resourceClaimTemplateName": "t"}}]}});
        let typed: k8s_openapi::api::core::v1::PodTemplateSpec =
            serde_json::from_value(classic.clone()).unwrap();
        let back = serde_json::to_value(typed).unwrap();
        assert_eq!(back.pointer("/spec/resourceClaims/0/source"), None);
        let pod = pod_from_template(&classic, "ns", "rs", "uid").unwrap();
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
        let c =
            json!({"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c"}]}});
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
}
