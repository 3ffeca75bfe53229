//! Prepare, held devices, CDI devices and the checkpoint check of the gpu profile.

use super::*;

#[test]
fn prepare_keeps_each_allocated_device_and_nothing_recomputable() {
    let p = mixed();
    let whole = prepare(&p, vec![allocated("gpu-3")]).unwrap();
    assert_eq!(
        serde_json::to_value(&whole).unwrap(),
        json!({"devices": [{"device": "gpu-3"}]})
    );
    assert_eq!(p.held_devices(&whole), ["gpu-3"]);

    let part = prepare(&p, vec![allocated("gpu-1-1g-10gb-6")]).unwrap();
    assert_eq!(p.held_devices(&part), ["gpu-1-1g-10gb-6"]);

    let shares = prepare(
        &p,
        vec![share("gpu-2", "s-1", "20Gi"), share("gpu-2", "s-2", "4Gi")],
    )
    .unwrap();
    assert_eq!(
        serde_json::to_value(&shares).unwrap(),
        json!({"devices": [
            {"device": "gpu-2", "shareId": "s-1", "consumedCapacity": {"memory": "20Gi"}},
            {"device": "gpu-2", "shareId": "s-2", "consumedCapacity": {"memory": "4Gi"}},
        ]})
    );
    assert!(p.held_devices(&shares).is_empty(), "shares hold nothing");
    assert_eq!(p.allocated_devices(&shares), ["gpu-2"]);
    let back: GpuPrepared = serde_json::from_value(serde_json::to_value(&shares).unwrap()).unwrap();
    assert_eq!(back, shares);
    assert!(
        serde_json::from_value::<GpuPrepared>(json!({"devices": [], "model": "x"})).is_err(),
        "unknown fields are refused"
    );
}

#[test]
fn a_whole_partitioned_gpu_holds_its_partitions() {
    let p = mixed();
    let whole = prepare(&p, vec![allocated("gpu-0")]).unwrap();
    let held = p.held_devices(&whole);
    assert_eq!(held.len(), 13);
    assert_eq!(p.allocated_devices(&whole), ["gpu-0"]);
    assert!(held.contains(&"gpu-0-3g-40gb-1".to_owned()));
    assert!(!held.iter().any(|d| d.starts_with("gpu-1")));
}

#[test]
fn what_the_node_cannot_have_is_refused_naming_it() {
    let p = mixed();
    let err = prepare(&p, vec![allocated("gpu-0"), allocated("gpu-9")]).unwrap_err();
    assert_eq!(err.reason, "unknown_device");
    assert_eq!(
        err.message,
        "device \"gpu-9\" is not a device of node \"node-1\" (it has 4 GPU(s), gpu-0 to gpu-3, and 24 partition(s) such as gpu-0-1g-10gb-0) (request \"req\")"
    );
    // A partition of a GPU that is not partitioned does not exist.
    assert_eq!(
        prepare(&p, vec![allocated("gpu-3-1g-10gb-0")])
            .unwrap_err()
            .reason,
        "unknown_device"
    );
    let twice = prepare(&p, vec![allocated("gpu-3"), allocated("gpu-3")]).unwrap_err();
    assert_eq!(twice.reason, "duplicate_device");
    let same_share = prepare(
        &p,
        vec![share("gpu-2", "s", "1Gi"), share("gpu-2", "s", "1Gi")],
    )
    .unwrap_err();
    assert!(
        same_share.message.contains("not as distinct shares"),
        "{same_share}"
    );
    let bad_share = prepare(&p, vec![share("gpu-2", "a/b", "1Gi")]).unwrap_err();
    assert_eq!(bad_share.reason, "bad_allocation");
    assert!(bad_share.message.contains("shareID \"a/b\""), "{bad_share}");
    let bad_amount = prepare(&p, vec![share("gpu-2", "s", "lots")]).unwrap_err();
    assert!(
        bad_amount.message.contains("consumedCapacity \"memory\""),
        "{bad_amount}"
    );
}

