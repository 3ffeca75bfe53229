use std::collections::{BTreeMap, BTreeSet};

use serde_json::json;

use super::devices::{self, CAPACITIES};
use super::groups::Mig;
use super::models::{self, MEMORY_SLICES};
use super::*;
use dra_kubelet_plugin::Quantity;
use dra_kubelet_plugin::claim::AllocatedDevice;
use dra_kubelet_plugin::device::CounterLayout;
use dra_kubelet_plugin::device::{Attribute, CounterConsumption};
use dra_kubelet_plugin::slices;
use dra_kubelet_plugin::slices::Desired;

const NODE: &str = "node-1";
const DRIVER: &str = "gpu.nvidia.com";

fn group(model: &str, count: usize, mig: Mig) -> NvidiaGroup {
    NvidiaGroup {
        model: model.into(),
        count,
        mig,
    }
}

fn profile(groups: &[NvidiaGroup]) -> NvidiaProfile {
    NvidiaProfile::new(NODE, DRIVER, groups, "--nvidia-gpus").unwrap()
}

fn device<'a>(devices: &'a [SliceDevice], name: &str) -> &'a SliceDevice {
    devices.iter().find(|d| d.name == name).unwrap()
}

fn q(s: &str) -> Quantity {
    Quantity::from(s)
}

fn string(v: &str) -> Attribute {
    Attribute::String(v.into())
}

fn version(v: &str) -> Attribute {
    Attribute::Version(v.into())
}

/// `{name: amount}` of quantities.
fn amounts(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), q(v))).collect()
}

/// `memory-slice-<k>: 1` for `range`.
fn slice_counters(range: std::ops::Range<u32>) -> Vec<(String, Quantity)> {
    range
        .map(|k| (format!("memory-slice-{k}"), q("1")))
        .collect()
}

/// The names k8s-dra-driver-gpu gives one A100-SXM4-40GB with its MIG devices
/// (`gpu-<minor>-mig-<profile without dots>-<profile id>-<placement start>`, `+me` spelled
/// `-me`), sorted as it sorts them, written out by hand from `nvidia-smi mig -lgipp`.
const A100_40GB_NAMES: &[&str] = &[
    "gpu-0",
    "gpu-0-mig-1g10gb-15-0",
    "gpu-0-mig-1g10gb-15-2",
    "gpu-0-mig-1g10gb-15-4",
    "gpu-0-mig-1g10gb-15-6",
    "gpu-0-mig-1g5gb-19-0",
    "gpu-0-mig-1g5gb-19-1",
    "gpu-0-mig-1g5gb-19-2",
    "gpu-0-mig-1g5gb-19-3",
    "gpu-0-mig-1g5gb-19-4",
    "gpu-0-mig-1g5gb-19-5",
    "gpu-0-mig-1g5gb-19-6",
    "gpu-0-mig-1g5gb-me-20-0",
    "gpu-0-mig-1g5gb-me-20-1",
    "gpu-0-mig-1g5gb-me-20-2",
    "gpu-0-mig-1g5gb-me-20-3",
    "gpu-0-mig-1g5gb-me-20-4",
    "gpu-0-mig-1g5gb-me-20-5",
    "gpu-0-mig-1g5gb-me-20-6",
    "gpu-0-mig-2g10gb-14-0",
    "gpu-0-mig-2g10gb-14-2",
    "gpu-0-mig-2g10gb-14-4",
    "gpu-0-mig-3g20gb-9-0",
    "gpu-0-mig-3g20gb-9-4",
    "gpu-0-mig-4g20gb-5-0",
    "gpu-0-mig-7g40gb-0-0",
];

