//! The kubelet's DRA manager (`pkg/kubelet/cm/dra/manager.go`, `claiminfo.go`), per
//! release:
//!
//! - The claim-info cache, keyed by claim name and namespace: each claim's drivers (and,
//!   classic, their resource handles), the devices the drivers answered, the pods using it.
//!   It comes back from its checkpoint after a restart ([`restore_from_checkpoint`]).
//! - `PrepareResources(pod)`, before a pod's first container starts: every claim of the
//!   pod must be the one made for the pod (when generated) and list the pod in
//!   `status.reservedFor`. Claims not yet prepared on the node go, grouped by driver, into
//!   one `NodePrepareResources` call per driver with all of them (1.28+); 1.27 calls
//!   `v1alpha2 NodePrepareResource` once per claim and handle, and 1.28–1.30 fall back to
//!   it when `v1alpha3` answers `Unimplemented`. Any per-claim error, an answer for a claim
//!   not asked about, or a claim left out fails the pod; the next attempt sends the claims
//!   not yet prepared again. 1.28–1.30 skip a claim no container uses.
//! - Classic kubelets turn each claim's CDI ids into the annotation
//!   `cdi.k8s.io/<driver>_<claim uid>` and refuse a name part over 63 characters or ids
//!   that are not fully qualified (`pkg/kubelet/cm/util/cdi`).
//! - `GetResources(container)`: the CDI ids of the claims the container names; structured
//!   kubelets give only the devices of the `request` a container names, every id of every
//!   matching device in order, repeats included (`cdiDevicesAsList`).
//! - `UnprepareResources(pod)`: the last pod using a claim on the node unprepares it, in
//!   one call per driver (1.27: per claim and handle).
//!
//! Not emulated: 1.33 and 1.34.0 stop adding a pod's claims to the cache after the first
//! one already prepared (`return nil` where later releases `continue`); the emulator
//! follows the fixed behaviour.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use dra_kubelet_proto::{v1alpha2, v1alpha3};
use fake_dra_api::upstream::pod::{ClassicContainer, DraPod};
use fake_dra_api::upstream::v1alpha2::ResourceClaim;
use kube::api::Api;

use super::registration::{PluginApi, Socket, dial};
use super::{NodeContext, PluginInstance, Release};
use crate::cluster::structured::{self, ResourceClaim as StructuredClaim};

mod calls;

use calls::*;

/// `defaultClientCallTimeout` of the kubelet's DRA client.
const DRA_CALL_TIMEOUT: Duration = Duration::from_secs(45);
/// `annotationKey`'s limit on `<driver>_<claim uid>`.
const MAX_ANNOTATION_NAME_LEN: usize = 63;

/// Claims are cached by namespace and name, as upstream does.
pub(super) type ClaimKey = (String, String);

/// One entry of the claim-info cache.
#[derive(Debug, Clone)]
pub(super) struct ClaimInfo {
    uid: String,
    namespace: String,
    name: String,
    /// `status.driverName` (classic): the annotation key is built from it.
    driver_name: String,
    /// The drivers to call and, classic, the handle data for each (`ResourceHandles`).
    handles: Vec<(String, String)>,
    /// What the drivers answered.
    devices: Vec<DeviceInfo>,
    pods: BTreeSet<String>,
    prepared: bool,
}

/// One device as a driver answered it; classic answers are one device per driver, for
/// every request.
#[derive(Debug, Clone)]
struct DeviceInfo {
    request_names: Vec<String>,
    cdi_ids: Vec<String>,
}

pub(super) type ClaimCache = BTreeMap<ClaimKey, ClaimInfo>;

impl ClaimInfo {
    /// `cdiDevicesAsList`: the ids of every device serving `request` (all without one).
    fn cdi_devices_as_list(&self, request: Option<&str>) -> Vec<String> {
        self.devices
            .iter()
            .filter(|d| {
                request.is_none_or(|r| {
                    d.request_names.is_empty() || d.request_names.iter().any(|n| n == r)
                })
            })
            .flat_map(|d| d.cdi_ids.iter().cloned())
            .collect()
    }

    fn key(&self) -> ClaimKey {
        (self.namespace.clone(), self.name.clone())
    }
}

/// After a restart the cache is what the checkpoint held: 1.28–1.30 do not checkpoint
/// whether a claim was prepared, so a restored claim is prepared again for the next pod
/// that uses it (a running pod is never prepared again: `PrepareDynamicResources` runs
/// when a pod's sandbox is created).
pub(super) async fn restore_from_checkpoint(ctx: &NodeContext) {
    if ctx.release.restored_claims_prepared() {
        return;
    }
    for info in ctx.claims.lock().await.values_mut() {
        info.prepared = false;
    }
}

