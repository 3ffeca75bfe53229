//! kube-controller-manager's resourceclaim controller
//! (`pkg/controller/resourceclaim/controller.go`), 1.28–1.30 and, for structured DRA, 1.32+:
//!
//! - creates the claims of a Pod's `resourceClaimTemplateName` entries, owned by the Pod,
//!   annotated `resource.kubernetes.io/pod-claim-name`, and records their names in
//!   `status.resourceClaimStatuses`;
//! - drops `reservedFor` entries of Pods that are gone or done, and sets
//!   `deallocationRequested` when a WaitForFirstConsumer claim loses its last consumer
//!   (classic DRA: the driver deallocates);
//! - deletes the generated claims of done Pods (a deleted Pod's claims go with the garbage
//!   collector through their owner reference).
//!
//! Structured DRA differs in one place: there is no driver controller, so when the last
//! consumer of an allocated claim goes away the controller itself deallocates it (clears
//! `status.allocation`, only for claims carrying the scheduler's
//! `resource.kubernetes.io/delete-protection` finalizer), then removes that finalizer; a
//! claim being deleted loses the finalizer once it is unallocated (`syncClaim`).

use std::collections::HashMap;
use std::sync::Arc;

use fake_dra_api::upstream::pod::DraPod;
use fake_dra_api::upstream::v1alpha2::{AllocationMode, ResourceClaim, ResourceClaimTemplate};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::structured::{
    self, DELETE_PROTECTION_FINALIZER, ResourceClaim as StructuredClaim,
    ResourceClaimTemplate as StructuredTemplate, ResourceClient,
};
use super::{Events, level_triggered, object_ref};
use crate::apiserver::WatchEvent;

/// The annotation upstream puts on generated claims (1.28+).
pub const POD_CLAIM_NAME_ANNOTATION: &str = "resource.kubernetes.io/pod-claim-name";

/// Runs the controller of Kubernetes `server_version` (classic up to 1.30, structured from 1.32).
pub async fn run(
    client: kube::Client,
    changes: broadcast::Receiver<Arc<WatchEvent>>,
    server_version: (u32, u32),
) {
    let events = Events::new(client.clone(), "resource_claim", None);
    let structured = ResourceClient::for_server(client.clone(), server_version);
    let naming = if server_version < (1, 28) {
        Naming::PodAndClaim
    } else {
        Naming::Generated
    };
    level_triggered("resourceclaim-controller", changes, || async {
        match &structured {
            Some(api) => structured_pass(&client, &events, api).await,
            None => pass(&client, &events, naming).await,
        }
    })
    .await;
}

/// How generated claims are named and found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Naming {
    /// 1.27: `<pod>-<pod claim>` (`resourceclaim.Name`), checked to be owned by the pod
    /// (`IsForPod`); nothing recorded in the pod.
    PodAndClaim,
    /// 1.28+: a generated name recorded in `status.resourceClaimStatuses`, the claim
    /// annotated with its pod claim's name.
    Generated,
}

async fn pass(client: &kube::Client, events: &Events, naming: Naming) -> Result<(), kube::Error> {
    let pods = Api::<DraPod>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    let claims = Api::<ResourceClaim>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    let existing: Vec<&ObjectMeta> = claims.iter().map(|c| &c.metadata).collect();
    for pod in &pods {
        if let Err(error) = create_pod_claims(
            client,
            &ClassicClaims(client),
            events,
            pod,
            &existing,
            naming,
        )
        .await
        {
            tracing::debug!(pod = ?pod.metadata.name, %error, "creating the claims of a pod failed");
        }
    }
    let pods_by_uid: HashMap<&str, &DraPod> = pods
        .iter()
        .filter_map(|p| Some((p.metadata.uid.as_deref()?, p)))
        .collect();
    for claim in &claims {
        if let Err(error) = sync_claim(client, claim, &pods_by_uid).await {
            tracing::debug!(claim = ?claim.metadata.name, %error, "syncing a claim failed");
        }
    }
    Ok(())
}

/// Upstream truncates both parts so the name plus the 5-character suffix stays ≤ 63.
fn generate_name(pod: &str, pod_claim: &str) -> String {
    let (mut pod, mut claim) = (pod.to_string(), pod_claim.to_string());
    if pod.len() + 1 + claim.len() > 57 {
        pod.truncate(28);
        claim.truncate(28);
    }
    format!("{pod}-{claim}-")
}