#[test]
fn an_a100_40gb_with_mig_publishes_the_real_drivers_names_attributes_and_counters() {
    let p = profile(&[group("A100-40GB", 1, Mig::All)]);
    let devices = p.slice_devices();
    let names: Vec<&str> = devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, A100_40GB_NAMES);

    let uuid = devices::gpu_uuid(NODE, 0);
    assert!(uuid.starts_with("GPU-") && uuid.len() == 40, "{uuid}");
    let common = |extra: &[(&str, Attribute)]| -> BTreeMap<String, Attribute> {
        let mut attrs = BTreeMap::from([
            ("productName".to_owned(), string("NVIDIA A100-SXM4-40GB")),
            ("brand".to_owned(), string("Nvidia")),
            ("architecture".to_owned(), string("Ampere")),
            ("cudaComputeCapability".to_owned(), version("8.0.0")),
            ("driverVersion".to_owned(), version("580.95.5")),
            ("cudaDriverVersion".to_owned(), version("13.0.0")),
            (
                "resource.kubernetes.io/pciBusID".to_owned(),
                string("0000:01:00.0"),
            ),
            (
                "resource.kubernetes.io/pcieRoot".to_owned(),
                string("pci0000:00"),
            ),
            (
                "resource.kubernetes.io/numaNode".to_owned(),
                Attribute::Int(0),
            ),
        ]);
        for (k, v) in extra {
            attrs.insert((*k).to_owned(), v.clone());
        }
        attrs
    };

    // The whole GPU: the largest profile's engines and memory, consuming all of them.
    let whole = device(&devices, "gpu-0");
    assert_eq!(
        whole.attributes,
        common(&[("type", string("gpu")), ("uuid", string(&uuid))])
    );
    let gpu_amounts = [
        ("multiprocessors", "98"),
        ("copyEngines", "7"),
        ("decoders", "5"),
        ("encoders", "0"),
        ("jpegEngines", "1"),
        ("ofaEngines", "1"),
        ("memory", "40192Mi"),
    ];
    let capacity: BTreeMap<String, Quantity> = whole
        .capacity
        .iter()
        .map(|(k, c)| (k.clone(), c.value.clone()))
        .collect();
    assert_eq!(capacity, amounts(&gpu_amounts));
    let mut set = amounts(&[
        ("multiprocessors", "98"),
        ("copy-engines", "7"),
        ("decoders", "5"),
        ("encoders", "0"),
        ("jpeg-engines", "1"),
        ("ofa-engines", "1"),
        ("memory", "40192Mi"),
    ]);
    set.extend(slice_counters(0..8));
    assert_eq!(
        p.counter_sets(),
        [CounterSet::new("gpu-0-counter-set", set.clone())]
    );
    assert_eq!(
        whole.consumes_counters,
        [CounterConsumption::new("gpu-0-counter-set", set)]
    );

    // A MIG device: its profile's engines, memory and placement; no uuid until created.
    let mig = device(&devices, "gpu-0-mig-3g20gb-9-4");
    assert_eq!(
        mig.attributes,
        common(&[
            ("type", string("mig")),
            ("parentUUID", string(&uuid)),
            ("profile", string("3g.20gb")),
        ])
    );
    let capacity: BTreeMap<String, Quantity> = mig
        .capacity
        .iter()
        .map(|(k, c)| (k.clone(), c.value.clone()))
        .collect();
    assert_eq!(
        capacity,
        amounts(&[
            ("multiprocessors", "42"),
            ("copyEngines", "3"),
            ("decoders", "2"),
            ("encoders", "0"),
            ("jpegEngines", "0"),
            ("ofaEngines", "0"),
            ("memory", "19968Mi"),
        ])
    );
    let mut consumed = amounts(&[
        ("multiprocessors", "42"),
        ("copy-engines", "3"),
        ("decoders", "2"),
        ("encoders", "0"),
        ("jpeg-engines", "0"),
        ("ofa-engines", "0"),
        ("memory", "19968Mi"),
    ]);
    consumed.extend(slice_counters(4..8));
    assert_eq!(
        mig.consumes_counters,
        [CounterConsumption::new("gpu-0-counter-set", consumed)]
    );
    let me = device(&devices, "gpu-0-mig-1g5gb-me-20-6");
    assert_eq!(me.attributes["profile"], string("1g.5gb+me"));
    assert_eq!(me.capacity["ofaEngines"].value, q("1"));
    assert!(
        devices
            .iter()
            .all(|d| d.attributes.len() + d.capacity.len() <= 32)
    );
}