/// The name of the claim behind a pod claim, as `resourceclaim.Name` of the release
/// gives it, and whether the claim must be checked to be the pod's (`mustCheckOwner`).
fn claim_name(release: Release, pod: &DraPod, pod_claim: &str) -> Result<(String, bool), String> {
    let entry = pod
        .resource_claims()
        .iter()
        .find(|c| c.name == pod_claim)
        .ok_or_else(|| format!("pod claim {pod_claim:?} is not in spec.resourceClaims"))?;
    if let Some(name) = entry.direct_claim_name() {
        return Ok((name.to_string(), false));
    }
    if release.legacy_claim_names() {
        return pod
            .legacy_generated_claim_name(pod_claim)
            .map(|n| (n, false))
            .ok_or_else(|| "pod has no name".to_string());
    }
    match pod.claim_name(pod_claim) {
        Some(name) => Ok((name.to_string(), true)),
        None => Err(format!(
            "pod \"{}/{}\": ResourceClaim not created yet",
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.metadata.name.as_deref().unwrap_or_default()
        )),
    }
}

/// The cache keys of the pod's claims whose names are known.
pub(super) fn pod_claim_keys(release: Release, pod: &DraPod) -> Vec<ClaimKey> {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    pod.resource_claims()
        .iter()
        .filter_map(|c| claim_name(release, pod, &c.name).ok())
        .map(|(name, _)| (namespace.clone(), name))
        .collect()
}

/// `claimIsUsedByPod`.
fn used_by_pod(pod: &DraPod, pod_claim: &str) -> bool {
    pod.all_containers()
        .any(|c| c.claim_names().any(|n| n == pod_claim))
}

/// A claim of the pod as read from the API: a fresh cache entry for it.
async fn fetch(
    ctx: &NodeContext,
    pod: &DraPod,
    pod_uid: &str,
    name: &str,
    must_check_owner: bool,
) -> Result<ClaimInfo, String> {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let fetch_failed = |e: String| {
        format!("failed to fetch ResourceClaim {name} referenced by pod {pod_name}: {e}")
    };
    let (uid, owners, reserved, driver_name, handles) = if let Some(api) = &ctx.structured {
        let claim = api
            .get::<StructuredClaim>(Some(&namespace), name)
            .await
            .map_err(|e| fetch_failed(e.to_string()))?
            .ok_or_else(|| fetch_failed("not found".into()))?;
        let reserved = structured::reserved_for(&claim)
            .iter()
            .any(|r| r.uid == pod_uid);
        let mut drivers: Vec<(String, String)> = Vec::new();
        for r in claim
            .status
            .as_ref()
            .and_then(|s| s.allocation.as_ref())
            .and_then(|a| a.devices.as_ref())
            .and_then(|d| d.results.as_ref())
            .into_iter()
            .flatten()
        {
            if !drivers.iter().any(|(d, _)| d == &r.driver) {
                drivers.push((r.driver.clone(), String::new()));
            }
        }
        if !structured::is_allocated(&claim) {
            return Err(format!("ResourceClaim {name} is not allocated"));
        }
        (
            claim.metadata.uid.clone().unwrap_or_default(),
            claim.metadata.owner_references.clone().unwrap_or_default(),
            reserved,
            String::new(),
            drivers,
        )
    } else {
        let claim = Api::<ResourceClaim>::namespaced(ctx.client.clone(), &namespace)
            .get_opt(name)
            .await
            .map_err(|e| fetch_failed(e.to_string()))?
            .ok_or_else(|| fetch_failed("not found".into()))?;
        let driver_name = claim
            .status
            .as_ref()
            .and_then(|s| s.driver_name.clone())
            .unwrap_or_default();
        let Some(allocation) = claim.allocation() else {
            return Err(format!("ResourceClaim {name} is not allocated"));
        };
        // No handles: one empty handle for the claim's driver.
        let mut handles: Vec<(String, String)> = allocation
            .resource_handles
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|h| {
                (
                    h.driver_name.unwrap_or_else(|| driver_name.clone()),
                    h.data.unwrap_or_default(),
                )
            })
            .collect();
        if handles.is_empty() {
            handles.push((driver_name.clone(), String::new()));
        }
        (
            claim.metadata.uid.clone().unwrap_or_default(),
            claim.metadata.owner_references.clone().unwrap_or_default(),
            claim.is_reserved_for(pod_uid),
            driver_name,
            handles,
        )
    };
    if must_check_owner
        && !owners
            .iter()
            .any(|o| o.uid == pod_uid && o.controller == Some(true))
    {
        // `resourceclaim.IsForPod`.
        return Err(format!(
            "ResourceClaim {name} was not created for pod {namespace}/{pod_name} (pod is not owner)"
        ));
    }
    if !reserved {
        return Err(format!(
            "pod {pod_name}({pod_uid}) is not allowed to use resource claim {name}({uid})"
        ));
    }
    Ok(ClaimInfo {
        uid,
        namespace,
        name: name.to_string(),
        driver_name,
        handles,
        devices: Vec::new(),
        pods: BTreeSet::new(),
        prepared: false,
    })
}

