use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::model::{
    Capacity, CounterConsumption, DeviceTaint, RequestPolicy, TaintEffect, ValidRange,
};
use crate::quantity::Quantity;

/// The slice of a node with `n` devices of the test profile.
fn desired(n: usize) -> Desired {
    use crate::profile::DeviceProfile;
    Desired {
        driver: "fake.resource.3-shake.com".into(),
        node_name: "node-1".into(),
        pool: "node-1".into(),
        devices: crate::testing::TestProfile::new(n).slice_devices(),
        counter_sets: Vec::new(),
        layout: CounterLayout::Separate,
        split: SliceSplit::Packed,
    }
}

fn published(
    name: &str,
    d: &Desired,
    content: SliceContent,
    generation: i64,
    count: i64,
) -> PublishedSlice {
    PublishedSlice {
        name: name.into(),
        resource_version: Some("7".into()),
        driver: d.driver.clone(),
        node_name: Some(d.node_name.clone()),
        pool: d.node_name.clone(),
        generation,
        slice_count: count,
        content,
    }
}

fn one(d: &Desired, name: &str, generation: i64) -> PublishedSlice {
    let content = pack(d).unwrap().remove(0);
    published(name, d, content, generation, 1)
}

fn plan_of(d: &Desired, existing: &[PublishedSlice], last: i64) -> SlicePlan {
    let packed = pack(d).unwrap();
    plan(d, &packed, &packed, existing, last)
}

/// A partitionable GPU: a counter set and `parts` partitions consuming from it.
fn gpu(i: usize, parts: usize) -> (CounterSet, Vec<SliceDevice>) {
    let set = CounterSet {
        name: format!("gpu-{i}-counters"),
        counters: BTreeMap::from([
            ("memory".to_owned(), Quantity::from("80Gi")),
            ("slices".to_owned(), Quantity::from("7")),
        ]),
    };
    let devices = (0..parts)
        .map(|p| SliceDevice {
            name: format!("gpu-{i}-part-{p}"),
            consumes_counters: vec![CounterConsumption {
                counter_set: set.name.clone(),
                counters: BTreeMap::from([("slices".to_owned(), Quantity::from("1"))]),
            }],
            ..Default::default()
        })
        .collect();
    (set, devices)
}

fn partitioned(gpus: usize, parts: usize, layout: CounterLayout) -> Desired {
    let mut d = desired(1);
    d.devices.clear();
    d.layout = layout;
    for i in 0..gpus {
        let (set, devices) = gpu(i, parts);
        d.counter_sets.push(set);
        d.devices.extend(devices);
    }
    d
}

mod convert;

#[test]
fn plans() {
    let d = desired(8);
    let content = pack(&d).unwrap().remove(0);
    assert_eq!(
        plan_of(&d, &[], 0),
        SlicePlan::Write {
            generation: 1,
            slices: vec![(None, content.clone())],
            delete: vec![]
        }
    );
    assert_eq!(plan_of(&d, &[one(&d, "a", 4)], 4), SlicePlan::UpToDate);
    // Deleted by hand and recreated: a new generation, above what we published.
    assert_eq!(
        plan_of(&d, &[], 4),
        SlicePlan::Write {
            generation: 5,
            slices: vec![(None, content.clone())],
            delete: vec![]
        }
    );
    // Devices changed (--num-devices): same object, next generation.
    let old = one(&desired(4), "a", 2);
    assert_eq!(
        plan_of(&d, &[old], 0),
        SlicePlan::Write {
            generation: 3,
            slices: vec![(Some(("a".into(), Some("7".into()))), content.clone())],
            delete: vec![]
        }
    );
    // Two slices for a one-slice pool: keep one, delete the other.
    assert_eq!(
        plan_of(&d, &[one(&d, "b", 6), one(&d, "a", 2)], 0),
        SlicePlan::Write {
            generation: 7,
            slices: vec![(Some(("a".into(), Some("7".into()))), content)],
            delete: vec!["b".into()]
        }
    );
}

