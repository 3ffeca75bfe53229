//! The node's fake devices: parent ids, the node's model, and the children a `split`
//! derives. Pure: everything is computed from the node name and the flags, so a restart
//! (or another process, such as a test) gets the same ids without storing them.

use fake_dra_api::handle::DEVICE_ID_PREFIX;
use fake_dra_api::nas::{AllocatableDevice, NodeAllocationStateSpec};
use fake_dra_api::params::{MAX_COUNT, validate_model};
use uuid::Uuid;

// Namespace of all our v5 UUIDs, so our ids never coincide with another tool's v5 ids
// for the same names.
use crate::shared::id_namespace;

/// Parent devices per node when `--num-devices` is not given.
pub const DEFAULT_NUM_DEVICES: usize = 8;

/// Most parent devices per node: what one NodeAllocationState (and one ResourceSlice) lists.
pub const MAX_NUM_DEVICES: usize = MAX_COUNT.unsigned_abs() as usize;

/// The models a node picks from when `--models` is not given.
pub const DEFAULT_MODELS: &[&str] = &["ULTRA_10", "ULTRA_100"];

/// Why an inventory cannot be built from the flags.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InventoryError {
    /// `--num-devices` out of range.
    #[error("--num-devices must be between 1 and {MAX_NUM_DEVICES}, got {0}")]
    NumDevices(usize),
    /// `--models` is empty.
    #[error("--models must name at least one model")]
    NoModels,
    /// A model name the CRDs would refuse.
    #[error("--models entry {model:?} {reason}")]
    BadModel {
        /// The entry.
        model: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An empty node name.
    #[error("--node-name must not be empty")]
    NoNodeName,
}

/// The devices of one node. All parents of a node have the node's model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inventory {
    /// The node the devices are on.
    pub node_name: String,
    /// The model of every device of the node.
    pub model: String,
    /// Parent device ids, `FAKE-<uuid>`, in index order.
    pub devices: Vec<String>,
}

impl Inventory {
    /// The inventory of `node_name` with `num_devices` parents and a model picked from
    /// `models` by the node name.
    pub fn new(
        node_name: &str,
        num_devices: usize,
        models: &[String],
    ) -> Result<Self, InventoryError> {
        if node_name.is_empty() {
            return Err(InventoryError::NoNodeName);
        }
        if !(1..=MAX_NUM_DEVICES).contains(&num_devices) {
            return Err(InventoryError::NumDevices(num_devices));
        }
        for model in models {
            validate_model(model).map_err(|reason| InventoryError::BadModel {
                model: model.clone(),
                reason,
            })?;
        }
        let model = node_model(node_name, models).ok_or(InventoryError::NoModels)?;
        Ok(Self {
            node_name: node_name.to_owned(),
            model: model.to_owned(),
            devices: (0..num_devices).map(|i| parent_id(node_name, i)).collect(),
        })
    }

    /// Whether `id` is one of this node's parent devices.
    pub fn contains(&self, id: &str) -> bool {
        self.devices.iter().any(|d| d.eq_ignore_ascii_case(id))
    }

    /// The inventory as the NodeAllocationState spec publishes it.
    pub fn to_nas_spec(&self) -> NodeAllocationStateSpec {
        NodeAllocationStateSpec {
            allocatable_devices: self
                .devices
                .iter()
                .map(|id| AllocatableDevice {
                    id: id.clone(),
                    model: self.model.clone(),
                })
                .collect(),
        }
    }
}

/// The id of parent device `index` of `node_name`: stable across restarts, distinct per
/// node.
pub fn parent_id(node_name: &str, index: usize) -> String {
    let name = format!("node/{node_name}/{index}");
    format!(
        "{DEVICE_ID_PREFIX}{}",
        Uuid::new_v5(&id_namespace(), name.as_bytes())
    )
}

/// The model of `node_name`: one of `models`, picked by a hash of the name so every
/// restart picks the same one and nodes spread over the list. `None` if `models` is empty.
pub fn node_model<'a>(node_name: &str, models: &'a [String]) -> Option<&'a str> {
    if models.is_empty() {
        return None;
    }
    let hash = Uuid::new_v5(&id_namespace(), format!("model/{node_name}").as_bytes()).as_u128();
    let index = (hash % models.len() as u128) as usize;
    models.get(index).map(String::as_str)
}

/// One device a container sees: a child of a parent device, or the parent itself when the
/// claim does not split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildDevice {
    /// `FAKE-<uuid>`.
    pub id: String,
    /// The parent device it was split from (its own id when `split` is 1).
    pub parent: String,
}

