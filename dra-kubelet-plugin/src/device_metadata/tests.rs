#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;

const UID: &str = "0b9a5c4e-1d2f-4a6b-8c7d-9e0f1a2b3c4d";

fn claim(name: &str) -> ClaimRef {
    ClaimRef::new(UID, "team-a", name).unwrap()
}

fn writer(dir: &Path, versions: &[MetadataVersion]) -> MetadataWriter {
    MetadataWriter::new(
        "gpu.example.com",
        &dir.join("plugin"),
        &dir.join("cdi"),
        versions,
    )
    .unwrap()
}

fn attrs() -> BTreeMap<String, Attribute> {
    BTreeMap::from([
        ("model".to_owned(), Attribute::String("A100".into())),
        ("index".to_owned(), Attribute::Int(3)),
        (
            "driverVersion".to_owned(),
            Attribute::Version("1.2.3".into()),
        ),
        ("mig".to_owned(), Attribute::Bool(false)),
    ])
}

#[test]
fn no_versions_means_no_writer() {
    assert!(MetadataWriter::new("d", Path::new("/p"), Path::new("/c"), &[]).is_none());
}

#[test]
fn a_request_gets_its_file_spec_and_cdi_id() {
    let tmp = tempfile::tempdir().unwrap();
    let w = writer(tmp.path(), &MetadataVersion::ALL);
    let c = claim("pod0-gpu-x7k2p");
    let gpu0 = AllocatedDevice::new("gpus/big", "gpu-0");
    let gpu1 = AllocatedDevice::new("gpus/big", "gpu-1");
    let ids = w
        .write(&ClaimMetadata {
            claim: &c,
            pod_claim_name: Some("gpu"),
            pool: "node-1",
            devices: vec![(&gpu0, attrs()), (&gpu1, BTreeMap::new())],
        })
        .unwrap();
    let name = format!("{UID}_gpus");
    assert_eq!(
        ids,
        BTreeMap::from([(
            "gpus".to_owned(),
            format!("gpu.example.com/metadata={name}")
        )])
    );
    let host = tmp
        .path()
        .join("plugin/dra-device-metadata/team-a_pod0-gpu-x7k2p/gpus/metadata.json");
    let bytes = std::fs::read(&host).unwrap();
    let docs: Vec<serde_json::Value> = serde_json::Deserializer::from_slice(&bytes)
        .into_iter()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(docs.len(), 2);
    assert_eq!(docs[0]["apiVersion"], "metadata.resource.k8s.io/v1beta1");
    assert_eq!(docs[1]["apiVersion"], "metadata.resource.k8s.io/v1alpha1");
    assert_eq!(docs[0]["kind"], "DeviceMetadata");
    assert_eq!(docs[0]["metadata"]["uid"], UID);
    assert_eq!(docs[0]["metadata"]["generation"], 1);
    assert_eq!(docs[0]["podClaimName"], "gpu");
    assert_eq!(docs[0]["requests"][0]["name"], "gpus/big");
    let devices = &docs[0]["requests"][0]["devices"];
    assert_eq!(devices[0]["pool"], "node-1");
    assert_eq!(devices[0]["attributes"]["model"]["string"], "A100");
    assert_eq!(devices[0]["attributes"]["index"]["int"], 3);
    assert_eq!(
        devices[0]["attributes"]["driverVersion"]["version"],
        "1.2.3"
    );
    assert_eq!(devices[0]["attributes"]["mig"]["bool"], false);
    assert!(devices[1].get("attributes").is_none());

    let spec_file = tmp
        .path()
        .join(format!("cdi/gpu.example.com_metadata_{name}.json"));
    let spec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(spec_file).unwrap()).unwrap();
    assert_eq!(spec["kind"], "gpu.example.com/metadata");
    // A device name that starts with a digit needs CDI 0.5.0.
    assert_eq!(spec["cdiVersion"], "0.5.0");
    let mount = &spec["devices"][0]["containerEdits"]["mounts"][0];
    assert_eq!(mount["hostPath"], host.display().to_string());
    assert_eq!(
        mount["containerPath"],
        "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/gpu/gpus/gpu.example.com-metadata.json"
    );
    assert_eq!(mount["options"], serde_json::json!(["rbind", "ro"]));
}

#[test]
fn a_claim_of_its_own_is_under_resourceclaims() {
    let tmp = tempfile::tempdir().unwrap();
    let w = writer(tmp.path(), &[MetadataVersion::V1beta1]);
    let c = claim("shared");
    let d = AllocatedDevice::new("nic", "nic-0");
    w.write(&ClaimMetadata {
        claim: &c,
        pod_claim_name: None,
        pool: "node-1",
        devices: vec![(&d, BTreeMap::new())],
    })
    .unwrap();
    let spec: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            tmp.path()
                .join(format!("cdi/gpu.example.com_metadata_{UID}_nic.json")),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(
        spec["devices"][0]["containerEdits"]["mounts"][0]["containerPath"],
        "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/shared/nic/gpu.example.com-metadata.json"
    );
    let file = std::fs::read_to_string(
        tmp.path()
            .join("plugin/dra-device-metadata/team-a_shared/nic/metadata.json"),
    )
    .unwrap();
    assert_eq!(file.matches("\"apiVersion\"").count(), 1, "{file}");
    assert!(!file.contains("podClaimName"), "{file}");
}