#[test]
fn opaque_configs_are_refused() {
    // The profile takes no config: the plugin refuses any before the profile sees it.
    let err = dra_kubelet_plugin::config::decode::<<GpuProfile as DeviceProfile>::Config>(
        DRIVER,
        dra_kubelet_plugin::claim::ConfigEntry::new(
            ConfigSource::FromClass,
            json!({"anything": 1}),
            2,
        ),
    )
    .unwrap_err();
    assert_eq!(err.reason, "bad_parameters");
    assert!(
        err.message.starts_with("status.allocation.devices.config[2].opaque: driver \"gpu.example.com\" takes no parameters"),
        "{err}"
    );
}

#[test]
fn admin_access_is_all_or_nothing_and_holds_nothing() {
    let p = mixed();
    let admin = |d: &str| {
        let mut built = allocated(d);
        built.admin_access = true;
        built
    };
    let all = prepare(&p, vec![admin("gpu-0"), admin("gpu-3")]).unwrap();
    assert!(all.admin_access);
    assert!(p.held_devices(&all).is_empty());
    assert_eq!(p.allocated_devices(&all), ["gpu-0", "gpu-3"]);
    assert_eq!(
        serde_json::to_value(&all).unwrap()["adminAccess"],
        json!(true)
    );
    let mixed_access = prepare(&p, vec![admin("gpu-0"), allocated("gpu-3")]).unwrap_err();
    assert_eq!(mixed_access.reason, "admin_access_mixed");
}

#[test]
fn containers_see_each_device_numbered_claim_wide() {
    let p = mixed();
    let prepared = prepare(
        &p,
        vec![
            allocated("gpu-3"),
            allocated("gpu-0-3g-40gb-1"),
            share("gpu-2", "s-1", "20Gi"),
            share("gpu-2", "s-2", "4Gi"),
        ],
    )
    .unwrap();
    let uid = ClaimUid::parse("uid-1").unwrap();
    let devices = p.cdi_devices(&uid, &prepared);
    let names: Vec<&str> = devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["uid-1", "uid-1:0", "uid-1:1", "uid-1:2", "uid-1:3"]);
    let slice = p.slice_devices();
    let uuid = |name: &str| string(device(&slice, name), "uuid");
    assert_eq!(
        devices[0].container_edits.env,
        [
            format!("FAKE_GPU_0={}", uuid("gpu-3")),
            "FAKE_GPU_0_PRODUCT=H100-SXM5-80GB".into(),
            "FAKE_GPU_0_MEMORY=80Gi".into(),
            format!("FAKE_GPU_1={}", uuid("gpu-0-3g-40gb-1")),
            "FAKE_GPU_1_PRODUCT=A100-SXM4-80GB".into(),
            "FAKE_GPU_1_MEMORY=40Gi".into(),
            "FAKE_GPU_1_PARTITION=3g.40gb".into(),
            format!("FAKE_GPU_2={}", uuid("gpu-2")),
            "FAKE_GPU_2_PRODUCT=L4".into(),
            "FAKE_GPU_2_MEMORY=20Gi".into(),
            "FAKE_GPU_2_SHARE=s-1".into(),
            format!("FAKE_GPU_3={}", uuid("gpu-2")),
            "FAKE_GPU_3_PRODUCT=L4".into(),
            "FAKE_GPU_3_MEMORY=4Gi".into(),
            "FAKE_GPU_3_SHARE=s-2".into(),
            "FAKE_GPU_COUNT=4".to_string(),
        ]
    );
    assert_eq!(devices[2].container_edits.env.len(), 4);
    // Each share is a CDI device of its own: a request gets its share, not its sibling's.
    assert_eq!(
        p.device_cdi_devices(&uid, &prepared, &share("gpu-2", "s-1", "20Gi")),
        Some(vec!["uid-1:2".to_owned()])
    );
    assert_eq!(
        p.device_cdi_devices(&uid, &prepared, &share("gpu-2", "s-2", "4Gi")),
        Some(vec!["uid-1:3".to_owned()])
    );
    assert_eq!(
        p.device_cdi_devices(&uid, &prepared, &share("gpu-2", "s-3", "4Gi")),
        None,
        "a share the claim does not hold"
    );
    assert_eq!(
        p.device_cdi_devices(&uid, &prepared, &allocated("gpu-0-3g-40gb-1")),
        Some(vec!["uid-1:1".to_owned()])
    );
    assert_eq!(
        p.device_cdi_devices(&uid, &prepared, &allocated("gpu-0")),
        None
    );
    assert_eq!(p.claim_cdi_devices(&uid, &prepared), ["uid-1"]);
    assert_eq!(p.cdi_class(), "gpu");
    assert_eq!(
        p.common_edits().env,
        [
            "FAKE_NODE_NAME=node-1",
            "DRA_RESOURCE_DRIVER_NAME=gpu.example.com"
        ]
    );
}

