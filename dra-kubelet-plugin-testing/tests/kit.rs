//! The kit against a small driver of its own ("vf": a NIC's virtual functions), as a
//! driver's tests use it, and the inputs a driver author gets wrong, each refused naming
//! what is wrong.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use dra_kubelet_plugin::cdi::{ContainerEdits, Device, DeviceNode, Mount};
use dra_kubelet_plugin::claim::{AllocatedDevice, ClaimRef, ClaimUid, DriverAllocation};
use dra_kubelet_plugin::device::SliceDevice;
use dra_kubelet_plugin::{DeviceProfile, NoConfig, ProfileError};
use dra_kubelet_plugin_testing::{
    ApiServer, Claim, ClaimBuilder, KitError, MAX_MESSAGE_BYTES, SliceBuilder, TestNode, cdi,
};
use serde::{Deserialize, Serialize};

const DRIVER: &str = "vf.example.com";
const NODE: &str = "node-1";
const LIMIT: Duration = Duration::from_secs(20);

#[derive(Debug, Clone)]
struct VfProfile {
    vfs: usize,
    class: &'static str,
    common: ContainerEdits,
    /// A host directory each VF's container gets, if any.
    firmware: Option<&'static str>,
}

impl VfProfile {
    fn new(vfs: usize) -> Self {
        Self {
            vfs,
            class: "vf",
            common: ContainerEdits::new().env("VF_NODE", NODE),
            firmware: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Vfs {
    vfs: Vec<String>,
}

impl DeviceProfile for VfProfile {
    type Prepared = Vfs;
    type Config = NoConfig;

    fn cdi_class(&self) -> &str {
        self.class
    }

    fn slice_devices(&self) -> Vec<SliceDevice> {
        (0..self.vfs)
            .map(|i| SliceDevice::new(format!("vf-{i}")).attribute("index", i as i64))
            .collect()
    }

    fn prepare_allocation(
        &self,
        _claim: &ClaimRef,
        allocation: &DriverAllocation<NoConfig>,
    ) -> Result<Vfs, ProfileError> {
        Ok(Vfs {
            vfs: allocation
                .devices
                .iter()
                .map(|d| d.device.clone())
                .collect(),
        })
    }

    fn held_devices(&self, prepared: &Vfs) -> Vec<String> {
        prepared.vfs.clone()
    }

    fn check(&self, _prepared: &Vfs) -> Result<(), ProfileError> {
        Ok(())
    }

    fn common_edits(&self) -> ContainerEdits {
        self.common.clone()
    }

    fn cdi_devices(&self, uid: &ClaimUid, prepared: &Vfs) -> Vec<Device> {
        prepared
            .vfs
            .iter()
            .map(|vf| {
                let mut edits = ContainerEdits::new()
                    .env("VF", vf)
                    .device_node(DeviceNode::new("/dev/null"));
                if let Some(dir) = self.firmware {
                    edits = edits.mount(Mount::bind(dir, "/lib/firmware/vf").read_only());
                }
                Device::new(format!("{uid}:{vf}"), edits)
            })
            .collect()
    }

    fn claim_cdi_devices(&self, uid: &ClaimUid, prepared: &Vfs) -> Vec<String> {
        prepared
            .vfs
            .iter()
            .map(|vf| format!("{uid}:{vf}"))
            .collect()
    }

    fn device_cdi_devices(
        &self,
        uid: &ClaimUid,
        prepared: &Vfs,
        device: &AllocatedDevice,
    ) -> Option<Vec<String>> {
        prepared
            .vfs
            .contains(&device.device)
            .then(|| vec![format!("{uid}:{}", device.device)])
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_prepares_and_unprepares_as_a_kubelet_asks() {
    let api = ApiServer::start().await.unwrap();
    api.create_node(NODE).unwrap();
    // A slice an earlier run left, with a device the driver no longer has.
    api.create(
        "resource.k8s.io",
        "v1",
        "resourceslices",
        "",
        SliceBuilder::new("stale", DRIVER, NODE)
            .device("vf-9")
            .build(),
    )
    .unwrap();
    let node = TestNode::new(NODE).unwrap();
    let plugin = node.plugin(DRIVER, api.client().unwrap());
    let running = node.start(DRIVER, plugin, VfProfile::new(2)).await.unwrap();

    // Published, the stale device gone.
    api.wait_for_slices(LIMIT, |slices| {
        slices.len() == 1
            && slices[0]
                .spec
                .devices
                .as_ref()
                .is_some_and(|d| d.len() == 2)
    })
    .await
    .unwrap();

    let mut kubelet = running.kubelet();
    let err = kubelet.prepare(&[]).await.unwrap_err();
    assert!(matches!(err, KitError::NotRegistered { .. }), "{err}");
    let registered = kubelet.register().await.unwrap();
    assert_eq!(registered.driver, DRIVER);

    let claim = api
        .create_claim(
            &ClaimBuilder::new(DRIVER, NODE, "default", "c")
                .device("nic", "vf-1")
                .build(),
        )
        .unwrap();
    let devices = kubelet.prepare_one(&Claim::of(&claim)).await.unwrap();
    assert_eq!(devices.len(), 1);
    assert_eq!(devices[0].requests, ["nic"]);
    assert_eq!(cdi::CdiCheck::new().check_dir(&node.cdi_root()).unwrap(), 2);
    let container = cdi::inject(&node.cdi_root(), &devices[0].cdi_device_ids).unwrap();
    assert!(
        container.env.contains(&"VF=vf-1".to_owned()),
        "{container:?}"
    );
    assert!(
        container.env.contains(&format!("VF_NODE={NODE}")),
        "{container:?}"
    );
    assert_eq!(container.device_nodes, ["/dev/null"]);

    let mut health = kubelet.watch_health().await.unwrap();
    let first = futures::StreamExt::next(&mut health)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.len(), 2);
    assert!(first.iter().all(|d| d.health == "HEALTHY"), "{first:?}");

    // What a kubelet never sends.
    let err = kubelet
        .prepare(&[Claim::new("c-1", "default", "c")])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("\"c-1\" is not a UUID"), "{err}");
    // ~300 bytes a claim: names no API object can have, which the plugin refuses unread.
    let claims = |n: usize| -> Vec<Claim> {
        (0..n)
            .map(|i| {
                let name = format!("{}{i:06}", "X".repeat(240));
                Claim::new(uuid::Uuid::new_v4().to_string(), "default", name)
            })
            .collect()
    };
    let err = kubelet.prepare(&claims(15_000)).await.unwrap_err();
    assert!(
        matches!(err, KitError::TooLarge { bytes, .. } if bytes > MAX_MESSAGE_BYTES),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("refuses messages over 4194304 bytes"),
        "{err}"
    );
    // 2 MiB is under the limit: the plugin answers each claim.
    let answers = kubelet.prepare(&claims(7_100)).await.unwrap();
    assert_eq!(answers.len(), 7_100);
    assert!(
        answers.values().all(|a| a
            .as_ref()
            .is_err_and(|e| e.contains("is not a valid Kubernetes object name"))),
        "{:?}",
        answers.values().next()
    );

    let answers = kubelet.unprepare(&[Claim::of(&claim)]).await.unwrap();
    assert_eq!(answers[claim.metadata.uid.as_deref().unwrap()], Ok(()));
    assert_eq!(cdi::CdiCheck::new().check_dir(&node.cdi_root()).unwrap(), 1);
    running.stop().await.unwrap();
}

/// Starts `profile` as `driver`; the error it stops with.
async fn refused(driver: &str, profile: VfProfile) -> String {
    let api = ApiServer::start().await.unwrap();
    let node = TestNode::new(NODE).unwrap();
    let plugin = node.plugin(driver, api.client().unwrap());
    match node.start(driver, plugin, profile).await {
        Err(KitError::Plugin(e)) => e.to_string(),
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("{driver} started"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_driver_gets_wrong_is_refused_at_start_naming_it() {
    let err = refused(
        &format!("{}.example.com", "d".repeat(52)),
        VfProfile::new(1),
    )
    .await;
    assert!(
        err.contains("is 64 characters; a driver name is at most 63"),
        "{err}"
    );

    let bad_class = VfProfile {
        class: "vf.nic",
        ..VfProfile::new(1)
    };
    let err = refused(DRIVER, bad_class).await;
    assert!(
        err.contains("CDI class \"vf.nic\" (DeviceProfile::cdi_class)"),
        "{err}"
    );

    let err = refused(DRIVER, VfProfile::new(0)).await;
    assert!(
        err.contains("DeviceProfile::slice_devices returned no devices"),
        "{err}"
    );

    let missing = VfProfile {
        common: ContainerEdits::new()
            .mount(Mount::bind("/nonexistent/vf-firmware", "/lib/firmware")),
        ..VfProfile::new(1)
    };
    let err = refused(DRIVER, missing).await;
    assert!(
        err.contains("DeviceProfile::common_edits: CDI device \"common\": containerEdits.mounts[0].hostPath \"/nonexistent/vf-firmware\" cannot be used on this node"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_common_edits_means_no_common_device() {
    let api = ApiServer::start().await.unwrap();
    let node = TestNode::new(NODE).unwrap();
    let plugin = node.plugin(DRIVER, api.client().unwrap());
    let profile = VfProfile {
        common: ContainerEdits::new(),
        ..VfProfile::new(1)
    };
    let running = node.start(DRIVER, plugin, profile).await.unwrap();
    let mut kubelet = running.kubelet();
    kubelet.register().await.unwrap();
    let claim = api
        .create_claim(
            &ClaimBuilder::new(DRIVER, NODE, "default", "c")
                .device("nic", "vf-0")
                .build(),
        )
        .unwrap();
    let devices = kubelet.prepare_one(&Claim::of(&claim)).await.unwrap();
    let uid = claim.metadata.uid.unwrap();
    assert_eq!(
        devices[0].cdi_device_ids,
        [format!("k8s.{DRIVER}/vf={uid}:vf-0")]
    );
    cdi::inject(&node.cdi_root(), &devices[0].cdi_device_ids).unwrap();
    running.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bind_mount_whose_source_is_missing_fails_its_claim_alone() {
    let api = ApiServer::start().await.unwrap();
    let node = TestNode::new(NODE).unwrap();
    let plugin = node.plugin(DRIVER, api.client().unwrap());
    let profile = VfProfile {
        firmware: Some("/nonexistent/vf-firmware"),
        ..VfProfile::new(1)
    };
    let running = node.start(DRIVER, plugin, profile).await.unwrap();
    let mut kubelet = running.kubelet();
    kubelet.register().await.unwrap();
    let claim = api
        .create_claim(
            &ClaimBuilder::new(DRIVER, NODE, "default", "c")
                .device("nic", "vf-0")
                .build(),
        )
        .unwrap();
    let err = kubelet.prepare_one(&Claim::of(&claim)).await.unwrap_err();
    assert!(
        err.to_string().contains("containerEdits.mounts[0].hostPath \"/nonexistent/vf-firmware\" cannot be used on this node"),
        "{err}"
    );
    assert_eq!(
        cdi::CdiCheck::new().check_dir(&node.cdi_root()).unwrap(),
        1,
        "only the common spec: nothing written for the claim"
    );
    running.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn device_metadata_files_follow_the_claim_and_survive_a_cdi_wipe() {
    use dra_kubelet_plugin::claim::{CONTAINER_DIR, MetadataVersion};
    let api = ApiServer::start().await.unwrap();
    let node = TestNode::new(NODE).unwrap();
    let start = || {
        node.plugin(DRIVER, api.client().unwrap())
            .device_metadata(MetadataVersion::ALL)
    };
    let running = node
        .start(DRIVER, start(), VfProfile::new(3))
        .await
        .unwrap();
    let mut kubelet = running.kubelet();
    kubelet.register().await.unwrap();
    // A claim made from a pod's template ("net" in the pod), two requests, one of them
    // with a subrequest (firstAvailable).
    let mut claim = ClaimBuilder::new(DRIVER, NODE, "team-a", "pod0-net-x7k2p")
        .device("data/fast", "vf-0")
        .device("data/fast", "vf-1")
        .device("ctl", "vf-2")
        .build();
    claim.metadata.annotations = Some(
        [(
            "resource.kubernetes.io/pod-claim-name".to_owned(),
            "net".to_owned(),
        )]
        .into(),
    );
    let claim = api.create_claim(&claim).unwrap();
    let uid = claim.metadata.uid.clone().unwrap();
    let devices = kubelet.prepare_one(&Claim::of(&claim)).await.unwrap();

    // The file's CDI id rides on the first device of each request only.
    let ids: Vec<&[String]> = devices
        .iter()
        .map(|d| d.cdi_device_ids.as_slice())
        .collect();
    assert!(
        ids[0].contains(&format!("{DRIVER}/metadata={uid}_data")),
        "{ids:?}"
    );
    assert!(
        !ids[1].iter().any(|id| id.contains("/metadata=")),
        "{ids:?}"
    );
    assert!(
        ids[2].contains(&format!("{DRIVER}/metadata={uid}_ctl")),
        "{ids:?}"
    );
    // Common spec, claim spec, one spec per request: all valid CDI.
    assert_eq!(cdi::CdiCheck::new().check_dir(&node.cdi_root()).unwrap(), 4);
    let container = cdi::inject(&node.cdi_root(), &devices[0].cdi_device_ids).unwrap();
    let host = node
        .plugin_dir(DRIVER)
        .join("dra-device-metadata/team-a_pod0-net-x7k2p/data/metadata.json");
    assert!(
        container.mounts.contains(&(
            host.display().to_string(),
            format!("{CONTAINER_DIR}/resourceclaimtemplates/net/data/{DRIVER}-metadata.json")
        )),
        "{container:?}"
    );
    let bytes = std::fs::read(&host).unwrap();
    let docs: Vec<serde_json::Value> = serde_json::Deserializer::from_slice(&bytes)
        .into_iter()
        .collect::<Result<_, _>>()
        .unwrap();
    let versions: Vec<&str> = docs
        .iter()
        .filter_map(|d| d["apiVersion"].as_str())
        .collect();
    assert_eq!(
        versions,
        [
            "metadata.resource.k8s.io/v1beta1",
            "metadata.resource.k8s.io/v1alpha1"
        ]
    );
    assert_eq!(docs[0]["metadata"]["namespace"], "team-a");
    assert_eq!(docs[0]["podClaimName"], "net");
    assert_eq!(docs[0]["requests"][0]["name"], "data/fast");
    let devices_of_data = &docs[0]["requests"][0]["devices"];
    assert_eq!(devices_of_data[1]["name"], "vf-1");
    assert_eq!(devices_of_data[1]["pool"], NODE);
    assert_eq!(devices_of_data[1]["driver"], DRIVER);
    assert_eq!(devices_of_data[1]["attributes"]["index"]["int"], 1);

    // A reboot empties /var/run/cdi; the kubelet, which holds the claim prepared, does
    // not ask again: the restarted plugin writes the file's spec back.
    running.stop().await.unwrap();
    std::fs::remove_dir_all(node.cdi_root()).unwrap();
    let running = node
        .start(DRIVER, start(), VfProfile::new(3))
        .await
        .unwrap();
    let mut kubelet = running.kubelet();
    kubelet.register().await.unwrap();
    assert_eq!(cdi::CdiCheck::new().check_dir(&node.cdi_root()).unwrap(), 4);
    cdi::inject(&node.cdi_root(), &devices[2].cdi_device_ids).unwrap();

    // Unprepared: the files and their specs go; again, and a claim never prepared whose
    // names would climb out of the plugin dir, are no error and touch nothing.
    let answers = kubelet.unprepare(&[Claim::of(&claim)]).await.unwrap();
    assert_eq!(answers[uid.as_str()], Ok(()));
    assert!(!host.exists());
    assert_eq!(cdi::CdiCheck::new().check_dir(&node.cdi_root()).unwrap(), 1);
    let stranger = Claim::new(uuid::Uuid::new_v4().to_string(), "..", "..");
    let answers = kubelet
        .unprepare(&[Claim::of(&claim), stranger])
        .await
        .unwrap();
    assert!(answers.values().all(Result::is_ok), "{answers:?}");
    assert!(node.plugin_dir(DRIVER).join("dra-device-metadata").is_dir());
    running.stop().await.unwrap();
}