/// How one DRA generation stores claims and templates, for [`create_pod_claims`].
trait ClaimStore {
    /// The template's `spec.metadata` and `spec.spec`, `None` when it does not exist.
    type Spec;
    async fn template(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<(Option<ObjectMeta>, Self::Spec)>, kube::Error>;
    /// Creates the claim; returns its generated name.
    async fn create(
        &self,
        namespace: &str,
        metadata: ObjectMeta,
        spec: Self::Spec,
    ) -> Result<String, kube::Error>;
}

/// Classic DRA: resource.k8s.io/v1alpha2.
struct ClassicClaims<'a>(&'a kube::Client);

impl ClaimStore for ClassicClaims<'_> {
    type Spec = fake_dra_api::upstream::v1alpha2::ResourceClaimSpec;

    async fn template(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<(Option<ObjectMeta>, Self::Spec)>, kube::Error> {
        let templates: Api<ResourceClaimTemplate> = Api::namespaced(self.0.clone(), namespace);
        Ok(templates
            .get_opt(name)
            .await?
            .map(|t| (t.spec.metadata, t.spec.spec)))
    }

    async fn create(
        &self,
        namespace: &str,
        metadata: ObjectMeta,
        spec: Self::Spec,
    ) -> Result<String, kube::Error> {
        let claim = ResourceClaim {
            metadata,
            spec,
            status: None,
        };
        let created = Api::<ResourceClaim>::namespaced(self.0.clone(), namespace)
            .create(&PostParams::default(), &claim)
            .await?;
        Ok(created.metadata.name.unwrap_or_default())
    }
}

/// Structured DRA: resource.k8s.io/v1 (v1beta1 on 1.32/1.33).
struct StructuredClaims<'a>(&'a ResourceClient);

impl ClaimStore for StructuredClaims<'_> {
    type Spec = k8s_openapi::api::resource::v1::ResourceClaimSpec;

    async fn template(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<(Option<ObjectMeta>, Self::Spec)>, kube::Error> {
        Ok(self
            .0
            .get::<StructuredTemplate>(Some(namespace), name)
            .await?
            .map(|t| (t.spec.metadata, t.spec.spec)))
    }

    async fn create(
        &self,
        namespace: &str,
        metadata: ObjectMeta,
        spec: Self::Spec,
    ) -> Result<String, kube::Error> {
        let claim = StructuredClaim {
            metadata,
            spec,
            status: None,
        };
        Ok(self
            .0
            .create(Some(namespace), &claim)
            .await?
            .metadata
            .name
            .unwrap_or_default())
    }
}

