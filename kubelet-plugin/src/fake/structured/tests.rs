use proptest::prelude::*;
use serde_json::json;

use super::*;
use dra_kubelet_plugin::claim::ConfigSource;
use dra_kubelet_plugin::claim::{ClaimError, ClaimRef};

const DRIVER: &str = "fake.resource.3-shake.com";

fn inventory() -> Inventory {
    Inventory::new("node-1", 8, &["ULTRA_10".to_string()]).unwrap()
}

fn claim() -> ClaimRef {
    ClaimRef::new("u1", "ns", "c").unwrap()
}

/// One `status.allocation.devices.results[]` entry.
#[derive(Debug, Clone, Default)]
struct AllocatedResult {
    request: String,
    driver: String,
    pool: String,
    device: String,
}

/// One `status.allocation.devices.config[]` entry.
#[derive(Debug, Clone)]
struct AllocatedConfig {
    source: ConfigSource,
    requests: Option<Vec<String>>,
    driver: String,
    parameters: serde_json::Value,
}

/// A claim as the API returns it, reduced to what these tests vary.
#[derive(Debug, Clone)]
struct FetchedClaim {
    uid: String,
    allocation: Option<FetchedAllocation>,
}

#[derive(Debug, Clone)]
struct FetchedAllocation {
    results: Vec<AllocatedResult>,
    config: Vec<AllocatedConfig>,
}

/// The `resource.k8s.io/v1` ResourceClaim `f` stands for.
fn api_claim(f: &FetchedClaim) -> k8s_openapi::api::resource::v1::ResourceClaim {
    let status = f.allocation.as_ref().map(|a| {
        json!({"allocation": {"devices": {
            "results": a.results.iter().map(|r| json!({"request": r.request, "driver": r.driver, "pool": r.pool, "device": r.device})).collect::<Vec<_>>(),
            "config": a.config.iter().map(|c| json!({
                "source": match c.source { ConfigSource::FromClass => "FromClass", _ => "FromClaim" },
                "requests": c.requests,
                "opaque": {"driver": c.driver, "parameters": c.parameters},
            })).collect::<Vec<_>>(),
        }}})
    });
    serde_json::from_value(json!({
        "metadata": {"name": "c", "namespace": "ns", "uid": f.uid},
        "spec": {},
        "status": status.unwrap_or(json!({})),
    }))
    .unwrap()
}

/// What the plugin makes of a fetched claim: the plumbing's checks, then this profile.
#[derive(Debug)]
struct Resolved {
    claim: FakePrepared,
    devices: Vec<AllocatedResult>,
}

fn resolve(
    inv: &Inventory,
    driver: &str,
    claim: &ClaimRef,
    fetched: &FetchedClaim,
) -> Result<Resolved, ClaimError> {
    let allocation = dra_kubelet_plugin::claim::allocation_of::<FakeConfig>(
        driver,
        &inv.node_name,
        claim,
        &api_claim(fetched),
    )?;
    let prepared = prepare(inv, &allocation).map_err(|source| ClaimError::Device {
        claim: claim.to_string(),
        source,
    })?;
    Ok(Resolved {
        claim: prepared,
        devices: allocation
            .devices
            .iter()
            .map(|d| AllocatedResult {
                request: d.request.clone(),
                driver: driver.into(),
                pool: inv.node_name.clone(),
                device: d.device.clone(),
            })
            .collect(),
    })
}

fn result(request: &str, pool: &str, device: &str) -> AllocatedResult {
    AllocatedResult {
        request: request.into(),
        driver: DRIVER.into(),
        pool: pool.into(),
        device: device.into(),
    }
}

fn params(spec: serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": "fake.resource.3-shake.com/v1alpha1", "kind": "FakeClaimParameters", "spec": spec})
}

fn config(
    source: ConfigSource,
    requests: Option<&[&str]>,
    parameters: serde_json::Value,
) -> AllocatedConfig {
    AllocatedConfig {
        source,
        requests: requests.map(|r| r.iter().map(|s| s.to_string()).collect()),
        driver: DRIVER.into(),
        parameters,
    }
}

fn fetched(results: Vec<AllocatedResult>, config: Vec<AllocatedConfig>) -> FetchedClaim {
    FetchedClaim {
        uid: "u1".into(),
        allocation: Some(FetchedAllocation { results, config }),
    }
}

fn four(request: &str) -> Vec<AllocatedResult> {
    (0..4)
        .map(|i| result(request, "node-1", &format!("fake-{i}")))
        .collect()
}

#[test]
fn device_names_round_trip_and_are_dns_labels() {
    for i in [0, 1, 7, 127] {
        let name = device_name(i);
        assert_eq!(device_index(&name), Some(i));
        assert!(name.len() <= 63);
        assert!(
            name.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        );
    }
    for bad in [
        "fake-", "fake-01", "fake--1", "fake-1a", "gpu-1", "FAKE-1", "",
    ] {
        assert_eq!(device_index(bad), None, "{bad}");
    }
}

