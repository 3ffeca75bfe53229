//! What more than one device profile uses, so each profile keeps only what makes it
//! different:
//!
//! - the namespace of the stable device ids ([`id_namespace`]);
//! - the standard PCI attributes and a two-socket PCI layout ([`pci_placement`]);
//! - the check that a node's pool can be published to every release the plugin serves
//!   ([`check_publishable`]);
//! - [`prepared`]: a claim's allocated devices as the checkpoint keeps them, checked
//!   against the node.

pub mod prepared;

use dra_kubelet_plugin::device::{CounterLayout, SliceSplit};
use dra_kubelet_plugin::device::{CounterSet, SliceDevice};
use dra_kubelet_plugin::slices;
use dra_kubelet_plugin::slices::{Desired, PackError};
use uuid::Uuid;

/// The standard attributes (k8s.io/dynamic-resource-allocation `deviceattribute`).
pub const ATTR_PCIE_ROOT: &str = "resource.kubernetes.io/pcieRoot";
pub const ATTR_PCI_BUS_ID: &str = "resource.kubernetes.io/pciBusID";
pub const ATTR_NUMA_NODE: &str = "resource.kubernetes.io/numaNode";

/// Namespace of every profile's device ids: the v5 UUID of "fake.resource.3-shake.com" in
/// the URL namespace. Each profile names its ids differently (`node/…`, `gpu/…`,
/// `nvidia/…`), so no two profiles' ids meet.
pub fn id_namespace() -> Uuid {
    Uuid::new_v5(&Uuid::NAMESPACE_URL, b"fake.resource.3-shake.com")
}

/// The v5 UUID of `name` in [`id_namespace`]: the same on every restart.
pub fn stable_uuid(name: &str) -> Uuid {
    Uuid::new_v5(&id_namespace(), name.as_bytes())
}

/// Where a device sits on a two-socket server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciPlacement {
    /// `pci0000:NN`.
    pub pcie_root: String,
    /// `0000:BB:00.0`.
    pub bus_id: String,
    /// The socket's NUMA node.
    pub numa_node: i64,
}

/// Device `index` of `total`: the first half on PCIe root `pci0000:00` and NUMA node 0
/// (buses `01`, `02`, …), the second half on `pci0000:80` and NUMA node 1 (buses `81`,
/// `82`, …), as on a two-socket server. `total` is at most 128, so buses stay below `ff`.
pub fn pci_placement(index: usize, total: usize) -> PciPlacement {
    let half = total.div_ceil(2);
    let (socket, slot): (u8, usize) = if index < half {
        (0, index)
    } else {
        (1, index - half)
    };
    let root = 0x80 * usize::from(socket);
    PciPlacement {
        pcie_root: format!("pci0000:{root:02x}"),
        bus_id: format!("0000:{:02x}:00.0", root + 1 + slot),
        numa_node: i64::from(socket),
    }
}

/// Packs a node's pool as Kubernetes 1.34 and as 1.35+ would, so a node the plumbing
/// would refuse at start is refused while its inventory is still at hand. The error
/// names the release.
pub fn check_publishable(
    node_name: &str,
    devices: Vec<SliceDevice>,
    counter_sets: Vec<CounterSet>,
) -> Result<(), (&'static str, PackError)> {
    let mut desired = Desired {
        // Only the limits matter here, not the driver's name.
        driver: "check".into(),
        node_name: node_name.to_owned(),
        pool: node_name.to_owned(),
        devices,
        counter_sets,
        layout: CounterLayout::WithDevices,
        // Splitting never refuses what packing accepts.
        split: SliceSplit::Packed,
    };
    for (layout, release) in [
        (CounterLayout::WithDevices, "1.34"),
        (CounterLayout::Separate, "1.35+"),
    ] {
        desired.layout = layout;
        slices::pack(&desired).map_err(|e| (release, e))?;
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_first_half_is_on_socket_zero_and_the_rest_on_socket_one() {
        let all: Vec<(String, String, i64)> = (0..5)
            .map(|i| {
                let p = pci_placement(i, 5);
                (p.pcie_root, p.bus_id, p.numa_node)
            })
            .collect();
        assert_eq!(
            all,
            [
                ("pci0000:00".into(), "0000:01:00.0".into(), 0),
                ("pci0000:00".into(), "0000:02:00.0".into(), 0),
                ("pci0000:00".into(), "0000:03:00.0".into(), 0),
                ("pci0000:80".into(), "0000:81:00.0".into(), 1),
                ("pci0000:80".into(), "0000:82:00.0".into(), 1),
            ]
        );
        assert_eq!(pci_placement(127, 128).bus_id, "0000:c0:00.0");
    }

    #[test]
    fn ids_depend_on_the_name_only() {
        assert_eq!(stable_uuid("a/b"), stable_uuid("a/b"));
        assert_ne!(stable_uuid("a/b"), stable_uuid("a/c"));
    }
}
