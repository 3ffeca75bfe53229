//! Device work (`DeviceProfile::DEVICE_WORK`) through the kit: a driver of "cards" whose
//! preparation loads a file into the claim's state directory (a bind mount's source),
//! and whose claims fail, panic, hang or refuse their rollback as their names ask. Each
//! outcome: a clear error, the work rolled back, nothing else lost.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dra_kubelet_plugin::cdi::{ContainerEdits, Device, Mount};
use dra_kubelet_plugin::claim::{AllocatedDevice, ClaimRef, ClaimUid, DriverAllocation};
use dra_kubelet_plugin::device::SliceDevice;
use dra_kubelet_plugin::{
    CHECKPOINT_FILE, DeviceProfile, DeviceWork, NoConfig, ProfileError, STATE_DIR, claim_state_dir,
};
use dra_kubelet_plugin_testing::{ApiServer, Claim, ClaimBuilder, TestNode, cdi};
use serde::{Deserialize, Serialize};

const DRIVER: &str = "card.example.com";
const NODE: &str = "node-1";

/// What the driver did, in order: `prepare <claim>`, `unprepare <claim>`,
/// `rollback <claim>`.
type Log = Arc<Mutex<Vec<String>>>;

#[derive(Debug, Clone)]
struct Cards {
    plugin_dir: PathBuf,
    log: Log,
    /// How many rollbacks of `badroll-*` claims fail before one succeeds.
    failing_rollbacks: Arc<Mutex<u32>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Held {
    cards: Vec<String>,
}

const LOADED: &str = "loaded";

impl Cards {
    fn new(plugin_dir: PathBuf) -> Self {
        Self {
            plugin_dir,
            log: Log::default(),
            failing_rollbacks: Arc::new(Mutex::new(0)),
        }
    }

    fn note(&self, what: &str, claim: &ClaimRef) {
        self.log
            .lock()
            .unwrap()
            .push(format!("{what} {}", claim.name));
    }

    fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

impl DeviceProfile for Cards {
    type Prepared = Held;
    type Config = NoConfig;
    const DEVICE_WORK: bool = true;

    fn cdi_class(&self) -> &str {
        "card"
    }