#[test]
fn count_four_split_two_gives_four_parents_and_eight_children() {
    let inv = inventory();
    let got = resolve(
        &inv,
        DRIVER,
        &claim(),
        &fetched(
            four("req"),
            vec![config(
                ConfigSource::FromClaim,
                None,
                params(json!({"count": 4, "split": 2})),
            )],
        ),
    )
    .unwrap();
    assert_eq!(got.claim.devices, inv.devices[..4].to_vec());
    assert_eq!(got.claim.split, 2);
    assert_eq!(got.claim.children().len(), 8);
    assert_eq!(got.devices.len(), 4);
    assert_eq!(got.devices[3].device, "fake-3");
    assert_eq!(got.devices[3].request, "req");
    assert_eq!(got.devices[3].pool, "node-1");
}

#[test]
fn no_config_means_split_one() {
    let got = resolve(&inventory(), DRIVER, &claim(), &fetched(four("r"), vec![])).unwrap();
    assert_eq!(got.claim.split, 1);
}

#[test]
fn claim_config_overrides_class_config_whatever_the_order() {
    let cfg = vec![
        config(ConfigSource::FromClaim, None, params(json!({"split": 3}))),
        config(
            ConfigSource::FromClass,
            None,
            params(json!({"split": 5, "selector": {"model": "ULTRA_10"}})),
        ),
    ];
    let got = resolve(&inventory(), DRIVER, &claim(), &fetched(four("r"), cfg)).unwrap();
    assert_eq!(got.claim.split, 3);
}

#[test]
fn per_request_config_applies_to_its_request_only() {
    let mut results = four("a");
    results.extend((4..6).map(|i| result("b/sub", "node-1", &format!("fake-{i}"))));
    let cfg = vec![
        config(
            ConfigSource::FromClaim,
            Some(&["a"]),
            params(json!({"count": 4, "split": 2})),
        ),
        config(
            ConfigSource::FromClaim,
            Some(&["b"]),
            params(json!({"count": 2, "split": 2})),
        ),
    ];
    let got = resolve(
        &inventory(),
        DRIVER,
        &claim(),
        &fetched(results.clone(), cfg),
    )
    .unwrap();
    assert_eq!(got.claim.devices.len(), 6);
    assert_eq!(got.claim.split, 2);

    // Different splits per request cannot be one prepared claim.
    let cfg = vec![config(
        ConfigSource::FromClaim,
        Some(&["a"]),
        params(json!({"split": 2})),
    )];
    let err = resolve(&inventory(), DRIVER, &claim(), &fetched(results, cfg))
        .unwrap_err()
        .to_string();
    assert!(err.contains("a=2, b/sub=1"), "{err}");
}

#[test]
fn other_drivers_are_ignored() {
    let mut results = four("r");
    results.push(AllocatedResult {
        driver: "gpu.example.com".into(),
        ..result("r", "elsewhere", "gpu-0")
    });
    let mut other = config(ConfigSource::FromClaim, None, json!("not ours to judge"));
    other.driver = "gpu.example.com".into();
    let got = resolve(
        &inventory(),
        DRIVER,
        &claim(),
        &fetched(results, vec![other]),
    )
    .unwrap();
    assert_eq!(got.devices.len(), 4);
}

fn error_of(f: FetchedClaim) -> String {
    resolve(&inventory(), DRIVER, &claim(), &f)
        .unwrap_err()
        .to_string()
}

fn with_params(p: serde_json::Value) -> String {
    error_of(fetched(
        four("r"),
        vec![config(ConfigSource::FromClaim, None, p)],
    ))
}

#[test]
fn bad_claims_get_clear_errors() {
    let mut f = fetched(four("r"), vec![]);
    f.uid = "u2".into();
    let err = error_of(f);
    assert!(
        err.contains("has uid \"u2\"; the kubelet asked for \"u1\""),
        "{err}"
    );

    let err = error_of(FetchedClaim {
        uid: "u1".into(),
        allocation: None,
    });
    assert_eq!(
        err,
        "claim ns/c (u1): not allocated (status.allocation is empty)"
    );

    let err = error_of(fetched(vec![result("r", "node-2", "fake-0")], vec![]));
    assert!(
        err.contains("allocated from pool \"node-2\"; this is node \"node-1\""),
        "{err}"
    );

    let err = error_of(fetched(vec![result("r", "node-1", "fake-8")], vec![]));
    assert!(
        err.contains("\"fake-8\"") && err.contains("fake-0 to fake-7"),
        "{err}"
    );

    let mut foreign = result("r", "node-1", "fake-0");
    foreign.driver = "other".into();
    let err = error_of(fetched(vec![foreign], vec![]));
    assert!(err.contains("no device of driver"), "{err}");
}

