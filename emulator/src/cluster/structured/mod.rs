//! Structured DRA (Kubernetes 1.32+): the kube-scheduler's `DynamicResources` plugin
//! allocating devices from ResourceSlices
//! (`pkg/scheduler/framework/plugins/dynamicresources`, with the allocator of
//! `staging/src/k8s.io/dynamic-resource-allocation/structured/allocator.go`), and the access
//! to `resource.k8s.io` the other components share.
//!
//! For one pod at a time:
//!
//! - PreFilter: every claim of the pod exists, is not being deleted, is owned by the pod
//!   when generated, and has room in `reservedFor` (structured claims are always shareable).
//! - Filter, per node: an allocated claim limits the pod to its `nodeSelector`; the
//!   unallocated ones must all be allocatable together from the devices of the node's
//!   ResourceSlices (`spec.nodeName`), which no other claim's allocation lists. A device
//!   matches a request when every CEL selector of its DeviceClass and of the request is
//!   true; `ExactCount` takes `count` devices, `All` takes every matching device (at least
//!   one, none of them allocated).
//! - PostFilter: when no node fits, allocated claims nobody uses are deallocated so the
//!   next attempt can place them elsewhere.
//! - Reserve/PreBind: the `resource.kubernetes.io/delete-protection` finalizer, then
//!   `status.allocation` and `reservedFor` in one status update; Bind.
//!
//! Device taints (`NoSchedule`, `NoExecute`) keep a device from new allocations unless the
//! request tolerates them; nothing is evicted (no device taint eviction controller). The
//! taint of a DeviceTaintRule (1.37+) counts as a taint of every device it selects, as
//! the scheduler's device tracker adds it to the slices it allocates from upstream.
//! A device allowing multiple allocations goes to several requests as shares, each
//! taking part of its capacity under the capacity's request policy ([`capacity`]).
//! What the allocator does not implement is refused with an Event, never guessed: devices
//! with `bindingConditions`, and slices published for `nodeSelector`/`allNodes`/per-device
//! nodes (logged and skipped).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use fake_dra_api::upstream::node_selector::{self, NodeView};
use fake_dra_api::upstream::pod::DraPod;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::{Device, DeviceSelector};
pub use k8s_openapi::api::resource::v1::{
    DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::{Events, level_triggered, object_ref};
use crate::apiserver::device_taint_rule::DeviceTaintRule;
use crate::apiserver::gates::{FeatureGates, Gate};
use crate::apiserver::{ResourceKey, WatchEvent, conversion, resource_api_versions};

/// `resourceapi.Finalizer`: put on a claim by the scheduler before it writes an allocation,
/// removed by the resourceclaim controller once the claim is deallocated.
pub const DELETE_PROTECTION_FINALIZER: &str = "resource.kubernetes.io/delete-protection";
/// `ResourceClaimReservedForMaxSize` of structured DRA.
pub const RESERVED_FOR_MAX: usize = 256;
/// Upper bound on the allocator's backtracking steps per node (upstream bounds its search
/// by a timeout; a pod that needs more is reported unschedulable, never half-allocated).
const SEARCH_BUDGET: usize = 100_000;

// ---------------------------------------------------------------------------------------
// resource.k8s.io access

/// `resource.k8s.io` through the version the emulated release prefers (`v1` from 1.34,
/// `v1beta1` on 1.32/1.33), with every object converted to `v1`'s layout so one code path
/// serves both — what the components' informers do through the internal version upstream.
#[derive(Clone)]
pub struct ResourceClient {
    client: kube::Client,
    version: &'static str,
    server_version: (u32, u32),
    /// The component's `--feature-gates`.
    gates: FeatureGates,
}

impl std::fmt::Debug for ResourceClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceClient")
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

fn conversion_error(message: String) -> kube::Error {
    kube::Error::SerdeError(<serde_json::Error as serde::de::Error>::custom(message))
}

impl ResourceClient {
    /// `None` when the release serves classic DRA (`v1alpha2`) or is not emulated.
    pub fn for_server(client: kube::Client, server_version: (u32, u32)) -> Option<Self> {
        let version = *resource_api_versions(server_version).ok()?.first()?;
        (version != "v1alpha2").then_some(Self {
            client,
            version,
            server_version,
            gates: FeatureGates::default(),
        })
    }

    /// The same, for a component started with `gates` as its `--feature-gates`.
    pub fn with_gates(self, gates: FeatureGates) -> Self {
        Self { gates, ..self }
    }

    /// Whether the component has `gate` on.
    pub fn gate(&self, gate: Gate) -> bool {
        self.gates.enabled(gate, self.server_version)
    }

    /// The version requests go through.
    pub fn version(&self) -> &'static str {
        self.version
    }

    /// The emulated release (major, minor).
    pub fn server_version(&self) -> (u32, u32) {
        self.server_version
    }

    fn api<T: k8s_openapi::Resource>(&self, namespace: Option<&str>) -> Api<DynamicObject> {
        let resource = ApiResource {
            group: T::GROUP.into(),
            version: self.version.into(),
            api_version: format!("{}/{}", T::GROUP, self.version),
            kind: T::KIND.into(),
            plural: T::URL_PATH_SEGMENT.into(),
        };
        match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &resource),
            None => Api::all_with(self.client.clone(), &resource),
        }
    }

    fn key<T: k8s_openapi::Resource>() -> ResourceKey {
        ResourceKey {
            group: T::GROUP.into(),
            plural: T::URL_PATH_SEGMENT.into(),
        }
    }

    fn decode<T: k8s_openapi::Resource + DeserializeOwned>(
        &self,
        object: DynamicObject,
    ) -> Result<T, kube::Error> {
        let mut value = serde_json::to_value(object).map_err(kube::Error::SerdeError)?;
        conversion::to_storage(&Self::key::<T>(), self.version, &mut value)
            .map_err(|e| conversion_error(e.message))?;
        value["apiVersion"] = Value::String(T::API_VERSION.into());
        value["kind"] = Value::String(T::KIND.into());
        serde_json::from_value(value).map_err(kube::Error::SerdeError)
    }

    fn encode<T: k8s_openapi::Resource + Serialize>(
        &self,
        object: &T,
    ) -> Result<DynamicObject, kube::Error> {
        let mut value = serde_json::to_value(object).map_err(kube::Error::SerdeError)?;
        conversion::from_storage(&Self::key::<T>(), self.version, &mut value);
        value["apiVersion"] = Value::String(format!("{}/{}", T::GROUP, self.version));
        serde_json::from_value(value).map_err(kube::Error::SerdeError)
    }

    pub async fn list<T: k8s_openapi::Resource + DeserializeOwned>(
        &self,
        namespace: Option<&str>,
    ) -> Result<Vec<T>, kube::Error> {
        self.api::<T>(namespace)
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .map(|o| self.decode(o))
            .collect()
    }

    /// The DeviceTaintRules, on a release that serves them (`v1` from 1.37); none before.
    pub async fn device_taint_rules(&self) -> Result<Vec<DeviceTaintRule>, kube::Error> {
        if !crate::apiserver::serves_device_taint_rules(self.server_version) {
            return Ok(Vec::new());
        }
        let resource = ApiResource {
            group: "resource.k8s.io".into(),
            version: "v1".into(),
            api_version: "resource.k8s.io/v1".into(),
            kind: "DeviceTaintRule".into(),
            plural: "devicetaintrules".into(),
        };
        Api::<DynamicObject>::all_with(self.client.clone(), &resource)
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .map(|o| {
                let value = serde_json::to_value(o).map_err(kube::Error::SerdeError)?;
                serde_json::from_value(value).map_err(kube::Error::SerdeError)
            })
            .collect()
    }

    pub async fn get<T: k8s_openapi::Resource + DeserializeOwned>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<T>, kube::Error> {
        self.api::<T>(namespace)
            .get_opt(name)
            .await?
            .map(|o| self.decode(o))
            .transpose()
    }

    pub async fn create<T: k8s_openapi::Resource + Serialize + DeserializeOwned>(
        &self,
        namespace: Option<&str>,
        object: &T,
    ) -> Result<T, kube::Error> {
        let created = self
            .api::<T>(namespace)
            .create(&PostParams::default(), &self.encode(object)?)
            .await?;
        self.decode(created)
    }

    /// A merge patch of the main resource (metadata only: spec layouts differ by version);
    /// returns the new resourceVersion.
    pub async fn patch_metadata<T: k8s_openapi::Resource>(
        &self,
        namespace: Option<&str>,
        name: &str,
        patch: &Value,
    ) -> Result<Option<String>, kube::Error> {
        if patch.get("spec").is_some() {
            return Err(conversion_error(
                "patch_metadata patches metadata only".into(),
            ));
        }
        let patched = self
            .api::<T>(namespace)
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        Ok(patched.metadata.resource_version)
    }

    /// A merge patch of `/status` (claim status is the same in every structured version);
    /// returns the new resourceVersion.
    pub async fn patch_status<T: k8s_openapi::Resource>(
        &self,
        namespace: Option<&str>,
        name: &str,
        patch: &Value,
    ) -> Result<Option<String>, kube::Error> {
        let patched = self
            .api::<T>(namespace)
            .patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        Ok(patched.metadata.resource_version)
    }

    pub async fn delete<T: k8s_openapi::Resource>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<(), kube::Error> {
        self.api::<T>(namespace)
            .delete(name, &DeleteParams::default())
            .await?;
        Ok(())
    }
}

mod allocator;
mod capacity;
mod scheduler;

pub use allocator::*;
pub use scheduler::*;
