//! The Deployment controller (`pkg/controller/deployment`): one ReplicaSet per template
//! hash, scaled to the Deployment's replicas, and the Deployment's status.

use super::*;

pub(super) async fn deployments_pass(client: &kube::Client) -> Result<(), kube::Error> {
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
pub(super) async fn sync_deployment(
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
pub(super) fn new_replica_set(
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
pub(super) async fn scale(
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
pub(super) async fn update_deployment_status<'a>(
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
pub(super) fn max_unavailable(deployment: &Deployment, replicas: i32) -> i32 {
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

pub(super) fn hash_value(value: &Value, feed: &mut impl FnMut(&[u8])) {
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
