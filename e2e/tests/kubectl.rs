//! The real `kubectl` against the emulator: plain `kubectl apply -f` / `kubectl create -f`
//! (no `--validate=false`), server-side field validation, and `kubectl describe` showing
//! the Events written through either Events API. Skipped LOUDLY when kubectl is not on
//! PATH (CI has it).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;
use fake_dra_emulator::apiserver::{ApiServer, ApiServerOptions};
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, PostParams};
use tempfile::TempDir;

/// kubectl on PATH, or None after a loud notice.
fn kubectl_or_skip() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("kubectl"))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        eprintln!(
            "!!!!!!!! SKIPPED: kubectl not found on PATH; these tests run the real kubectl against the emulator (install kubectl) !!!!!!!!"
        );
    }
    found
}

/// Runs kubectl with `kubeconfig` and a cache of its own (discovery and OpenAPI are cached
/// by server address, and every test's server reuses loopback ports).
struct Kubectl {
    program: PathBuf,
    kubeconfig: PathBuf,
    cache: TempDir,
    files: TempDir,
}

impl Kubectl {
    fn new(program: PathBuf, kubeconfig: &Path) -> Self {
        Self {
            program,
            kubeconfig: kubeconfig.to_path_buf(),
            cache: tempfile::tempdir().unwrap(),
            files: tempfile::tempdir().unwrap(),
        }
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new(&self.program)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(self.cache.path())
            .args(args)
            .output()
            .unwrap()
    }

    /// Runs and requires success; returns stdout and stderr.
    fn ok(&self, args: &[&str]) -> (String, String) {
        let out = self.run(args);
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        );
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}\nstdout: {stdout}\nstderr: {stderr}",
            out.status
        );
        (stdout, stderr)
    }

    fn file(&self, name: &str, text: &str) -> String {
        let path = self.files.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }
}

const MANIFESTS: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: apply}
---
apiVersion: v1
kind: ConfigMap
metadata: {namespace: apply, name: settings}
data: {level: "1"}
---
apiVersion: fake.resource.3-shake.com/v1alpha1
kind: FakeClaimParameters
metadata: {namespace: apply, name: params}
spec: {count: 2}
---
apiVersion: resource.k8s.io/v1alpha2
kind: ResourceClaimTemplate
metadata: {namespace: apply, name: fake}
spec:
  spec:
    resourceClassName: fake.3-shake.com
    parametersRef: {apiGroup: fake.resource.3-shake.com, kind: FakeClaimParameters, name: params}
---
apiVersion: v1
kind: Pod
metadata: {namespace: apply, name: pod0}
spec:
  containers:
  - name: ctr0
    image: busybox
    command: ["sh", "-c", "export; sleep infinity"]
    resources: {claims: [{name: fake}]}
  resourceClaims:
  - name: fake
    source: {resourceClaimTemplateName: fake}
"#;

