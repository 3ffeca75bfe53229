//! The kube-scheduler's `DynamicResources` plugin around the allocator: PreFilter,
//! Filter, PostFilter, Reserve/PreBind and Bind, one pod at a time.

use super::*;

pub async fn run_scheduler(
    api: ResourceClient,
    client: kube::Client,
    changes: broadcast::Receiver<Arc<WatchEvent>>,
) {
    let events = Events::new(client.clone(), "default-scheduler", None);
    let reported = Arc::new(tokio::sync::Mutex::new(HashMap::new()));
    level_triggered("kube-scheduler", changes, || {
        let (api, client, events, reported) = (
            api.clone(),
            client.clone(),
            events.clone(),
            reported.clone(),
        );
        async move { pass(&api, &client, &events, &mut *reported.lock().await).await }
    })
    .await;
}

/// What one pass knows of the cluster.
pub(super) struct World {
    nodes: Vec<Node>,
    claims: Vec<ResourceClaim>,
    classes: BTreeMap<String, DeviceClass>,
    slices: Vec<ResourceSlice>,
    /// What any claim's allocation holds, including those this pass just made.
    held: Held,
    load: BTreeMap<String, usize>,
    /// What the pods bound to each node request (NodeResourcesFit).
    usage: BTreeMap<String, crate::cluster::node_fit::NodeUsage>,
    programs: Programs,
}

pub(super) enum ScheduleError {
    Unschedulable(String),
    /// Rejected by the DynamicResources PreEnqueue check (a claim of the pod missing,
    /// being deleted or not the pod's): upstream keeps such a pod out of the active queue
    /// without a scheduling attempt, so without a FailedScheduling Event.
    Gated(String),
    Api(kube::Error),
}

impl From<kube::Error> for ScheduleError {
    fn from(e: kube::Error) -> Self {
        Self::Api(e)
    }
}

