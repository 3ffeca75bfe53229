use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use serde_json::json;

use super::*;
use dra_kubelet_plugin::Quantity;
use dra_kubelet_plugin::claim::{AllocatedDevice, ConfigSource};
use dra_kubelet_plugin::device::CounterLayout;
use dra_kubelet_plugin::device::{Attribute, CounterConsumption, RequestPolicy, ValidRange};
use dra_kubelet_plugin::slices;
use dra_kubelet_plugin::slices::Desired;

const NODE: &str = "node-1";
const DRIVER: &str = "gpu.example.com";

fn group(model: &str, count: usize, sharing: Sharing) -> GpuGroup {
    GpuGroup {
        model: model.into(),
        count,
        sharing,
    }
}

fn profile(groups: &[GpuGroup]) -> GpuProfile {
    GpuProfile::new(NODE, DRIVER, groups, &Catalog::builtin()).unwrap()
}

fn mixed() -> GpuProfile {
    profile(&[
        group("A100-80GB", 2, Sharing::Partitioned),
        group("L4-24GB", 1, Sharing::Shared),
        group("H100-80GB", 1, Sharing::Exclusive),
    ])
}

fn device<'a>(devices: &'a [SliceDevice], name: &str) -> &'a SliceDevice {
    devices.iter().find(|d| d.name == name).unwrap()
}

fn string(d: &SliceDevice, name: &str) -> String {
    match &d.attributes[name] {
        Attribute::String(s) => s.clone(),
        other => panic!("{name} is {other:?}"),
    }
}

fn q(s: &str) -> Quantity {
    Quantity::from(s)
}

fn claim() -> ClaimRef {
    ClaimRef::new("uid-1", "ns", "c").unwrap()
}

fn allocated(device: &str) -> AllocatedDevice {
    AllocatedDevice::new("req", device)
}

fn share(device: &str, id: &str, memory: &str) -> AllocatedDevice {
    {
        let mut built = allocated(device);
        built.share_id = Some(id.into());
        built.consumed_capacity = BTreeMap::from([("memory".to_owned(), memory.to_owned())]);
        built
    }
}

fn prepare(p: &GpuProfile, devices: Vec<AllocatedDevice>) -> Result<GpuPrepared, ProfileError> {
    p.prepare_allocation(&claim(), &DriverAllocation::new(devices, Vec::new()))
}

#[test]
fn an_exclusive_gpu_is_one_device_with_its_attributes() {
    let p = profile(&[group("H100-80GB", 1, Sharing::Exclusive)]);
    let devices = p.slice_devices();
    assert_eq!(devices.len(), 1);
    let d = &devices[0];
    assert_eq!(d.name, "gpu-0");
    let uuid = devices::gpu_uuid(NODE, 0);
    assert!(uuid.starts_with("GPU-") && uuid.len() == 40, "{uuid}");
    let s = |v: &str| Attribute::String(v.into());
    assert_eq!(
        d.attributes,
        BTreeMap::from([
            ("uuid".to_owned(), s(&uuid)),
            ("productName".to_owned(), s("H100-SXM5-80GB")),
            ("architecture".to_owned(), s("Hopper")),
            ("model".to_owned(), s("H100-80GB")),
            ("index".to_owned(), Attribute::Int(0)),
            (
                "driverVersion".to_owned(),
                Attribute::Version(DRIVER_VERSION.into())
            ),
            ("type".to_owned(), s("gpu")),
            (
                "resource.kubernetes.io/pcieRoot".to_owned(),
                s("pci0000:00")
            ),
            (
                "resource.kubernetes.io/pciBusID".to_owned(),
                s("0000:01:00.0")
            ),
            (
                "resource.kubernetes.io/numaNode".to_owned(),
                Attribute::Int(0)
            ),
        ])
    );
    assert_eq!(d.capacity["memory"].value, q("80Gi"));
    assert_eq!(d.capacity["memory"].request_policy, None);
    assert!(d.consumes_counters.is_empty() && !d.allow_multiple_allocations);
    assert!(p.counter_sets().is_empty());
}

