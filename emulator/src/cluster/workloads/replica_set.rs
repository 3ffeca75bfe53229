//! The ReplicaSet controller (`pkg/controller/replicaset`): pods from the template until
//! the count matches, the surplus deleted in upstream's order.

use super::*;

pub(super) async fn replica_sets_pass(client: &kube::Client) -> Result<(), kube::Error> {
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
pub(super) async fn sync_replica_set(
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
            let owner = owner_reference("apps/v1", "ReplicaSet", name, uid);
            let pod = pod_from_template(template, namespace, owner)?;
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

/// `getPodsToDelete` with the leading keys of `ActivePodsWithRanks.Less`: unscheduled
/// before scheduled, Pending before Unknown before Running, not ready before ready, then
/// the newest first.
pub(super) fn pods_to_delete<'a>(
    active: &[&'a DynamicObject],
    count: usize,
) -> Vec<&'a DynamicObject> {
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
