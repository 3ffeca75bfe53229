//! Rolling updates (`Plugin::rolling_update`): two instances of one driver on one node,
//! each registered under sockets of its own, sharing the plugin directory. The kubelet
//! may call either for any claim: each sees what the other prepared, a claim prepared
//! twice is worked on once, and the old instance's shutdown leaves the new one serving.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use dra_kubelet_plugin::cdi::{ContainerEdits, Device};
use dra_kubelet_plugin::claim::{AllocatedDevice, ClaimRef, ClaimUid, DriverAllocation};
use dra_kubelet_plugin::device::SliceDevice;
use dra_kubelet_plugin::{DeviceProfile, DeviceWork, NoConfig, ProfileError};
use dra_kubelet_plugin_testing::{
    ApiServer, Claim, ClaimBuilder, Kubelet, RunningPlugin, TestNode,
};
use serde::{Deserialize, Serialize};

const DRIVER: &str = "card.example.com";
const NODE: &str = "node-1";
const OLD: &str = "11111111-2222-4333-8444-555555555555";
const NEW: &str = "66666666-7777-4888-8999-aaaaaaaaaaaa";

/// Cards whose preparation is device work, logged by the instance that did it.
#[derive(Debug, Clone)]
struct Cards {
    instance: &'static str,
    log: Arc<Mutex<Vec<String>>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Held {
    cards: Vec<String>,
}

impl DeviceProfile for Cards {
    type Prepared = Held;
    type Config = NoConfig;
    const DEVICE_WORK: bool = true;

    fn cdi_class(&self) -> &str {
        "card"
    }
    fn slice_devices(&self) -> Vec<SliceDevice> {
        (0..2)
            .map(|i| SliceDevice::new(format!("card-{i}")))
            .collect()
    }
    fn prepare_allocation(
        &self,
        _: &ClaimRef,
        a: &DriverAllocation<NoConfig>,
    ) -> Result<Held, ProfileError> {
        Ok(Held {
            cards: a.devices.iter().map(|d| d.device.clone()).collect(),
        })
    }
    async fn prepare_devices(&self, work: &DeviceWork<'_, Held>) -> Result<(), ProfileError> {
        self.log
            .lock()
            .unwrap()
            .push(format!("{} prepare {}", self.instance, work.claim.name));
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        Ok(())
    }
    async fn unprepare_devices(&self, work: &DeviceWork<'_, Held>) -> Result<(), ProfileError> {
        self.log
            .lock()
            .unwrap()
            .push(format!("{} unprepare {}", self.instance, work.claim.name));
        Ok(())
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

async fn instance(
    api: &ApiServer,
    node: &TestNode,
    uid: &str,
    name: &'static str,
    log: &Arc<Mutex<Vec<String>>>,
) -> (RunningPlugin, Kubelet) {
    let plugin = node
        .plugin(DRIVER, api.client().unwrap())
        .rolling_update(Some(uid.to_owned()));
    let socket = plugin.registration_socket();
    assert!(
        socket
            .to_string_lossy()
            .ends_with(&format!("{DRIVER}-{uid}-reg.sock")),
        "{}",
        socket.display()
    );
    let cards = Cards {
        instance: name,
        log: log.clone(),
    };
    let running = node.start(DRIVER, plugin, cards).await.unwrap();
    let mut kubelet = running.kubelet();
    kubelet.register().await.unwrap();
    (running, kubelet)
}

fn claim(api: &ApiServer, name: &str, card: &str) -> Claim {
    Claim::of(
        &api.create_claim(
            &ClaimBuilder::new(DRIVER, NODE, "default", name)
                .device("cards", card)
                .build(),
        )
        .unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_share_the_claims_and_the_old_one_goes_cleanly() {
    let api = ApiServer::start().await.unwrap();
    let node = TestNode::new(NODE).unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let (old, mut via_old) = instance(&api, &node, OLD, "old", &log).await;
    let (new, mut via_new) = instance(&api, &node, NEW, "new", &log).await;
    let registered: Vec<String> = std::fs::read_dir(node.registry_dir())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        registered.len(),
        2,
        "one registration socket each: {registered:?}"
    );

    let x = claim(&api, "x", "card-0");
    let by_old = via_old.prepare_one(&x).await.unwrap();
    // The kubelet asks the other instance about the same claim: already prepared there too.
    let by_new = via_new.prepare_one(&x).await.unwrap();
    assert_eq!(by_old, by_new);
    // A card the other instance's claim holds is refused.
    let y = claim(&api, "y", "card-0");
    let err = via_new.prepare_one(&y).await.unwrap_err().to_string();
    assert!(
        err.contains("device card-0 is already prepared for claim default/x"),
        "{err}"
    );
    // Unprepared by the new one, the card is free for the old one.
    assert_eq!(
        via_new.unprepare(std::slice::from_ref(&x)).await.unwrap()[&x.uid],
        Ok(())
    );
    via_old.prepare_one(&y).await.unwrap();

    // Both asked for the same new claim at once: worked on once.
    let z = claim(&api, "z", "card-1");
    let (a, b) = tokio::join!(via_old.prepare_one(&z), via_new.prepare_one(&z));
    assert_eq!(a.unwrap(), b.unwrap());
    let log_now = log.lock().unwrap().clone();
    assert_eq!(
        log_now
            .iter()
            .filter(|l| l.ends_with("prepare z") && !l.contains("unprepare"))
            .count(),
        1,
        "{log_now:?}"
    );
    assert_eq!(
        log_now
            .iter()
            .filter(|l| l.ends_with("prepare x") && !l.contains("unprepare"))
            .count(),
        1,
        "{log_now:?}"
    );

    // The old instance stops as a DaemonSet update stops it: its sockets go, the new one
    // serves everything.
    old.stop().await.unwrap();
    let registered: Vec<String> = std::fs::read_dir(node.registry_dir())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(registered, [format!("{DRIVER}-{NEW}-reg.sock")]);
    let answers = via_new.unprepare(&[y.clone(), z.clone()]).await.unwrap();
    assert_eq!((&answers[&y.uid], &answers[&z.uid]), (&Ok(()), &Ok(())));
    new.stop().await.unwrap();
}