#[test]
fn gpus_without_mig_publish_their_memory_and_no_counters() {
    let p = profile(&[
        group("L4", 2, Mig::Off),
        group("H100-80GB", 1, Mig::Off),
        group("A100-80GB", 1, Mig::Off),
    ]);
    assert!(p.counter_sets().is_empty());
    let devices = p.slice_devices();
    let shown: Vec<(String, Attribute, Quantity)> = devices
        .iter()
        .map(|d| {
            assert!(d.consumes_counters.is_empty(), "{}", d.name);
            assert_eq!(d.capacity.len(), 1, "{}", d.name);
            (
                d.name.clone(),
                d.attributes["productName"].clone(),
                d.capacity["memory"].value.clone(),
            )
        })
        .collect();
    assert_eq!(
        shown,
        [
            ("gpu-0".into(), string("NVIDIA L4"), q("23034Mi")),
            ("gpu-1".into(), string("NVIDIA L4"), q("23034Mi")),
            (
                "gpu-2".into(),
                string("NVIDIA H100 80GB HBM3"),
                q("81559Mi")
            ),
            ("gpu-3".into(), string("NVIDIA A100-SXM4-80GB"), q("80Gi")),
        ]
    );
    let l4 = device(&devices, "gpu-0");
    assert_eq!(l4.attributes["architecture"], string("Ada Lovelace"));
    assert_eq!(l4.attributes["cudaComputeCapability"], version("8.9.0"));
    assert_eq!(
        device(&devices, "gpu-2").attributes["cudaComputeCapability"],
        version("9.0.0")
    );
    // What the real driver does not publish, this profile does not either.
    for absent in ["index", "minor", "model", "addressingMode"] {
        assert!(!l4.attributes.contains_key(absent), "{absent}");
    }
    // The second half of the GPUs is on the second PCIe root and NUMA node, MIG devices
    // with their GPU.
    assert_eq!(
        device(&devices, "gpu-3").attributes["resource.kubernetes.io/pcieRoot"],
        string("pci0000:80")
    );
    assert_eq!(
        l4.attributes["resource.kubernetes.io/numaNode"],
        Attribute::Int(0)
    );
    for d in devices.iter().filter(|d| d.name.starts_with("gpu-3")) {
        assert_eq!(
            d.attributes["resource.kubernetes.io/numaNode"],
            Attribute::Int(1),
            "{}",
            d.name
        );
    }
}

/// The memory slices a device's counters take.
fn slices_of(d: &SliceDevice) -> BTreeSet<String> {
    d.consumes_counters
        .iter()
        .flat_map(|c| c.counters.keys())
        .filter(|k| k.starts_with("memory-slice-"))
        .cloned()
        .collect()
}

#[test]
fn placements_that_overlap_and_only_those_consume_a_common_memory_slice() {
    for model in models::MODELS.iter().filter(|m| !m.mig.is_empty()) {
        let p = profile(&[group(model.name, 1, Mig::All)]);
        let layout = p.layout();
        let devices = p.slice_devices();
        // Each device's placement, from the tables' start and size, in memory slices.
        let placement = |d: &SliceDevice| -> std::ops::Range<u32> {
            match layout.device(&d.name).unwrap().kind {
                devices::Kind::Whole => 0..MEMORY_SLICES,
                devices::Kind::Mig { profile, start } => start..start + profile.size,
            }
        };
        for a in &devices {
            for b in &devices {
                if a.name == b.name {
                    continue;
                }
                let (ra, rb) = (placement(a), placement(b));
                let overlap = ra.start < rb.end && rb.start < ra.end;
                let common = !slices_of(a).is_disjoint(&slices_of(b));
                assert_eq!(
                    overlap, common,
                    "{}: {} ({ra:?}) and {} ({rb:?})",
                    model.name, a.name, b.name
                );
            }
        }
        // Every memory slice counter is 1, so no two overlapping devices fit together.
        let set = &p.counter_sets()[0];
        for k in 0..MEMORY_SLICES {
            assert_eq!(set.counters[&format!("memory-slice-{k}")], q("1"));
        }
    }
}