/// The id of child `index` of `parent`: derived from both, so a retry or a restart gives
/// the same ids and two parents never share a child id.
pub fn child_id(parent: &str, index: u32) -> String {
    let name = format!("child/{}/{index}", parent.to_ascii_lowercase());
    format!(
        "{DEVICE_ID_PREFIX}{}",
        Uuid::new_v5(&id_namespace(), name.as_bytes())
    )
}

/// The devices a claim's containers see, in `FAKE_DEVICE_<i>` order: each parent's
/// children in turn. With `split` 1 a parent is not split and is seen as itself.
pub fn children(parents: &[String], split: u32) -> Vec<ChildDevice> {
    parents
        .iter()
        .flat_map(|parent| {
            (0..split).map(move |i| ChildDevice {
                id: if split == 1 {
                    parent.clone()
                } else {
                    child_id(parent, i)
                },
                parent: parent.clone(),
            })
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::collections::HashSet;

    use fake_dra_api::handle::is_valid_device_id;
    use proptest::prelude::*;

    use super::*;

    fn models() -> Vec<String> {
        DEFAULT_MODELS.iter().map(|m| m.to_string()).collect()
    }

    #[test]
    fn defaults_give_eight_valid_devices() {
        let inv = Inventory::new("node-1", DEFAULT_NUM_DEVICES, &models()).unwrap();
        assert_eq!(inv.devices.len(), 8);
        assert!(inv.devices.iter().all(|d| is_valid_device_id(d)));
        assert!(DEFAULT_MODELS.contains(&inv.model.as_str()));
        let spec = inv.to_nas_spec();
        assert_eq!(spec.allocatable_devices.len(), 8);
        assert_eq!(spec.allocatable_devices[3].id, inv.devices[3]);
    }

    #[test]
    fn both_default_models_are_used_across_nodes() {
        let seen: HashSet<_> = (0..32)
            .map(|i| {
                node_model(&format!("node-{i}"), &models())
                    .unwrap()
                    .to_owned()
            })
            .collect();
        assert_eq!(seen.len(), 2);
    }

    #[test]
    fn flags_are_checked() {
        assert_eq!(
            Inventory::new("n", 0, &models()).unwrap_err().to_string(),
            "--num-devices must be between 1 and 128, got 0"
        );
        assert!(Inventory::new("n", 129, &models()).is_err());
        assert!(Inventory::new("n", 128, &models()).is_ok());
        assert_eq!(
            Inventory::new("n", 1, &[]).unwrap_err(),
            InventoryError::NoModels
        );
        assert!(
            Inventory::new("n", 1, &["a b".into()])
                .unwrap_err()
                .to_string()
                .starts_with("--models entry \"a b\" may only contain")
        );
        assert_eq!(
            Inventory::new("", 1, &models()).unwrap_err(),
            InventoryError::NoNodeName
        );
    }

    #[test]
    fn split_one_keeps_the_parent() {
        let parents = vec![parent_id("n", 0), parent_id("n", 1)];
        let kids = children(&parents, 1);
        assert_eq!(
            kids.iter().map(|c| c.id.clone()).collect::<Vec<_>>(),
            parents
        );
    }

    proptest! {
        #[test]
        fn ids_are_stable_and_distinct_per_node(node in "[a-z0-9]{1,20}", other in "[a-z0-9]{1,20}", n in 1usize..=128) {
            let a = Inventory::new(&node, n, &models()).unwrap();
            let b = Inventory::new(&node, n, &models()).unwrap();
            prop_assert_eq!(&a, &b);
            let distinct: HashSet<_> = a.devices.iter().collect();
            prop_assert_eq!(distinct.len(), n);
            if node != other {
                let c = Inventory::new(&other, n, &models()).unwrap();
                prop_assert!(a.devices.iter().all(|d| !c.contains(d)));
            }
        }

        #[test]
        fn children_are_deterministic_distinct_and_recorded_with_their_parent(
            node in "[a-z0-9]{1,10}", count in 1usize..=16, split in 1u32..=64,
        ) {
            let parents: Vec<String> = (0..count).map(|i| parent_id(&node, i)).collect();
            let kids = children(&parents, split);
            prop_assert_eq!(kids.len(), count * split as usize);
            prop_assert_eq!(&kids, &children(&parents, split));
            let ids: HashSet<_> = kids.iter().map(|c| c.id.as_str()).collect();
            prop_assert_eq!(ids.len(), kids.len());
            for (i, kid) in kids.iter().enumerate() {
                prop_assert!(is_valid_device_id(&kid.id));
                prop_assert_eq!(&kid.parent, &parents[i / split as usize]);
            }
        }
    }
}
