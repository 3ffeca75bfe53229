//! The node's ResourceSlice, without I/O: the devices it lists, the `v1` and `v1beta1`
//! objects, and what to change given the slices the API server has. The adapter is
//! [`crate::publish_slices`].
//!
//! One pool per node, named after the node, in one slice (`resourceSliceCount: 1`); the
//! pool generation goes up whenever what is published changes, so the scheduler never
//! mixes an old slice with a new one.

use k8s_openapi::api::resource::{v1, v1beta1};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::ObjectMeta;

use crate::profile::{Attribute, SliceDevice};

/// A slice of ours as the API has it, in version-neutral form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishedSlice {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.resourceVersion`, for updates.
    pub resource_version: Option<String>,
    /// `spec.driver`.
    pub driver: String,
    /// `spec.nodeName`.
    pub node_name: Option<String>,
    /// `spec.pool.name`.
    pub pool: String,
    /// `spec.pool.generation`.
    pub generation: i64,
    /// `spec.pool.resourceSliceCount`.
    pub slice_count: i64,
    /// `spec.devices`.
    pub devices: Vec<SliceDevice>,
}

/// What to publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    /// The driver name.
    pub driver: String,
    /// The node (and pool) name.
    pub node_name: String,
    pub devices: Vec<SliceDevice>,
}

impl Desired {
    /// Whether `slice` already says exactly what we want to say.
    fn is_published_by(&self, slice: &PublishedSlice) -> bool {
        slice.pool == self.node_name
            && slice.node_name.as_deref() == Some(self.node_name.as_str())
            && slice.slice_count == 1
            && slice.devices == self.devices
    }

    /// `generateName` of our slices: `<node>-<driver>-`.
    pub fn generate_name(&self) -> String {
        format!("{}-{}-", self.node_name, self.driver)
    }
}

/// What the publisher does in one round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlicePlan {
    /// The one slice is current; nothing to write.
    UpToDate,
    /// Write the desired devices with this pool generation, by updating the slice named
    /// `update` (keeping its resourceVersion) or creating one; then delete `delete`.
    Write {
        /// The slice to overwrite, if any; otherwise create.
        update: Option<(String, Option<String>)>,
        /// Its new pool generation.
        generation: i64,
        /// Stale slices of this node and driver.
        delete: Vec<String>,
    },
}

/// Decides what to do given this node's slices of our driver (`existing`, already
/// filtered) and the highest generation this process has published (`last_generation`,
/// so a slice deleted and recreated never goes back in generation).
pub fn plan(desired: &Desired, existing: &[PublishedSlice], last_generation: i64) -> SlicePlan {
    if let [only] = existing
        && desired.is_published_by(only)
        && only.generation >= last_generation
    {
        return SlicePlan::UpToDate;
    }
    let top = existing
        .iter()
        .map(|s| s.generation)
        .max()
        .unwrap_or(0)
        .max(last_generation);
    let mut rest = existing.iter();
    let update = rest
        .next()
        .map(|s| (s.name.clone(), s.resource_version.clone()));
    SlicePlan::Write {
        update,
        generation: top.saturating_add(1),
        delete: rest.map(|s| s.name.clone()).collect(),
    }
}

/// Whether an API slice belongs to this node and driver (a server that ignores the field
/// selector must not make us delete someone else's slices).
pub fn is_ours(slice: &PublishedSlice, driver: &str, node_name: &str) -> bool {
    slice.driver == driver && slice.node_name.as_deref() == Some(node_name)
}

fn meta(
    desired: &Desired,
    name: Option<&(String, Option<String>)>,
    owner: Option<&OwnerReference>,
) -> ObjectMeta {
    ObjectMeta {
        name: name.map(|(n, _)| n.clone()),
        generate_name: name.is_none().then(|| desired.generate_name()),
        resource_version: name.and_then(|(_, rv)| rv.clone()),
        owner_references: owner.map(|o| vec![o.clone()]),
        ..Default::default()
    }
}

macro_rules! attribute_conversions {
    ($ver:ident) => {
        pub(super) fn $ver(a: &Attribute) -> $ver::DeviceAttribute {
            match a {
                Attribute::Int(i) => $ver::DeviceAttribute {
                    int: Some(*i),
                    ..Default::default()
                },
                Attribute::String(s) => $ver::DeviceAttribute {
                    string: Some(s.clone()),
                    ..Default::default()
                },
                Attribute::Version(v) => $ver::DeviceAttribute {
                    version: Some(v.clone()),
                    ..Default::default()
                },
                Attribute::Bool(b) => $ver::DeviceAttribute {
                    bool: Some(*b),
                    ..Default::default()
                },
            }
        }
    };
}

mod attr {
    use super::*;
    attribute_conversions!(v1);
    attribute_conversions!(v1beta1);

