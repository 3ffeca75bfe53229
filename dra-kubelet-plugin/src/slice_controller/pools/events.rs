//! What a slice event means for the pools, without I/O: our own write's echo, or a
//! change someone else made that the pool must be listed and written over for.

use std::collections::{BTreeMap, BTreeSet};

use super::PoolState;
use crate::pool::PublishedSlice;

/// A slice event: our own write's echo (nothing), or a change to list and write over
/// (the pool's name).
pub(super) fn external_change(
    pools: &mut BTreeMap<String, PoolState>,
    driver: &str,
    slice: &PublishedSlice,
    deleted: bool,
) -> Option<String> {
    if slice.driver != driver {
        return None;
    }
    let state = pools.get_mut(&slice.pool)?;
    if slice.node_name.as_deref() != Some(state.node.as_str()) {
        return None;
    }
    let echo = state
        .record
        .iter()
        .any(|r| r.name == slice.name && r.resource_version == slice.resource_version);
    let held = state.record.iter().any(|r| r.name == slice.name);
    if deleted && !held || !deleted && echo {
        return None;
    }
    state.needs_list = true;
    state.in_sync = false;
    Some(slice.pool.clone())
}

/// After the watch was lost and listed again, a change made while it was away (a slice
/// deleted by hand or by the garbage collector) comes as no event: every pool whose
/// listed slices are not the ones last written, set to be listed and written.
pub(super) fn stale_after_relist(
    pools: &mut BTreeMap<String, PoolState>,
    driver: &str,
    listed: &[PublishedSlice],
) -> Vec<String> {
    let mut seen: BTreeMap<&str, BTreeSet<(&str, Option<&str>)>> = BTreeMap::new();
    for slice in listed.iter().filter(|s| s.driver == driver) {
        if slice.node_name.is_some() {
            seen.entry(slice.pool.as_str())
                .or_default()
                .insert((slice.name.as_str(), slice.resource_version.as_deref()));
        }
    }
    pools
        .iter_mut()
        .filter_map(|(name, state)| {
            let recorded: BTreeSet<(&str, Option<&str>)> = state
                .record
                .iter()
                .map(|r| (r.name.as_str(), r.resource_version.as_deref()))
                .collect();
            let listed = seen.remove(name.as_str()).unwrap_or_default();
            (recorded != listed).then(|| {
                state.needs_list = true;
                state.in_sync = false;
                name.clone()
            })
        })
        .collect()
}