/// Creates the claims of a Pod's `resourceClaimTemplateName` entries and records their
/// names in `status.resourceClaimStatuses` (`pkg/controller/resourceclaim`
/// `handleClaim`), whichever generation stores them. `existing` are the claims there are.
async fn create_pod_claims<S: ClaimStore>(
    client: &kube::Client,
    store: &S,
    events: &Events,
    pod: &DraPod,
    existing: &[&ObjectMeta],
    naming: Naming,
) -> Result<(), kube::Error> {
    if pod.metadata.deletion_timestamp.is_some() || pod.is_done() {
        return Ok(());
    }
    let (Some(namespace), Some(pod_name), Some(pod_uid)) = (
        pod.metadata.namespace.as_deref(),
        pod.metadata.name.as_deref(),
        pod.metadata.uid.as_deref(),
    ) else {
        return Ok(());
    };
    let mut statuses: Vec<(String, String)> = Vec::new();
    let mut missing_status = false;
    for pod_claim in pod.resource_claims() {
        let Some(template_name) = pod_claim.template_name() else {
            continue;
        };
        let legacy_name = (naming == Naming::PodAndClaim)
            .then(|| pod.legacy_generated_claim_name(&pod_claim.name))
            .flatten();
        if let Some(name) = &legacy_name
            && let Some(claim) = existing.iter().find(|m| {
                m.namespace.as_deref() == Some(namespace) && m.name.as_ref() == Some(name)
            })
        {
            if owning_pod(claim).is_none_or(|(_, uid)| uid != pod_uid) {
                let note = format!(
                    "PodResourceClaim {}: ResourceClaim {name} was not created for pod {namespace}/{pod_name} (pod is not owner)",
                    pod_claim.name
                );
                events
                    .warn(
                        object_ref(pod),
                        "FailedResourceClaimCreation",
                        "CreateResourceClaim",
                        note,
                    )
                    .await;
            }
            continue;
        }
        if legacy_name.is_none()
            && let Some(existing) = pod.claim_name(&pod_claim.name)
        {
            statuses.push((pod_claim.name.clone(), existing.to_string()));
            continue;
        }
        missing_status = true;
        // A claim created earlier whose status update was lost: reuse it (upstream looks it
        // up by owner and annotation for the same reason).
        let adopted = existing.iter().find(|m| {
            m.namespace.as_deref() == Some(namespace)
                && m.annotations
                    .as_ref()
                    .and_then(|a| a.get(POD_CLAIM_NAME_ANNOTATION))
                    == Some(&pod_claim.name)
                && owning_pod(m).is_some_and(|(_, uid)| uid == pod_uid)
        });
        if let Some(claim) = adopted {
            statuses.push((
                pod_claim.name.clone(),
                claim.name.clone().unwrap_or_default(),
            ));
            continue;
        }
        let Some((template_meta, spec)) = store.template(namespace, template_name).await? else {
            let note = format!(
                "PodResourceClaim {}: resource claim template \"{template_name}\": resourceclaimtemplates.resource.k8s.io \"{template_name}\" not found",
                pod_claim.name
            );
            events
                .warn(
                    object_ref(pod),
                    "FailedResourceClaimCreation",
                    "CreateResourceClaim",
                    note,
                )
                .await;
            return Ok(());
        };
        let mut annotations = template_meta
            .as_ref()
            .and_then(|m| m.annotations.clone())
            .unwrap_or_default();
        if legacy_name.is_none() {
            annotations.insert(POD_CLAIM_NAME_ANNOTATION.into(), pod_claim.name.clone());
        }
        let metadata = ObjectMeta {
            name: legacy_name.clone(),
            generate_name: legacy_name
                .is_none()
                .then(|| generate_name(pod_name, &pod_claim.name)),
            namespace: Some(namespace.into()),
            labels: template_meta.and_then(|m| m.labels),
            annotations: Some(annotations),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Pod".into(),
                name: pod_name.into(),
                uid: pod_uid.into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..Default::default()
        };
        let created = store.create(namespace, metadata, spec).await?;
        statuses.push((pod_claim.name.clone(), created));
    }
    if missing_status && naming == Naming::Generated {
        let entries: Vec<_> = statuses
            .iter()
            .map(|(name, claim)| json!({"name": name, "resourceClaimName": claim}))
            .collect();
        let patch = json!({"metadata": {"resourceVersion": pod.metadata.resource_version}, "status": {"resourceClaimStatuses": entries}});
        Api::<DraPod>::namespaced(client.clone(), namespace)
            .patch_status(pod_name, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
    }
    Ok(())
}

async fn sync_claim(
    client: &kube::Client,
    claim: &ResourceClaim,
    pods: &HashMap<&str, &DraPod>,
) -> Result<(), kube::Error> {
    let (Some(namespace), Some(name)) = (
        claim.metadata.namespace.as_deref(),
        claim.metadata.name.as_deref(),
    ) else {
        return Ok(());
    };
    let api: Api<ResourceClaim> = Api::namespaced(client.clone(), namespace);
    let reserved = claim.reserved_for();
    let valid: Vec<_> = reserved
        .iter()
        .filter(|r| r.api_group.as_deref().unwrap_or_default().is_empty() && r.resource == "pods")
        .filter(|r| pods.get(r.uid.as_str()).is_some_and(|p| !p.is_done()))
        .cloned()
        .collect();
    if valid.len() != reserved.len() {
        let mut status = claim.status.clone().unwrap_or_default();
        status.reserved_for = (!valid.is_empty()).then_some(valid.clone());
        if valid.is_empty()
            && status.allocation.is_some()
            && claim.spec.allocation_mode() == AllocationMode::WaitForFirstConsumer
        {
            status.deallocation_requested = Some(true);
        }
        let patch = json!({"metadata": {"resourceVersion": claim.metadata.resource_version}, "status": {"reservedFor": status.reserved_for, "deallocationRequested": status.deallocation_requested}});
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        return Ok(());
    }
    // Generated claims of done pods are deleted once nobody uses them.
    let owner = claim
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true) && o.kind == "Pod");
    if let Some(owner) = owner
        && valid.is_empty()
        && claim.metadata.deletion_timestamp.is_none()
        && pods.get(owner.uid.as_str()).is_some_and(|p| p.is_done())
    {
        api.delete(name, &DeleteParams::default()).await?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Structured DRA (1.32+)

async fn structured_pass(
    client: &kube::Client,
    events: &Events,
    api: &ResourceClient,
) -> Result<(), kube::Error> {
    let pods = Api::<DraPod>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    let claims: Vec<StructuredClaim> = api.list(None).await?;
    let existing: Vec<&ObjectMeta> = claims.iter().map(|c| &c.metadata).collect();
    for pod in &pods {
        if let Err(error) = create_pod_claims(
            client,
            &StructuredClaims(api),
            events,
            pod,
            &existing,
            Naming::Generated,
        )
        .await
        {
            tracing::debug!(pod = ?pod.metadata.name, %error, "creating the claims of a pod failed");
        }
    }
    for claim in &claims {
        if let Err(error) = sync_structured_claim(api, claim, &pods).await {
            tracing::debug!(claim = ?claim.metadata.name, %error, "syncing a claim failed");
        }
    }
    Ok(())
}

/// The pod a generated claim belongs to: its controlling owner reference of kind Pod.
fn owning_pod(metadata: &ObjectMeta) -> Option<(&str, &str)> {
    metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true) && o.kind == "Pod" && o.api_version == "v1")
        .map(|o| (o.name.as_str(), o.uid.as_str()))
}