#[test]
fn bad_parameters_name_the_field_and_limit() {
    let base = "claim ns/c (u1): status.allocation.devices.config[0].opaque.parameters";
    let cases = [
        (
            json!({"apiVersion": "fake.resource.3-shake.com/v1alpha1", "kind": "DeviceClassParameters"}),
            ".kind: must be \"FakeClaimParameters\", got \"DeviceClassParameters\"",
        ),
        (
            json!({"apiVersion": "fake.resource.3-shake.com/v2", "kind": "FakeClaimParameters"}),
            ".apiVersion: must be \"fake.resource.3-shake.com/v1alpha1\", got \"fake.resource.3-shake.com/v2\"",
        ),
        (json!("split=2"), ": must be a FakeClaimParameters object"),
        (json!([1, 2]), "got an array"),
        (
            params(json!({"split": 0})),
            ".spec.split: must be between 1 and 64, got 0",
        ),
        (
            params(json!({"split": 1_000_000})),
            ".spec.split: must be between 1 and 64, got 1000000",
        ),
        (
            params(json!({"count": 129})),
            ".spec.count: must be between 1 and 128, got 129",
        ),
        (
            params(json!({"split": "2"})),
            ".spec.split: is not a valid FakeClaimParameters: invalid type",
        ),
        (params(json!({"splitt": 2})), "unknown field `splitt`"),
        (
            params(json!({"selector": {"model": "a b"}})),
            ": spec.selector.model may only contain",
        ),
        (params(json!([])), ".spec: is not a valid"),
    ];
    for (p, want) in cases {
        let err = with_params(p.clone());
        assert!(err.starts_with(base), "{p}: {err}");
        assert!(err.contains(want), "{p}: {err}\nwanted {want}");
    }
}

#[test]
fn count_and_model_must_agree_with_the_allocation() {
    let err = with_params(params(json!({"count": 2})));
    assert!(
        err.contains("spec.count is 2 for request \"r\", but 4 device(s)"),
        "{err}"
    );
    let err = with_params(params(json!({"selector": {"model": "ULTRA_100"}})));
    assert!(err.contains("are \"ULTRA_10\""), "{err}");
    // Count given by the class and corrected by the claim: the claim wins.
    let ok = resolve(
        &inventory(),
        DRIVER,
        &claim(),
        &fetched(
            four("r"),
            vec![
                config(ConfigSource::FromClass, None, params(json!({"count": 1}))),
                config(ConfigSource::FromClaim, None, params(json!({"count": 4}))),
            ],
        ),
    );
    assert!(ok.is_ok(), "{ok:?}");
}

/// `opaque.parameters` as the plugin decodes them for this profile.
fn parse_parameters(p: &serde_json::Value) -> Result<OpaqueParameters, String> {
    let entry = dra_kubelet_plugin::claim::ConfigEntry::new(ConfigSource::FromClaim, p.clone(), 0);
    dra_kubelet_plugin::config::decode::<FakeConfig>(DRIVER, entry)
        .map(|e| e.config.parameters())
        .map_err(|e| e.message)
}

#[test]
fn empty_spec_is_all_defaults() {
    let p =
        json!({"apiVersion": "fake.resource.3-shake.com/v1alpha1", "kind": "FakeClaimParameters"});
    assert_eq!(parse_parameters(&p).unwrap(), OpaqueParameters::default());
    let with_metadata = json!({"apiVersion": "fake.resource.3-shake.com/v1alpha1", "kind": "FakeClaimParameters", "metadata": {"name": "x"}});
    assert_eq!(
        parse_parameters(&with_metadata).unwrap(),
        OpaqueParameters::default(),
        "the CRD object's other fields are ignored"
    );
}

#[test]
fn the_config_type_is_the_crds() {
    use kube::Resource;
    let crd = fake_dra_api::params::FakeClaimParameters::api_version(&());
    assert_eq!(CONFIG_API_VERSION, crd);
    assert_eq!(
        CONFIG_KIND,
        fake_dra_api::params::FakeClaimParameters::kind(&())
    );
}

proptest! {
    #[test]
    fn any_parameters_either_parse_within_limits_or_error(
        count in proptest::option::of(-5i64..300), split in proptest::option::of(-5i64..200),
    ) {
        let mut spec = serde_json::Map::new();
        if let Some(c) = count { spec.insert("count".into(), json!(c)); }
        if let Some(s) = split { spec.insert("split".into(), json!(s)); }
        match parse_parameters(&params(serde_json::Value::Object(spec))) {
            Ok(p) => {
                prop_assert!(p.count.is_none_or(|c| (1..=128).contains(&c)));
                prop_assert!(p.split.is_none_or(|s| (1..=64).contains(&s)));
                prop_assert_eq!(p.count, count);
            }
            Err(message) => prop_assert!(
                message.starts_with("status.allocation.devices.config[0].opaque.parameters.spec."),
                "{}", message
            ),
        }
    }

    #[test]
    fn resolved_devices_are_the_allocated_ones(idx in proptest::collection::btree_set(0usize..8, 1..8), split in 1u32..=64) {
        let inv = inventory();
        let results: Vec<_> = idx.iter().map(|&i| result("r", "node-1", &device_name(i))).collect();
        let got = resolve(&inv, DRIVER, &claim(), &fetched(results, vec![
            config(ConfigSource::FromClaim, None, params(json!({"split": split, "count": idx.len()}))),
        ])).unwrap();
        let want: Vec<String> = idx.iter().map(|&i| inv.devices[i].clone()).collect();
        prop_assert_eq!(&got.claim.devices, &want);
        prop_assert_eq!(got.claim.children().len(), idx.len() * split as usize);
    }
}