    fn slice_devices(&self) -> Vec<SliceDevice> {
        (0..4)
            .map(|i| SliceDevice::new(format!("card-{i}")))
            .collect()
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

    async fn prepare_devices(&self, work: &DeviceWork<'_, Held>) -> Result<(), ProfileError> {
        self.note("prepare", work.claim);
        // Half the work is done before any failure: the rollback must undo it.
        std::fs::write(work.state_dir.join(LOADED), work.prepared.cards.join(","))
            .map_err(|e| ProfileError::new("io", e.to_string()))?;
        let name = work.claim.name.as_str();
        if name.starts_with("fail") || name.starts_with("badroll") {
            return Err(ProfileError::new(
                "load_failed",
                format!("card {} did not take the bitstream", work.prepared.cards[0]),
            ));
        }
        if name.starts_with("panic") {
            panic!("the card driver lost its mind");
        }
        if name.starts_with("hang") {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
        Ok(())
    }

    async fn unprepare_devices(&self, work: &DeviceWork<'_, Held>) -> Result<(), ProfileError> {
        self.note("unprepare", work.claim);
        remove(&work.state_dir.join(LOADED))
    }

    async fn roll_back_devices(&self, work: &DeviceWork<'_, Held>) -> Result<(), ProfileError> {
        self.note("rollback", work.claim);
        if work.claim.name.starts_with("badroll") {
            let mut left = self.failing_rollbacks.lock().unwrap();
            if *left > 0 {
                *left -= 1;
                return Err(ProfileError::new("unload_failed", "the card is stuck"));
            }
        }
        remove(&work.state_dir.join(LOADED))
    }

    fn held_devices(&self, held: &Held) -> Vec<String> {
        held.cards.clone()
    }

    fn check(&self, _: &Held) -> Result<(), ProfileError> {
        Ok(())
    }

    fn cdi_devices(&self, uid: &ClaimUid, held: &Held) -> Vec<Device> {
        let loaded = claim_state_dir(&self.plugin_dir, uid).join(LOADED);
        vec![Device::new(
            uid.to_string(),
            ContainerEdits::new()
                .env("CARDS", &held.cards.join(","))
                .mount(Mount::bind(loaded.to_string_lossy(), "/run/cards/loaded")),
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

fn remove(path: &Path) -> Result<(), ProfileError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(ProfileError::new("io", e.to_string()))
        }
        _ => Ok(()),
    }
}

struct World {
    api: ApiServer,
    node: TestNode,
    cards: Cards,
}

impl World {
    async fn new() -> Self {
        let api = ApiServer::start().await.unwrap();
        let node = TestNode::new(NODE).unwrap();
        let cards = Cards::new(node.plugin_dir(DRIVER));
        Self { api, node, cards }
    }

    fn claim(&self, name: &str, card: &str) -> Claim {
        let claim = self
            .api
            .create_claim(
                &ClaimBuilder::new(DRIVER, NODE, "default", name)
                    .device("cards", card)
                    .build(),
            )
            .unwrap();
        Claim::of(&claim)
    }

    fn state_dirs(&self) -> Vec<String> {
        let mut dirs: Vec<String> = std::fs::read_dir(self.node.plugin_dir(DRIVER).join(STATE_DIR))
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        dirs.sort();
        dirs
    }

    fn checkpoint(&self) -> serde_json::Value {
        let bytes = std::fs::read(self.node.plugin_dir(DRIVER).join(CHECKPOINT_FILE)).unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    async fn start(
        &self,
        timeout: Duration,
    ) -> (
        dra_kubelet_plugin_testing::RunningPlugin,
        dra_kubelet_plugin_testing::Kubelet,
    ) {
        let plugin = self
            .node
            .plugin(DRIVER, self.api.client().unwrap())
            .device_work_timeout(timeout);
        let running = self
            .node
            .start(DRIVER, plugin, self.cards.clone())
            .await
            .unwrap();
        let mut kubelet = running.kubelet();
        kubelet.register().await.unwrap();
        (running, kubelet)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_work_is_done_before_the_spec_and_undone_after_it() {
    let world = World::new().await;
    let (running, mut kubelet) = world.start(Duration::from_secs(10)).await;
    let claim = world.claim("good", "card-1");
    let devices = kubelet.prepare_one(&claim).await.unwrap();
    let container = cdi::inject(&world.node.cdi_root(), &devices[0].cdi_device_ids).unwrap();
    let (host, _) = container
        .mounts
        .iter()
        .find(|(_, c)| c == "/run/cards/loaded")
        .expect("the state directory's file is mounted");
    assert_eq!(std::fs::read_to_string(host).unwrap(), "card-1");
    assert_eq!(world.state_dirs(), std::slice::from_ref(&claim.uid));
    assert!(
        world.checkpoint().to_string().contains("\"good\"")
            && !world.checkpoint().to_string().contains("preparePhase"),
        "completed, so no phase is written: {}",
        world.checkpoint()
    );

    // Again: already prepared, no work.
    kubelet.prepare_one(&claim).await.unwrap();
    let answers = kubelet
        .unprepare(std::slice::from_ref(&claim))
        .await
        .unwrap();
    assert_eq!(answers[&claim.uid], Ok(()));
    assert!(world.state_dirs().is_empty(), "{:?}", world.state_dirs());
    // Unprepare of a claim never prepared (or already unprepared) succeeds, no work.
    let never = world.claim("never", "card-2");
    let answers = kubelet
        .unprepare(&[claim.clone(), never.clone()])
        .await
        .unwrap();
    assert_eq!(
        (&answers[&claim.uid], &answers[&never.uid]),
        (&Ok(()), &Ok(()))
    );
    assert_eq!(world.cards.log(), ["prepare good", "unprepare good"]);
    running.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_panicking_or_hanging_prepare_is_rolled_back_alone() {
    let world = World::new().await;
    let (running, mut kubelet) = world.start(Duration::from_millis(500)).await;
    let good = world.claim("good", "card-0");
    let failing = world.claim("fail", "card-1");
    let panicking = world.claim("panic", "card-2");
    let hanging = world.claim("hang", "card-3");
    let answers = kubelet
        .prepare(&[
            good.clone(),
            failing.clone(),
            panicking.clone(),
            hanging.clone(),
        ])
        .await
        .unwrap();
    assert!(answers[&good.uid].is_ok(), "{:?}", answers[&good.uid]);
    let error = |c: &Claim| answers[&c.uid].clone().unwrap_err();
    let fail = error(&failing);
    assert!(
        fail.contains("default/fail (")
            && fail
                .contains("prepare_devices: card card-1 did not take the bitstream; rolled back"),
        "{fail}"
    );
    let panic = error(&panicking);
    assert!(
        panic.contains("prepare_devices: panicked: the card driver lost its mind; rolled back"),
        "{panic}"
    );
    let hang = error(&hanging);
    assert!(
        hang.contains("prepare_devices: not done by its deadline")
            && hang.contains("Plugin::device_work_timeout")
            && hang.ends_with("rolled back"),
        "{hang}"
    );
    let mut log = world.cards.log();
    log.sort();
    assert_eq!(
        log,
        [
            "prepare fail",
            "prepare good",
            "prepare hang",
            "prepare panic",
            "rollback fail",
            "rollback hang",
            "rollback panic"
        ]
    );
    assert_eq!(
        world.state_dirs(),
        std::slice::from_ref(&good.uid),
        "only the prepared claim keeps its state"
    );
    let checkpoint = world.checkpoint();
    assert_eq!(
        checkpoint["claims"].as_object().unwrap().len(),
        1,
        "{checkpoint}"
    );

    // The devices the failed claims asked for are free: another claim takes one.
    let next = world.claim("next", "card-1");
    kubelet.prepare_one(&next).await.unwrap();
    running.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_rollback_keeps_the_claim_started_until_a_rollback_succeeds() {
    let world = World::new().await;
    *world.cards.failing_rollbacks.lock().unwrap() = 2;
    let (running, mut kubelet) = world.start(Duration::from_secs(10)).await;
    let claim = world.claim("badroll", "card-0");
    let err = kubelet.prepare_one(&claim).await.unwrap_err().to_string();
    assert!(
        err.contains("did not take the bitstream; rolling back failed too (")
            && err.contains("roll_back_devices: the card is stuck)"),
        "{err}"
    );
    let checkpoint = world.checkpoint();
    assert_eq!(
        checkpoint["claims"][&claim.uid]["preparePhase"], "PrepareStarted",
        "{checkpoint}"
    );
    // The card stays held while its rollback is owed.
    let other = world.claim("other", "card-0");
    let err = kubelet.prepare_one(&other).await.unwrap_err().to_string();
    assert!(
        err.contains("device card-0 is already prepared for claim default/badroll"),
        "{err}"
    );

    // The kubelet's retry: rolled back first (fails again), nothing else done.
    let err = kubelet.prepare_one(&claim).await.unwrap_err().to_string();
    assert!(
        err.contains("roll_back_devices: the card is stuck"),
        "{err}"
    );
    // Restart: the rollback owed runs before the plugin serves, and succeeds.
    running.stop().await.unwrap();
    let (running, mut kubelet) = world.start(Duration::from_secs(10)).await;
    assert!(world.state_dirs().is_empty(), "{:?}", world.state_dirs());
    assert_eq!(world.checkpoint()["claims"], serde_json::json!({}));
    kubelet.prepare_one(&other).await.unwrap();
    assert_eq!(
        world.cards.log(),
        [
            "prepare badroll",
            "rollback badroll",
            "rollback badroll",
            "rollback badroll",
            "prepare other"
        ]
    );
    running.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_a_crash_left_started_is_rolled_back_before_serving() {
    let world = World::new().await;
    let (running, mut kubelet) = world.start(Duration::from_secs(10)).await;
    let claim = world.claim("good", "card-0");
    kubelet.prepare_one(&claim).await.unwrap();
    running.stop().await.unwrap();

    // What a kill -9 between the work and the checkpoint's completion leaves: the claim
    // recorded as started, its work done, its state there, no spec.
    let plugin_dir = world.node.plugin_dir(DRIVER);
    let path = plugin_dir.join(CHECKPOINT_FILE);
    let text = std::fs::read_to_string(&path).unwrap();
    let started = text.replacen(
        "\"namespace\"",
        "\"preparePhase\": \"PrepareStarted\", \"namespace\"",
        1,
    );
    std::fs::write(&path, started).unwrap();
    let spec = std::fs::read_dir(world.node.cdi_root())
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().contains(&claim.uid))
        .unwrap();
    std::fs::remove_file(spec.path()).unwrap();
    let orphan = plugin_dir
        .join(STATE_DIR)
        .join("3f8a4c1e-0000-4000-8000-000000000000");
    std::fs::create_dir_all(&orphan).unwrap();

    let (running, mut kubelet) = world.start(Duration::from_secs(10)).await;
    assert_eq!(
        world.cards.log(),
        ["prepare good", "rollback good"],
        "rolled back once"
    );
    assert!(
        world.state_dirs().is_empty(),
        "the state and an orphan's are gone: {:?}",
        world.state_dirs()
    );
    assert_eq!(world.checkpoint()["claims"], serde_json::json!({}));
    // The kubelet's retry prepares it afresh.
    kubelet.prepare_one(&claim).await.unwrap();
    assert_eq!(world.state_dirs(), std::slice::from_ref(&claim.uid));
    assert_eq!(world.cards.log().len(), 3);
    running.stop().await.unwrap();
}
