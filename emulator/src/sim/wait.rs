//! `fake-dra-sim run --wait`: whether the workloads the manifests made have settled —
//! every pod outside the driver's namespace Ready or Succeeded and every Deployment's
//! replicas ready — or failed: a pod Failed, or a container crash-looping.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, ListParams};

/// Where the workloads are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    /// Everything ready; what there is.
    Ready(String),
    /// Not yet; what is missing (with the latest warning of each pod that waits).
    NotYet(String),
    /// Will not get there; why.
    Failed(String),
}

/// Looks once.
pub async fn settled(
    client: &kube::Client,
    driver_namespace: &str,
) -> Result<Settled, kube::Error> {
    let theirs = |ns: Option<&String>| ns.map(String::as_str) != Some(driver_namespace);
    let pods: Vec<Pod> = Api::<Pod>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|p| theirs(p.metadata.namespace.as_ref()))
        .collect();
    let deployments: Vec<Deployment> = Api::<Deployment>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|d| theirs(d.metadata.namespace.as_ref()))
        .collect();
    let name = |meta: &kube::api::ObjectMeta| {
        format!(
            "{}/{}",
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default()
        )
    };
    let mut waiting = Vec::new();
    for d in &deployments {
        let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        let ready = d
            .status
            .as_ref()
            .and_then(|s| s.ready_replicas)
            .unwrap_or(0);
        if ready < want {
            waiting.push(format!(
                "deployment {}: {ready}/{want} ready",
                name(&d.metadata)
            ));
        }
    }
    let mut ready = 0;
    let mut pending = Vec::new();
    for pod in &pods {
        let status = pod.status.clone().unwrap_or_default();
        let phase = status.phase.as_deref().unwrap_or("Pending");
        if phase == "Failed" {
            let why = status
                .container_statuses
                .iter()
                .flatten()
                .find_map(|c| {
                    let t = c.state.as_ref()?.terminated.as_ref()?;
                    (t.exit_code != 0)
                        .then(|| format!("container {} exited with {}", c.name, t.exit_code))
                })
                .or(status.message.clone())
                .unwrap_or_else(|| "no reason given".into());
            return Ok(Settled::Failed(format!(
                "pod {} failed: {why}; see kubectl logs -n {} {}",
                name(&pod.metadata),
                pod.metadata.namespace.as_deref().unwrap_or_default(),
                pod.metadata.name.as_deref().unwrap_or_default()
            )));
        }
        for c in status.container_statuses.iter().flatten() {
            let crashing = c
                .state
                .as_ref()
                .and_then(|s| s.waiting.as_ref())
                .is_some_and(|w| w.reason.as_deref() == Some("CrashLoopBackOff"));
            if crashing {
                return Ok(Settled::Failed(format!(
                    "pod {}: container {} keeps crashing ({} restarts); see kubectl logs -n {} {} -c {} --previous",
                    name(&pod.metadata),
                    c.name,
                    c.restart_count,
                    pod.metadata.namespace.as_deref().unwrap_or_default(),
                    pod.metadata.name.as_deref().unwrap_or_default(),
                    c.name
                )));
            }
        }
        let is_ready = status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        if phase == "Succeeded" || (phase == "Running" && is_ready) {
            ready += 1;
        } else {
            pending.push(pod);
        }
    }
    if pending.is_empty() && waiting.is_empty() {
        return Ok(Settled::Ready(format!(
            "every pod is ready or has succeeded ({ready} pods, {} deployments)",
            deployments.len()
        )));
    }
    for pod in pending {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        let events = Api::<Event>::namespaced(client.clone(), namespace)
            .list(&ListParams::default().fields(&format!(
                "involvedObject.name={},type=Warning",
                pod.metadata.name.as_deref().unwrap_or_default()
            )))
            .await?
            .items;
        let latest = events
            .iter()
            .max_by_key(|e| {
                e.metadata
                    .resource_version
                    .as_deref()
                    .and_then(|v| v.parse::<u64>().ok())
            })
            .map(|e| {
                format!(
                    ": {} {}",
                    e.reason.as_deref().unwrap_or_default(),
                    e.message.as_deref().unwrap_or_default()
                )
            })
            .unwrap_or_default();
        let phase = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .unwrap_or("Pending");
        waiting.push(format!("pod {} is {phase}{latest}", name(&pod.metadata)));
    }
    Ok(Settled::NotYet(waiting.join("; ")))
}
