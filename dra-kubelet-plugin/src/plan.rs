//! What preparing a claim means given the claims already prepared, without I/O and
//! whatever the device: the same claim with the same devices again is nothing to do, with
//! others it is refused until unprepared, and no device is held by two claims.

use std::collections::BTreeMap;

use crate::checkpoint::Entry;
use crate::claim_data::{ClaimRef, ClaimUid};
use crate::claim_error::ClaimError;
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
        phase: crate::checkpoint::Phase::Completed,
        prepared: wanted,
    }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::testing::{TestPrepared, TestProfile};

    fn claim(uid: &str) -> ClaimRef {
        ClaimRef::new(uid, "ns", &format!("claim-{uid}")).unwrap()
    }

    fn wanted(idx: &[usize], start: u32) -> TestPrepared {
        TestPrepared {
            counters: idx.iter().map(|i| format!("counter-{i}")).collect(),
            start,
        }
    }

    type Prepared = BTreeMap<ClaimUid, Entry<TestPrepared>>;

    fn plan_of(
        prepared: &Prepared,
        claim: &ClaimRef,
        w: TestPrepared,
    ) -> Result<Plan<TestPrepared>, ClaimError> {
        plan(&TestProfile::new(8), prepared, claim, w)
    }

    #[test]
    fn a_new_claim_is_prepared_with_its_namespace_and_name() {
        let got = plan_of(&BTreeMap::new(), &claim("u1"), wanted(&[0, 1], 0)).unwrap();
        let Plan::Prepare(p) = got else {
            panic!("{got:?}")
        };
        assert_eq!(p.prepared, wanted(&[0, 1], 0));
        assert_eq!((p.namespace.as_str(), p.name.as_str()), ("ns", "claim-u1"));
    }

    #[test]
    fn same_claim_again_is_a_no_op_and_changes_are_refused() {
        let Plan::Prepare(p) = plan_of(&BTreeMap::new(), &claim("u1"), wanted(&[0], 2)).unwrap()
        else {
            panic!()
        };
        let prepared = BTreeMap::from([(ClaimUid::parse("u1").unwrap(), p)]);
        assert_eq!(
            plan_of(&prepared, &claim("u1"), wanted(&[0], 2)).unwrap(),
            Plan::AlreadyPrepared
        );
        let err = plan_of(&prepared, &claim("u1"), wanted(&[1], 2)).unwrap_err();
        assert!(matches!(err, ClaimError::Changed { .. }), "{err}");
        let err = plan_of(&prepared, &claim("u1"), wanted(&[0], 3)).unwrap_err();
        assert!(
            matches!(err, ClaimError::Changed { .. }),
            "start changed: {err}"
        );
    }

    #[test]
    fn a_device_serves_one_claim_at_a_time() {
        let Plan::Prepare(p) = plan_of(&BTreeMap::new(), &claim("u1"), wanted(&[0, 1], 0)).unwrap()
        else {
            panic!()
        };
        let prepared = BTreeMap::from([(ClaimUid::parse("u1").unwrap(), p)]);
        let err = plan_of(&prepared, &claim("u2"), wanted(&[1, 2], 0)).unwrap_err();
        assert_eq!(err.reason(), "device_in_use");
        let err = err.to_string();
        assert!(
            err.contains("ns/claim-u2 (u2)") && err.contains("ns/claim-u1 (u1)"),
            "{err}"
        );
    }

    proptest! {
        #[test]
        fn prepared_sets_never_share_a_device(
            claims in proptest::collection::vec(proptest::collection::btree_set(0usize..8, 1..4), 1..10)
        ) {
            let mut prepared = BTreeMap::new();
            for (n, idx) in claims.iter().enumerate() {
                let idx: Vec<usize> = idx.iter().copied().collect();
                let uid = format!("u{n}");
                if let Ok(Plan::Prepare(p)) = plan_of(&prepared, &claim(&uid), wanted(&idx, 0)) {
                    prepared.insert(ClaimUid::parse(&uid).unwrap(), p);
                }
            }
            let mut seen = std::collections::HashSet::new();
            for p in prepared.values() {
                for d in &p.prepared.counters {
                    prop_assert!(seen.insert(d.clone()), "device {} twice", d);
                }
            }
        }
    }
}