#[test]
fn a_pool_of_many_slices_is_current_only_when_whole_and_of_one_generation() {
    let d = partitioned(12, 10, CounterLayout::Separate);
    let packed = pack(&d).unwrap();
    // 12 counter sets: two counter slices (8 + 4); 120 partitions with counters: 64 + 56.
    assert_eq!(packed.len(), 4);
    let n = packed.len() as i64;
    let whole: Vec<_> = packed
        .iter()
        .enumerate()
        .map(|(i, c)| published(&format!("s{i}"), &d, c.clone(), 3, n))
        .collect();
    assert_eq!(plan(&d, &packed, &packed, &whole, 3), SlicePlan::UpToDate);
    let mut reversed = whole.clone();
    reversed.reverse();
    assert_eq!(
        plan(&d, &packed, &packed, &reversed, 3),
        SlicePlan::UpToDate
    );
    // One missing, one of another generation, a wrong count: all rewritten.
    let missing = &whole[1..];
    let mut mixed = whole.clone();
    mixed[2].generation = 2;
    let mut miscounted = whole.clone();
    miscounted[0].slice_count = 3;
    for existing in [missing, &mixed[..], &miscounted[..]] {
        let SlicePlan::Write {
            generation,
            slices,
            delete,
        } = plan(&d, &packed, &packed, existing, 3)
        else {
            panic!("not current: {existing:?}");
        };
        assert_eq!(generation, 4);
        assert_eq!(slices.len(), 4);
        assert!(delete.is_empty());
    }
}

#[test]
fn counter_sets_get_slices_of_their_own_from_1_35() {
    let d = partitioned(2, 3, CounterLayout::Separate);
    let packed = pack(&d).unwrap();
    assert_eq!(packed.len(), 2);
    assert!(packed[0].devices.is_empty());
    assert_eq!(packed[0].counter_sets.len(), 2);
    assert_eq!(packed[1].devices.len(), 6);
    assert!(packed[1].counter_sets.is_empty());
    // Only one of sharedCounters or devices may be set: the counter slice has no devices
    // field at all; a device slice has no sharedCounters.
    let json = serde_json::to_value(to_v1(&d, None, &packed[0], 1, 2, None)).unwrap();
    assert!(json["spec"].get("devices").is_none(), "{json}");
    assert_eq!(json["spec"]["pool"]["resourceSliceCount"], 2);
    let json = serde_json::to_value(to_v1(&d, None, &packed[1], 1, 2, None)).unwrap();
    assert!(json["spec"].get("sharedCounters").is_none(), "{json}");
}

#[test]
fn counter_sets_share_their_devices_slice_on_1_34() {
    // 16 GPUs of 2 counters each is 32 shared counters: one slice; the 17th needs another.
    let d = partitioned(17, 3, CounterLayout::WithDevices);
    let packed = pack(&d).unwrap();
    assert_eq!(packed.len(), 2);
    for slice in &packed {
        for dev in &slice.devices {
            let set = &dev.consumes_counters[0].counter_set;
            assert!(
                slice.counter_sets.iter().any(|s| &s.name == set),
                "{} consumes {set}, which is in another slice",
                dev.name
            );
        }
    }
    assert_eq!(packed[0].counter_sets.len(), 16);
    assert_eq!(packed[1].counter_sets.len(), 1);
}