#[test]
fn names_unsafe_as_paths_are_refused_and_name_the_field() {
    let tmp = tempfile::tempdir().unwrap();
    let w = writer(tmp.path(), &[MetadataVersion::V1beta1]);
    let d = AllocatedDevice::new("gpu", "gpu-0");
    let bad_ns = ClaimRef::new(UID, "../..", "c").unwrap();
    let e = w
        .write(&ClaimMetadata {
            claim: &bad_ns,
            pod_claim_name: None,
            pool: "n",
            devices: vec![(&d, BTreeMap::new())],
        })
        .unwrap_err();
    assert!(e.to_string().contains("namespace \"../..\""), "{e}");
    assert_eq!(e.reason(), "not_a_path_name");
    let bad_request = AllocatedDevice::new("../gpu", "gpu-0");
    let c = claim("c");
    let e = w
        .write(&ClaimMetadata {
            claim: &c,
            pod_claim_name: None,
            pool: "n",
            devices: vec![(&bad_request, BTreeMap::new())],
        })
        .unwrap_err();
    assert!(e.to_string().contains("request \"../gpu\""), "{e}");
    assert!(!tmp.path().join("plugin").exists());
    // Removing such a claim touches nothing outside the plugin dir.
    w.remove(&bad_ns).unwrap();
}

#[test]
fn remove_takes_the_files_and_specs_of_that_claim_only() {
    let tmp = tempfile::tempdir().unwrap();
    let w = writer(tmp.path(), &[MetadataVersion::V1beta1]);
    let d = AllocatedDevice::new("a", "gpu-0");
    let e = AllocatedDevice::new("b", "gpu-1");
    let c = claim("one");
    let other = ClaimRef::new("1b9a5c4e-1d2f-4a6b-8c7d-9e0f1a2b3c4d", "team-a", "two").unwrap();
    for (claim, devices) in [
        (&c, vec![(&d, BTreeMap::new()), (&e, BTreeMap::new())]),
        (&other, vec![(&d, BTreeMap::new())]),
    ] {
        w.write(&ClaimMetadata {
            claim,
            pod_claim_name: None,
            pool: "n",
            devices,
        })
        .unwrap();
    }
    w.remove(&c).unwrap();
    let specs: Vec<_> = std::fs::read_dir(tmp.path().join("cdi"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(
        specs,
        vec!["gpu.example.com_metadata_1b9a5c4e-1d2f-4a6b-8c7d-9e0f1a2b3c4d_a.json"]
    );
    assert!(
        !tmp.path()
            .join("plugin/dra-device-metadata/team-a_one")
            .exists()
    );
    assert!(
        tmp.path()
            .join("plugin/dra-device-metadata/team-a_two")
            .exists()
    );
    // Again, and for a claim never prepared: nothing to do, no error.
    w.remove(&c).unwrap();
    w.remove(&claim("never")).unwrap();
}

#[test]
fn reconcile_restores_specs_of_prepared_claims_and_drops_the_rest() {
    let tmp = tempfile::tempdir().unwrap();
    let w = writer(tmp.path(), &MetadataVersion::ALL);
    let d = AllocatedDevice::new("gpu", "gpu-0");
    let kept = claim("kept");
    let gone = ClaimRef::new("1b9a5c4e-1d2f-4a6b-8c7d-9e0f1a2b3c4d", "team-a", "gone").unwrap();
    for c in [&kept, &gone] {
        w.write(&ClaimMetadata {
            claim: c,
            pod_claim_name: Some("gpu"),
            pool: "n",
            devices: vec![(&d, BTreeMap::new())],
        })
        .unwrap();
    }
    let spec = tmp
        .path()
        .join(format!("cdi/gpu.example.com_metadata_{UID}_gpu.json"));
    let before = std::fs::read(&spec).unwrap();
    std::fs::remove_dir_all(tmp.path().join("cdi")).unwrap();
    let prepared = BTreeSet::from([kept.uid.clone()]);
    assert_eq!(w.reconcile(&prepared, false).unwrap(), (1, 0));
    assert!(
        tmp.path()
            .join("plugin/dra-device-metadata/team-a_gone")
            .exists()
    );
    assert_eq!(w.reconcile(&prepared, true).unwrap(), (1, 1));
    assert_eq!(std::fs::read(&spec).unwrap(), before);
    assert!(
        !tmp.path()
            .join("plugin/dra-device-metadata/team-a_gone")
            .exists()
    );
    assert_eq!(
        std::fs::read_dir(tmp.path().join("cdi")).unwrap().count(),
        1
    );
}

#[test]
fn a_claim_of_128_devices_is_one_file_per_request() {
    let tmp = tempfile::tempdir().unwrap();
    let w = writer(tmp.path(), &MetadataVersion::ALL);
    let c = claim("big");
    let devices: Vec<AllocatedDevice> = (0..128)
        .map(|i| AllocatedDevice::new("gpus", format!("gpu-{i}")))
        .collect();
    let ids = w
        .write(&ClaimMetadata {
            claim: &c,
            pod_claim_name: None,
            pool: "node-1",
            devices: devices.iter().map(|d| (d, attrs())).collect(),
        })
        .unwrap();
    assert_eq!(ids.len(), 1);
    let bytes = std::fs::read(
        tmp.path()
            .join("plugin/dra-device-metadata/team-a_big/gpus/metadata.json"),
    )
    .unwrap();
    let docs: Vec<serde_json::Value> = serde_json::Deserializer::from_slice(&bytes)
        .into_iter()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(docs.len(), 2);
    for doc in &docs {
        assert_eq!(doc["requests"][0]["devices"].as_array().unwrap().len(), 128);
    }
    // Well under what a runtime reads without complaint.
    assert!(bytes.len() < 256 << 10, "{} bytes", bytes.len());
}