/// How many devices of `names` the counters let the scheduler allocate together, taking
/// them in order while every counter lasts.
fn allocatable_together(p: &NvidiaProfile, names: &[&SliceDevice]) -> usize {
    let set = &p.counter_sets()[0];
    let value = |q: &Quantity| q.nanos().unwrap();
    let mut left: BTreeMap<&String, i128> =
        set.counters.iter().map(|(k, v)| (k, value(v))).collect();
    let mut taken = 0;
    for d in names {
        let wants = &d.consumes_counters[0].counters;
        if wants.iter().all(|(k, v)| left[k] >= value(v)) {
            for (k, v) in wants {
                *left.get_mut(k).unwrap() -= value(v);
            }
            taken += 1;
        }
    }
    taken
}

#[test]
fn the_counters_allow_as_many_instances_of_each_profile_as_nvidia_documents() {
    // "Number of Instances Available" of the MIG user guide's tables (-lgip's Total).
    let documented: &[(&str, &[(&str, usize)])] = &[
        (
            "A100-40GB",
            &[
                ("1g.5gb", 7),
                ("1g.5gb+me", 1),
                ("1g.10gb", 4),
                ("2g.10gb", 3),
                ("3g.20gb", 2),
                ("4g.20gb", 1),
                ("7g.40gb", 1),
            ],
        ),
        (
            "A100-80GB",
            &[
                ("1g.10gb", 7),
                ("1g.10gb+me", 1),
                ("1g.20gb", 4),
                ("2g.20gb", 3),
                ("3g.40gb", 2),
                ("4g.40gb", 1),
                ("7g.80gb", 1),
            ],
        ),
        (
            "H100-80GB",
            &[
                ("1g.10gb", 7),
                ("1g.10gb+me", 1),
                ("1g.20gb", 4),
                ("2g.20gb", 3),
                ("3g.40gb", 2),
                ("4g.40gb", 1),
                ("7g.80gb", 1),
            ],
        ),
    ];
    for (model, profiles) in documented {
        let p = profile(&[group(model, 1, Mig::All)]);
        let devices = p.slice_devices();
        for (name, instances) in *profiles {
            let of_profile: Vec<&SliceDevice> = devices
                .iter()
                .filter(|d| d.attributes.get("profile") == Some(&string(name)))
                .collect();
            assert_eq!(
                allocatable_together(&p, &of_profile),
                *instances,
                "{model} {name}"
            );
        }
        // The whole GPU takes everything: nothing else fits beside it.
        let mut order: Vec<&SliceDevice> = vec![device(&devices, "gpu-0")];
        order.extend(devices.iter().filter(|d| d.name != "gpu-0"));
        assert_eq!(allocatable_together(&p, &order), 1, "{model}");
    }
}

#[test]
fn mig_can_be_limited_to_some_profiles_in_nvml_order() {
    let p = profile(&[group(
        "H100-80GB",
        1,
        Mig::Profiles(vec!["3g.40gb".into(), "1g.10gb".into()]),
    )]);
    let names: Vec<String> = p.slice_devices().into_iter().map(|d| d.name).collect();
    assert_eq!(names.len(), 1 + 7 + 2);
    assert!(names.contains(&"gpu-0-mig-3g40gb-9-4".to_owned()));
    assert!(names.contains(&"gpu-0-mig-1g10gb-19-6".to_owned()));
    // The counter set is the hardware's, whatever is published.
    let full = profile(&[group("H100-80GB", 1, Mig::All)]);
    assert_eq!(p.counter_sets(), full.counter_sets());
    assert_eq!(
        p.counter_sets()[0].counters["multiprocessors"],
        q("132"),
        "H100's 7g.80gb has 132 SMs"
    );
}

