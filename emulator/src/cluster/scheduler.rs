//! kube-scheduler with the classic `DynamicResources` plugin, 1.27–1.30
//! (`pkg/scheduler/framework/plugins/dynamicresources`), for one pod at a time:
//!
//! - PreFilter: every claim of the pod must exist, not be being deleted, and (when generated)
//!   be owned by the pod; an unallocated Immediate claim makes the pod wait.
//! - Filter: an allocated claim limits the pod to its `availableOnNodes` ("resourceclaim
//!   not available on the node"); an unallocated WaitForFirstConsumer claim rules out its
//!   class' non-`suitableNodes` ("excluded by resource class node filter") and the nodes
//!   the driver listed in `unsuitableNodes` ("… (unsuitable)").
//! - PostFilter (1.30): when no node fits, one allocated claim that was not available on
//!   some node and is reserved by nobody but this pod gets `deallocationRequested` (and an
//!   empty `reservedFor`), after `selectedNode` is cleared.
//! - PreScore/Reserve: publish `potentialNodes` (≤ 128) in the PodSchedulingContext; select a
//!   node once there is a single pending claim or the driver reported on all of them; then
//!   wait for the driver to allocate.
//! - PreBind: add the pod to every claim's `reservedFor`; Bind; PostBind deletes the
//!   PodSchedulingContext.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use fake_dra_api::upstream::node_selector::{self, NodeView};
use fake_dra_api::upstream::pod::DraPod;
use fake_dra_api::upstream::v1alpha2::{
    AllocationMode, MAX_SCHEDULING_NODES, PodSchedulingContext, PodSchedulingContextSpec,
    ResourceClaim, ResourceClaimConsumerReference, ResourceClass,
};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::broadcast;

use super::{Events, level_triggered, node_fit, object_ref};
use crate::apiserver::WatchEvent;

/// Runs the scheduler of Kubernetes `server_version`: the classic plugin up to 1.30, the
/// structured one ([`super::structured`]) from 1.32.
pub async fn run(
    client: kube::Client,
    changes: broadcast::Receiver<Arc<WatchEvent>>,
    server_version: (u32, u32),
    gates: crate::apiserver::gates::FeatureGates,
) {
    if let Some(api) = super::structured::ResourceClient::for_server(client.clone(), server_version)
    {
        let api = api.with_gates(gates);
        return super::structured::run_scheduler(api, client, changes).await;
    }
    let events = Events::new(client.clone(), "default-scheduler", None);
    let reported = Arc::new(tokio::sync::Mutex::new(HashMap::new()));
    level_triggered("kube-scheduler", changes, || {
        let (client, events, reported) = (client.clone(), events.clone(), reported.clone());
        async move {
            pass(
                &client,
                &events,
                &mut *reported.lock().await,
                server_version,
            )
            .await
        }
    })
    .await;
}

/// Why a pod is not scheduled yet; reported once per distinct message, like the
/// scheduler's FailedScheduling events.
struct Unschedulable(String);

async fn pass(
    client: &kube::Client,
    events: &Events,
    reported: &mut HashMap<String, String>,
    server_version: (u32, u32),
) -> Result<(), kube::Error> {
    let pods = Api::<DraPod>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    let mut nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    nodes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut load: BTreeMap<String, usize> = BTreeMap::new();
    for pod in &pods {
        if let Some(node) = pod.node_name() {
            *load.entry(node.to_string()).or_default() += 1;
        }
    }
    let mut usage = node_fit::usage_by_node(&pods);
    for pod in &pods {
        // A pod for another scheduler is not ours to place or to report on.
        if pod.node_name().is_some()
            || pod.metadata.deletion_timestamp.is_some()
            || !node_fit::is_ours(pod)
        {
            continue;
        }
        let key = format!(
            "{}/{}",
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.metadata.name.as_deref().unwrap_or_default()
        );
        match schedule(client, pod, &nodes, &mut load, &mut usage, server_version).await {
            Ok(Some(node)) => {
                reported.remove(&key);
                let note = format!("Successfully assigned {key} to {node}");
                events
                    .normal(object_ref(pod), "Scheduled", "Binding", note)
                    .await;
            }
            Ok(None) => {}
            Err(ScheduleError::Unschedulable(Unschedulable(message))) => {
                if reported.get(&key) != Some(&message) {
                    events
                        .warn(
                            object_ref(pod),
                            "FailedScheduling",
                            "Scheduling",
                            message.clone(),
                        )
                        .await;
                    if let Err(error) = node_fit::mark_unschedulable(client, pod, &message).await {
                        tracing::debug!(pod = %key, %error, "setting the PodScheduled condition failed");
                    }
                    reported.insert(key, message);
                }
            }
            Err(ScheduleError::Gated(message)) => {
                tracing::debug!(pod = %key, %message, "pod gated by PreEnqueue: no scheduling attempt")
            }
            Err(ScheduleError::Api(error)) => {
                tracing::debug!(pod = key, %error, "scheduling attempt failed")
            }
        }
    }
    Ok(())
}

