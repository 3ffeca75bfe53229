//! What preparing a claim means given the claims already prepared, without I/O and
//! whatever the device: the same claim with the same devices again is nothing to do, with
//! others it is refused until unprepared, and no device is held by two claims.

use std::collections::BTreeMap;

use crate::checkpoint::Entry;
use crate::claim::{ClaimError, ClaimRef, ClaimUid};
use crate::profile::DeviceProfile;

/// The outcome of [`plan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan<P> {
    /// Already prepared exactly so: answer with the same ids, write nothing.
    AlreadyPrepared,
    /// Prepare it: write the spec, record it.
    Prepare(Entry<P>),
}

/// Decides what preparing `claim` as `wanted` (the profile's reading of the request)
/// means given the claims prepared so far.
pub fn plan<D: DeviceProfile>(
    profile: &D,
    prepared: &BTreeMap<ClaimUid, Entry<D::Prepared>>,
    claim: &ClaimRef,
    wanted: D::Prepared,
) -> Result<Plan<D::Prepared>, ClaimError> {
    if let Some(existing) = prepared.get(&claim.uid) {
        if existing.prepared == wanted {
            return Ok(Plan::AlreadyPrepared);
        }
        return Err(ClaimError::Changed {
            claim: claim.to_string(),
            prepared: profile.held_devices(&existing.prepared),
            requested: profile.held_devices(&wanted),
        });
    }
    let held = profile.held_devices(&wanted);
    for (uid, other) in prepared {
        let theirs = profile.held_devices(&other.prepared);
        if let Some(device) = held.iter().find(|d| theirs.contains(d)) {
            return Err(ClaimError::DeviceInUse {
                claim: claim.to_string(),
                device: device.clone(),
                holder: format!("{}/{} ({uid})", other.namespace, other.name),
            });
        }
    }
    Ok(Plan::Prepare(Entry {
        namespace: claim.namespace.clone(),
        name: claim.name.clone(),
        prepared: wanted,
    }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use fake_dra_api::handle::AllocationHandle;
    use proptest::prelude::*;

    use super::*;
    use crate::fake::FakeProfile;
    use crate::fake::devices::Inventory;

    fn inventory() -> Inventory {
        Inventory::new("node-1", 8, &["ULTRA_10".to_string()]).unwrap()
    }

    fn profile() -> FakeProfile {
        FakeProfile::new(inventory(), "drv")
    }

    fn handle(inv: &Inventory, idx: &[usize], split: u32) -> String {
        AllocationHandle {
            node_name: inv.node_name.clone(),
            model: inv.model.clone(),
            split,
            devices: idx.iter().map(|&i| inv.devices[i].clone()).collect(),
        }
        .to_json()
    }

    fn claim(uid: &str) -> ClaimRef {
        ClaimRef::new(uid, "ns", &format!("claim-{uid}")).unwrap()
    }

    type Prepared = BTreeMap<ClaimUid, Entry<crate::fake::FakePrepared>>;

    /// A classic prepare: the profile reads the handle, the plumbing decides.
    fn plan_handle(
        prepared: &Prepared,
        claim: &ClaimRef,
        handle: &str,
    ) -> Result<Plan<crate::fake::FakePrepared>, ClaimError> {
        let p = profile();
        let wanted = p
            .prepare_handle(claim, handle)
            .map_err(|source| ClaimError::Device {
                claim: claim.to_string(),
                source,
            })?;
        plan(&p, prepared, claim, wanted)
    }

    #[test]
    fn prepares_own_devices() {
        let inv = inventory();
        let got = plan_handle(
            &BTreeMap::new(),
            &claim("u1"),
            &handle(&inv, &[0, 1, 2, 3], 2),
        )
        .unwrap();
        let Plan::Prepare(p) = got else {
            panic!("{got:?}")
        };
        assert_eq!(p.prepared.devices, inv.devices[..4].to_vec());
        assert_eq!(p.prepared.children().len(), 8);
        assert_eq!((p.namespace.as_str(), p.name.as_str()), ("ns", "claim-u1"));
    }

    #[test]
    fn refuses_foreign_and_mismatched_handles() {
        let inv = inventory();
        let other = Inventory::new("node-2", 8, &["ULTRA_10".to_string()]).unwrap();
        let none = BTreeMap::new();
        let err = plan_handle(&none, &claim("u"), &handle(&other, &[0], 1)).unwrap_err();
        assert_eq!(err.reason(), "wrong_node", "{err}");
        let foreign = AllocationHandle {
            node_name: "node-1".into(),
            model: "ULTRA_10".into(),
            split: 1,
            devices: vec![other.devices[0].clone()],
        }
        .to_json();
        let err = plan_handle(&none, &claim("u"), &foreign)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&other.devices[0]) && err.contains("not a device of node"),
            "{err}"
        );
        let wrong_model = handle(&inv, &[0], 1).replace("ULTRA_10", "ULTRA_100");
        let err = plan_handle(&none, &claim("u"), &wrong_model).unwrap_err();
        assert_eq!(err.reason(), "wrong_model", "{err}");
        let err = plan_handle(&none, &claim("u"), "not json")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("claim ns/claim-u (u): allocation handle is not JSON"),
            "{err}"
        );
    }

    #[test]
    fn same_claim_again_is_a_no_op_and_changes_are_refused() {
        let inv = inventory();
        let Plan::Prepare(p) =
            plan_handle(&BTreeMap::new(), &claim("u1"), &handle(&inv, &[0], 2)).unwrap()
        else {
            panic!()
        };
        let prepared = BTreeMap::from([(ClaimUid::parse("u1").unwrap(), p)]);
        assert_eq!(
            plan_handle(&prepared, &claim("u1"), &handle(&inv, &[0], 2)).unwrap(),
            Plan::AlreadyPrepared
        );
        let err = plan_handle(&prepared, &claim("u1"), &handle(&inv, &[1], 2)).unwrap_err();
        assert!(matches!(err, ClaimError::Changed { .. }), "{err}");
        let err = plan_handle(&prepared, &claim("u1"), &handle(&inv, &[0], 3)).unwrap_err();
        assert!(
            matches!(err, ClaimError::Changed { .. }),
            "split changed: {err}"
        );
    }

    #[test]
    fn a_device_serves_one_claim_at_a_time() {
        let inv = inventory();
        let Plan::Prepare(p) =
            plan_handle(&BTreeMap::new(), &claim("u1"), &handle(&inv, &[0, 1], 1)).unwrap()
        else {
            panic!()
        };
        let prepared = BTreeMap::from([(ClaimUid::parse("u1").unwrap(), p)]);
        let err = plan_handle(&prepared, &claim("u2"), &handle(&inv, &[1, 2], 1))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("ns/claim-u2 (u2)") && err.contains("ns/claim-u1 (u1)"),
            "{err}"
        );
    }

    proptest! {
        #[test]
        fn prepared_sets_never_share_a_device(
            claims in proptest::collection::vec((proptest::collection::btree_set(0usize..8, 1..4), 1u32..4), 1..10)
        ) {
            let inv = inventory();
            let mut prepared = BTreeMap::new();
            for (n, (idx, split)) in claims.iter().enumerate() {
                let idx: Vec<usize> = idx.iter().copied().collect();
                let uid = format!("u{n}");
                if let Ok(Plan::Prepare(p)) = plan_handle(&prepared, &claim(&uid), &handle(&inv, &idx, *split)) {
                    prepared.insert(ClaimUid::parse(&uid).unwrap(), p);
                }
            }
            let mut seen = std::collections::HashSet::new();
            for p in prepared.values() {
                for d in &p.prepared.devices {
                    prop_assert!(seen.insert(d.clone()), "device {} twice", d);
                }
            }
        }
    }
}