/// `kubectl apply -f` and `kubectl create -f` as users type them: created, unchanged,
/// configured; a typo is refused by the server naming the field (kubectl asks for
/// `fieldValidation=Strict`), or only warned about with `--validate=warn`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_and_create_validate_on_the_server() {
    let Some(program) = kubectl_or_skip() else {
        return;
    };
    let server = ApiServer::start_with(ApiServerOptions {
        crds: fake_dra_api::crdgen::yaml_documents().expect("the driver's CRDs"),
        ..ApiServerOptions::default()
    })
    .await
    .unwrap();
    let kubectl = Kubectl::new(program, server.kubeconfig());
    let manifests = kubectl.file("all.yaml", MANIFESTS);
    let (stdout, _) = kubectl.ok(&["apply", "-f", &manifests]);
    for line in [
        "namespace/apply created",
        "configmap/settings created",
        "fakeclaimparameters.fake.resource.3-shake.com/params created",
        "resourceclaimtemplate.resource.k8s.io/fake created",
        "pod/pod0 created",
    ] {
        assert!(stdout.contains(line), "{line:?} not in {stdout}");
    }
    let (stdout, _) = kubectl.ok(&["apply", "-f", &manifests]);
    assert_eq!(stdout.matches(" unchanged").count(), 5, "{stdout}");

    let changed = MANIFESTS
        .replace("level: \"1\"", "level: \"2\"")
        .replace("count: 2", "count: 3");
    let changed = kubectl.file("changed.yaml", &changed);
    let (stdout, _) = kubectl.ok(&["apply", "-f", &changed]);
    assert!(stdout.contains("configmap/settings configured"), "{stdout}");
    assert!(
        stdout.contains("fakeclaimparameters.fake.resource.3-shake.com/params configured"),
        "{stdout}"
    );
    let client = server.client().unwrap();
    let settings = Api::<ConfigMap>::namespaced(client.clone(), "apply")
        .get("settings")
        .await
        .unwrap();
    assert_eq!(settings.data.unwrap()["level"], "2");
    let (stdout, _) = kubectl.ok(&[
        "get",
        "fakeclaimparameters",
        "-n",
        "apply",
        "params",
        "-o",
        "jsonpath={.spec.count}",
    ]);
    assert_eq!(stdout, "3");

    let other = kubectl.file(
        "other.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {namespace: apply, name: other}\ndata: {a: b}\n",
    );
    let (stdout, _) = kubectl.ok(&["create", "-f", &other]);
    assert!(stdout.contains("configmap/other created"), "{stdout}");
    let again = kubectl.run(&["create", "-f", &other]);
    assert!(!again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("already exists"),
        "{again:?}"
    );

    // Typos: refused naming the fields, nothing created.
    let typo = kubectl.file(
        "typo.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {namespace: apply, name: typo, labelz: {a: b}}\ndta: {a: b}\n---\n\
         apiVersion: fake.resource.3-shake.com/v1alpha1\nkind: FakeClaimParameters\nmetadata: {namespace: apply, name: typo}\nspec: {cont: 4}\n",
    );
    for verb in ["create", "apply"] {
        let refused = kubectl.run(&[verb, "-f", &typo]);
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success(), "{verb}: {stderr}");
        assert!(
            stderr.contains(
                "strict decoding error: unknown field \"dta\", unknown field \"metadata.labelz\""
            ),
            "{verb}: {stderr}"
        );
        assert!(
            stderr.contains("strict decoding error: unknown field \"spec.cont\""),
            "{verb}: {stderr}"
        );
    }
    let refused = kubectl.run(&["get", "configmap", "-n", "apply", "typo"]);
    assert!(!refused.status.success());
    // --validate=warn: created, the unknown fields dropped with a warning each.
    let (_, stderr) = kubectl.ok(&["apply", "--validate=warn", "-f", &typo]);
    assert!(
        stderr.contains("Warning: unknown field \"dta\""),
        "{stderr}"
    );
    assert!(
        stderr.contains("Warning: unknown field \"spec.cont\""),
        "{stderr}"
    );
    let (stdout, _) = kubectl.ok(&["get", "configmap", "-n", "apply", "typo", "-o", "json"]);
    let stored: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert!(stored.get("dta").is_none(), "{stdout}");
    assert!(stored["metadata"].get("labelz").is_none(), "{stdout}");
}

fn pod_ref(name: &str, uid: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some(name.into()),
        namespace: Some("default".into()),
        uid: Some(uid.into()),
        ..Default::default()
    }
}

