//! The DaemonSet controller (`pkg/controller/daemon`), reduced: one Pod per node whose
//! labels match the template's `nodeSelector` and whose `NoSchedule`/`NoExecute` taints
//! the template tolerates, created from the template and controlled by the DaemonSet; a
//! Pod on a node that no longer qualifies is deleted; the status `kubectl get ds` prints.
//!
//! Upstream lets kube-scheduler bind DaemonSet Pods (since 1.12, through a node affinity
//! on `metadata.name`); here the Pod is created with `spec.nodeName` set, as before that.
//! Left out: node affinity, rolling updates (`updatedNumberScheduled` counts every Pod),
//! surge, `minReadySeconds`, ControllerRevisions.

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Node;

use super::*;

pub(super) async fn daemon_sets_pass(client: &kube::Client) -> Result<(), kube::Error> {
    let daemon_sets = list_all::<DaemonSet>(client).await?;
    if daemon_sets.is_empty() {
        return Ok(());
    }
    let pods = list_all::<Pod>(client).await?;
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    for ds in &daemon_sets {
        if let Err(error) = sync_daemon_set(client, ds, &pods, &nodes).await {
            tracing::debug!(daemonset = ?ds.metadata.name, %error, "syncing a daemonset failed");
        }
    }
    Ok(())
}

/// Whether the template's pods belong on `node`: nodeSelector and taints.
fn runs_on(template_spec: &Value, node: &Node) -> bool {
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let selected = template_spec
        .get("nodeSelector")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .all(|(k, v)| labels.get(k).map(String::as_str) == v.as_str());
    let tolerations: &[Value] = template_spec
        .get("tolerations")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let tolerated = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .filter(|t| matches!(t.effect.as_str(), "NoSchedule" | "NoExecute"))
        .all(|taint| crate::cluster::node_fit::tolerated(taint, tolerations));
    selected && tolerated
}

async fn sync_daemon_set(
    client: &kube::Client,
    object: &DynamicObject,
    pods: &[DynamicObject],
    nodes: &[Node],
) -> Result<(), SyncError> {
    let meta = &object.metadata;
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
    let template_spec = template.get("spec").cloned().unwrap_or_default();
    let wanted: Vec<&str> = nodes
        .iter()
        .filter(|n| runs_on(&template_spec, n))
        .filter_map(|n| n.metadata.name.as_deref())
        .collect();
    let mine: Vec<&DynamicObject> = pods
        .iter()
        .filter(|p| {
            p.metadata.namespace.as_deref() == Some(namespace)
                && controller_uid(&p.metadata) == Some(uid)
                && is_active(p)
        })
        .collect();
    let node_of = |p: &DynamicObject| {
        p.data
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let pod_api = namespaced::<Pod>(client, namespace);
    if meta.deletion_timestamp.is_none() {
        for node in &wanted {
            if mine.iter().any(|p| node_of(p) == *node) {
                continue;
            }
            let owner = owner_reference("apps/v1", "DaemonSet", name, uid);
            let mut pod = serde_json::to_value(pod_from_template(template, namespace, owner)?)?;
            pod["spec"]["nodeName"] = json!(node);
            let pod: DynamicObject = serde_json::from_value(pod)?;
            pod_api.create(&PostParams::default(), &pod).await?;
        }
        for pod in &mine {
            if wanted.contains(&node_of(pod).as_str()) {
                continue;
            }
            if let Some(pod_name) = pod.metadata.name.as_deref() {
                match pod_api.delete(pod_name, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(status)) if status.code == 404 => {}
                    Err(error) => return Err(error.into()),
                }
            }
        }
    }
    let scheduled = mine
        .iter()
        .filter(|p| wanted.contains(&node_of(p).as_str()))
        .count();
    let ready = mine.iter().filter(|p| ready_condition(p).is_some()).count();
    let status = json!({
        "desiredNumberScheduled": wanted.len(),
        "currentNumberScheduled": scheduled,
        "numberMisscheduled": mine.len() - scheduled,
        "numberReady": ready,
        "updatedNumberScheduled": scheduled,
        "numberAvailable": ready,
        "numberUnavailable": wanted.len().saturating_sub(ready),
        "observedGeneration": meta.generation,
    });
    if object.data.get("status") == Some(&status) {
        return Ok(());
    }
    namespaced::<DaemonSet>(client, namespace)
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status})),
        )
        .await?;
    Ok(())
}