enum ScheduleError {
    Unschedulable(Unschedulable),
    /// Rejected by the DynamicResources PreEnqueue check (1.28+, `foreachPodResourceClaim`:
    /// a claim of the pod not created yet, missing, being deleted or not the pod's): the
    /// pod stays out of the active queue without a scheduling attempt, so without a
    /// FailedScheduling Event. 1.27 has no PreEnqueue: there PreFilter reports them.
    Gated(String),
    Api(kube::Error),
}

impl From<kube::Error> for ScheduleError {
    fn from(e: kube::Error) -> Self {
        Self::Api(e)
    }
}

fn unschedulable(message: impl Into<String>) -> ScheduleError {
    ScheduleError::Unschedulable(Unschedulable(message.into()))
}

/// One claim of the pod, with what Filter needs about it.
struct PodClaim {
    pod_claim_name: String,
    claim: ResourceClaim,
    class: Option<ResourceClass>,
}

/// Returns the node the pod was bound to, `None` while waiting for the driver.
async fn schedule(
    client: &kube::Client,
    pod: &DraPod,
    nodes: &[Node],
    load: &mut BTreeMap<String, usize>,
    usage: &mut BTreeMap<String, node_fit::NodeUsage>,
    server_version: (u32, u32),
) -> Result<Option<String>, ScheduleError> {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let pod_uid = pod.metadata.uid.clone().unwrap_or_default();
    let claims_api: Api<ResourceClaim> = Api::namespaced(client.clone(), &namespace);

    // PreEnqueue (1.28+) or PreFilter (1.27) for the claims' existence, then PreFilter.
    let not_yet = |message: String| {
        if server_version >= (1, 28) {
            ScheduleError::Gated(message)
        } else {
            unschedulable(message)
        }
    };
    let mut claims = Vec::new();
    for pod_claim in pod.resource_claims() {
        let from_template = pod_claim.template_name().is_some();
        // `resourceclaim.Name`: 1.27 names a generated claim `<pod>-<pod claim>`, later
        // releases read it from the pod's status.
        let legacy = (server_version < (1, 28) && from_template)
            .then(|| pod.legacy_generated_claim_name(&pod_claim.name))
            .flatten();
        let Some(claim_name) = legacy
            .as_deref()
            .or_else(|| pod.claim_name(&pod_claim.name))
        else {
            return Err(not_yet(format!(
                "waiting for resource claim {} of the pod to be created",
                pod_claim.name
            )));
        };
        let Some(claim) = claims_api.get_opt(claim_name).await? else {
            return Err(not_yet(format!("resourceclaim \"{claim_name}\" not found")));
        };
        if claim.is_being_deleted() {
            return Err(not_yet(format!(
                "resourceclaim \"{claim_name}\" is being deleted"
            )));
        }
        if from_template
            && !claim
                .metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.uid == pod_uid)
        {
            return Err(not_yet(format!(
                "ResourceClaim {claim_name} was not created for the pod"
            )));
        }
        if !claim.is_allocated() && claim.spec.allocation_mode() == AllocationMode::Immediate {
            return Err(unschedulable(format!(
                "unallocated immediate resourceclaim \"{claim_name}\""
            )));
        }
        if claim.deallocation_requested() {
            return Err(unschedulable(format!(
                "resourceclaim \"{claim_name}\" must be reallocated"
            )));
        }
        let class = if claim.is_allocated() {
            None
        } else {
            Api::<ResourceClass>::all(client.clone())
                .get_opt(&claim.spec.resource_class_name)
                .await?
        };
        if !claim.is_allocated() && class.is_none() {
            return Err(unschedulable(format!(
                "resource class {} does not exist",
                claim.spec.resource_class_name
            )));
        }
        let reserved = claim.reserved_for();
        let shareable = claim
            .allocation()
            .and_then(|a| a.shareable)
            .unwrap_or(false);
        if !claim.is_reserved_for(&pod_uid) && !reserved.is_empty() && !shareable {
            return Err(unschedulable(format!(
                "resourceclaim \"{claim_name}\" is in use by another pod"
            )));
        }
        claims.push(PodClaim {
            pod_claim_name: pod_claim.name.clone(),
            claim,
            class,
        });
    }

    let psc_api: Api<PodSchedulingContext> = Api::namespaced(client.clone(), &namespace);
    let psc = if claims.iter().any(|c| !c.claim.is_allocated()) {
        psc_api.get_opt(&pod_name).await?
    } else {
        None
    };

    // Filter: per node, the first claim that rules the node out gives the reason; an
    // allocated claim not available there is remembered for PostFilter.
    let mut feasible = Vec::new();
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    let mut resolvable = 0;
    let mut unavailable: std::collections::BTreeSet<usize> = Default::default();
    for node in nodes {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        // The filters before DynamicResources; the first that fails decides the node.
        if let Err(rejection) = node_fit::filter(pod, node, usage.get(name), server_version) {
            for reason in rejection.reasons {
                *reasons.entry(reason).or_default() += 1;
            }
            resolvable += usize::from(rejection.resolvable);
            continue;
        }
        let empty = BTreeMap::new();
        let view = NodeView {
            name,
            labels: node.metadata.labels.as_ref().unwrap_or(&empty),
        };
        let mut here = Vec::new();
        let verdict = claims.iter().enumerate().find_map(|(index, c)| {
            if let Some(allocation) = c.claim.allocation() {
                if allocation
                    .available_on_nodes
                    .as_ref()
                    .is_some_and(|s| !node_selector::matches(s, view))
                {
                    here.push(index);
                }
                return None;
            }
            if let Some(suitable) = c.class.as_ref().and_then(|cl| cl.suitable_nodes.as_ref())
                && !node_selector::matches(suitable, view)
            {
                return Some("excluded by resource class node filter");
            }
            let unsuitable = psc
                .as_ref()
                .and_then(|p| p.claim_status(&c.pod_claim_name))
                .is_some_and(|s| s.unsuitable_nodes.iter().flatten().any(|n| n == name));
            unsuitable.then_some("resourceclaim cannot be allocated for the node (unsuitable)")
        });
        let verdict = verdict.or_else(|| {
            (!here.is_empty()).then(|| {
                unavailable.extend(here);
                "resourceclaim not available on the node"
            })
        });
        match verdict {
            None => feasible.push(name.to_string()),
            Some(reason) => *reasons.entry(reason.to_owned()).or_default() += 1,
        }
    }

    if feasible.is_empty() {
        // PostFilter (1.30): one allocated claim that is not available where the pod could
        // go and that nobody else uses is handed back to its driver — after the scheduler
        // stopped asking for allocation on a selected node, so the driver does not
        // allocate on it again.
        if let Some(c) = unavailable.iter().map(|&i| &claims[i]).find(|c| {
            let reserved = c.claim.reserved_for();
            reserved.is_empty() || (reserved.len() == 1 && reserved[0].uid == pod_uid)
        }) {
            if let Some(p) = psc.as_ref().filter(|p| p.selected_node().is_some()) {
                clear_selected_node(&psc_api, p).await?;
            }
            let patch = json!({"metadata": {"resourceVersion": c.claim.metadata.resource_version}, "status": {"reservedFor": null, "deallocationRequested": true}});
            claims_api
                .patch_status(
                    c.claim.metadata.name.as_deref().unwrap_or_default(),
                    &PatchParams::default(),
                    &Patch::Merge(patch),
                )
                .await?;
        }
        // A pod without claims fails only on the other filters: kube-scheduler's whole
        // FitError, with DynamicResources' "no new claims to deallocate" (1.30's PostFilter)
        // and DefaultPreemption's words. With claims, the classic emulation keeps the
        // Filter reasons alone.
        if claims.is_empty() {
            return Err(unschedulable(node_fit::fit_error(
                nodes.len(),
                &reasons,
                resolvable,
                node_fit::dra_message_without_claims(server_version),
            )));
        }
        let details: Vec<String> = reasons
            .iter()
            .map(|(reason, n)| format!("{n} {reason}"))
            .collect();
        return Err(unschedulable(format!(
            "0/{} nodes are available: {}.",
            nodes.len(),
            details.join(", ")
        )));
    }

    let pending: Vec<&PodClaim> = claims.iter().filter(|c| !c.claim.is_allocated()).collect();
    if !pending.is_empty() {
        let mut potential = feasible.clone();
        potential.truncate(MAX_SCHEDULING_NODES);
        let selected = psc
            .as_ref()
            .and_then(|p| p.selected_node())
            .map(str::to_string);
        if let Some(selected) = &selected
            && feasible.contains(selected)
        {
            // Waiting for the driver to allocate on the selected node.
            return Ok(None);
        }
        let reported = pending
            .iter()
            .filter(|c| {
                psc.as_ref()
                    .and_then(|p| p.claim_status(&c.pod_claim_name))
                    .is_some()
            })
            .count();
        let select = if pending.len() == 1 || reported == pending.len() {
            Some(least_loaded(&feasible, load))
        } else {
            None
        };
        let spec = PodSchedulingContextSpec {
            selected_node: select.clone(),
            potential_nodes: Some(potential),
        };
        match psc {
            None => {
                let object = PodSchedulingContext {
                    metadata: ObjectMeta {
                        name: Some(pod_name.clone()),
                        namespace: Some(namespace.clone()),
                        owner_references: Some(vec![OwnerReference {
                            api_version: "v1".into(),
                            kind: "Pod".into(),
                            name: pod_name.clone(),
                            uid: pod_uid.clone(),
                            controller: Some(true),
                            block_owner_deletion: Some(true),
                        }]),
                        ..Default::default()
                    },
                    spec,
                    status: None,
                };
                psc_api.create(&PostParams::default(), &object).await?;
            }
            Some(existing) => {
                if existing.spec != spec {
                    let mut updated = existing.clone();
                    updated.spec = spec;
                    psc_api
                        .replace(&pod_name, &PostParams::default(), &updated)
                        .await?;
                }
            }
        }
        if let Some(node) = select {
            *load.entry(node).or_default() += 1;
        }
        return Ok(None);
    }

    // All claims allocated: pick among the nodes they are available on.
    let node = least_loaded(&feasible, load);
    for c in &claims {
        if c.claim.is_reserved_for(&pod_uid) {
            continue;
        }
        let mut reserved = c.claim.reserved_for().to_vec();
        reserved.push(ResourceClaimConsumerReference {
            api_group: None,
            resource: "pods".into(),
            name: pod_name.clone(),
            uid: pod_uid.clone(),
        });
        let patch = json!({"metadata": {"resourceVersion": c.claim.metadata.resource_version}, "status": {"reservedFor": reserved}});
        claims_api
            .patch_status(
                c.claim.metadata.name.as_deref().unwrap_or_default(),
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await?;
    }
    super::bind(client, &namespace, &pod_name, &node).await?;
    *load.entry(node.clone()).or_default() += 1;
    usage.entry(node.clone()).or_default().add(pod);
    // PostBind: the PodSchedulingContext is not needed any more; one try, a 404 is fine
    // (the garbage collector removes a leftover with the pod).
    if !claims.is_empty()
        && let Err(error) = psc_api.delete(&pod_name, &Default::default()).await
        && !matches!(&error, kube::Error::Api(s) if s.code == 404)
    {
        tracing::debug!(pod = %pod_name, %error, "deleting the PodSchedulingContext failed");
    }
    Ok(Some(node))
}

/// Spreads pods over nodes (the default scorers' net effect here); ties go to the first name.
fn least_loaded(feasible: &[String], load: &BTreeMap<String, usize>) -> String {
    feasible
        .iter()
        .min_by_key(|n| load.get(*n).copied().unwrap_or(0))
        .cloned()
        .unwrap_or_default()
}

async fn clear_selected_node(
    api: &Api<PodSchedulingContext>,
    psc: &PodSchedulingContext,
) -> Result<(), kube::Error> {
    let mut updated = psc.clone();
    updated.spec.selected_node = None;
    api.replace(
        psc.metadata.name.as_deref().unwrap_or_default(),
        &PostParams::default(),
        &updated,
    )
    .await?;
    Ok(())
}