pub(super) async fn pass(
    api: &ResourceClient,
    client: &kube::Client,
    events: &Events,
    reported: &mut HashMap<String, String>,
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
    let claims: Vec<ResourceClaim> = api.list(None).await?;
    let classes: BTreeMap<String, DeviceClass> = api
        .list::<DeviceClass>(None)
        .await?
        .into_iter()
        .filter_map(|c| Some((c.metadata.name.clone()?, c)))
        .collect();
    let mut slices: Vec<ResourceSlice> = api.list(None).await?;
    // kube-scheduler reads DeviceTaintRules only with the gate on
    // (`EnableDeviceTaintRules` in pkg/scheduler/scheduler.go of 1.37.2); the API serves
    // them either way.
    if api.gate(Gate::DeviceTaintRules) {
        add_rule_taints(&mut slices, &api.device_taint_rules().await?);
    }
    for name in unsupported_slices(&slices) {
        tracing::debug!(slice = %name, "ResourceSlice without spec.nodeName: not used by the emulated scheduler");
    }
    let mut load: BTreeMap<String, usize> = BTreeMap::new();
    for pod in &pods {
        if let Some(node) = pod.node_name() {
            *load.entry(node.to_string()).or_default() += 1;
        }
    }
    let mut world = World {
        nodes,
        held: Held::of_claims(&claims),
        claims,
        classes,
        slices,
        load,
        usage: crate::cluster::node_fit::usage_by_node(&pods),
        programs: Programs::for_release(
            api.server_version(),
            api.gate(Gate::FractionalCapacityRange),
        ),
    };
    // kube-controller-manager's device-taint-eviction-controller evicts the pods of claims
    // allocated a device with an untolerated NoExecute taint; the emulator has none, and
    // says so on the pod instead of keeping quiet.
    for (claim, device) in untolerated_no_execute(&world.claims, &world.slices) {
        for consumer in reserved_for(claim) {
            let Some(pod) = pods
                .iter()
                .find(|p| p.metadata.uid.as_deref() == Some(consumer.uid.as_str()))
            else {
                continue;
            };
            let key = format!("no-execute {} {device}", consumer.uid);
            if reported.contains_key(&key) {
                continue;
            }
            let note = format!(
                "device {device} has a NoExecute taint the claim does not tolerate; a real cluster evicts this pod (device-taint-eviction-controller), the emulator does not"
            );
            events
                .warn(object_ref(pod), "DeviceTaintNotEvicted", "Evict", note)
                .await;
            reported.insert(key, String::new());
        }
    }
    for pod in &pods {
        // A pod for another scheduler is not ours to place or to report on.
        if pod.node_name().is_some()
            || pod.metadata.deletion_timestamp.is_some()
            || !crate::cluster::node_fit::is_ours(pod)
        {
            continue;
        }
        let key = format!(
            "{}/{}",
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.metadata.name.as_deref().unwrap_or_default()
        );
        match schedule(api, client, pod, &mut world).await {
            Ok(node) => {
                reported.remove(&key);
                let note = format!("Successfully assigned {key} to {node}");
                events
                    .normal(object_ref(pod), "Scheduled", "Binding", note)
                    .await;
            }
            Err(ScheduleError::Unschedulable(message)) => {
                if reported.get(&key) != Some(&message) {
                    tracing::info!(pod = %key, %message, "pod unschedulable");
                    events
                        .warn(
                            object_ref(pod),
                            "FailedScheduling",
                            "Scheduling",
                            message.clone(),
                        )
                        .await;
                    if let Err(error) =
                        crate::cluster::node_fit::mark_unschedulable(client, pod, &message).await
                    {
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

/// Gives every device the taints of the DeviceTaintRules that select it, after its own.
fn add_rule_taints(slices: &mut [ResourceSlice], rules: &[DeviceTaintRule]) {
    if rules.is_empty() {
        return;
    }
    for slice in slices {
        let (driver, pool) = (&slice.spec.driver, &slice.spec.pool.name);
        for device in slice.spec.devices.iter_mut().flatten() {
            let taints = rules
                .iter()
                .filter(|r| r.selects(driver, pool, &device.name))
                .map(|r| r.spec.taint.clone());
            device.taints.get_or_insert_with(Vec::new).extend(taints);
        }
    }
}

/// Claims allocated a device whose NoExecute taint their result does not tolerate, with
/// the device as `driver/pool/device`.
fn untolerated_no_execute<'a>(
    claims: &'a [ResourceClaim],
    slices: &[ResourceSlice],
) -> Vec<(&'a ResourceClaim, String)> {
    let mut found = Vec::new();
    for claim in claims {
        let results = claim
            .status
            .as_ref()
            .and_then(|s| s.allocation.as_ref())
            .and_then(|a| a.devices.as_ref())
            .and_then(|d| d.results.as_ref());
        for r in results.into_iter().flatten() {
            let device = slices
                .iter()
                .filter(|s| s.spec.driver == r.driver && s.spec.pool.name == r.pool)
                .flat_map(|s| s.spec.devices.iter().flatten())
                .find(|d| d.name == r.device);
            let tolerations = r.tolerations.as_deref().unwrap_or_default();
            let evicting = device
                .into_iter()
                .flat_map(|d| d.taints.iter().flatten())
                .any(|t| t.effect == "NoExecute" && !super::allocator::tolerated(t, tolerations));
            if evicting {
                found.push((claim, format!("{}/{}/{}", r.driver, r.pool, r.device)));
            }
        }
    }
    found
}

/// The first resource a container of `pod` requests (or limits) that a DeviceClass backs:
/// (resource name, class name).
fn extended_resource_request(
    pod: &DraPod,
    classes: &BTreeMap<String, DeviceClass>,
) -> Option<(String, String)> {
    let backed_by = |resource: &str| {
        classes.iter().find_map(|(name, class)| {
            let explicit = class.spec.extended_resource_name.as_deref() == Some(resource);
            let implicit = resource == format!("deviceclass.resource.kubernetes.io/{name}");
            (explicit || implicit).then(|| name.clone())
        })
    };
    pod.all_containers().find_map(|c| {
        let extra = &c.resources.as_ref()?.extra;
        ["limits", "requests"].iter().find_map(|field| {
            extra
                .get(*field)?
                .as_object()?
                .keys()
                .find_map(|r| backed_by(r).map(|class| (r.clone(), class)))
        })
    })
}

/// Runs blocking work on this worker thread after handing its other tasks to another
/// worker (`block_in_place`), so a long evaluation stalls no timer, signal or request; in
/// place on a current-thread runtime (tests), which has no other worker.
fn off_the_runtime<R>(f: impl FnOnce() -> R) -> R {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// Schedules one pod; returns the node it was bound to.
pub(super) async fn schedule(
    api: &ResourceClient,
    client: &kube::Client,
    pod: &DraPod,
    world: &mut World,
) -> Result<String, ScheduleError> {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let pod_uid = pod.metadata.uid.clone().unwrap_or_default();

    // Extended resources backed by DRA (a DeviceClass's extendedResourceName, or the
    // implicit deviceclass.resource.kubernetes.io/<class>): upstream's scheduler makes a
    // special claim for them in PreBind; the emulator does not, so it refuses the pod
    // rather than place it without its devices.
    if let Some((resource, class)) = extended_resource_request(pod, &world.classes) {
        return Err(ScheduleError::Unschedulable(format!(
            "the pod requests {resource}, an extended resource backed by DeviceClass {class} (DRAExtendedResource), which the emulated scheduler does not implement; run this on a real cluster (docs/real-kubernetes.md)"
        )));
    }

    // PreEnqueue (foreachPodResourceClaim), then PreFilter.
    let mut claims: Vec<ResourceClaim> = Vec::new();
    for pod_claim in pod.resource_claims() {
        let Some(claim_name) = pod.claim_name(&pod_claim.name) else {
            return Err(ScheduleError::Gated(format!(
                "waiting for resource claim {} of the pod to be created",
                pod_claim.name
            )));
        };
        let Some(claim) = world.claims.iter().find(|c| {
            c.metadata.namespace.as_deref() == Some(namespace.as_str())
                && c.metadata.name.as_deref() == Some(claim_name)
        }) else {
            return Err(ScheduleError::Gated(format!(
                "resourceclaim \"{claim_name}\" not found"
            )));
        };
        if claim.metadata.deletion_timestamp.is_some() {
            return Err(ScheduleError::Gated(format!(
                "resourceclaim \"{claim_name}\" is being deleted"
            )));
        }
        if pod_claim.template_name().is_some()
            && !claim
                .metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.uid == pod_uid)
        {
            return Err(ScheduleError::Gated(format!(
                "ResourceClaim {claim_name} was not created for the pod"
            )));
        }
        let reserved = reserved_for(claim);
        if !reserved.iter().any(|r| r.uid == pod_uid) && reserved.len() >= RESERVED_FOR_MAX {
            return Err(ScheduleError::Unschedulable(format!(
                "resourceclaim \"{claim_name}\": reservedFor is full"
            )));
        }
        if !claims.iter().any(|c| c.metadata.uid == claim.metadata.uid) {
            claims.push(claim.clone());
        }
    }
    let pending: Vec<&ResourceClaim> = claims.iter().filter(|c| !is_allocated(c)).collect();

    // Filter. CEL evaluation is CPU work bounded only by the selectors' cost limit: it runs
    // where it blocks no other task of the runtime, on a stack deep enough for CEL.
    let version = api.server_version();
    let filter = || -> Result<_, ScheduleError> {
        let mut feasible: Vec<(String, Option<Vec<Value>>)> = Vec::new();
        let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
        let mut resolvable = 0;
        for node in &world.nodes {
            let name = node.metadata.name.clone().unwrap_or_default();
            // The filters before DynamicResources; the first that fails decides the node.
            if let Err(rejection) =
                crate::cluster::node_fit::filter(pod, node, world.usage.get(&name), version)
            {
                for reason in rejection.reasons {
                    *reasons.entry(reason).or_default() += 1;
                }
                resolvable += usize::from(rejection.resolvable);
                continue;
            }
            let empty = BTreeMap::new();
            let view = NodeView {
                name: &name,
                labels: node.metadata.labels.as_ref().unwrap_or(&empty),
            };
            let allocated_fit = claims.iter().filter(|c| is_allocated(c)).all(|c| {
                c.status
                    .as_ref()
                    .and_then(|s| s.allocation.as_ref())
                    .and_then(|a| a.node_selector.as_ref())
                    .is_none_or(|s| node_selector::matches(s, view))
            });
            if !allocated_fit {
                *reasons
                    .entry("resourceclaim not available on the node".to_owned())
                    .or_default() += 1;
                continue;
            }
            if pending.is_empty() {
                feasible.push((name, None));
                continue;
            }
            match allocate_on_node(
                &name,
                &pending,
                &world.classes,
                &world.slices,
                &world.held,
                &mut world.programs,
            ) {
                Ok(Some(allocations)) => feasible.push((name, Some(allocations))),
                Ok(None) => {
                    *reasons
                        .entry("cannot allocate all claims".to_owned())
                        .or_default() += 1
                }
                // A Filter error (not a rejection) ends the scheduling cycle; the framework
                // names the plugin (frameworkImpl.RunFilterPlugins).
                Err(AllocateError::Filter(e)) => {
                    return Err(ScheduleError::Unschedulable(format!(
                        "running \"DynamicResources\" filter plugin: {e}"
                    )));
                }
                Err(e) => return Err(ScheduleError::Unschedulable(e.to_string())),
            }
        }
        Ok((feasible, reasons, resolvable))
    };
    let (feasible, reasons, resolvable) = off_the_runtime(|| crate::cel::with_stack(filter))?;

    if feasible.is_empty() {
        // PostFilter, DynamicResources first (before DefaultPreemption): an allocated claim
        // nobody uses may be what holds the pod back.
        let mut post_filter = Vec::new();
        for c in claims
            .iter()
            .filter(|c| is_allocated(c) && reserved_for(c).is_empty())
        {
            if post_filter.is_empty() {
                post_filter.push("deallocation of ResourceClaim completed".to_string());
            }
            let patch = json!({"metadata": {"resourceVersion": c.metadata.resource_version}, "status": {"allocation": null}});
            api.patch_status::<ResourceClaim>(
                Some(&namespace),
                c.metadata.name.as_deref().unwrap_or_default(),
                &patch,
            )
            .await?;
        }
        // Nothing deallocated: up to 1.36 the plugin's PostFilter still says so
        // (`fwk.NewStatus(Unschedulable, "still not schedulable")`); 1.37's returns a
        // status without a message (deallocateOrDeletePodClaims). A pod without claims:
        // node_fit::dra_message_without_claims.
        let dra = if claims.is_empty() {
            crate::cluster::node_fit::dra_message_without_claims(version).map(str::to_owned)
        } else if post_filter.is_empty() && version < (1, 37) {
            Some("still not schedulable".to_string())
        } else {
            post_filter.pop()
        };
        // FitError.Error(): the Filter reasons, then the PostFilter messages (DefaultPreemption
        // finds no victim where a resolvable reason failed, and is not helpful elsewhere).
        return Err(ScheduleError::Unschedulable(
            crate::cluster::node_fit::fit_error(
                world.nodes.len(),
                &reasons,
                resolvable,
                dra.as_deref(),
            ),
        ));
    }

    let (node, allocations) = feasible
        .into_iter()
        .min_by_key(|(n, _)| world.load.get(n).copied().unwrap_or(0))
        .unwrap_or_default();

    // PreBind: finalizer, then allocation + reservedFor in one status update.
    let consumer = json!({"resource": "pods", "name": pod_name, "uid": pod_uid});
    let mut allocations = allocations.unwrap_or_default().into_iter();
    for claim in &claims {
        let name = claim.metadata.name.clone().unwrap_or_default();
        let mut reserved: Vec<Value> = reserved_for(claim)
            .iter()
            .map(|r| serde_json::to_value(r).unwrap_or(Value::Null))
            .collect();
        let already = reserved_for(claim).iter().any(|r| r.uid == pod_uid);
        if !already {
            reserved.push(consumer.clone());
        }
        if is_allocated(claim) {
            if !already {
                let patch = json!({"metadata": {"resourceVersion": claim.metadata.resource_version}, "status": {"reservedFor": reserved}});
                api.patch_status::<ResourceClaim>(Some(&namespace), &name, &patch)
                    .await?;
            }
            continue;
        }
        let Some(allocation) = allocations.next() else {
            continue;
        };
        let mut finalizers = claim.metadata.finalizers.clone().unwrap_or_default();
        let mut resource_version = claim.metadata.resource_version.clone();
        if !finalizers.iter().any(|f| f == DELETE_PROTECTION_FINALIZER) {
            finalizers.push(DELETE_PROTECTION_FINALIZER.into());
            let patch = json!({"metadata": {"resourceVersion": resource_version, "finalizers": finalizers}});
            resource_version = api
                .patch_metadata::<ResourceClaim>(Some(&namespace), &name, &patch)
                .await?;
        }
        let patch = json!({"metadata": {"resourceVersion": resource_version}, "status": {"allocation": allocation, "reservedFor": reserved}});
        api.patch_status::<ResourceClaim>(Some(&namespace), &name, &patch)
            .await?;
        let results: Vec<k8s_openapi::api::resource::v1::DeviceRequestAllocationResult> =
            allocation
                .pointer("/devices/results")
                .and_then(|r| serde_json::from_value(r.clone()).ok())
                .unwrap_or_default();
        world.held.add(&results);
    }
    crate::cluster::bind(client, &namespace, &pod_name, &node).await?;
    *world.load.entry(node.clone()).or_default() += 1;
    world.usage.entry(node.clone()).or_default().add(pod);
    Ok(node)
}

pub fn is_allocated(claim: &ResourceClaim) -> bool {
    claim
        .status
        .as_ref()
        .is_some_and(|s| s.allocation.is_some())
}

pub fn reserved_for(
    claim: &ResourceClaim,
) -> &[k8s_openapi::api::resource::v1::ResourceClaimConsumerReference] {
    claim
        .status
        .as_ref()
        .and_then(|s| s.reserved_for.as_deref())
        .unwrap_or_default()
}
