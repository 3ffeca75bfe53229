//! What to change given the slices the API server has: the pool's slices rewritten
//! together under a new generation, or nothing.

use std::collections::BTreeSet;

use super::{Desired, PublishedSlice, SliceContent};
use crate::model::SliceDevice;

/// An existing slice to overwrite: its name and resourceVersion.
pub type Existing = (String, Option<String>);

/// What the publisher does in one round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlicePlan {
    /// The pool is current; nothing to write.
    UpToDate,
    /// Write every slice of the pool with this generation, then delete `delete`.
    Write {
        /// The new pool generation.
        generation: i64,
        /// Each slice: the existing one to overwrite (name, resourceVersion), or `None`
        /// to create one; and its content.
        slices: Vec<(Option<Existing>, SliceContent)>,
        /// Slices the pool no longer needs.
        delete: Vec<String>,
    },
}

/// Whether `existing` is exactly the pool `expected`: one generation (not below
/// `last_generation`), the right slice count and node, and the same contents in any
/// order.
fn is_current(
    desired: &Desired,
    expected: &[SliceContent],
    existing: &[PublishedSlice],
    last_generation: i64,
) -> bool {
    let Some(first) = existing.first() else {
        return false;
    };
    if existing.len() != expected.len() || first.generation < last_generation {
        return false;
    }
    let mut unmatched: Vec<&SliceContent> = expected.iter().collect();
    for s in existing {
        if s.generation != first.generation
            || s.pool != desired.pool
            || s.node_name.as_deref() != Some(desired.node_name.as_str())
            || usize::try_from(s.slice_count).ok() != Some(expected.len())
        {
            return false;
        }
        match unmatched.iter().position(|c| **c == s.content) {
            Some(i) => {
                unmatched.swap_remove(i);
            }
            None => return false,
        }
    }
    unmatched.is_empty()
}

/// Decides what to do given this pool's slices of our driver (`existing`, already
/// filtered). `packed` is what [`super::pack`] made of the desired devices; `expected` what the
/// API server stores when given them (the same, unless it drops fields whose feature
/// gate is off: see [`dropped_features`]). `last_generation` is the highest generation
/// this process published, so a pool deleted and recreated never goes back.
pub fn plan(
    desired: &Desired,
    packed: &[SliceContent],
    expected: &[SliceContent],
    existing: &[PublishedSlice],
    last_generation: i64,
) -> SlicePlan {
    if is_current(desired, expected, existing, last_generation) {
        return SlicePlan::UpToDate;
    }
    let top = existing
        .iter()
        .map(|s| s.generation)
        .max()
        .unwrap_or(0)
        .max(last_generation);
    let mut reuse: Vec<&PublishedSlice> = existing.iter().collect();
    reuse.sort_by(|a, b| a.name.cmp(&b.name));
    let mut reuse = reuse.into_iter();
    let slices = packed
        .iter()
        .map(|content| {
            (
                reuse
                    .next()
                    .map(|s| (s.name.clone(), s.resource_version.clone())),
                content.clone(),
            )
        })
        .collect();
    SlicePlan::Write {
        generation: top.saturating_add(1),
        slices,
        delete: reuse.map(|s| s.name.clone()).collect(),
    }
}

/// Whether an API slice belongs to this pool of this node and driver (a server that
/// ignores the field selector must not make us delete someone else's slices, nor a
/// pool's round another pool's).
pub fn is_ours(slice: &PublishedSlice, driver: &str, node_name: &str, pool: &str) -> bool {
    slice.driver == driver && slice.node_name.as_deref() == Some(node_name) && slice.pool == pool
}

/// The feature gates whose fields the API server dropped from a slice we wrote (`sent`,
/// and what it stored, `stored`): kube-apiserver silently drops the fields of a disabled
/// gate (`dropDisabled*Fields` in `pkg/registry/resource/resourceslice/strategy.go`).
pub fn dropped_features(sent: &SliceContent, stored: &SliceContent) -> Vec<&'static str> {
    let mut gates = BTreeSet::new();
    if !sent.counter_sets.is_empty() && stored.counter_sets.is_empty() {
        gates.insert("DRAPartitionableDevices (sharedCounters)");
    }
    for (s, t) in sent.devices.iter().zip(&stored.devices) {
        if !s.consumes_counters.is_empty() && t.consumes_counters.is_empty() {
            gates.insert("DRAPartitionableDevices (consumesCounters)");
        }
        if !s.taints.is_empty() && t.taints.is_empty() {
            gates.insert("DRADeviceTaints (taints)");
        }
        if s.allow_multiple_allocations && !t.allow_multiple_allocations {
            gates.insert("DRAConsumableCapacity (allowMultipleAllocations)");
        }
        if s.binding.is_some() && t.binding.is_none() {
            gates.insert("DRADeviceBindingConditions (bindingConditions)");
        }
        let policies = |d: &SliceDevice| {
            d.capacity
                .values()
                .filter(|c| c.request_policy.is_some())
                .count()
        };
        if policies(s) > policies(t) {
            gates.insert("DRAConsumableCapacity (capacity requestPolicy)");
        }
    }
    gates.into_iter().collect()
}
