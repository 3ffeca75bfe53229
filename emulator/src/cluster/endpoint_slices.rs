//! The EndpointSlice controller (`pkg/controller/endpointslice`): for every Service with a
//! selector, one slice of the pods it selects that have an address, labelled and owned as
//! upstream's reconciler writes them, with the ports the Service's `targetPort`s resolve
//! to (a named port looked up in the pod's containers). Nothing routes traffic to them.
//!
//! Left out: slices split at 100 endpoints (`--max-endpoints-per-slice`; one slice here),
//! `publishNotReadyAddresses`, topology hints, dual stack, and the `kubernetes` Service's
//! slice (the apiserver's own reconciler writes that one upstream).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::level_triggered;
use crate::apiserver::WatchEvent;

const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
const MANAGED_BY: &str = "endpointslice-controller.k8s.io";

pub async fn run(client: kube::Client, changes: broadcast::Receiver<Arc<WatchEvent>>) {
    level_triggered("endpointslice-controller", changes, || pass(&client)).await;
}

async fn pass(client: &kube::Client) -> Result<(), kube::Error> {
    let services = Api::<Service>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    let selected: Vec<&Service> = services
        .iter()
        .filter(|s| selector(s).is_some_and(|sel| !sel.is_empty()))
        .collect();
    if selected.is_empty() {
        return Ok(());
    }
    let pods = Api::<Pod>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    let managed = ListParams::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY}"));
    let slices = Api::<EndpointSlice>::all(client.clone())
        .list(&managed)
        .await?
        .items;
    for service in selected {
        if let Err(error) = sync_service(client, service, &pods, &slices).await {
            tracing::debug!(service = ?service.metadata.name, %error, "syncing endpoint slices failed");
        }
    }
    Ok(())
}

fn selector(service: &Service) -> Option<&BTreeMap<String, String>> {
    service.spec.as_ref()?.selector.as_ref()
}

fn selects(selector: &BTreeMap<String, String>, pod: &Pod) -> bool {
    let labels = pod.metadata.labels.as_ref();
    selector
        .iter()
        .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
}

/// A `targetPort` as the pod serves it: a number, or the container port of that name.
fn resolve_port(target: &Value, pod: &Pod) -> Option<i64> {
    match target {
        Value::Number(n) => n.as_i64(),
        Value::String(name) => pod
            .spec
            .as_ref()?
            .containers
            .iter()
            .flat_map(|c| c.ports.iter().flatten())
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .map(|p| i64::from(p.container_port)),
        _ => None,
    }
}

/// The slice's `endpoints` and `ports` for `service` (`endpoints` sorted by pod name).
fn desired(service: &Service, pods: &[Pod]) -> (Vec<Value>, Vec<Value>) {
    let namespace = service.metadata.namespace.as_deref();
    let Some(selector) = selector(service) else {
        return (Vec::new(), Vec::new());
    };
    let mut members: Vec<&Pod> = pods
        .iter()
        .filter(|p| p.metadata.namespace.as_deref() == namespace && selects(selector, p))
        .filter(|p| {
            let status = p.status.as_ref();
            let phase = status.and_then(|s| s.phase.as_deref());
            !matches!(phase, Some("Succeeded" | "Failed"))
                && status.and_then(|s| s.pod_ip.as_deref()).is_some()
        })
        .collect();
    members.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let endpoints = members
        .iter()
        .map(|pod| {
            let terminating = pod.metadata.deletion_timestamp.is_some();
            let ready = pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            json!({
                "addresses": [pod.status.as_ref().and_then(|s| s.pod_ip.clone())],
                "conditions": {"ready": ready && !terminating, "serving": ready, "terminating": terminating},
                "nodeName": pod.spec.as_ref().and_then(|s| s.node_name.clone()),
                "targetRef": {"kind": "Pod", "namespace": pod.metadata.namespace,
                    "name": pod.metadata.name, "uid": pod.metadata.uid},
            })
        })
        .collect();
    let service_ports = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.clone())
        .unwrap_or_default();
    let ports = service_ports
        .iter()
        .filter_map(|port| {
            let target = port
                .target_port
                .as_ref()
                .map(|t| serde_json::to_value(t).unwrap_or(Value::Null))
                .unwrap_or_else(|| json!(port.port));
            let number = members
                .first()
                .map_or_else(|| target.as_i64(), |pod| resolve_port(&target, pod))?;
            Some(
                json!({"name": port.name.clone().unwrap_or_default(), "port": number,
                "protocol": port.protocol.clone().unwrap_or_else(|| "TCP".into())}),
            )
        })
        .collect();
    (endpoints, ports)
}

async fn sync_service(
    client: &kube::Client,
    service: &Service,
    pods: &[Pod],
    slices: &[EndpointSlice],
) -> Result<(), kube::Error> {
    let (Some(namespace), Some(name), Some(uid)) = (
        service.metadata.namespace.as_deref(),
        service.metadata.name.as_deref(),
        service.metadata.uid.as_deref(),
    ) else {
        return Ok(());
    };
    if service.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let (endpoints, ports) = desired(service, pods);
    let api = Api::<EndpointSlice>::namespaced(client.clone(), namespace);
    let mine: Vec<&EndpointSlice> = slices
        .iter()
        .filter(|s| {
            s.metadata.namespace.as_deref() == Some(namespace)
                && s.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(SERVICE_NAME_LABEL))
                    .map(String::as_str)
                    == Some(name)
        })
        .collect();
    let mut labels = service.metadata.labels.clone().unwrap_or_default();
    labels.insert(SERVICE_NAME_LABEL.into(), name.into());
    labels.insert(MANAGED_BY_LABEL.into(), MANAGED_BY.into());
    let body = json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "namespace": namespace,
            "labels": labels,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": name, "uid": uid,
                "controller": true, "blockOwnerDeletion": true}],
        },
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": ports,
    });
    let Some((first, extra)) = mine.split_first() else {
        let mut body = body;
        body["metadata"]["generateName"] = json!(format!("{name}-"));
        let slice: EndpointSlice = serde_json::from_value(body).map_err(kube::Error::SerdeError)?;
        api.create(&PostParams::default(), &slice).await?;
        return Ok(());
    };
    for slice in extra {
        if let Some(slice_name) = slice.metadata.name.as_deref() {
            api.delete(slice_name, &DeleteParams::default()).await?;
        }
    }
    let current = json!({
        "endpoints": serde_json::to_value(&first.endpoints).unwrap_or(Value::Null),
        "ports": serde_json::to_value(&first.ports).unwrap_or(Value::Null),
        "labels": first.metadata.labels,
    });
    let wanted: Value = serde_json::from_value::<EndpointSlice>(body.clone())
        .map(|s| json!({"endpoints": s.endpoints, "ports": s.ports, "labels": s.metadata.labels}))
        .map_err(kube::Error::SerdeError)?;
    if current == wanted {
        return Ok(());
    }
    let Some(slice_name) = first.metadata.name.clone() else {
        return Ok(());
    };
    let mut body = body;
    body["metadata"]["name"] = json!(slice_name);
    body["metadata"]["resourceVersion"] = json!(first.metadata.resource_version);
    let slice: EndpointSlice = serde_json::from_value(body).map_err(kube::Error::SerdeError)?;
    api.replace(&slice_name, &PostParams::default(), &slice)
        .await?;
    Ok(())
}