#[test]
fn a_share_without_consumed_capacity_sees_the_whole_memory() {
    // With DRAConsumableCapacity off the API server drops the sharing fields: the GPU is
    // allocated whole, without a share.
    let p = mixed();
    let prepared = prepare(&p, vec![allocated("gpu-2")]).unwrap();
    let uid = ClaimUid::parse("u").unwrap();
    let env = &p.cdi_devices(&uid, &prepared)[1].container_edits.env;
    assert_eq!(env[2], "FAKE_GPU_0_MEMORY=24Gi");
    assert_eq!(env.len(), 3);
    assert_eq!(p.held_devices(&prepared), ["gpu-2"]);
}

#[test]
fn a_stale_checkpoint_is_refused_naming_the_device() {
    let eight = profile(&[group("A100-80GB", 8, Sharing::Partitioned)]);
    let prepared = prepare(&eight, vec![allocated("gpu-7-1g-10gb-0")]).unwrap();
    eight.check(&prepared).unwrap();
    let four = profile(&[group("A100-80GB", 4, Sharing::Partitioned)]);
    let err = four.check(&prepared).unwrap_err();
    assert_eq!(err.reason, "bad_checkpoint");
    assert!(
        err.message
            .starts_with("device \"gpu-7-1g-10gb-0\" is not a device of node \"node-1\""),
        "{err}"
    );
    let exclusive = profile(&[group("A100-80GB", 8, Sharing::Exclusive)]);
    assert!(
        exclusive.check(&prepared).is_err(),
        "no partitions any more"
    );
    let empty = GpuPrepared {
        devices: Vec::new(),
        admin_access: false,
    };
    assert_eq!(eight.check(&empty).unwrap_err().reason, "bad_checkpoint");
}

fn node_devices() -> Vec<String> {
    mixed()
        .slice_devices()
        .into_iter()
        .map(|d| d.name)
        .collect()
}

proptest! {
    /// The same allocation gives the same CDI devices, from a profile built anew (a
    /// restart); every name is the claim's, and each allocated device's names hold
    /// exactly its variables.
    #[test]
    fn cdi_devices_are_deterministic(
        picks in proptest::collection::vec((0usize..1000, proptest::option::of(0u32..4)), 1..12),
        uid in "[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?",
    ) {
        let names = node_devices();
        let mut seen = BTreeSet::new();
        let devices: Vec<AllocatedDevice> = picks
            .iter()
            .map(|(i, s)| {
                let name = &names[i % names.len()];
                if name == "gpu-2" {
                    share(name, &format!("s-{}", s.unwrap_or(0)), "2Gi")
                } else {
                    allocated(name)
                }
            })
            .filter(|d| seen.insert((d.device.clone(), d.share_id.clone())))
            .collect();
        let p = mixed();
        let prepared = prepare(&p, devices.clone()).unwrap();
        let uid = ClaimUid::parse(&uid).unwrap();
        let first = p.cdi_devices(&uid, &prepared);
        prop_assert_eq!(&first, &mixed().cdi_devices(&uid, &prepared));
        let again = prepare(&mixed(), devices.clone()).unwrap();
        prop_assert_eq!(&again, &prepared);
        prop_assert_eq!(first.len(), devices.len() + 1);
        let prefix = format!("{uid}:");
        for d in &first {
            prop_assert!(d.name == uid.as_str() || d.name.starts_with(&prefix));
        }
        prop_assert!(dra_kubelet_plugin::cdi::claim_spec(&dra_kubelet_plugin::cdi::CdiKind::new(DRIVER, CDI_CLASS).unwrap(), &uid, first.clone()).is_ok());
        for d in &devices {
            let names = p.device_cdi_devices(&uid, &prepared, d).unwrap();
            for n in names {
                prop_assert!(first.iter().any(|c| c.name == n));
            }
        }
    }
}