#[test]
fn split_per_counter_set_gives_each_set_s_devices_slices_of_their_own() {
    let shape = |d: &Desired| -> Vec<(Vec<String>, usize)> {
        pack(d)
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s.counter_sets.iter().map(|c| c.name.clone()).collect(),
                    s.devices.len(),
                )
            })
            .collect()
    };
    let sets = |names: &[&str]| -> Vec<String> { names.iter().map(|n| n.to_string()).collect() };
    for layout in [CounterLayout::WithDevices, CounterLayout::Separate] {
        // Three GPUs of 3 partitions, listed out of order, and 4 devices without counters.
        let mut d = partitioned(3, 3, layout);
        d.devices.rotate_left(4);
        d.devices.extend(desired(4).devices);
        let packed_shape = shape(&d);
        d.split = SliceSplit::PerCounterSet;
        let split = pack(&d).unwrap();
        for s in &split {
            let consumed: BTreeSet<&str> = s
                .devices
                .iter()
                .filter_map(|dev| dev.consumes_counters.first())
                .map(|c| c.counter_set.as_str())
                .collect();
            assert!(
                consumed.len() <= 1,
                "{layout:?}: one slice has devices of {consumed:?}"
            );
        }
        let mut names: Vec<&str> = split
            .iter()
            .flat_map(|s| s.devices.iter().map(|dev| dev.name.as_str()))
            .collect();
        names.sort_unstable();
        let mut want: Vec<&str> = d.devices.iter().map(|dev| dev.name.as_str()).collect();
        want.sort_unstable();
        assert_eq!(names, want, "{layout:?}: every device once");
        match layout {
            CounterLayout::WithDevices => {
                assert_eq!(
                    packed_shape,
                    [(
                        sets(&["gpu-0-counters", "gpu-1-counters", "gpu-2-counters"]),
                        13
                    )]
                );
                assert_eq!(
                    shape(&d),
                    [
                        (sets(&["gpu-0-counters"]), 3),
                        (sets(&["gpu-1-counters"]), 3),
                        (sets(&["gpu-2-counters"]), 3),
                        (sets(&[]), 4),
                    ]
                );
            }
            CounterLayout::Separate => {
                let all = sets(&["gpu-0-counters", "gpu-1-counters", "gpu-2-counters"]);
                assert_eq!(packed_shape, [(all.clone(), 0), (sets(&[]), 13)]);
                assert_eq!(
                    shape(&d),
                    [
                        (all, 0),
                        (sets(&[]), 3),
                        (sets(&[]), 3),
                        (sets(&[]), 3),
                        (sets(&[]), 4)
                    ]
                );
            }
        }
    }
}

#[test]
fn devices_fill_slices_of_128_or_64_with_counters_or_taints() {
    let d = desired(128);
    assert_eq!(pack(&d).unwrap().len(), 1);
    let mut big = desired(128);
    big.devices
        .extend(desired(1).devices.into_iter().map(|mut x| {
            x.name = "counter-extra".into();
            x
        }));
    assert_eq!(
        pack(&big)
            .unwrap()
            .iter()
            .map(|s| s.devices.len())
            .collect::<Vec<_>>(),
        [128, 1]
    );
    let mut tainted = desired(100);
    tainted.devices[70].taints = vec![DeviceTaint {
        key: "k".into(),
        value: None,
        effect: TaintEffect::NoSchedule,
    }];
    let sizes: Vec<usize> = pack(&tainted)
        .unwrap()
        .iter()
        .map(|s| s.devices.len())
        .collect();
    assert_eq!(
        sizes,
        [70, 30],
        "the tainted device starts a slice of at most 64"
    );
    // 1.34 has no such limit.
    tainted.layout = CounterLayout::WithDevices;
    assert_eq!(pack(&tainted).unwrap().len(), 1);
}

#[test]
fn what_cannot_be_published_is_refused_naming_the_device_and_the_limit() {
    let mut d = partitioned(1, 2, CounterLayout::Separate);
    d.devices[1].consumes_counters[0].counter_set = "nope".into();
    assert_eq!(
        pack(&d).unwrap_err().to_string(),
        "device \"gpu-0-part-1\" consumes from counter set \"nope\", which the pool does not have"
    );
    let mut d = partitioned(1, 2, CounterLayout::Separate);
    d.devices[0].consumes_counters[0]
        .counters
        .insert("cores".into(), "1".into());
    assert!(
        pack(&d)
            .unwrap_err()
            .to_string()
            .contains("no such counter")
    );
    let mut d = partitioned(3, 1, CounterLayout::Separate);
    let extra: Vec<_> = (1..3)
        .map(|i| CounterConsumption {
            counter_set: format!("gpu-{i}-counters"),
            counters: BTreeMap::new(),
        })
        .collect();
    d.devices[0].consumes_counters.extend(extra);
    assert_eq!(
        pack(&d).unwrap_err().to_string(),
        "device \"gpu-0-part-0\" has 3 consumesCounters entries; the Kubernetes release serving this pool allows at most 2"
    );
    let mut d = desired(2);
    d.devices[1].name = d.devices[0].name.clone();
    assert!(pack(&d).unwrap_err().to_string().contains("listed twice"));
    let mut d = desired(1);
    d.devices[0].attributes = (0..33)
        .map(|i| (format!("a{i}"), crate::model::Attribute::Int(i)))
        .collect();
    assert!(pack(&d).unwrap_err().to_string().contains("at most 32"));
    let mut d = desired(1);
    d.layout = CounterLayout::WithDevices;
    d.devices[0].taints = (0..5)
        .map(|i| DeviceTaint {
            key: format!("k{i}"),
            value: None,
            effect: TaintEffect::NoSchedule,
        })
        .collect();
    assert!(pack(&d).unwrap_err().to_string().contains("5 taints"));
}

