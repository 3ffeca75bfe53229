//! `resource.k8s.io/v1alpha2`, the classic DRA API of Kubernetes 1.27–1.30.
//!
//! k8s-openapi dropped these types when Kubernetes did, so they are written here by hand:
//! only the fields a classic driver reads or writes, with the names and limits of the
//! upstream API. Each root type implements `k8s_openapi::Resource` and
//! `k8s_openapi::Metadata`, which gives it kube's `Resource` through kube's blanket impl,
//! so `kube::Api<ResourceClaim>` works like any built-in type.
//!
//! Optional fields are `Option`s that are skipped when `None`. That keeps a read-modify-
//! write round trip byte-for-byte faithful, and lets a merge patch say "clear this"
//! (`Some(false)`, `Some(vec![])`) as distinct from "leave it alone" (`None`).
//!
//! Reading ignores `apiVersion` and `kind`: list items from the API server omit them, and
//! the URL already fixed the type. Writing always emits them, as the API server requires.

use k8s_openapi::api::core::v1::NodeSelector;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize, Serializer};

/// The API group.
pub const GROUP: &str = "resource.k8s.io";
/// The API version within the group.
pub const VERSION: &str = "v1alpha2";
/// `apiVersion` of every object in this module.
pub const API_VERSION: &str = "resource.k8s.io/v1alpha2";

/// Most entries in `status.allocation.resourceHandles`.
pub const MAX_RESOURCE_HANDLES: usize = 32;
/// Most bytes in one `resourceHandles[].data`.
pub const MAX_RESOURCE_HANDLE_DATA_BYTES: usize = 16 * 1024;
/// Most entries in `status.reservedFor`.
pub const MAX_RESERVED_FOR: usize = 32;
/// Most entries in a PodSchedulingContext's `spec.potentialNodes` and in each
/// `status.resourceClaims[].unsuitableNodes`.
pub const MAX_SCHEDULING_NODES: usize = 128;

/// Implements the k8s-openapi traits for a hand-written root type.
macro_rules! k8s_resource {
    ($ty:ident, plural = $plural:literal, scope = $scope:ident) => {
        impl k8s_openapi::Resource for $ty {
            const API_VERSION: &'static str = API_VERSION;
            const GROUP: &'static str = GROUP;
            const KIND: &'static str = stringify!($ty);
            const VERSION: &'static str = VERSION;
            const URL_PATH_SEGMENT: &'static str = $plural;
            type Scope = k8s_openapi::$scope;
        }

        impl k8s_openapi::ListableResource for $ty {
            const LIST_KIND: &'static str = concat!(stringify!($ty), "List");
        }

        impl k8s_openapi::Metadata for $ty {
            type Ty = ObjectMeta;

            fn metadata(&self) -> &ObjectMeta {
                &self.metadata
            }

            fn metadata_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

/// Writes `apiVersion` and `kind` of `K`, then the fields `fields` adds.
pub(crate) fn serialize_object<K, S, F>(
    ser: S,
    field_count: usize,
    fields: F,
) -> Result<S::Ok, S::Error>
where
    K: k8s_openapi::Resource,
    S: Serializer,
    F: FnOnce(&mut S::SerializeStruct) -> Result<(), S::Error>,
{
    let mut obj = ser.serialize_struct(K::KIND, field_count + 2)?;
    obj.serialize_field("apiVersion", K::API_VERSION)?;
    obj.serialize_field("kind", K::KIND)?;
    fields(&mut obj)?;
    obj.end()
}

/// Writes `value` under `key` if it is `Some`.
pub(crate) fn serialize_opt<S: SerializeStruct, T: Serialize>(
    obj: &mut S,
    key: &'static str,
    value: &Option<T>,
) -> Result<(), S::Error> {
    match value {
        Some(value) => obj.serialize_field(key, value),
        None => obj.skip_field(key),
    }
}

// ---------------------------------------------------------------------------------------
// ResourceClass

/// Names the driver responsible for claims of this class. Cluster-scoped.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceClass {
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The driver that allocates claims of this class; the controller only handles claims
    /// whose class names it.
    #[serde(default)]
    pub driver_name: String,
    /// Class-wide parameters (for us: a `DeviceClassParameters`).
    #[serde(default)]
    pub parameters_ref: Option<ResourceClassParametersReference>,
    /// Only nodes matching this are considered for claims of the class; `None` means all.
    #[serde(default)]
    pub suitable_nodes: Option<NodeSelector>,
    /// 1.30: the scheduler allocates from published resources instead of the driver's
    /// controller. We never set it; a class that does is not ours to allocate.
    #[serde(default)]
    pub structured_parameters: Option<bool>,
}

k8s_resource!(
    ResourceClass,
    plural = "resourceclasses",
    scope = ClusterResourceScope
);

impl Serialize for ResourceClass {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        serialize_object::<Self, _, _>(ser, 5, |obj| {
            obj.serialize_field("metadata", &self.metadata)?;
            obj.serialize_field("driverName", &self.driver_name)?;
            serialize_opt(obj, "parametersRef", &self.parameters_ref)?;
            serialize_opt(obj, "suitableNodes", &self.suitable_nodes)?;
            serialize_opt(obj, "structuredParameters", &self.structured_parameters)
        })
    }
}

/// Points a ResourceClass at its parameters object.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceClassParametersReference {
    /// The object's API group; `None` means the core group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_group: Option<String>,
    /// The object's kind.
    #[serde(default)]
    pub kind: String,
    /// The object's name.
    #[serde(default)]
    pub name: String,
    /// The object's namespace; required for a namespaced kind, `None` for a cluster-scoped one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

// ---------------------------------------------------------------------------------------
// ResourceClaim

/// A request for resources and, once allocated, the record of what was given.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceClaim {
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// What is asked for; immutable.
    #[serde(default)]
    pub spec: ResourceClaimSpec,
    /// What was allocated and who uses it.
    #[serde(default)]
    pub status: Option<ResourceClaimStatus>,
}