fn packed(p: &NvidiaProfile, layout: CounterLayout) -> Vec<slices::SliceContent> {
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
fn mig_gpus_get_a_slice_each_as_the_real_driver_cuts_its_pool_and_the_most_a_node_may_have_still_packs()
 {
    let p = profile(&[group("A100-80GB", 8, Mig::All)]);
    assert_eq!(p.slice_devices().len(), 8 * 26);
    // As the real driver cuts its pool: on 1.34 one slice per GPU, its counter set with
    // its devices; from 1.35 the eight counter sets in one slice, then one slice per GPU.
    let shape = |slices: &[slices::SliceContent]| -> Vec<(usize, usize)> {
        slices
            .iter()
            .map(|s| (s.counter_sets.len(), s.devices.len()))
            .collect()
    };
    let gpu_of = |device: &str| device.split('-').take(2).collect::<Vec<_>>().join("-");
    let one_gpu_each = |slices: &[slices::SliceContent]| {
        for s in slices.iter().filter(|s| !s.devices.is_empty()) {
            let gpus: BTreeSet<String> = s.devices.iter().map(|d| gpu_of(&d.name)).collect();
            assert_eq!(gpus.len(), 1, "a slice lists the devices of {gpus:?}");
        }
    };
    let old = packed(&p, CounterLayout::WithDevices);
    assert_eq!(shape(&old), [(1, 26); 8]);
    one_gpu_each(&old);
    let new = packed(&p, CounterLayout::Separate);
    let mut want = vec![(8, 0)];
    want.extend([(0, 26); 8]);
    assert_eq!(shape(&new), want);
    one_gpu_each(&new);
    // GPUs without MIG consume no counters: packed together after the MIG GPUs.
    let mixed = profile(&[group("A100-40GB", 2, Mig::All), group("L4", 3, Mig::Off)]);
    let old = packed(&mixed, CounterLayout::WithDevices);
    assert_eq!(shape(&old)[2..], [(0, 3)]);
    assert_eq!(shape(&old).len(), 3);
    let new = packed(&mixed, CounterLayout::Separate);
    assert_eq!(shape(&new)[0], (2, 0));
    assert_eq!(shape(&new).last(), Some(&(0, 3)));
    assert_eq!(shape(&new).len(), 4);
    let most = profile(&[group("H100-80GB", 128, Mig::All)]);
    assert_eq!(most.slice_devices().len(), 128 * 26);
    for d in most.slice_devices() {
        assert!(d.name.len() <= 63, "{} is not a DNS label", d.name);
        assert!(
            d.name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
            "{}",
            d.name
        );
    }
}

#[test]
fn nodes_the_profile_cannot_build_are_refused_naming_the_group() {
    let err = |groups: &[NvidiaGroup]| {
        NvidiaProfile::new(NODE, DRIVER, groups, "nvidiaGpus")
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        err(&[group("L4", 1, Mig::Off), group("B200", 1, Mig::All)]),
        "nvidiaGpus[1] (B200:1:mig): model \"B200\" is not an NVIDIA model of the nvidia profile; the models are A100-40GB, A100-80GB, H100-80GB, L4"
    );
    assert_eq!(
        err(&[group("L4", 2, Mig::All)]),
        "nvidiaGpus[0] (L4:2:mig): model \"L4\" has no MIG; the models with MIG are A100-40GB, A100-80GB, H100-80GB"
    );
    assert_eq!(
        err(&[group(
            "A100-40GB",
            1,
            Mig::Profiles(vec!["1g.5gb".into(), "1g.10gb+me".into()])
        )]),
        "nvidiaGpus[0] (A100-40GB:1:mig=1g.5gb/1g.10gb+me): MIG profile \"1g.10gb+me\" is not one of A100-40GB's; its MIG profiles are 1g.5gb, 1g.5gb+me, 1g.10gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb"
    );
    assert!(
        err(&[group("L4", 1, Mig::Profiles(Vec::new()))]).contains("has no MIG"),
        "an empty list on a model without MIG is refused for the model first"
    );
    assert!(
        err(&[group("A100-40GB", 1, Mig::Profiles(Vec::new()))])
            .contains("mig lists no profiles; give true for all of them, false for none")
    );
    assert!(
        err(&[group(
            "A100-40GB",
            1,
            Mig::Profiles(vec!["1g.5gb".into(), "1g.5gb".into()])
        )])
        .contains("MIG profile \"1g.5gb\" is listed twice")
    );
    assert_eq!(
        err(&[group("A100-40GB", 100, Mig::All), group("L4", 29, Mig::Off)]),
        "the node has 129 NVIDIA GPUs; at most 128 per node"
    );
    assert_eq!(
        err(&[group("L4", 0, Mig::Off)]),
        "nvidiaGpus[0] (L4:0): count must be at least 1"
    );
    assert_eq!(
        NvidiaProfile::new("", DRIVER, &[group("L4", 1, Mig::Off)], "nvidiaGpus").unwrap_err(),
        NvidiaError::NoNodeName
    );
    assert_eq!(
        NvidiaProfile::new(NODE, DRIVER, &[], "nvidiaGpus").unwrap_err(),
        NvidiaError::NoGpus
    );
}

/// The flags, an inventory file and their errors, as the plugin reads them.
mod registry;

fn claim() -> ClaimRef {
    ClaimRef::new("uid-1", "ns", "c").unwrap()
}

fn allocated(request: &str, device: &str) -> AllocatedDevice {
    AllocatedDevice::new(request, device)
}

fn prepare(
    p: &NvidiaProfile,
    devices: Vec<AllocatedDevice>,
) -> Result<NvidiaPrepared, ProfileError> {
    p.prepare_allocation(&claim(), &DriverAllocation::new(devices, Vec::new()))
}

fn env_of(devices: &[Device], name: &str) -> Vec<String> {
    devices
        .iter()
        .find(|d| d.name == name)
        .unwrap()
        .container_edits
        .env
        .clone()
}

#[test]
fn containers_see_the_uuids_of_their_request_in_nvidia_visible_devices() {
    let p = profile(&[group("A100-40GB", 1, Mig::All), group("L4", 1, Mig::Off)]);
    let prepared = prepare(
        &p,
        vec![
            allocated("whole", "gpu-1"),
            allocated("small/first", "gpu-0-mig-1g5gb-19-3"),
            allocated("small/first", "gpu-0-mig-3g20gb-9-4"),
        ],
    )
    .unwrap();
    // The checkpoint keeps the devices and their requests (without the subrequest).
    assert_eq!(
        serde_json::to_value(&prepared).unwrap(),
        json!({"devices": [
            {"device": "gpu-1", "request": "whole"},
            {"device": "gpu-0-mig-1g5gb-19-3", "request": "small"},
            {"device": "gpu-0-mig-3g20gb-9-4", "request": "small"},
        ]})
    );
    p.check(&prepared).unwrap();

    let l4 = devices::gpu_uuid(NODE, 1);
    let layout = p.layout();
    let mig_uuid = |name: &str| layout.device(name).unwrap().uuid.clone();
    let (small, big) = (
        mig_uuid("gpu-0-mig-1g5gb-19-3"),
        mig_uuid("gpu-0-mig-3g20gb-9-4"),
    );
    assert!(small.starts_with("MIG-") && small.len() == 40, "{small}");
    assert_ne!(small, big);

    let uid = ClaimUid::parse("uid-1").unwrap();
    let cdi = p.cdi_devices(&uid, &prepared);
    let names: Vec<&str> = cdi.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["uid-1", "uid-1:0", "uid-1:1", "uid-1:2"]);
    // A whole GPU.
    assert_eq!(
        env_of(&cdi, "uid-1:0"),
        [
            format!("FAKE_GPU_0={l4}"),
            "FAKE_GPU_0_PRODUCT=NVIDIA L4".into(),
            "FAKE_GPU_0_MEMORY=23034Mi".into(),
            format!("NVIDIA_VISIBLE_DEVICES={l4}"),
            format!("CUDA_VISIBLE_DEVICES={l4}"),
        ]
    );
    // A MIG device: its own MIG- uuid, beside the other device of its request.
    assert_eq!(
        env_of(&cdi, "uid-1:1"),
        [
            format!("FAKE_GPU_1={small}"),
            "FAKE_GPU_1_PRODUCT=NVIDIA A100-SXM4-40GB".into(),
            "FAKE_GPU_1_MEMORY=4864Mi".into(),
            "FAKE_GPU_1_PARTITION=1g.5gb".into(),
            format!("NVIDIA_VISIBLE_DEVICES={small},{big}"),
            format!("CUDA_VISIBLE_DEVICES={small},{big}"),
        ]
    );
    let whole_claim = env_of(&cdi, "uid-1");
    assert!(whole_claim.contains(&format!("NVIDIA_VISIBLE_DEVICES={l4},{small},{big}")));
    assert!(whole_claim.contains(&format!("CUDA_VISIBLE_DEVICES={l4},{small},{big}")));
    assert!(whole_claim.contains(&"FAKE_GPU_COUNT=3".to_owned()));
    // Every container also gets the node and the driver.
    assert_eq!(
        p.common_edits().env,
        [
            "FAKE_NODE_NAME=node-1",
            "DRA_RESOURCE_DRIVER_NAME=gpu.nvidia.com"
        ]
    );
    assert_eq!(
        p.device_cdi_devices(&uid, &prepared, &allocated("r", "gpu-0-mig-3g20gb-9-4")),
        Some(vec!["uid-1:2".to_owned()])
    );
    assert_eq!(
        p.device_cdi_devices(&uid, &prepared, &allocated("r", "gpu-0")),
        None
    );
    assert_eq!(p.cdi_class(), "claim");
}

