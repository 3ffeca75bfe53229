//! What the plugin tests share, whatever the driver: the CDI checks (the project's JSON
//! schema and the container-device-interface crate), the emulated apiserver, claims
//! allocated as the scheduler would.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::path::Path;

/// For a test that cannot run on this machine: a failure naming what is missing, unless
/// `opt_out` is `1` in the environment — then a SKIPPED line written past the test
/// harness's output capture (a skip must show even though the test then passes), and the
/// caller returns.
pub fn cannot_run(test: &str, why: &str, opt_out: &str) {
    if std::env::var(opt_out).as_deref() == Ok("1") {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "\n*** SKIPPED {test}: {why}; it did NOT run ({opt_out}=1) ***\n"
        );
        return;
    }
    panic!(
        "{test} cannot run: {why}. Install what is missing, or set {opt_out}=1 to skip it knowingly"
    );
}

/// Checks a spec file against the CDI JSON schema: `../shared/cdi-schema` beside the
/// repository (as the project's docs lay it out) or `FAKE_DRA_CDI_SCHEMA_DIR`; on a clone
/// without it (CI's clean clone), the CDI project's own copy that the
/// `container-device-interface` dev-dependency ships, said loudly.
pub fn validate_schema(path: &Path) {
    let schema_dir = std::env::var_os("FAKE_DRA_CDI_SCHEMA_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/cdi-schema"));
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let explicit = std::env::var_os("FAKE_DRA_CDI_SCHEMA_DIR").is_some();
    let validator = if schema_dir.join("schema.json").exists() || explicit {
        let read = |name: &str| -> serde_json::Value {
            let file = schema_dir.join(name);
            let bytes = std::fs::read(&file).unwrap_or_else(|e| {
                panic!(
                    "the CDI JSON schema {} (FAKE_DRA_CDI_SCHEMA_DIR) cannot be read: {e}",
                    file.display()
                )
            });
            serde_json::from_slice(&bytes).unwrap()
        };
        let mut schema = read("schema.json");
        schema["$id"] = serde_json::Value::String("file:///cdi-schema/schema.json".into());
        jsonschema::options()
            .with_retriever(Defs(read("defs.json")))
            .build(&schema)
            .unwrap()
    } else {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "note: {} is not there; validating against the CDI schema the container-device-interface crate ships",
            schema_dir.display()
        );
        let schema = container_device_interface::schema::builtin_schema_value().unwrap();
        jsonschema::options().build(&schema).unwrap()
    };
    let errors: Vec<String> = validator.iter_errors(&doc).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{}: {errors:?}", path.display());
}

/// Answers the schema's `defs.json` references from the local file.
struct Defs(serde_json::Value);

impl jsonschema::Retrieve for Defs {
    fn retrieve(
        &self,
        uri: &jsonschema::Uri<String>,
    ) -> Result<serde_json::Value, Box<dyn std::error::Error + Send + Sync>> {
        if uri.as_str().ends_with("defs.json") {
            Ok(self.0.clone())
        } else {
            Err(format!("no such schema {}", uri.as_str()).into())
        }
    }
}

/// Resolves `ids` with the container-device-interface crate from `cdi_root` and injects
/// them into an empty OCI spec; returns the container's env.
pub fn inject(cdi_root: &Path, ids: &[String]) -> Vec<String> {
    use container_device_interface::cache::Cache;
    let mut cache = Cache::new(
        vec![cdi_root.to_string_lossy().into_owned()],
        Default::default(),
        Default::default(),
    );
    cache.refresh().unwrap();
    let errors = cache.get_errors();
    assert!(errors.is_empty(), "CDI cache errors: {errors:?}");
    let mut spec = oci_spec::runtime::Spec::default();
    if let Some(p) = spec.process_mut() {
        p.set_env(Some(vec![]));
    }
    cache.inject_devices(Some(&mut spec), ids.to_vec()).unwrap();
    spec.process()
        .as_ref()
        .and_then(|p| p.env().clone())
        .unwrap_or_default()
}

/// The namespace of the tests' ResourceClaims.
pub const CLAIM_NS: &str = "default";

/// The emulated apiserver of Kubernetes `version` (which decides the `resource.k8s.io`
/// versions served and the slice layout) with every DRA feature gate on (the plugin's
/// features are tested on each release's layout; what a default cluster of a release
/// drops is the real-cluster suite's and the emulator's concern), `crds` installed and
/// `namespaces` created.
pub async fn start_api_with(
    version: (u32, u32),
    crds: Vec<String>,
    namespaces: &[&str],
) -> fake_dra_emulator::apiserver::ApiServer {
    use fake_dra_emulator::apiserver::{ApiServer, ApiServerOptions};
    let _ = rustls::crypto::ring::default_provider().install_default();
    let api = ApiServer::start_with(ApiServerOptions {
        server_version: version,
        crds,
        feature_gates: fake_dra_emulator::apiserver::gates::FeatureGates::all_on(),
        ..Default::default()
    })
    .await
    .unwrap();
    let api_namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(api.client().unwrap());
    for ns in namespaces {
        let obj = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}
        }))
        .unwrap();
        let _ = api_namespaces.create(&Default::default(), &obj).await;
    }
    api
}

/// Creates a claim through `version` (`v1` or `v1beta1`) and writes its allocation as
/// the scheduler would: `devices` of `driver` in `pool` for request `req`, with `config`
/// (`None`: no allocation). Returns the claim's uid.
pub async fn allocated_claim_of(
    api: &fake_dra_emulator::apiserver::ApiServer,
    version: &str,
    name: &str,
    driver: &str,
    pool: &str,
    devices: &[String],
    config: Option<serde_json::Value>,
) -> String {
    use k8s_openapi::api::resource::{v1, v1beta1};
    use kube::Api;
    use kube::api::PostParams;
    use serde_json::{Value, json};
    let request = if version == "v1" {
        json!({"name": "req", "exactly": {"deviceClassName": "fake.3-shake.com", "count": devices.len()}})
    } else {
        json!({"name": "req", "deviceClassName": "fake.3-shake.com", "count": devices.len()})
    };
    let claim = json!({
        "apiVersion": format!("resource.k8s.io/{version}"), "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": CLAIM_NS},
        "spec": {"devices": {"requests": [request]}},
    });
    let client = api.client().unwrap();
    let results: Vec<Value> = devices
        .iter()
        .map(|device| json!({"request": "req", "driver": driver, "pool": pool, "device": device}))
        .collect();
    let status = config.map(|config| {
        json!({"allocation": {
            "devices": {"results": results, "config": config},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [pool]}
            ]}]},
        }})
    });
    macro_rules! create {
        ($ty:ty) => {{
            let claims: Api<$ty> = Api::namespaced(client, CLAIM_NS);
            let mut created = claims
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(claim).unwrap(),
                )
                .await
                .unwrap();
            if let Some(status) = status {
                created.status = Some(serde_json::from_value(status).unwrap());
                created = claims
                    .replace_status(name, &PostParams::default(), &created)
                    .await
                    .unwrap();
            }
            created.metadata.uid.unwrap()
        }};
    }
    if version == "v1" {
        create!(v1::ResourceClaim)
    } else {
        create!(v1beta1::ResourceClaim)
    }
}
