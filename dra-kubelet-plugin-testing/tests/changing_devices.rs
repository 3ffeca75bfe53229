//! Devices that change while the plugin runs (`DeviceProfile::changes`): a card plugged in
//! and out, one going bad. The slices follow, an unhealthy device is tainted when the
//! driver asks, the kubelet's health stream reports it, and a claim holding a device
//! that goes away keeps it until unprepared.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dra_kubelet_plugin::cdi::{ContainerEdits, Device};
use dra_kubelet_plugin::claim::{AllocatedDevice, ClaimRef, ClaimUid, DriverAllocation};
use dra_kubelet_plugin::device::{HealthStatus, SliceDevice, TaintEffect};
use dra_kubelet_plugin::{DeviceProfile, NoConfig, ProfileError};
use dra_kubelet_plugin_testing::{ApiServer, Claim, ClaimBuilder, TestNode};
use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::resource::v1::ResourceSlice;
use serde::{Deserialize, Serialize};

const DRIVER: &str = "card.example.com";
const NODE: &str = "node-1";
const LIMIT: Duration = Duration::from_secs(20);

/// What the node has now: card names, the bad ones with why, and the pool of those not
/// in the node's own.
#[derive(Debug, Default)]
struct Cards {
    present: Vec<String>,
    bad: BTreeMap<String, String>,
    pools: BTreeMap<String, String>,
}

#[derive(Debug, Clone)]
struct HotPlug {
    cards: Arc<Mutex<Cards>>,
    changed: tokio::sync::watch::Sender<u64>,
    taint: Option<TaintEffect>,
}

impl HotPlug {
    fn new(cards: &[&str], taint: Option<TaintEffect>) -> Self {
        let present = cards.iter().map(|c| c.to_string()).collect();
        Self {
            cards: Arc::new(Mutex::new(Cards {
                present,
                ..Cards::default()
            })),
            changed: tokio::sync::watch::Sender::new(0),
            taint,
        }
    }