#[test]
fn fields_a_disabled_gate_drops_are_named() {
    let d = partitioned(1, 1, CounterLayout::WithDevices);
    let sent = pack(&d).unwrap().remove(0);
    let mut stored = sent.clone();
    stored.counter_sets.clear();
    stored.devices[0].consumes_counters.clear();
    assert_eq!(
        dropped_features(&sent, &stored),
        [
            "DRAPartitionableDevices (consumesCounters)",
            "DRAPartitionableDevices (sharedCounters)"
        ]
    );
    assert!(dropped_features(&sent, &sent).is_empty());
    // Once known, what the server stores is what the pool is compared with: no rewrite loop.
    let packed = vec![sent];
    let existing = [published("a", &d, stored.clone(), 1, 1)];
    assert!(matches!(
        plan(&d, &packed, &packed, &existing, 1),
        SlicePlan::Write { .. }
    ));
    assert_eq!(
        plan(&d, &packed, &[stored], &existing, 1),
        SlicePlan::UpToDate
    );
}

proptest! {
    #[test]
    fn generation_never_goes_back_and_a_write_converges(
        gens in proptest::collection::vec(0i64..100, 0..4), last in 0i64..100, n in 1usize..=128,
    ) {
        let d = desired(n);
        let existing: Vec<_> = gens.iter().enumerate().map(|(i, g)| one(&d, &format!("s{i}"), *g)).collect();
        match plan_of(&d, &existing, last) {
            SlicePlan::UpToDate => prop_assert!(existing.len() == 1 && existing[0].generation >= last),
            SlicePlan::Write { generation, slices, delete } => {
                prop_assert!(gens.iter().all(|g| *g < generation) && last < generation);
                prop_assert_eq!(delete.len(), existing.len().saturating_sub(1));
                prop_assert_eq!(slices.len(), 1);
                let name = slices[0].0.clone().map(|(n, _)| n).unwrap_or_else(|| "new".into());
                let after = PublishedSlice { name, generation, ..one(&d, "x", generation) };
                prop_assert_eq!(plan_of(&d, &[after], generation), SlicePlan::UpToDate);
            }
        }
    }

    #[test]
    fn every_device_and_counter_set_is_published_once_within_the_limits(
        gpus in 0usize..20, parts in 0usize..12, plain in 0usize..200, separate in any::<bool>(),
    ) {
        let layout = if separate { CounterLayout::Separate } else { CounterLayout::WithDevices };
        let mut d = partitioned(gpus, parts, layout);
        if plain > 0 {
            d.devices.extend(desired(plain.min(128)).devices);
        }
        let packed = pack(&d).unwrap();
        let mut names: Vec<&str> = packed.iter().flat_map(|s| s.devices.iter().map(|x| x.name.as_str())).collect();
        names.sort_unstable();
        let mut want: Vec<&str> = d.devices.iter().map(|x| x.name.as_str()).collect();
        want.sort_unstable();
        prop_assert_eq!(names, want);
        let sets: usize = packed.iter().map(|s| s.counter_sets.len()).sum();
        prop_assert_eq!(sets, d.counter_sets.len());
        for s in &packed {
            let advanced = s.devices.iter().any(|x| !x.consumes_counters.is_empty() || !x.taints.is_empty());
            let max = if separate && advanced { 64 } else { 128 };
            prop_assert!(s.devices.len() <= max);
            if separate {
                prop_assert!(s.devices.is_empty() || s.counter_sets.is_empty());
                prop_assert!(s.counter_sets.len() <= 8);
            } else {
                let shared: usize = s.counter_sets.iter().map(|c| c.counters.len()).sum();
                prop_assert!(shared <= 32);
            }
        }
    }
}