#[test]
fn overlapping_placements_are_never_held_by_two_claims() {
    let p = profile(&[group("A100-40GB", 1, Mig::All), group("L4", 1, Mig::Off)]);
    let held = |device: &str| -> BTreeSet<String> {
        p.held_devices(&prepare(&p, vec![allocated("r", device)]).unwrap())
            .into_iter()
            .collect()
    };
    let shared = |a: &str, b: &str| !held(a).is_disjoint(&held(b));
    assert!(shared("gpu-0-mig-1g5gb-19-0", "gpu-0-mig-2g10gb-14-0"));
    assert!(shared("gpu-0-mig-3g20gb-9-4", "gpu-0-mig-1g10gb-15-6"));
    assert!(shared("gpu-0", "gpu-0-mig-1g5gb-me-20-6"));
    assert!(!shared("gpu-0-mig-1g5gb-19-0", "gpu-0-mig-1g5gb-19-1"));
    assert!(shared("gpu-0-mig-3g20gb-9-0", "gpu-0-mig-4g20gb-5-0"));
    assert!(!shared("gpu-0-mig-3g20gb-9-4", "gpu-0-mig-4g20gb-5-0"));
    assert!(!shared("gpu-0", "gpu-1"));
    assert_eq!(
        held("gpu-0-mig-2g10gb-14-2"),
        BTreeSet::from([
            "gpu-0-mig-2g10gb-14-2".to_owned(),
            "gpu-0/memory-slice-2".to_owned(),
            "gpu-0/memory-slice-3".to_owned(),
        ])
    );
    assert_eq!(held("gpu-1"), BTreeSet::from(["gpu-1".to_owned()]));
    // Admin access holds nothing; every device is still reported allocated.
    let admin = prepare(
        &p,
        vec![{
            let mut built = allocated("r", "gpu-0");
            built.admin_access = true;
            built
        }],
    )
    .unwrap();
    assert!(p.held_devices(&admin).is_empty());
    assert_eq!(p.allocated_devices(&admin), ["gpu-0"]);
}