    /// The value of an API attribute; `None` when it sets no (or an unknown) kind.
    pub fn from_parts(
        int: Option<i64>,
        string: Option<&String>,
        version: Option<&String>,
        bool: Option<bool>,
    ) -> Option<Attribute> {
        match (int, string, version, bool) {
            (Some(i), None, None, None) => Some(Attribute::Int(i)),
            (None, Some(s), None, None) => Some(Attribute::String(s.clone())),
            (None, None, Some(v), None) => Some(Attribute::Version(v.clone())),
            (None, None, None, Some(b)) => Some(Attribute::Bool(b)),
            _ => None,
        }
    }
}

/// The `resource.k8s.io/v1` slice: attributes directly on the device.
pub fn to_v1(
    desired: &Desired,
    update: Option<&(String, Option<String>)>,
    generation: i64,
    owner: Option<&OwnerReference>,
) -> v1::ResourceSlice {
    v1::ResourceSlice {
        metadata: meta(desired, update, owner),
        spec: v1::ResourceSliceSpec {
            driver: desired.driver.clone(),
            node_name: Some(desired.node_name.clone()),
            pool: v1::ResourcePool {
                name: desired.node_name.clone(),
                generation,
                resource_slice_count: 1,
            },
            devices: Some(
                desired
                    .devices
                    .iter()
                    .map(|d| v1::Device {
                        name: d.name.clone(),
                        attributes: Some(
                            d.attributes
                                .iter()
                                .map(|(k, a)| (k.clone(), attr::v1(a)))
                                .collect(),
                        ),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        },
    }
}

/// The `resource.k8s.io/v1beta1` slice: attributes under `devices[].basic`.
pub fn to_v1beta1(
    desired: &Desired,
    update: Option<&(String, Option<String>)>,
    generation: i64,
    owner: Option<&OwnerReference>,
) -> v1beta1::ResourceSlice {
    v1beta1::ResourceSlice {
        metadata: meta(desired, update, owner),
        spec: v1beta1::ResourceSliceSpec {
            driver: desired.driver.clone(),
            node_name: Some(desired.node_name.clone()),
            pool: v1beta1::ResourcePool {
                name: desired.node_name.clone(),
                generation,
                resource_slice_count: 1,
            },
            devices: Some(
                desired
                    .devices
                    .iter()
                    .map(|d| v1beta1::Device {
                        name: d.name.clone(),
                        basic: Some(v1beta1::BasicDevice {
                            attributes: Some(
                                d.attributes
                                    .iter()
                                    .map(|(k, a)| (k.clone(), attr::v1beta1(a)))
                                    .collect(),
                            ),
                            ..Default::default()
                        }),
                    })
                    .collect(),
            ),
            ..Default::default()
        },
    }
}

/// A `v1` slice in neutral form. Attributes of a kind we do not know are left out, so
/// such a slice never compares equal to ours and gets rewritten.
pub fn from_v1(s: &v1::ResourceSlice) -> PublishedSlice {
    PublishedSlice {
        name: s.metadata.name.clone().unwrap_or_default(),
        resource_version: s.metadata.resource_version.clone(),
        driver: s.spec.driver.clone(),
        node_name: s.spec.node_name.clone(),
        pool: s.spec.pool.name.clone(),
        generation: s.spec.pool.generation,
        slice_count: s.spec.pool.resource_slice_count,
        devices: s
            .spec
            .devices
            .iter()
            .flatten()
            .map(|d| SliceDevice {
                name: d.name.clone(),
                attributes: d
                    .attributes
                    .iter()
                    .flatten()
                    .filter_map(|(k, a)| {
                        attr::from_parts(a.int, a.string.as_ref(), a.version.as_ref(), a.bool)
                            .map(|v| (k.clone(), v))
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// A `v1beta1` slice in neutral form.
pub fn from_v1beta1(s: &v1beta1::ResourceSlice) -> PublishedSlice {
    PublishedSlice {
        name: s.metadata.name.clone().unwrap_or_default(),
        resource_version: s.metadata.resource_version.clone(),
        driver: s.spec.driver.clone(),
        node_name: s.spec.node_name.clone(),
        pool: s.spec.pool.name.clone(),
        generation: s.spec.pool.generation,
        slice_count: s.spec.pool.resource_slice_count,
        devices: s
            .spec
            .devices
            .iter()
            .flatten()
            .map(|d| SliceDevice {
                name: d.name.clone(),
                attributes: d
                    .basic
                    .iter()
                    .flat_map(|b| b.attributes.iter().flatten())
                    .filter_map(|(k, a)| {
                        attr::from_parts(a.int, a.string.as_ref(), a.version.as_ref(), a.bool)
                            .map(|v| (k.clone(), v))
                    })
                    .collect(),
            })
            .collect(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    /// The fake device's slice of a node with `n` devices.
    fn desired(n: usize) -> Desired {
        use crate::profile::DeviceProfile;
        let inv =
            crate::fake::devices::Inventory::new("node-1", n, &["ULTRA_10".to_string()]).unwrap();
        Desired {
            driver: "fake.resource.3-shake.com".into(),
            node_name: "node-1".into(),
            devices: crate::fake::FakeProfile::new(inv, "fake.resource.3-shake.com")
                .slice_devices(),
        }
    }

    fn published(name: &str, d: &Desired, generation: i64) -> PublishedSlice {
        PublishedSlice {
            name: name.into(),
            resource_version: Some("7".into()),
            driver: d.driver.clone(),
            node_name: Some(d.node_name.clone()),
            pool: d.node_name.clone(),
            generation,
            slice_count: 1,
            devices: d.devices.clone(),
        }
    }

    #[test]
    fn v1_layout() {
        let d = desired(2);
        let owner = OwnerReference {
            api_version: "v1".into(),
            kind: "Node".into(),
            name: "node-1".into(),
            uid: "n-uid".into(),
            ..Default::default()
        };
        let slice = to_v1(&d, None, 3, Some(&owner));
        let json = serde_json::to_value(&slice).unwrap();
        assert_eq!(json["apiVersion"], "resource.k8s.io/v1");
        assert_eq!(json["kind"], "ResourceSlice");
        assert_eq!(
            json["metadata"]["generateName"],
            "node-1-fake.resource.3-shake.com-"
        );
        assert_eq!(json["metadata"]["ownerReferences"][0]["uid"], "n-uid");
        assert_eq!(json["spec"]["nodeName"], "node-1");
        assert_eq!(
            json["spec"]["pool"],
            json!({"name": "node-1", "generation": 3, "resourceSliceCount": 1})
        );
        let dev = &json["spec"]["devices"][1];
        assert_eq!(dev["name"], "fake-1");
        assert_eq!(dev["attributes"]["index"], json!({"int": 1}));
        assert_eq!(dev["attributes"]["model"], json!({"string": "ULTRA_10"}));
        assert_eq!(
            dev["attributes"]["driverVersion"],
            json!({"version": "0.1.0"})
        );
        assert!(
            dev["attributes"]["uuid"]["string"]
                .as_str()
                .unwrap()
                .starts_with("FAKE-")
        );
        assert_eq!(from_v1(&slice).devices, d.devices);
    }

    #[test]
    fn v1beta1_nests_under_basic() {
        let d = desired(2);
        let slice = to_v1beta1(&d, Some(&("s1".into(), Some("5".into()))), 1, None);
        let json = serde_json::to_value(&slice).unwrap();
        assert_eq!(json["apiVersion"], "resource.k8s.io/v1beta1");
        assert_eq!(json["metadata"]["name"], "s1");
        assert_eq!(json["metadata"]["resourceVersion"], "5");
        assert!(json["metadata"].get("generateName").is_none());
        assert_eq!(
            json["spec"]["devices"][0]["basic"]["attributes"]["index"],
            json!({"int": 0})
        );
        assert!(json["spec"]["devices"][0].get("attributes").is_none());
        let back = from_v1beta1(&slice);
        assert_eq!(back.devices, d.devices);
        assert!(is_ours(&back, &d.driver, "node-1"));
        assert!(!is_ours(&back, &d.driver, "node-2"));
    }

    #[test]
    fn plans() {
        let d = desired(8);
        assert_eq!(
            plan(&d, &[], 0),
            SlicePlan::Write {
                update: None,
                generation: 1,
                delete: vec![]
            }
        );
        assert_eq!(plan(&d, &[published("a", &d, 4)], 4), SlicePlan::UpToDate);
        // Deleted by hand and recreated: a new generation, above what we published.
        assert_eq!(
            plan(&d, &[], 4),
            SlicePlan::Write {
                update: None,
                generation: 5,
                delete: vec![]
            }
        );
        // Devices changed (--num-devices): same object, next generation.
        let old = published("a", &desired(4), 2);
        assert_eq!(
            plan(&d, &[old], 0),
            SlicePlan::Write {
                update: Some(("a".into(), Some("7".into()))),
                generation: 3,
                delete: vec![]
            }
        );
        // Two slices for one pool: keep one, delete the other.
        assert_eq!(
            plan(&d, &[published("a", &d, 2), published("b", &d, 6)], 0),
            SlicePlan::Write {
                update: Some(("a".into(), Some("7".into()))),
                generation: 7,
                delete: vec!["b".into()]
            }
        );
    }

    proptest! {
        #[test]
        fn generation_never_goes_back_and_a_write_converges(
            gens in proptest::collection::vec(0i64..100, 0..4), last in 0i64..100, n in 1usize..=128,
        ) {
            let d = desired(n);
            let existing: Vec<_> = gens.iter().enumerate().map(|(i, g)| published(&format!("s{i}"), &d, *g)).collect();
            match plan(&d, &existing, last) {
                SlicePlan::UpToDate => prop_assert!(existing.len() == 1 && existing[0].generation >= last),
                SlicePlan::Write { update, generation, delete } => {
                    prop_assert!(gens.iter().all(|g| *g < generation) && last < generation);
                    prop_assert_eq!(delete.len(), existing.len().saturating_sub(1));
                    let name = update.map(|(n, _)| n).unwrap_or_else(|| "new".into());
                    let after = PublishedSlice { name, generation, ..published("x", &d, generation) };
                    prop_assert_eq!(plan(&d, &[after], generation), SlicePlan::UpToDate);
                }
            }
        }
    }
}
