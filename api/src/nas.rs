//! `NodeAllocationState`: one object per node, named after the node, in the driver's
//! namespace. The kubelet plugin owns it; the controller reads it.
//!
//! `spec` is the node's inventory, which the controller allocates from. `status` says
//! whether the plugin is up, plus what it has prepared. The prepared-claims list is
//! informational (for `kubectl describe`): the allocation of record is each claim's
//! handle, and the plugin's own record is its checkpoint. Nothing may read it to decide
//! who owns a device.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The inventory of one node.
#[derive(
    CustomResource, Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema,
)]
// clippy mistakes repeated `type_ = "integer"` in the printcolumns for duplicate attributes.
#[allow(clippy::duplicated_attributes)]
#[kube(
    group = "nas.fake.resource.3-shake.com",
    version = "v1alpha1",
    kind = "NodeAllocationState",
    plural = "nodeallocationstates",
    shortname = "nas",
    namespaced,
    status = "NodeAllocationStateStatus",
    derive = "PartialEq",
    doc = "The fake devices of one node, published by the node's kubelet plugin.",
    printcolumn(name = "Status", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Devices",
        type_ = "integer",
        json_path = ".status.allocatableDeviceCount"
    ),
    printcolumn(
        name = "Prepared",
        type_ = "integer",
        json_path = ".status.preparedClaimCount"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct NodeAllocationStateSpec {
    /// Every device of the node, allocated or not. At most 128, the most one
    /// ResourceSlice may list.
    #[serde(default)]
    #[schemars(length(max = 128))]
    pub allocatable_devices: Vec<AllocatableDevice>,
}

/// One device in a node's inventory.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AllocatableDevice {
    /// `FAKE-<uuid>`, stable for a node name across restarts.
    #[schemars(pattern(
        r"^FAKE-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
    ))]
    pub id: String,
    /// What selectors match against.
    #[schemars(length(min = 1, max = 63), pattern(r"^[A-Za-z0-9._-]+$"))]
    pub model: String,
}

/// Whether the node's plugin is serving.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum NodePhase {
    /// The plugin is registered and prepares claims.
    Ready,
    /// The plugin has not started yet or has shut down; don't allocate here.
    #[default]
    NotReady,
}

/// What the node's plugin reports about itself. Informational, for people: the claims'
/// allocation handles are the record of which device belongs to which claim.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeAllocationStateStatus {
    /// Ready while the plugin serves; NotReady before start and after shutdown.
    #[serde(default)]
    pub phase: NodePhase,
    /// Why the node is NotReady, or other news for a human.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Number of entries in `spec.allocatableDevices`, for `kubectl get`.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub allocatable_device_count: i32,
    /// Number of entries in `preparedClaims`, for `kubectl get`.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub prepared_claim_count: i32,
    /// The claims the plugin has prepared on this node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prepared_claims: Vec<PreparedClaim>,
}

/// A claim the plugin has prepared.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreparedClaim {
    /// The claim's uid, the key the kubelet uses.
    pub uid: String,
    /// The claim's namespace.
    pub namespace: String,
    /// The claim's name.
    pub name: String,
    /// The parent device ids prepared for it.
    #[serde(default)]
    pub devices: Vec<String>,
}

impl NodeAllocationState {
    /// Whether the controller may allocate on this node.
    pub fn is_ready(&self) -> bool {
        self.status
            .as_ref()
            .is_some_and(|s| s.phase == NodePhase::Ready)
    }

    /// The device with this id, if the node has it.
    pub fn device(&self, id: &str) -> Option<&AllocatableDevice> {
        self.spec.allocatable_devices.iter().find(|d| d.id == id)
    }
}

impl NodeAllocationStateStatus {
    /// A status with the counts filled in from the inventory and the prepared claims, so
    /// the printer columns never disagree with the lists.
    pub fn new(
        phase: NodePhase,
        message: Option<String>,
        spec: &NodeAllocationStateSpec,
        prepared_claims: Vec<PreparedClaim>,
    ) -> Self {
        Self {
            phase,
            message,
            allocatable_device_count: saturating_i32(spec.allocatable_devices.len()),
            prepared_claim_count: saturating_i32(prepared_claims.len()),
            prepared_claims,
        }
    }
}

fn saturating_i32(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn readiness_follows_the_phase() {
        let mut nas = NodeAllocationState::new("node-1", NodeAllocationStateSpec::default());
        assert!(!nas.is_ready(), "no status yet");
        nas.status = Some(NodeAllocationStateStatus {
            phase: NodePhase::Ready,
            ..Default::default()
        });
        assert!(nas.is_ready());
        nas.status = Some(NodeAllocationStateStatus::default());
        assert!(!nas.is_ready(), "the default phase is NotReady");
    }

    #[test]
    fn status_counts_match_the_lists() {
        let spec = NodeAllocationStateSpec {
            allocatable_devices: vec![
                AllocatableDevice {
                    id: "FAKE-00000000-0000-0000-0000-000000000001".into(),
                    model: "m".into(),
                };
                3
            ],
        };
        let claim = PreparedClaim {
            uid: "u".into(),
            namespace: "ns".into(),
            name: "c".into(),
            devices: vec![],
        };
        let status = NodeAllocationStateStatus::new(NodePhase::Ready, None, &spec, vec![claim]);
        assert_eq!(status.allocatable_device_count, 3);
        assert_eq!(status.prepared_claim_count, 1);
    }

    #[test]
    fn phase_serializes_as_its_name() {
        let json = serde_json::to_value(NodeAllocationStateStatus::default()).unwrap();
        assert_eq!(json["phase"], "NotReady");
    }
}
