//! The FPGA driver as a kubelet and a cluster use it, on the test kit: its slice, a claim
//! prepared with a config, what the container gets, a card held twice, a bad config, the
//! claim unprepared.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::Duration;

use dra_kubelet_plugin_testing::{ApiServer, Claim, ClaimBuilder, KitError, TestNode, cdi};
use fpga_driver::profile::{CONFIG_API_VERSION, Cards, FpgaProfile};
use serde_json::json;

const DRIVER: &str = "fpga.example.com";
const NODE: &str = "node-1";

/// Two cards whose host device nodes are `/dev/null` (no CAP_MKNOD needed).
fn profile(node: &TestNode) -> FpgaProfile {
    let dev_dir = node.root().join("dev");
    std::fs::create_dir(&dev_dir).unwrap();
    for i in 0..2 {
        std::os::unix::fs::symlink("/dev/null", dev_dir.join(format!("fpga{i}"))).unwrap();
    }
    FpgaProfile {
        node_name: NODE.into(),
        cards: tokio::sync::watch::Sender::new(Cards {
            count: 2,
            ..Cards::default()
        })
        .subscribe(),
        bitstream: "blank".into(),
        dev_dir,
        plugin_dir: node.plugin_dir(DRIVER),
    }
}

fn claim(api: &ApiServer, name: &str, cards: &[&str], bitstream: Option<&str>) -> Claim {
    let mut claim = ClaimBuilder::new(DRIVER, NODE, "default", name);
    for card in cards {
        claim = claim.device("fpga", card);
    }
    if let Some(b) = bitstream {
        claim = claim.opaque_config(
            None,
            json!({"apiVersion": CONFIG_API_VERSION, "kind": "FpgaConfig", "bitstream": b}),
        );
    }
    Claim::of(&api.create_claim(&claim.build()).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_gets_its_cards_and_bitstream() {
    let api = ApiServer::start().await.unwrap();
    let node = TestNode::new(NODE).unwrap();
    let plugin = node.plugin(DRIVER, api.client().unwrap());
    let running = node.start(DRIVER, plugin, profile(&node)).await.unwrap();
    let slices = api
        .wait_for_slices(Duration::from_secs(20), |s| !s.is_empty())
        .await
        .unwrap();
    let devices = slices[0].spec.devices.clone().unwrap();
    assert_eq!(devices[1].name, "fpga-1");
    let bitstream = &devices[1].attributes.as_ref().unwrap()["bitstream"];
    assert_eq!(bitstream.string.as_deref(), Some("blank"));

    let mut kubelet = running.kubelet();
    kubelet.register().await.unwrap();
    let both = claim(&api, "both", &["fpga-0", "fpga-1"], Some("demo-v1.bit"));
    let prepared = kubelet.prepare_one(&both).await.unwrap();
    assert_eq!(prepared.len(), 2);
    cdi::CdiCheck::new().check_dir(&node.cdi_root()).unwrap();
    let container = cdi::inject(&node.cdi_root(), &prepared[1].cdi_device_ids).unwrap();
    for want in [
        "FPGA_BITSTREAM=demo-v1.bit",
        "FPGA_DEVICE_1=fpga1",
        "FPGA_NODE_NAME=node-1",
    ] {
        assert!(
            container.env.iter().any(|e| e == want),
            "{want}: {container:?}"
        );
    }
    assert_eq!(container.device_nodes, ["/dev/fpga1"]);
    // The load was real: the card's file, mounted where the container looks.
    let (host, _) = container
        .mounts
        .iter()
        .find(|(_, c)| c == "/run/fpga/fpga1.bitstream")
        .unwrap_or_else(|| panic!("no bitstream mount: {container:?}"));
    assert_eq!(std::fs::read_to_string(host).unwrap(), "demo-v1.bit\n");
    // What the driver reports of each card, in the claim's status.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let devices = loop {
        let claims = api.objects("resource.k8s.io", "v1", "resourceclaims");
        let status = claims
            .iter()
            .find(|c| c["metadata"]["uid"] == both.uid.as_str())
            .map(|c| c["status"]["devices"].clone())
            .unwrap_or_default();
        if status.as_array().is_some_and(|d| d.len() == 2) {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no device status: {status}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(devices[1]["device"], "fpga-1");
    assert_eq!(devices[1]["pool"], NODE);
    assert_eq!(devices[1]["data"], json!({"bitstream": "demo-v1.bit"}));
    assert_eq!(devices[1]["conditions"][0]["type"], "Ready");
    assert_eq!(devices[1]["conditions"][0]["status"], "True");
    assert_eq!(devices[1]["conditions"][0]["reason"], "BitstreamLoaded");
    let state_dir = dra_kubelet_plugin::claim_state_dir(
        &node.plugin_dir(DRIVER),
        &dra_kubelet_plugin::claim::ClaimUid::parse(&both.uid).unwrap(),
    );
    assert!(state_dir.join("fpga0.bitstream").exists());

    // A card another claim holds, and a bitstream the config refuses: each claim alone.
    let again = claim(&api, "again", &["fpga-1"], None);
    let bad = claim(&api, "bad", &["fpga-0"], Some("no/slash"));
    let answers = kubelet
        .prepare(&[again.clone(), bad.clone()])
        .await
        .unwrap();
    let held = answers[&again.uid].as_ref().unwrap_err();
    assert!(
        held.contains("device fpga-1 is already prepared for claim default/both"),
        "{held}"
    );
    let refused = answers[&bad.uid].as_ref().unwrap_err();
    assert!(
        refused.contains("opaque.parameters.bitstream: \"no/slash\" must be"),
        "{refused}"
    );

    let answers = kubelet
        .unprepare(std::slice::from_ref(&both))
        .await
        .unwrap();
    assert_eq!(answers[&both.uid], Ok(()));
    let specs = std::fs::read_dir(node.cdi_root()).unwrap().count();
    assert_eq!(specs, 1, "only the node-wide spec is left");
    assert!(
        !state_dir.exists(),
        "unloaded, and the state directory gone"
    );
    running.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bitstream_a_card_refuses_is_unloaded_from_the_others() {
    let api = ApiServer::start().await.unwrap();
    let node = TestNode::new(NODE).unwrap();
    let plugin = node.plugin(DRIVER, api.client().unwrap());
    let running = node.start(DRIVER, plugin, profile(&node)).await.unwrap();
    let mut kubelet = running.kubelet();
    kubelet.register().await.unwrap();
    let refused = claim(&api, "refused", &["fpga-0", "fpga-1"], Some("fail-v2.bit"));
    let err = kubelet.prepare_one(&refused).await.unwrap_err().to_string();
    assert!(
        err.contains("prepare_devices: card fpga1 refused bitstream \"fail-v2.bit\": CRC mismatch; rolled back"),
        "{err}"
    );
    let states = node.plugin_dir(DRIVER).join(dra_kubelet_plugin::STATE_DIR);
    let left: Vec<_> = std::fs::read_dir(&states).unwrap().flatten().collect();
    assert!(left.is_empty(), "card 0's load was undone: {left:?}");
    // Both cards are free again.
    let next = claim(&api, "next", &["fpga-0", "fpga-1"], None);
    kubelet.prepare_one(&next).await.unwrap();
    running.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_card_without_its_device_node_fails_its_claim_alone() {
    let api = ApiServer::start().await.unwrap();
    let node = TestNode::new(NODE).unwrap();
    let fpga = profile(&node);
    std::fs::remove_file(fpga.dev_dir.join("fpga1")).unwrap();
    let plugin = node.plugin(DRIVER, api.client().unwrap());
    let running = node.start(DRIVER, plugin, fpga).await.unwrap();
    let mut kubelet = running.kubelet();
    kubelet.register().await.unwrap();
    let missing = claim(&api, "missing", &["fpga-1"], None);
    match kubelet.prepare_one(&missing).await {
        Err(KitError::Claim { error, .. }) => {
            let path = node.root().join("dev/fpga1");
            assert!(
                error.contains(&format!(
                    "deviceNodes[0].hostPath {:?} cannot be used on this node",
                    path.display().to_string()
                )),
                "{error}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(
        kubelet
            .prepare_one(&claim(&api, "fine", &["fpga-0"], None))
            .await
            .is_ok()
    );
    assert!(
        !Path::new(
            &node
                .cdi_root()
                .join(format!("k8s.{DRIVER}-fpga_{}.json", missing.uid))
        )
        .exists()
    );
    running.stop().await.unwrap();
}