/// `kubectl describe pod` reads core/v1 Events by `involvedObject` field selectors: the
/// Events that components write through events.k8s.io/v1 are among them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_describe_shows_events_written_through_events_k8s_io() {
    let Some(program) = kubectl_or_skip() else {
        return;
    };
    let server = ApiServer::start().await.unwrap();
    let kubectl = Kubectl::new(program, server.kubeconfig());
    // Made with a client, so that only `describe` is under test here.
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "pod0"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }))
    .unwrap();
    let pod = Api::namespaced(server.client().unwrap(), "default")
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
    let uid = pod.metadata.uid.unwrap();
    let (before, _) = kubectl.ok(&["describe", "pod", "pod0"]);
    assert!(
        before.contains("Events:") && before.contains("<none>"),
        "{before}"
    );

    let events: Api<Event> = Api::namespaced(server.client().unwrap(), "default");
    for (name, reason, note, controller, regarding) in [
        (
            "e1",
            "FailedScheduling",
            "0/2 nodes are available: 2 cannot allocate all claims.",
            "default-scheduler",
            pod_ref("pod0", &uid),
        ),
        (
            "e2",
            "InvalidParameters",
            "FakeClaimParameters default/params: spec.split must divide the device",
            "fake.resource.3-shake.com-controller",
            pod_ref("pod0", &uid),
        ),
        (
            "e3",
            "Elsewhere",
            "about another pod",
            "default-scheduler",
            pod_ref("pod1", "other-uid"),
        ),
    ] {
        events
            .create(
                &PostParams::default(),
                &Event {
                    metadata: ObjectMeta {
                        name: Some(name.into()),
                        ..Default::default()
                    },
                    event_time: Some(MicroTime(jiff::Timestamp::now())),
                    action: Some("Scheduling".into()),
                    reason: Some(reason.into()),
                    note: Some(note.into()),
                    type_: Some("Warning".into()),
                    regarding: Some(regarding),
                    reporting_controller: Some(controller.into()),
                    reporting_instance: Some(controller.into()),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
    }
    let (described, _) = kubectl.ok(&["describe", "pod", "pod0"]);
    let events_part = described.split("Events:").nth(1).unwrap_or_default();
    for want in [
        "FailedScheduling",
        "0/2 nodes are available: 2 cannot allocate all claims.",
        "default-scheduler",
        "InvalidParameters",
        "spec.split must divide the device",
        "fake.resource.3-shake.com-controller",
    ] {
        assert!(events_part.contains(want), "{want:?} not in {described}");
    }
    assert!(!events_part.contains("Elsewhere"), "{described}");
    let (listed, _) = kubectl.ok(&[
        "get",
        "events",
        "--field-selector",
        "reason=InvalidParameters",
        "-o",
        "name",
    ]);
    assert_eq!(listed.trim(), "event/e2");
}

/// In the simulator, end to end: a pod whose claim cannot be allocated shows why in
/// `kubectl describe` — the scheduler's FailedScheduling on the pod, the driver's reason on
/// the claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kubectl_describe_in_the_sim_shows_why_a_pod_waits() {
    let Some(program) = kubectl_or_skip() else {
        return;
    };
    let sim = start_default().await;
    let kubectl = Kubectl::new(program, &sim.work_dir().join("kubeconfig"));
    let manifests = parse(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: waits}}\n---\n{}",
        unknown_model_pod("waits")
    ));
    sim.apply(&manifests).await.unwrap();
    let described = eventually("the claim's Events naming the unknown model", || async {
        let (described, _) = kubectl.ok(&["describe", "resourceclaims", "-n", "waits"]);
        described.contains("ULTRA_9000").then_some(described)
    })
    .await;
    let events_part = described.split("Events:").nth(1).unwrap_or_default();
    assert!(events_part.contains("UnknownModel"), "{described}");
    assert!(
        events_part.contains("fake.resource.3-shake.com-controller"),
        "{described}"
    );
    let (pod, _) = kubectl.ok(&["describe", "pod", "-n", "waits", "pending"]);
    let events_part = pod.split("Events:").nth(1).unwrap_or_default();
    assert!(
        events_part.contains("FailedScheduling") && events_part.contains("default-scheduler"),
        "{pod}"
    );
    sim.shutdown().await;
}