#[test]
fn devices_the_node_does_not_publish_are_refused() {
    let p = profile(&[group("A100-40GB", 1, Mig::Profiles(vec!["7g.40gb".into()]))]);
    let err = prepare(&p, vec![allocated("r", "gpu-0-mig-1g5gb-19-0")]).unwrap_err();
    assert_eq!(err.reason, "unknown_device");
    assert_eq!(
        err.message,
        "device \"gpu-0-mig-1g5gb-19-0\" is not a device of node \"node-1\" (it has 1 GPU(s), gpu-0 to gpu-0, and 1 MIG device(s) such as gpu-0-mig-7g40gb-0-0) (request \"r\")"
    );
    let twice = prepare(&p, vec![allocated("a", "gpu-0"), allocated("b", "gpu-0")]).unwrap_err();
    assert_eq!(twice.reason, "duplicate_device");
    let stale: NvidiaPrepared =
        serde_json::from_value(json!({"devices": [{"device": "gpu-7", "request": "r"}]})).unwrap();
    assert_eq!(p.check(&stale).unwrap_err().reason, "bad_checkpoint");
}

#[test]
fn every_capacity_has_its_counter_in_dns_label_form() {
    let names: Vec<(&str, &str)> = CAPACITIES.to_vec();
    for (capacity, counter) in names {
        let mut expected = String::new();
        for c in capacity.chars() {
            if c.is_ascii_uppercase() {
                expected.push('-');
            }
            expected.push(c.to_ascii_lowercase());
        }
        assert_eq!(counter, expected);
    }
}
