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
        let mut summary = format!(
            "every pod is ready or has succeeded ({}, {})",
            plural(ready, "pod"),
            plural(deployments.len(), "deployment")
        );
        let claims = claim_holdings(client).await;
        for pod in &pods {
            summary.push_str("\n  ");
            summary.push_str(&pod_line(pod, &claims));
        }
        return Ok(Settled::Ready(summary));
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

/// "1 pod", "2 pods".
fn plural(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// The resource.k8s.io versions a claim may be served in, newest first: the sim serves
/// one generation, and the first that lists is it.
const CLAIM_VERSIONS: &[&str] = &["v1", "v1beta2", "v1beta1", "v1alpha3", "v1alpha2"];

/// "namespace/name" of every claim -> what it holds: "8 devices" (structured: the
/// allocation's results), "allocated" (classic: the driver's opaque handle), or
/// "not allocated". Empty when no version lists (the summary then says nothing of claims).
async fn claim_holdings(client: &kube::Client) -> std::collections::BTreeMap<String, String> {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    for version in CLAIM_VERSIONS {
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("resource.k8s.io", version, "ResourceClaim"),
            "resourceclaims",
        );
        let Ok(list) = Api::<DynamicObject>::all_with(client.clone(), &resource)
            .list(&ListParams::default())
            .await
        else {
            continue;
        };
        return list
            .items
            .iter()
            .map(|claim| {
                let key = format!(
                    "{}/{}",
                    claim.metadata.namespace.as_deref().unwrap_or_default(),
                    claim.metadata.name.as_deref().unwrap_or_default()
                );
                (key, holding(&claim.data))
            })
            .collect();
    }
    Default::default()
}

/// What one claim (its JSON) holds, for the summary.
fn holding(claim: &serde_json::Value) -> String {
    let allocation = &claim["status"]["allocation"];
    if allocation.is_null() {
        return "not allocated".into();
    }
    match allocation["devices"]["results"].as_array() {
        Some(results) => plural(results.len(), "device"),
        None => "allocated".into(),
    }
}

/// "test5/pod0 on kind-worker2: claim pod0-gpu-x7k2 (8 devices)".
fn pod_line(pod: &Pod, claims: &std::collections::BTreeMap<String, String>) -> String {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("no node");
    // A pod's claims: those it names, and those made for it from templates (in its status).
    let named = pod
        .spec
        .iter()
        .flat_map(|s| s.resource_claims.iter().flatten())
        .filter_map(|c| c.resource_claim_name.clone());
    let generated = pod
        .status
        .iter()
        .flat_map(|s| s.resource_claim_statuses.iter().flatten())
        .filter_map(|c| c.resource_claim_name.clone());
    let held: Vec<String> = named
        .chain(generated)
        .map(|claim| {
            let what = claims
                .get(&format!("{namespace}/{claim}"))
                .map_or("not found", String::as_str);
            format!("claim {claim} ({what})")
        })
        .collect();
    let held = if held.is_empty() {
        "no claims".to_string()
    } else {
        held.join(", ")
    };
    format!(
        "{namespace}/{} on {node}: {held}",
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_says_what_it_holds() {
        let structured =
            serde_json::json!({"status": {"allocation": {"devices": {"results": [{}, {}]}}}});
        assert_eq!(holding(&structured), "2 devices");
        let classic = serde_json::json!({"status": {"allocation": {"resourceHandles": [{}]}}});
        assert_eq!(holding(&classic), "allocated");
        assert_eq!(holding(&serde_json::json!({"status": {}})), "not allocated");
        assert_eq!(plural(1, "device"), "1 device");
    }

    #[test]
    fn a_pod_line_names_its_node_and_claims() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "pod0", "namespace": "test5"},
            "spec": {"nodeName": "kind-worker2", "containers": [],
                     "resourceClaims": [{"name": "a", "resourceClaimName": "shared"},
                                        {"name": "b", "resourceClaimTemplateName": "t"}]},
            "status": {"resourceClaimStatuses": [{"name": "b", "resourceClaimName": "pod0-b-x"}]}
        }))
        .unwrap();
        let claims = [("test5/shared".to_string(), "1 device".to_string())].into();
        assert_eq!(
            pod_line(&pod, &claims),
            "test5/pod0 on kind-worker2: claim shared (1 device), claim pod0-b-x (not found)"
        );
    }
}