k8s_resource!(
    ResourceClaim,
    plural = "resourceclaims",
    scope = NamespaceResourceScope
);

impl Serialize for ResourceClaim {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        serialize_object::<Self, _, _>(ser, 3, |obj| {
            obj.serialize_field("metadata", &self.metadata)?;
            obj.serialize_field("spec", &self.spec)?;
            serialize_opt(obj, "status", &self.status)
        })
    }
}

/// What a claim asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceClaimSpec {
    /// The ResourceClass, which names the driver.
    #[serde(default)]
    pub resource_class_name: String,
    /// The claim's parameters (for us: a `FakeClaimParameters` in the claim's namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters_ref: Option<ResourceClaimParametersReference>,
    /// When to allocate; `None` means [`AllocationMode::WaitForFirstConsumer`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocation_mode: Option<AllocationMode>,
}

impl ResourceClaimSpec {
    /// The allocation mode with the API's default applied.
    pub fn allocation_mode(&self) -> AllocationMode {
        self.allocation_mode.unwrap_or_default()
    }
}

/// Points a claim at its parameters object, in the claim's namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceClaimParametersReference {
    /// The object's API group; `None` means the core group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_group: Option<String>,
    /// The object's kind.
    #[serde(default)]
    pub kind: String,
    /// The object's name.
    #[serde(default)]
    pub name: String,
}

/// When a claim gets allocated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AllocationMode {
    /// Once a Pod using the claim is being scheduled, on a node the scheduler picks with
    /// the driver through the PodSchedulingContext.
    #[default]
    WaitForFirstConsumer,
    /// As soon as the claim exists, on a node the driver picks.
    Immediate,
}

/// The allocation of a claim and its consumers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceClaimStatus {
    /// The driver that allocated the claim, copied from the class at allocation time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_name: Option<String>,
    /// Set once the claim is allocated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocation: Option<AllocationResult>,
    /// The Pods allowed to use the claim (at most [`MAX_RESERVED_FOR`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved_for: Option<Vec<ResourceClaimConsumerReference>>,
    /// Asks the driver to deallocate; it clears this together with `allocation`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deallocation_requested: Option<bool>,
}

/// What was allocated, and where it can be used.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AllocationResult {
    /// One entry per kubelet plugin that must prepare the claim (at most
    /// [`MAX_RESOURCE_HANDLES`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_handles: Option<Vec<ResourceHandle>>,
    /// The nodes on which the claim can be used; for us always exactly one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_on_nodes: Option<NodeSelector>,
    /// Whether several Pods may use the claim at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shareable: Option<bool>,
}

/// What one kubelet plugin gets for a claim.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceHandle {
    /// The kubelet calls the plugin of this name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_name: Option<String>,
    /// Passed to the plugin as is (at most [`MAX_RESOURCE_HANDLE_DATA_BYTES`]); for us an
    /// [`AllocationHandle`](crate::handle::AllocationHandle) document.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    /// 1.30's structured allocation result. Kept opaque: we never write it and only carry
    /// it through a read-modify-write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_data: Option<serde_json::Value>,
}

/// A consumer of a claim; the kubelet only prepares claims for Pods listed here.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceClaimConsumerReference {
    /// The consumer's API group; `None` means the core group (Pods).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_group: Option<String>,
    /// The consumer's resource, e.g. `pods`.
    #[serde(default)]
    pub resource: String,
    /// The consumer's name.
    #[serde(default)]
    pub name: String,
    /// The consumer's uid, which tells apart objects reusing a name.
    #[serde(default)]
    pub uid: String,
}

impl ResourceClaim {
    /// Whether the claim carries an allocation.
    pub fn is_allocated(&self) -> bool {
        self.allocation().is_some()
    }

    /// The allocation, if any.
    pub fn allocation(&self) -> Option<&AllocationResult> {
        self.status.as_ref()?.allocation.as_ref()
    }