#[test]
fn a_node_s_devices_go_to_the_pools_the_driver_names_with_their_counter_sets() {
    let mut node = partitioned(2, 2, CounterLayout::Separate);
    node.devices.push(SliceDevice::new("nic-0"));
    node.counter_sets.push(CounterSet {
        name: "unused".into(),
        counters: BTreeMap::new(),
    });
    // gpu-1's partitions and the NIC in pools of their own; gpu-0 stays in the node's.
    let pool_of = |d: &str| {
        if d.starts_with("gpu-1") {
            Some("gpu-1".to_owned())
        } else if d.starts_with("nic") {
            Some("nics.example".to_owned())
        } else {
            None
        }
    };
    let pools = node_pools(node.clone(), pool_of).unwrap();
    let shape: Vec<(&str, Vec<&str>, Vec<&str>, String)> = pools
        .iter()
        .map(|p| {
            (
                p.pool.as_str(),
                p.devices.iter().map(|d| d.name.as_str()).collect(),
                p.counter_sets.iter().map(|s| s.name.as_str()).collect(),
                p.generate_name(),
            )
        })
        .collect();
    assert_eq!(
        shape,
        [
            (
                "node-1",
                vec!["gpu-0-part-0", "gpu-0-part-1"],
                vec!["gpu-0-counters", "unused"],
                "node-1-fake.resource.3-shake.com-".to_owned()
            ),
            (
                "node-1/gpu-1",
                vec!["gpu-1-part-0", "gpu-1-part-1"],
                vec!["gpu-1-counters"],
                "node-1-gpu-1-fake.resource.3-shake.com-".to_owned()
            ),
            (
                "node-1/nics.example",
                vec!["nic-0"],
                vec![],
                "node-1-nics.example-fake.resource.3-shake.com-".to_owned()
            ),
        ]
    );
    assert!(pools.iter().all(|p| p.node_name == "node-1"));
    for p in &pools {
        pack(p).unwrap();
    }
    // Every device elsewhere: no empty pool of the node's own.
    let pools = node_pools(desired(2), |_| Some("all".to_owned())).unwrap();
    assert_eq!(pools.len(), 1);
    assert_eq!(pools[0].pool, "node-1/all");
    // No devices at all: the node's pool, empty.
    let mut empty = desired(0);
    empty.devices.clear();
    let pools = node_pools(empty, |_| None).unwrap();
    assert_eq!(pools.len(), 1);
    assert_eq!(pools[0].pool, "node-1");
}

#[test]
fn pools_the_api_would_refuse_are_refused_naming_the_device() {
    let node = partitioned(1, 2, CounterLayout::Separate);
    for bad in ["", "Upper", "a//b", "-a", "a/", &"x".repeat(250)] {
        let e = node_pools(node.clone(), |_| Some(bad.to_owned())).unwrap_err();
        assert!(
            matches!(&e, PackError::BadPoolName { device, pool } if device == "gpu-0-part-0" && pool == bad),
            "{bad:?}: {e}"
        );
    }
    // One counter set consumed from two pools.
    let e = node_pools(node.clone(), |d| d.ends_with('1').then(|| "b".to_owned())).unwrap_err();
    assert_eq!(
        e.to_string(),
        "counter set \"gpu-0-counters\" is consumed by devices of pools \"node-1\" and \"node-1/b\"; counters are shared within one pool only"
    );
    // Two devices of one name in two pools.
    let mut twice = desired(1);
    twice.devices.push(twice.devices[0].clone());
    let e = node_pools(twice, |_| None).unwrap_err();
    assert!(e.to_string().contains("listed twice"), "{e}");
}