/// `syncClaim` for structured claims.
async fn sync_structured_claim(
    api: &ResourceClient,
    claim: &StructuredClaim,
    pods: &[DraPod],
) -> Result<(), kube::Error> {
    let (Some(namespace), Some(name)) = (
        claim.metadata.namespace.as_deref(),
        claim.metadata.name.as_deref(),
    ) else {
        return Ok(());
    };
    let pod_by_uid = |uid: &str| pods.iter().find(|p| p.metadata.uid.as_deref() == Some(uid));
    let reserved = structured::reserved_for(claim);
    let valid: Vec<_> = reserved
        .iter()
        .filter(|r| r.api_group.as_deref().unwrap_or_default().is_empty() && r.resource == "pods")
        .filter(|r| pod_by_uid(&r.uid).is_some_and(|p| !p.is_done()))
        .cloned()
        .collect();
    let has_finalizer = claim
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == DELETE_PROTECTION_FINALIZER);
    let mut allocated = structured::is_allocated(claim);
    let mut resource_version = claim.metadata.resource_version.clone();
    if valid.len() < reserved.len() {
        let mut status =
            json!({"reservedFor": if valid.is_empty() { Value::Null } else { json!(valid) }});
        // The last consumer is gone: deallocate, so the devices are free again and a
        // future consumer is not bound to this node ("DRA always performs delayed
        // allocations"). Only claims the scheduler allocated carry the finalizer.
        if valid.is_empty() && has_finalizer && allocated {
            status["allocation"] = Value::Null;
            allocated = false;
        }
        let patch = json!({"metadata": {"resourceVersion": resource_version}, "status": status});
        resource_version = api
            .patch_status::<StructuredClaim>(Some(namespace), name, &patch)
            .await?;
        if has_finalizer && !allocated {
            remove_finalizer(api, claim, namespace, name, resource_version).await?;
        }
    } else if claim.metadata.deletion_timestamp.is_some() && has_finalizer && !allocated {
        remove_finalizer(api, claim, namespace, name, resource_version).await?;
        return Ok(());
    }
    if valid.is_empty()
        && claim.metadata.deletion_timestamp.is_none()
        && let Some((pod_name, pod_uid)) = owning_pod(&claim.metadata)
        && let Some(pod) = pods.iter().find(|p| {
            p.metadata.namespace.as_deref() == Some(namespace)
                && p.metadata.name.as_deref() == Some(pod_name)
        })
        && (pod.metadata.uid.as_deref() != Some(pod_uid) || pod.is_done())
    {
        // The owning pod was replaced or will not run again; a pod that is gone is the
        // garbage collector's business.
        api.delete::<StructuredClaim>(Some(namespace), name).await?;
    }
    Ok(())
}

async fn remove_finalizer(
    api: &ResourceClient,
    claim: &StructuredClaim,
    namespace: &str,
    name: &str,
    resource_version: Option<String>,
) -> Result<(), kube::Error> {
    let finalizers: Vec<&String> = claim
        .metadata
        .finalizers
        .iter()
        .flatten()
        .filter(|f| *f != DELETE_PROTECTION_FINALIZER)
        .collect();
    let patch =
        json!({"metadata": {"resourceVersion": resource_version, "finalizers": finalizers}});
    api.patch_metadata::<StructuredClaim>(Some(namespace), name, &patch)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn generated_names_stay_short() {
        assert_eq!(super::generate_name("pod0", "gpu"), "pod0-gpu-");
        let long = super::generate_name(&"p".repeat(40), &"c".repeat(40));
        assert!(long.len() + 5 <= 63, "{long}");
    }
}