    /// The `data` of the first resource handle for `driver_name`: what that driver's
    /// kubelet plugin will be given.
    pub fn handle_for_driver(&self, driver_name: &str) -> Option<&str> {
        self.allocation()?
            .resource_handles
            .as_deref()?
            .iter()
            .find(|h| h.driver_name.as_deref() == Some(driver_name))?
            .data
            .as_deref()
    }

    /// The consumers the claim is reserved for.
    pub fn reserved_for(&self) -> &[ResourceClaimConsumerReference] {
        self.status
            .as_ref()
            .and_then(|s| s.reserved_for.as_deref())
            .unwrap_or_default()
    }

    /// Whether the claim is reserved for the object with this uid.
    pub fn is_reserved_for(&self, uid: &str) -> bool {
        self.reserved_for().iter().any(|r| r.uid == uid)
    }

    /// Whether someone asked the driver to deallocate the claim.
    pub fn deallocation_requested(&self) -> bool {
        self.status
            .as_ref()
            .and_then(|s| s.deallocation_requested)
            .unwrap_or(false)
    }

    /// Whether the claim is being deleted (and waits for finalizers).
    pub fn is_being_deleted(&self) -> bool {
        self.metadata.deletion_timestamp.is_some()
    }

    /// Whether the claim's finalizers include `finalizer`.
    pub fn has_finalizer(&self, finalizer: &str) -> bool {
        self.metadata
            .finalizers
            .as_deref()
            .unwrap_or_default()
            .iter()
            .any(|f| f == finalizer)
    }
}

// ---------------------------------------------------------------------------------------
// ResourceClaimTemplate

/// A blueprint from which the resource-claim controller creates one claim per Pod.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceClaimTemplate {
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The claims to create.
    #[serde(default)]
    pub spec: ResourceClaimTemplateSpec,
}

k8s_resource!(
    ResourceClaimTemplate,
    plural = "resourceclaimtemplates",
    scope = NamespaceResourceScope
);

impl Serialize for ResourceClaimTemplate {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        serialize_object::<Self, _, _>(ser, 2, |obj| {
            obj.serialize_field("metadata", &self.metadata)?;
            obj.serialize_field("spec", &self.spec)
        })
    }
}

/// Metadata and spec of the claims created from a template.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceClaimTemplateSpec {
    /// Labels and annotations copied into each claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,
    /// The spec of each claim.
    #[serde(default)]
    pub spec: ResourceClaimSpec,
}

// ---------------------------------------------------------------------------------------
// PodSchedulingContext

/// The scheduler's and the drivers' negotiation about where a Pod with unallocated
/// `WaitForFirstConsumer` claims can go. Same name and namespace as the Pod, owned by it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSchedulingContext {
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Written by the scheduler.
    #[serde(default)]
    pub spec: PodSchedulingContextSpec,
    /// Written by the drivers.
    #[serde(default)]
    pub status: Option<PodSchedulingContextStatus>,
}

k8s_resource!(
    PodSchedulingContext,
    plural = "podschedulingcontexts",
    scope = NamespaceResourceScope
);

impl Serialize for PodSchedulingContext {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        serialize_object::<Self, _, _>(ser, 3, |obj| {
            obj.serialize_field("metadata", &self.metadata)?;
            obj.serialize_field("spec", &self.spec)?;
            serialize_opt(obj, "status", &self.status)
        })
    }
}

/// The scheduler's side.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSchedulingContextSpec {
    /// The node the scheduler wants; drivers allocate the Pod's claims there if they can.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selected_node: Option<String>,
    /// Nodes that fit the Pod otherwise (at most [`MAX_SCHEDULING_NODES`]); drivers say
    /// which of them cannot take the claims.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub potential_nodes: Option<Vec<String>>,
}

/// The drivers' side.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSchedulingContextStatus {
    /// One entry per Pod claim (by its name in the Pod) that needs allocation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_claims: Option<Vec<ResourceClaimSchedulingStatus>>,
}

/// A driver's answer for one claim of the Pod.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceClaimSchedulingStatus {
    /// The claim's name in `pod.spec.resourceClaims`.
    #[serde(default)]
    pub name: String,
    /// The potential nodes where the claim cannot be allocated (at most
    /// [`MAX_SCHEDULING_NODES`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsuitable_nodes: Option<Vec<String>>,
}

impl PodSchedulingContext {
    /// The node the scheduler selected, if any.
    pub fn selected_node(&self) -> Option<&str> {
        self.spec.selected_node.as_deref()
    }

    /// The nodes the scheduler asks about.
    pub fn potential_nodes(&self) -> &[String] {
        self.spec.potential_nodes.as_deref().unwrap_or_default()
    }

    /// The status entry for the Pod claim named `pod_claim_name`, if a driver wrote one.
    pub fn claim_status(&self, pod_claim_name: &str) -> Option<&ResourceClaimSchedulingStatus> {
        self.status
            .as_ref()?
            .resource_claims
            .as_deref()?
            .iter()
            .find(|c| c.name == pod_claim_name)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