    /// Changes the cards as a driver's watcher would, and says so.
    fn update(&self, change: impl FnOnce(&mut Cards)) {
        change(&mut self.cards.lock().unwrap());
        self.changed.send_modify(|n| *n += 1);
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Held {
    cards: Vec<String>,
}

impl DeviceProfile for HotPlug {
    type Prepared = Held;
    type Config = NoConfig;

    fn cdi_class(&self) -> &str {
        "card"
    }

    fn slice_devices(&self) -> Vec<SliceDevice> {
        let cards = self.cards.lock().unwrap();
        cards.present.iter().map(SliceDevice::new).collect()
    }

    fn changes(&self) -> BoxStream<'static, ()> {
        let rx = self.changed.subscribe();
        futures::stream::unfold(rx, |mut rx| async move {
            rx.changed().await.ok().map(|()| ((), rx))
        })
        .boxed()
    }

    fn health(&self, device: &str) -> (HealthStatus, Option<String>) {
        match self.cards.lock().unwrap().bad.get(device) {
            Some(why) => (HealthStatus::Unhealthy, Some(why.clone())),
            None => (HealthStatus::Healthy, None),
        }
    }

    fn unhealthy_taint(&self) -> Option<TaintEffect> {
        self.taint
    }

    fn device_pool(&self, device: &str) -> Option<String> {
        self.cards.lock().unwrap().pools.get(device).cloned()
    }

    fn prepare_allocation(
        &self,
        _: &ClaimRef,
        allocation: &DriverAllocation<NoConfig>,
    ) -> Result<Held, ProfileError> {
        Ok(Held {
            cards: allocation
                .devices
                .iter()
                .map(|d| d.device.clone())
                .collect(),
        })
    }

    fn held_devices(&self, held: &Held) -> Vec<String> {
        held.cards.clone()
    }

    fn check(&self, _: &Held) -> Result<(), ProfileError> {
        Ok(())
    }

    fn cdi_devices(&self, uid: &ClaimUid, held: &Held) -> Vec<Device> {
        vec![Device::new(
            uid.to_string(),
            ContainerEdits::new().env("CARDS", &held.cards.join(",")),
        )]
    }

    fn claim_cdi_devices(&self, uid: &ClaimUid, _: &Held) -> Vec<String> {
        vec![uid.to_string()]
    }

    fn device_cdi_devices(
        &self,
        uid: &ClaimUid,
        held: &Held,
        device: &AllocatedDevice,
    ) -> Option<Vec<String>> {
        held.cards
            .contains(&device.device)
            .then(|| vec![uid.to_string()])
    }
}

/// The published devices, by name, with their taints' keys and effects.
fn published(slices: &[ResourceSlice]) -> BTreeMap<String, Vec<String>> {
    slices
        .iter()
        .flat_map(|s| s.spec.devices.clone().unwrap_or_default())
        .map(|d| {
            let taints = d
                .taints
                .unwrap_or_default()
                .into_iter()
                .map(|t| format!("{}:{}", t.key, t.effect))
                .collect();
            (d.name, taints)
        })
        .collect()
}

fn names(slices: &[ResourceSlice]) -> Vec<String> {
    published(slices).into_keys().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_slices_follow_cards_plugged_in_and_out_and_a_held_card_stays_prepared() {
    let api = ApiServer::start().await.unwrap();
    let node = TestNode::new(NODE).unwrap();
    let profile = HotPlug::new(&["card-0", "card-1"], None);
    let plugin = node.plugin(DRIVER, api.client().unwrap());
    let running = node.start(DRIVER, plugin, profile.clone()).await.unwrap();
    let mut kubelet = running.kubelet();
    kubelet.register().await.unwrap();
    api.wait_for_slices(LIMIT, |s| names(s) == ["card-0", "card-1"])
        .await
        .unwrap();

    let claim = Claim::of(
        &api.create_claim(
            &ClaimBuilder::new(DRIVER, NODE, "default", "held")
                .device("cards", "card-1")
                .build(),
        )
        .unwrap(),
    );
    kubelet.prepare_one(&claim).await.unwrap();

    // Plugged in: published without a restart.
    profile.update(|c| c.present.push("card-2".into()));
    api.wait_for_slices(LIMIT, |s| names(s) == ["card-0", "card-1", "card-2"])
        .await
        .unwrap();
    // Pulled out while a claim holds it: gone from the slice, the claim still prepared.
    profile.update(|c| c.present.retain(|n| n != "card-1"));
    api.wait_for_slices(LIMIT, |s| names(s) == ["card-0", "card-2"])
        .await
        .unwrap();
    let again = kubelet.prepare_one(&claim).await.unwrap();
    assert_eq!(again[0].device, "card-1", "answered from the checkpoint");
    let spec_files = std::fs::read_dir(node.cdi_root()).unwrap().count();
    assert_eq!(spec_files, 1, "its CDI spec stays");
    let answers = kubelet
        .unprepare(std::slice::from_ref(&claim))
        .await
        .unwrap();
    assert_eq!(answers[&claim.uid], Ok(()));

    // Two devices of one name: refused, the last good pool stays published; the next
    // good change is published.
    profile.update(|c| c.present = vec!["card-0".into(), "card-0".into()]);
    profile.update(|c| c.present = vec!["card-3".into()]);
    api.wait_for_slices(LIMIT, |s| names(s) == ["card-3"])
        .await
        .unwrap();
    running.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_card_is_tainted_and_reported_unhealthy_until_it_recovers() {
    let api = ApiServer::start().await.unwrap();
    let node = TestNode::new(NODE).unwrap();
    let profile = HotPlug::new(&["card-0", "card-1"], Some(TaintEffect::NoSchedule));
    let plugin = node.plugin(DRIVER, api.client().unwrap());
    let running = node.start(DRIVER, plugin, profile.clone()).await.unwrap();
    let mut kubelet = running.kubelet();
    kubelet.register().await.unwrap();
    api.wait_for_slices(LIMIT, |s| names(s) == ["card-0", "card-1"])
        .await
        .unwrap();
    let mut health = kubelet.watch_health().await.unwrap();
    let first = tokio::time::timeout(LIMIT, health.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(first.iter().all(|d| d.health == "HEALTHY"), "{first:?}");

    profile.update(|c| {
        c.bad
            .insert("card-1".into(), "ECC errors over the limit".into());
    });
    let slices = api
        .wait_for_slices(LIMIT, |s| !published(s)["card-1"].is_empty())
        .await
        .unwrap();
    assert_eq!(
        published(&slices),
        BTreeMap::from([
            ("card-0".to_owned(), vec![]),
            (
                "card-1".to_owned(),
                vec![format!("{DRIVER}/unhealthy:NoSchedule")]
            ),
        ])
    );
    let report = loop {
        let report = tokio::time::timeout(LIMIT, health.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if report.iter().any(|d| d.health == "UNHEALTHY") {
            break report;
        }
    };
    let bad: Vec<_> = report
        .iter()
        .filter(|d| d.health == "UNHEALTHY")
        .map(|d| (d.device.as_str(), d.message.as_str()))
        .collect();
    assert_eq!(bad, [("card-1", "ECC errors over the limit")]);

    profile.update(|c| c.bad.clear());
    api.wait_for_slices(LIMIT, |s| published(s).values().all(Vec::is_empty))
        .await
        .unwrap();
    running.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_of_ten_thousand_devices_is_published_in_slices_of_the_api_limit() {
    let api = ApiServer::start().await.unwrap();
    let node = TestNode::new(NODE).unwrap();
    let names: Vec<String> = (0..10_000).map(|i| format!("card-{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let profile = HotPlug::new(&refs, None);
    let plugin = node.plugin(DRIVER, api.client().unwrap());
    let running = node.start(DRIVER, plugin, profile.clone()).await.unwrap();
    let slices = api
        .wait_for_slices(LIMIT, |s| published(s).len() == 10_000)
        .await
        .unwrap();
    // 128 devices a slice (the API's limit), all of one pool generation.
    assert_eq!(slices.len(), 79);
    assert!(
        slices
            .iter()
            .all(|s| s.spec.pool.resource_slice_count == 79)
    );
    // A card plugged into the big pool is published like any other.
    profile.update(|c| c.present.push("card-10000".into()));
    api.wait_for_slices(LIMIT, |s| published(s).len() == 10_001)
        .await
        .unwrap();
    running.stop().await.unwrap();
}

/// The published devices by pool, and each pool's slices' names and generation.
fn pools(slices: &[ResourceSlice]) -> BTreeMap<String, (Vec<String>, BTreeMap<String, i64>)> {
    let mut pools: BTreeMap<String, (Vec<String>, BTreeMap<String, i64>)> = BTreeMap::new();
    for s in slices {
        let pool = pools.entry(s.spec.pool.name.clone()).or_default();
        pool.0
            .extend(s.spec.devices.iter().flatten().map(|d| d.name.clone()));
        pool.0.sort();
        pool.1.insert(
            s.metadata.name.clone().unwrap_or_default(),
            s.spec.pool.generation,
        );
    }
    pools
}

fn devices_by_pool(slices: &[ResourceSlice]) -> BTreeMap<String, Vec<String>> {
    pools(slices)
        .into_iter()
        .map(|(p, (d, _))| (p, d))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_s_pools_on_one_node_come_and_go_apart_and_serve_claims() {
    let api = ApiServer::start().await.unwrap();
    let node = TestNode::new(NODE).unwrap();
    let profile = HotPlug::new(&["card-0", "nic-0", "nic-1"], None);
    profile.update(|c| {
        c.pools.insert("nic-0".into(), "nics".into());
        c.pools.insert("nic-1".into(), "nics".into());
    });
    let plugin = node.plugin(DRIVER, api.client().unwrap());
    let running = node.start(DRIVER, plugin, profile.clone()).await.unwrap();
    let mut kubelet = running.kubelet();
    kubelet.register().await.unwrap();
    let both = BTreeMap::from([
        (NODE.to_owned(), vec!["card-0".to_owned()]),
        (
            format!("{NODE}/nics"),
            vec!["nic-0".to_owned(), "nic-1".to_owned()],
        ),
    ]);
    let first = api
        .wait_for_slices(LIMIT, |s| devices_by_pool(s) == both)
        .await
        .unwrap();
    let node_pool = pools(&first)[NODE].1.clone();

    // A claim of a card and a NIC, one from each pool: prepared, each device named with
    // its pool.
    let claim = Claim::of(
        &api.create_claim(
            &ClaimBuilder::new(DRIVER, NODE, "default", "card-and-nic")
                .device("card", "card-0")
                .result(serde_json::json!({"request": "nic", "driver": DRIVER, "pool": format!("{NODE}/nics"), "device": "nic-1"}))
                .build(),
        )
        .unwrap(),
    );
    let prepared = kubelet.prepare_one(&claim).await.unwrap();
    let mut got: Vec<(String, String)> = prepared
        .iter()
        .map(|d| (d.pool.clone(), d.device.clone()))
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            (NODE.to_owned(), "card-0".to_owned()),
            (format!("{NODE}/nics"), "nic-1".to_owned())
        ]
    );
    // A pool of another node whose name starts with this one's: refused.
    let other = Claim::of(
        &api.create_claim(
            &ClaimBuilder::new(DRIVER, NODE, "default", "elsewhere")
                .result(serde_json::json!({"request": "nic", "driver": DRIVER, "pool": format!("{NODE}0/nics"), "device": "nic-1"}))
                .build(),
        )
        .unwrap(),
    );
    let refused = kubelet.prepare_one(&other).await.unwrap_err().to_string();
    assert!(
        refused.contains(&format!("allocated from pool \"{NODE}0/nics\"")),
        "{refused}"
    );

    // The NICs pulled out: their pool's slices are deleted; the node's pool is left as
    // it was (same slices, same generation). The claim stays prepared.
    profile.update(|c| c.present.retain(|n| !n.starts_with("nic")));
    let after = api
        .wait_for_slices(LIMIT, |s| {
            devices_by_pool(s) == BTreeMap::from([(NODE.to_owned(), vec!["card-0".to_owned()])])
        })
        .await
        .unwrap();
    assert_eq!(
        pools(&after)[NODE].1,
        node_pool,
        "the node's pool untouched"
    );
    let again = kubelet.prepare_one(&claim).await.unwrap();
    assert_eq!(again.len(), 2, "answered from the checkpoint");

    // A pool name the API would refuse is refused (the pool unit tests say how); the next
    // good inventory is published, the NIC pool back.
    profile.update(|c| {
        c.present.push("nic-0".into());
        c.pools.insert("nic-0".into(), "Bad_Name".into());
    });
    profile.update(|c| {
        c.pools.insert("nic-0".into(), "nics".into());
    });
    api.wait_for_slices(LIMIT, |s| {
        devices_by_pool(s)
            == BTreeMap::from([
                (NODE.to_owned(), vec!["card-0".to_owned()]),
                (format!("{NODE}/nics"), vec!["nic-0".to_owned()]),
            ])
    })
    .await
    .unwrap();
    running.stop().await.unwrap();
}