/// The instance of `driver` calls go to: the newest connected one.
async fn plugin_for(ctx: &NodeContext, driver: &str) -> Result<PluginInstance, String> {
    let plugins = ctx.plugins.read().await;
    plugins
        .get(driver)
        .and_then(|instances| {
            instances
                .iter()
                .rev()
                .find(|p| p.connected.load(std::sync::atomic::Ordering::SeqCst))
                .cloned()
        })
        .ok_or_else(|| {
            if ctx.release.dra_errors_name_resource_claims() {
                format!("DRA driver {driver} is not registered")
            } else if ctx.release.structured() {
                // 1.32/1.33 (seen on a real 1.33.13 kubelet).
                format!(
                    "failed to get gRPC client for driver {driver}: plugin name {driver} not found in the list of registered DRA plugins"
                )
            } else {
                format!(
                    "failed to get DRA Plugin client for plugin name {driver}: plugin name {driver} not found in the list of registered DRA plugins"
                )
            }
        })
}

/// `PrepareResources`.
pub(super) async fn prepare_pod(
    ctx: &Arc<NodeContext>,
    pod: &DraPod,
    pod_uid: &str,
) -> Result<(), String> {
    let wrap = |e: String| {
        if ctx.release.dra_errors_name_resource_claims() {
            format!("prepare dynamic resources: {e}")
        } else {
            e
        }
    };
    prepare(ctx, pod, pod_uid).await.map_err(wrap)
}

async fn prepare(ctx: &Arc<NodeContext>, pod: &DraPod, pod_uid: &str) -> Result<(), String> {
    let release = ctx.release;
    // Validation pass: read every claim before touching the cache.
    let mut fetched: Vec<ClaimInfo> = Vec::new();
    for pod_claim in pod.resource_claims() {
        let (name, must_check_owner) = claim_name(release, pod, &pod_claim.name)
            .map_err(|e| format!("prepare resource claim: {e}"))?;
        let needed = if release.legacy_claim_names() {
            pod.all_containers()
                .any(|c| c.claim_names().next().is_some())
        } else {
            release.structured() || used_by_pod(pod, &pod_claim.name)
        };
        let info = fetch(ctx, pod, pod_uid, &name, must_check_owner).await?;
        if !needed {
            continue;
        }
        if release.structured() {
            for (driver, _) in &info.handles {
                plugin_for(ctx, driver).await?;
            }
        }
        fetched.push(info);
    }

    let mut cache = ctx.claims.lock().await;
    let mut to_prepare: Vec<ClaimInfo> = Vec::new();
    for mut info in fetched {
        match cache.get_mut(&info.key()) {
            Some(cached) => {
                if release.structured() && cached.uid != info.uid {
                    return Err(format!(
                        "old ResourceClaim with same name {} and different UID {} still exists (previous pod force-deleted?!)",
                        info.name, cached.uid
                    ));
                }
                cached.pods.insert(pod_uid.to_string());
                if !cached.prepared {
                    to_prepare.push(cached.clone());
                }
            }
            None => {
                info.pods.insert(pod_uid.to_string());
                // 1.32+ track the claim before calling the driver; earlier releases add it
                // once the driver prepared it.
                if release.structured() {
                    cache.insert(info.key(), info.clone());
                }
                to_prepare.push(info);
            }
        }
    }

    let mut drivers: BTreeSet<String> = BTreeSet::new();
    for info in &to_prepare {
        drivers.extend(info.handles.iter().map(|(d, _)| d.clone()));
    }
    let mut prepared: BTreeMap<String, ClaimInfo> = to_prepare
        .iter()
        .map(|i| (i.uid.clone(), i.clone()))
        .collect();
    for driver in drivers {
        let plugin = plugin_for(ctx, &driver).await?;
        let batch: Vec<&ClaimInfo> = to_prepare
            .iter()
            .filter(|i| i.handles.iter().any(|(d, _)| d == &driver))
            .collect();
        let answers = call_prepare(release, &plugin, &driver, &batch).await?;
        for (uid, devices) in answers {
            let Some(info) = prepared.get_mut(&uid) else {
                continue;
            };
            if release.cdi_annotations() {
                let ids: Vec<String> = devices.iter().flat_map(|d| d.cdi_ids.clone()).collect();
                check_annotation(&info.uid, &info.driver_name, &ids).map_err(|e| {
                    format!("failed to add CDIDevices to claimInfo {}/{}: failed to generate container annotations, err: {e}", info.namespace, info.name)
                })?;
            }
            info.devices.extend(devices);
            if !release.structured() {
                // 1.28–1.30 mark each claim prepared as its answer arrives.
                info.prepared = true;
                let mut entry = info.clone();
                if let Some(cached) = cache.get(&entry.key()) {
                    entry.pods.extend(cached.pods.iter().cloned());
                }
                cache.insert(entry.key(), entry);
            }
        }
    }
    for info in prepared.into_values() {
        if let Some(cached) = cache.get_mut(&info.key()) {
            cached.devices = info.devices;
            cached.prepared = true;
        }
    }
    Ok(())
}

