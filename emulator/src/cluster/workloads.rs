//! kube-controller-manager's deployment, replicaset, daemonset and job controllers
//! (`pkg/controller/deployment`, `pkg/controller/replicaset`, `pkg/controller/daemon`,
//! `pkg/controller/job`; the last two in [`daemon_set`] and [`job`]), reduced to what the
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

mod daemon_set;
mod deployment;
mod job;
mod replica_set;

use daemon_set::daemon_sets_pass;
use deployment::deployments_pass;
pub use deployment::template_hash;
use job::jobs_pass;
use replica_set::replica_sets_pass;

/// The label (and selector term) tying a ReplicaSet and its Pods to one template.
pub const POD_TEMPLATE_HASH_LABEL: &str = "pod-template-hash";
/// The rollout number upstream keeps on each ReplicaSet (`kubectl rollout history`).
pub const REVISION_ANNOTATION: &str = "deployment.kubernetes.io/revision";

/// Runs the four controllers until the store goes away.
pub async fn run(
    client: kube::Client,
    changes: broadcast::Receiver<Arc<WatchEvent>>,
    server_version: (u32, u32),
) {
    let rs_changes = changes.resubscribe();
    let ds_changes = changes.resubscribe();
    let job_changes = changes.resubscribe();
    let job_events = crate::cluster::Events::legacy(client.clone(), "job-controller", "");
    tokio::join!(
        level_triggered("deployment-controller", changes, || deployments_pass(
            &client
        )),
        level_triggered("replicaset-controller", rs_changes, || replica_sets_pass(
            &client
        )),
        level_triggered("daemonset-controller", ds_changes, || daemon_sets_pass(
            &client
        )),
        level_triggered("job-controller", job_changes, || jobs_pass(
            &client,
            &job_events,
            server_version
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

/// `controller.GetPodFromTemplate`: labels, annotations and finalizers of the template's
/// metadata, its spec verbatim, `generateName: <owner>-`, controlled by `owner`.
fn pod_from_template(
    template: &Value,
    namespace: &str,
    owner: OwnerReference,
) -> Result<DynamicObject, serde_json::Error> {
    let mut metadata = json!({
        "generateName": format!("{}-", owner.name),
        "namespace": namespace,
        "ownerReferences": [owner],
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

fn labels_of(template: &Value) -> Map<String, Value> {
    template
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
