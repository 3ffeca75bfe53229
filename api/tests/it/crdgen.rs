//! The committed CRD YAML must be what the types generate, and must carry the schema
//! features the project relies on.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use fake_dra_api::crdgen;
use fake_dra_api::nas::NodeAllocationState;
use fake_dra_api::params::{DeviceClassParameters, FakeClaimParameters, MAX_COUNT, MAX_SPLIT};
use fake_dra_api::{NAS_GROUP, PARAMS_GROUP, VERSION};
use kube::CustomResourceExt;
use serde_json::{Value, json};

#[test]
fn crdgen_answers_version_as_every_binary_does() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_crdgen"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("crdgen {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn committed_crds_are_up_to_date() {
    let dir = crdgen::default_dir();
    let mismatches = crdgen::check_dir(&dir).unwrap();
    assert!(
        mismatches.is_empty(),
        "the CRDs in {} are stale:\n  {}\nrun `{}` to regenerate them",
        dir.display(),
        mismatches
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n  "),
        crdgen::REGENERATE
    );
}

#[test]
fn check_reports_missing_changed_and_stray_files() {
    let dir = std::env::temp_dir().join(format!("fake-dra-crdgen-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(crdgen::check_dir(&dir).unwrap().len(), 4, "all missing");

    crdgen::write_dir(&dir).unwrap();
    assert!(crdgen::check_dir(&dir).unwrap().is_empty());

    std::fs::write(dir.join("nodeallocationstates.yaml"), "edited").unwrap();
    std::fs::write(dir.join("old.yaml"), "").unwrap();
    assert_eq!(
        crdgen::check_dir(&dir).unwrap(),
        [
            crdgen::Mismatch::Differs("nodeallocationstates.yaml"),
            crdgen::Mismatch::Unexpected("old.yaml".into()),
        ]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

fn version_of<T: CustomResourceExt>() -> Value {
    let crd = serde_json::to_value(T::crd()).unwrap();
    assert_eq!(crd["spec"]["versions"].as_array().unwrap().len(), 1);
    crd["spec"]["versions"][0].clone()
}

#[test]
fn names_match_the_constants() {
    assert_eq!(
        FakeClaimParameters::crd_name(),
        format!("fakeclaimparameters.{PARAMS_GROUP}")
    );
    assert_eq!(
        DeviceClassParameters::crd_name(),
        format!("deviceclassparameters.{PARAMS_GROUP}")
    );
    assert_eq!(
        NodeAllocationState::crd_name(),
        format!("nodeallocationstates.{NAS_GROUP}")
    );
    for version in [
        version_of::<FakeClaimParameters>(),
        version_of::<DeviceClassParameters>(),
        version_of::<NodeAllocationState>(),
    ] {
        assert_eq!(version["name"], VERSION);
    }
    let crd = serde_json::to_value(NodeAllocationState::crd()).unwrap();
    assert_eq!(crd["spec"]["names"]["shortNames"], json!(["nas"]));
    assert_eq!(crd["spec"]["scope"], "Namespaced");
    let crd = serde_json::to_value(DeviceClassParameters::crd()).unwrap();
    assert_eq!(crd["spec"]["scope"], "Cluster");
}

#[test]
fn claim_parameter_bounds_are_in_the_schema() {
    let version = version_of::<FakeClaimParameters>();
    let spec = &version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
    for (field, max) in [("count", MAX_COUNT), ("split", MAX_SPLIT)] {
        let schema = &spec[field];
        assert_eq!(schema["type"], "integer", "{field}");
        assert_eq!(schema["default"], 1, "{field}");
        assert_eq!(schema["minimum"].as_f64(), Some(1.0), "{field}");
        assert_eq!(schema["maximum"].as_f64(), Some(f64::from(max)), "{field}");
    }
    let model = &spec["selector"]["properties"]["model"];
    assert_eq!(model["maxLength"], 63);
    assert_eq!(model["pattern"], "^[A-Za-z0-9._-]+$");
    assert_eq!(
        model["pattern"],
        fake_dra_api::params::MODEL_PATTERN,
        "schema and code agree"
    );
}

#[test]
fn node_allocation_state_has_status_and_columns() {
    let version = version_of::<NodeAllocationState>();
    assert_eq!(version["subresources"]["status"], json!({}));
    let columns: Vec<(String, String)> = version["additionalPrinterColumns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_owned(),
                c["jsonPath"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let expected = [
        ("Status", ".status.phase"),
        ("Devices", ".status.allocatableDeviceCount"),
        ("Prepared", ".status.preparedClaimCount"),
        ("Age", ".metadata.creationTimestamp"),
    ];
    assert_eq!(columns, expected.map(|(n, p)| (n.to_owned(), p.to_owned())));
    let phase =
        &version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["phase"];
    assert_eq!(phase["enum"], json!(["Ready", "NotReady"]));
}