#[test]
fn a_partitioned_gpu_publishes_its_counters_and_partitions() {
    let p = profile(&[group("A100-80GB", 1, Sharing::Partitioned)]);
    let sets = p.counter_sets();
    assert_eq!(
        sets,
        [CounterSet::new(
            "gpu-0-counters",
            BTreeMap::from([("memory".into(), q("80Gi")), ("slices".into(), q("7"))])
        )]
    );
    let devices = p.slice_devices();
    let names: Vec<&str> = devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names.len(), 1 + 7 + 3 + 2);
    assert_eq!(names[..3], ["gpu-0", "gpu-0-1g-10gb-0", "gpu-0-1g-10gb-1"]);
    assert_eq!(names[12], "gpu-0-3g-40gb-1");
    let whole = device(&devices, "gpu-0");
    assert_eq!(whole.consumes_counters[0].counter_set, "gpu-0-counters");
    assert_eq!(whole.consumes_counters[0].counters, sets[0].counters);
    let part = device(&devices, "gpu-0-2g-20gb-2");
    assert_eq!(
        part.consumes_counters,
        [CounterConsumption::new(
            "gpu-0-counters",
            BTreeMap::from([("memory".into(), q("20Gi")), ("slices".into(), q("2"))])
        )]
    );
    assert_eq!(string(part, "type"), "partition");
    assert_eq!(string(part, "profile"), "2g.20gb");
    assert_eq!(string(part, "parentUUID"), string(whole, "uuid"));
    assert_ne!(string(part, "uuid"), string(whole, "uuid"));
    assert_eq!(string(part, "productName"), "A100-SXM4-80GB");
    assert_eq!(part.attributes["index"], Attribute::Int(0));
    assert_eq!(part.capacity["memory"].value, q("20Gi"));
    let uuids: BTreeSet<String> = devices.iter().map(|d| string(d, "uuid")).collect();
    assert_eq!(uuids.len(), devices.len(), "every device has its own uuid");
    for d in &devices {
        assert!(d.name.len() <= 63, "{}", d.name);
        assert!(
            d.name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        );
    }
}

#[test]
fn a_shared_gpu_allows_multiple_allocations_with_a_memory_policy() {
    let p = profile(&[group("L4-24GB", 1, Sharing::Shared)]);
    let d = &p.slice_devices()[0];
    assert!(d.allow_multiple_allocations);
    assert!(d.consumes_counters.is_empty());
    let memory = &d.capacity["memory"];
    assert_eq!(memory.value, q("24Gi"));
    assert_eq!(
        memory.request_policy,
        Some(
            RequestPolicy::new(Some(q("10Gi"))).valid_range(ValidRange::new(
                q("1Gi"),
                None,
                Some(q("1Gi"))
            ))
        )
    );
    // A GPU of less memory than the default share offers itself whole by default, in
    // whole steps.
    for (memory, default) in [("4Gi", "4Gi"), ("2560Mi", "2Gi"), ("1Gi", "1Gi")] {
        let small = GpuModel {
            name: "SMALL".into(),
            product_name: "Small".into(),
            architecture: "Test".into(),
            memory: memory.into(),
            partitions: Vec::new(),
            slices: None,
        };
        let catalog = Catalog::with(vec![small]).unwrap();
        let p = GpuProfile::new(
            NODE,
            DRIVER,
            &[group("SMALL", 1, Sharing::Shared)],
            &catalog,
        )
        .unwrap();
        let policy = p.slice_devices()[0].capacity["memory"]
            .request_policy
            .clone();
        assert_eq!(policy.unwrap().default, Some(q(default)), "{memory}");
    }
}

#[test]
fn the_first_half_of_the_gpus_is_on_one_root_and_numa_node() {
    for (count, first_half) in [(8, 4), (3, 2), (1, 1)] {
        let p = profile(&[group("L4-24GB", count, Sharing::Exclusive)]);
        let devices = p.slice_devices();
        for (i, d) in devices.iter().enumerate() {
            let (root, numa, bus) = if i < first_half {
                ("pci0000:00", 0, 1 + i)
            } else {
                ("pci0000:80", 1, 0x81 + i - first_half)
            };
            assert_eq!(string(d, devices::ATTR_PCIE_ROOT), root, "{count}: {i}");
            assert_eq!(d.attributes[devices::ATTR_NUMA_NODE], Attribute::Int(numa));
            assert_eq!(
                string(d, devices::ATTR_PCI_BUS_ID),
                format!("0000:{bus:02x}:00.0")
            );
        }
    }
    // Numbered across groups, in order.
    let p = mixed();
    let names: Vec<String> = p
        .slice_devices()
        .into_iter()
        .filter(|d| string(d, "type") == "gpu")
        .map(|d| format!("{}={}", d.name, string(&d, "model")))
        .collect();
    assert_eq!(
        names,
        [
            "gpu-0=A100-80GB",
            "gpu-1=A100-80GB",
            "gpu-2=L4-24GB",
            "gpu-3=H100-80GB"
        ]
    );
}