/// `annotationKey` and `annotationValue` of `pkg/kubelet/cm/util/cdi`.
fn check_annotation(claim_uid: &str, driver: &str, ids: &[String]) -> Result<(), String> {
    if ids.is_empty() {
        return Ok(());
    }
    let name = format!("{driver}_{}", claim_uid.replace('/', "_"));
    if name.len() > MAX_ANNOTATION_NAME_LEN {
        return Err(format!(
            "can't generate CDI annotations: CDI annotation failed: invalid plugin+deviceID {name:?}, too long"
        ));
    }
    for id in ids {
        if !is_qualified_cdi_id(id) {
            return Err(format!(
                "can't generate CDI annotations: CDI annotation failed: unqualified device {id:?}"
            ));
        }
    }
    Ok(())
}

/// `vendor/class=name`, as `parseQualifiedName` requires (the class without dots).
pub(super) fn is_qualified_cdi_id(id: &str) -> bool {
    let Some((kind, name)) = id.split_once('=') else {
        return false;
    };
    let Some((vendor, class)) = kind.split_once('/') else {
        return false;
    };
    !vendor.is_empty() && !class.is_empty() && !name.is_empty() && !class.contains('.')
}

/// `GetResources`: the CDI ids a container gets for the claims it names.
pub(super) async fn container_cdi_devices(
    ctx: &NodeContext,
    pod: &DraPod,
    container: &ClassicContainer,
) -> Result<Vec<String>, String> {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let cache = ctx.claims.lock().await;
    let mut ids = Vec::new();
    for claim in container
        .resources
        .as_ref()
        .and_then(|r| r.claims.as_deref())
        .unwrap_or_default()
    {
        let (name, _) = claim_name(ctx.release, pod, &claim.name)
            .map_err(|e| format!("container {}: {e}", container.name))?;
        let info = cache
            .get(&(namespace.clone(), name.clone()))
            .ok_or_else(|| {
                format!("unable to get resource for namespace: {namespace}, claim: {name}")
            })?;
        let request = claim.extra.get("request").and_then(|r| r.as_str());
        if request.is_some() && !ctx.release.structured() {
            return Err(format!(
                "container {}: resources.claims[].request is not known to Kubernetes {}.{}",
                container.name, ctx.release.0.0, ctx.release.0.1
            ));
        }
        ids.extend(info.cdi_devices_as_list(request));
    }
    Ok(ids)
}

/// `UnprepareResources`: the claims in `keys` this pod was the last user of are
/// unprepared. Returns the keys still held (a failed call is retried by the caller).
pub(super) async fn unprepare_pod(
    ctx: &Arc<NodeContext>,
    pod_uid: &str,
    keys: &[ClaimKey],
) -> Result<(), String> {
    let release = ctx.release;
    let mut cache = ctx.claims.lock().await;
    let mut last: Vec<ClaimInfo> = Vec::new();
    for key in keys {
        let Some(info) = cache.get_mut(key) else {
            continue;
        };
        if info.pods.len() > 1 || (!info.pods.is_empty() && !info.pods.contains(pod_uid)) {
            info.pods.remove(pod_uid);
            continue;
        }
        last.push(info.clone());
    }
    let mut drivers: BTreeSet<String> = BTreeSet::new();
    for info in &last {
        drivers.extend(info.handles.iter().map(|(d, _)| d.clone()));
    }
    for driver in drivers {
        let plugin = plugin_for(ctx, &driver).await?;
        let batch: Vec<&ClaimInfo> = last
            .iter()
            .filter(|i| i.handles.iter().any(|(d, _)| d == &driver))
            .collect();
        call_unprepare(release, &plugin, &driver, &batch).await?;
    }
    for info in last {
        cache.remove(&info.key());
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