#[test]
fn ids_are_stable_per_node_and_not_the_fake_devices() {
    assert_eq!(devices::gpu_uuid("n", 3), devices::gpu_uuid("n", 3));
    assert_ne!(devices::gpu_uuid("n", 3), devices::gpu_uuid("m", 3));
    assert_ne!(devices::gpu_uuid("n", 3), devices::gpu_uuid("n", 4));
    let fake = crate::fake::devices::parent_id("n", 3);
    assert_ne!(
        devices::gpu_uuid("n", 3).trim_start_matches("GPU-"),
        fake.trim_start_matches("FAKE-")
    );
    assert_eq!(mixed().slice_devices(), mixed().slice_devices());
}

fn packed(p: &GpuProfile, layout: CounterLayout) -> Vec<slices::SliceContent> {
    slices::pack(&Desired {
        driver: DRIVER.into(),
        node_name: NODE.into(),
        pool: NODE.into(),
        devices: p.slice_devices(),
        counter_sets: p.counter_sets(),
        layout,
        split: p.slice_split(),
    })
    .unwrap()
}

#[test]
fn eight_partitioned_gpus_pack_as_each_release_wants() {
    let p = profile(&[group("A100-80GB", 8, Sharing::Partitioned)]);
    assert_eq!(p.slice_devices().len(), 8 * 13);
    assert_eq!(p.counter_sets().len(), 8);
    // 1.34: counter sets with their devices; 16 shared counters and 104 devices fit one.
    let old = packed(&p, CounterLayout::WithDevices);
    assert_eq!(old.len(), 1);
    assert_eq!(old[0].counter_sets.len(), 8);
    assert_eq!(old[0].devices.len(), 104);
    // 1.35+: the eight counter sets in a slice of their own, then devices 64 a slice.
    let new = packed(&p, CounterLayout::Separate);
    let shape: Vec<(usize, usize)> = new
        .iter()
        .map(|s| (s.counter_sets.len(), s.devices.len()))
        .collect();
    assert_eq!(shape, [(8, 0), (0, 64), (0, 40)]);
}

#[test]
fn more_devices_than_a_slice_holds_pack_into_several() {
    let p = profile(&[group("A100-80GB", 16, Sharing::Partitioned)]);
    assert_eq!(p.slice_devices().len(), 208);
    let old = packed(&p, CounterLayout::WithDevices);
    assert_eq!(old.len(), 2);
    assert!(old.iter().all(|s| s.devices.len() <= 128));
    let new = packed(&p, CounterLayout::Separate);
    assert_eq!(
        new.len(),
        2 + 4,
        "two counter slices, then 64 + 64 + 64 + 16"
    );
    let all: usize = new.iter().map(|s| s.devices.len()).sum();
    assert_eq!(all, 208);
    // The most a node may have still packs.
    let most = profile(&[group(
        "H100-80GB",
        devices::MAX_GPUS_PER_NODE,
        Sharing::Partitioned,
    )]);
    assert_eq!(most.slice_devices().len(), 128 * 13);
}

#[test]
fn nodes_the_profile_cannot_build_are_refused() {
    let c = Catalog::builtin();
    let err = |groups: &[GpuGroup]| {
        GpuProfile::new(NODE, DRIVER, groups, &c)
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        err(&[
            group("A100-80GB", 100, Sharing::Exclusive),
            group("L4-24GB", 29, Sharing::Shared)
        ]),
        "the node has 129 GPUs; at most 128 per node"
    );
    assert_eq!(
        err(&[group("B200", 1, Sharing::Exclusive)]),
        "GPU group 0 (B200:1:exclusive): model \"B200\" is not in the catalog; known models: A100-80GB, H100-80GB, L4-24GB"
    );
    assert_eq!(
        err(&[group("L4-24GB", 2, Sharing::Partitioned)]),
        "GPU group 0 (L4-24GB:2:partitioned): model \"L4-24GB\" has no partitions; use exclusive or shared"
    );
    assert!(err(&[group("L4-24GB", 0, Sharing::Exclusive)]).contains("count must be at least 1"));
    assert!(err(&[]).contains("at least one GPU"));
    assert_eq!(
        GpuProfile::new("", DRIVER, &[group("L4-24GB", 1, Sharing::Exclusive)], &c).unwrap_err(),
        GpuError::NoNodeName
    );
    let tiny = GpuModel {
        name: "TINY".into(),
        product_name: "Tiny".into(),
        architecture: "Test".into(),
        memory: "512Mi".into(),
        partitions: Vec::new(),
        slices: None,
    };
    let c = Catalog::with(vec![tiny]).unwrap();
    let e = GpuProfile::new(NODE, DRIVER, &[group("TINY", 1, Sharing::Shared)], &c).unwrap_err();
    assert!(
        e.to_string().contains("a shared GPU needs at least 1Gi"),
        "{e}"
    );
}

/// Prepare, what containers see, the checkpoint.
mod prepare;
