//! The real `kubectl` against the emulator: plain `kubectl apply -f` / `kubectl create -f`
//! (no `--validate=false`), server-side field validation, and `kubectl describe` showing
//! the Events written through either Events API. Skipped LOUDLY when kubectl is not on
//! PATH (CI has it).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
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
pub(crate) fn kubectl_or_skip() -> Option<PathBuf> {
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
pub(crate) struct Kubectl {
    program: PathBuf,
    kubeconfig: PathBuf,
    cache: TempDir,
    files: TempDir,
}

impl Kubectl {
    pub(crate) fn new(program: PathBuf, kubeconfig: &Path) -> Self {
        Self {
            program,
            kubeconfig: kubeconfig.to_path_buf(),
            cache: tempfile::tempdir().unwrap(),
            files: tempfile::tempdir().unwrap(),
        }
    }

    pub(crate) fn run(&self, args: &[&str]) -> Output {
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
    pub(crate) fn ok(&self, args: &[&str]) -> (String, String) {
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

    pub(crate) fn file(&self, name: &str, text: &str) -> String {
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
    command: ["sh", "-c", "trap 'exit 0' TERM; export; sleep infinity & wait"]
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
    // The pod itself gets no stale "waiting for resource claim ... to be created"
    // FailedScheduling: upstream's PreEnqueue (1.28+) keeps a pod whose claim is not created
    // yet out of the queue without an Event, and the claim exists here.
    let (pod, _) = kubectl.ok(&["describe", "pod", "-n", "waits", "pending"]);
    assert!(!pod.contains("to be created"), "{pod}");
    sim.shutdown().await;
}

/// The column names of a `kubectl get` table (its header line, split where kubectl pads).
pub(crate) fn header(table: &str) -> Vec<String> {
    table
        .lines()
        .next()
        .unwrap_or_default()
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(str::to_string)
        .collect()
}

/// Pods in the states `kubectl get` and `kubectl logs` distinguish: one that crashes, one of
/// two containers that completed, one that ticks and ends.
const STATES: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: extra}
---
apiVersion: v1
kind: Pod
metadata: {namespace: extra, name: crash}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {name: c, image: busybox:1.36, command: ["sh", "-c", "echo run; echo to-stderr >&2; exit 3"]}
---
apiVersion: v1
kind: Pod
metadata: {namespace: extra, name: done}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - {name: a, image: busybox:1.36, command: ["sh", "-c", "echo line1; echo line2; echo line3"]}
  - {name: b, image: busybox:1.36, command: ["sh", "-c", "echo b-line"]}
---
apiVersion: v1
kind: Pod
metadata: {namespace: extra, name: ticker}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - {name: t, image: busybox:1.36, command: ["sh", "-c", "i=0; while [ $i -lt 3 ]; do echo tick $i; i=$((i+1)); sleep 1; done; echo finished"]}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {namespace: extra, name: split0}
spec:
  spec:
    devices:
      requests:
      - name: fake
        exactly: {deviceClassName: fake.3-shake.com, count: 1}
      config:
      - opaque:
          driver: fake.resource.3-shake.com
          parameters: {apiVersion: fake.resource.3-shake.com/v1alpha1, kind: FakeClaimParameters, spec: {split: 0}}
---
apiVersion: v1
kind: Pod
metadata: {namespace: extra, name: unprepared}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: busybox:1.36
    command: ["sh", "-c", "sleep 300"]
    resources: {claims: [{name: fake}]}
  resourceClaims:
  - {name: fake, resourceClaimTemplateName: split0}
"#;

/// The STATUS column of `kubectl get pods -A` for one pod.
fn pod_status(pods: &str, namespace: &str, name: &str) -> String {
    pods.lines()
        .find(|l| {
            l.starts_with(&format!("{namespace} ")) && l.split_whitespace().nth(1) == Some(name)
        })
        .and_then(|l| l.split_whitespace().nth(3))
        .unwrap_or_default()
        .to_string()
}

/// `kubectl get`, `logs` and `describe` against the sim print what they print against the
/// real Kubernetes 1.37.2 of hack/local-cluster.sh (recorded there, the same commands, the
/// same manifests): the same columns for each kind, the pod states, the log subresource
/// with its options and errors word for word, the driver's own workloads and pods, and the
/// kinds of Events a running pod gets.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kubectl_against_the_sim_as_against_a_cluster() {
    let Some(program) = kubectl_or_skip() else {
        return;
    };
    let sim = start(fake_dra_emulator::sim::SimConfig {
        overlay: "structured".into(),
        server_version: Some((1, 37)),
        ..fake_dra_emulator::sim::SimConfig::default()
    })
    .await;
    let kubectl = Kubectl::new(program, &sim.work_dir().join("kubeconfig"));
    sim.apply(&example("structured/5-count-4-split-2.yaml"))
        .await
        .unwrap();
    sim.apply(&example("structured/8-more-than-a-node-has.yaml"))
        .await
        .unwrap();
    sim.apply(&parse(STATES)).await.unwrap();
    eventually("pod0 running, crash restarted, ticker finished", || async {
        let (pods, _) = kubectl.ok(&["get", "pods", "-A"]);
        let (previous, _) = kubectl.ok(&[
            "get",
            "pod",
            "-n",
            "extra",
            "crash",
            "-o",
            "jsonpath={.status.containerStatuses[0].restartCount}",
        ]);
        let (ticker, _) = kubectl.ok(&[
            "get",
            "pod",
            "-n",
            "extra",
            "ticker",
            "-o",
            "jsonpath={.status.phase}",
        ]);
        (pods.contains("Running") && previous != "0" && ticker == "Succeeded").then_some(())
    })
    .await;

    // The columns the real cluster printed, per command.
    for (args, columns) in [
        (
            &["get", "pods", "-A"][..],
            &["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"][..],
        ),
        (
            &["get", "pods", "-A", "-o", "wide"],
            &[
                "NAMESPACE",
                "NAME",
                "READY",
                "STATUS",
                "RESTARTS",
                "AGE",
                "IP",
                "NODE",
                "NOMINATED NODE",
                "READINESS GATES",
            ],
        ),
        (
            &["get", "resourceclaims", "-A"],
            &["NAMESPACE", "NAME", "STATE", "AGE"],
        ),
        (
            &["get", "resourceslices"],
            &["NAME", "NODE", "DRIVER", "POOL", "AGE"],
        ),
        (
            &["get", "nodes"],
            &["NAME", "STATUS", "ROLES", "AGE", "VERSION"],
        ),
        (
            &["get", "nodes", "-o", "wide"],
            &[
                "NAME",
                "STATUS",
                "ROLES",
                "AGE",
                "VERSION",
                "INTERNAL-IP",
                "EXTERNAL-IP",
                "OS-IMAGE",
                "KERNEL-VERSION",
                "CONTAINER-RUNTIME",
            ],
        ),
        (
            &["get", "daemonsets", "-n", "fake-dra"],
            &[
                "NAME",
                "DESIRED",
                "CURRENT",
                "READY",
                "UP-TO-DATE",
                "AVAILABLE",
                "NODE SELECTOR",
                "AGE",
            ],
        ),
        (&["get", "deviceclasses"], &["NAME", "AGE"]),
        (
            &["get", "resourceclaimtemplates", "-A"],
            &["NAMESPACE", "NAME", "AGE"],
        ),
        (
            &["get", "events", "-A"],
            &[
                "NAMESPACE",
                "LAST SEEN",
                "TYPE",
                "REASON",
                "OBJECT",
                "MESSAGE",
            ],
        ),
        (
            &["get", "crds"],
            &["NAME", "SCOPE", "VERSIONS", "CREATED AT"],
        ),
        (&["get", "ns"], &["NAME", "STATUS", "AGE"]),
        (&["get", "sa", "-n", "fake-dra"], &["NAME", "AGE"]),
        (
            &["get", "clusterroles", "fake-dra-kubelet-plugin"],
            &["NAME", "CREATED AT"],
        ),
        (
            &["get", "validatingadmissionpolicies"],
            &["NAME", "VALIDATIONS", "PARAMKIND", "AGE"],
        ),
    ] {
        let (out, _) = kubectl.ok(args);
        assert_eq!(header(&out), columns, "kubectl {}:\n{out}", args.join(" "));
    }
    let (pods, _) = kubectl.ok(&["get", "pods", "-A"]);
    let status_of = |ns: &str, name: &str| pod_status(&pods, ns, name);
    assert_eq!(status_of("test5", "pod0"), "Running", "{pods}");
    assert_eq!(status_of("test8", "pod0"), "Pending", "{pods}");
    assert_eq!(status_of("extra", "done"), "Completed", "{pods}");
    // A pod whose claim the driver refuses to prepare: an Event, and ContainerCreating
    // as on a cluster (issue 35 item 9: it showed FailedPrepareDynamicResources).
    eventually(
        "the unprepared pod's FailedPrepareDynamicResources",
        || async {
            let (events, _) = kubectl.ok(&["get", "events", "-n", "extra"]);
            events
                .contains("FailedPrepareDynamicResources")
                .then_some(())
        },
    )
    .await;
    let (pods, _) = kubectl.ok(&["get", "pods", "-A"]);
    let status_of = |ns: &str, name: &str| pod_status(&pods, ns, name);
    assert_eq!(
        status_of("extra", "unprepared"),
        "ContainerCreating",
        "{pods}"
    );
    let (started, _) = kubectl.ok(&[
        "get",
        "pod",
        "-n",
        "extra",
        "unprepared",
        "-o",
        "jsonpath={.status.startTime}",
    ]);
    assert!(started.ends_with('Z'), "startTime {started:?}");
    assert!(
        matches!(
            status_of("extra", "crash").as_str(),
            // Between its runs; Running for the moment a run lasts.
            "CrashLoopBackOff" | "Error" | "Running"
        ),
        "{pods}"
    );
    let (claims, _) = kubectl.ok(&["get", "resourceclaims", "-n", "test5"]);
    assert!(claims.contains("allocated,reserved"), "{claims}");
    // The driver, as a cluster shows it: the DaemonSet's pods, one a node, running.
    let (driver, _) = kubectl.ok(&["get", "pods", "-n", "fake-dra", "-o", "wide"]);
    assert_eq!(
        driver.matches("fake-dra-kubelet-plugin-").count(),
        2,
        "{driver}"
    );
    assert_eq!(driver.matches(" Running ").count(), 2, "{driver}");
    let (ds, _) = kubectl.ok(&[
        "get",
        "ds",
        "-n",
        "fake-dra",
        "fake-dra-kubelet-plugin",
        "-o",
        "jsonpath={.status.numberReady}",
    ]);
    assert_eq!(ds, "2");
    let (plugin_log, _) = kubectl.ok(&[
        "logs",
        "-n",
        "fake-dra",
        "ds/fake-dra-kubelet-plugin",
        "--tail=50",
    ]);
    assert!(
        plugin_log.contains("fake_dra_kubelet_plugin"),
        "{plugin_log}"
    );

    // kubectl logs, with the real cluster's words.
    let (log, _) = kubectl.ok(&["logs", "-n", "test5", "pod0"]);
    assert_eq!(
        log.matches("export FAKE_DEVICE_").count(),
        9,
        "8 devices and the model:\n{log}"
    );
    let (tail, _) = kubectl.ok(&["logs", "-n", "test5", "pod0", "--tail=3"]);
    assert_eq!(tail.lines().count(), 3, "{tail}");
    let (stamped, _) = kubectl.ok(&["logs", "-n", "test5", "pod0", "--tail=1", "--timestamps"]);
    assert!(
        stamped
            .split(' ')
            .next()
            .unwrap()
            .parse::<jiff::Timestamp>()
            .is_ok(),
        "{stamped}"
    );
    let refused = kubectl.run(&["logs", "-n", "test5", "pod0", "--previous"]);
    assert_eq!(
        String::from_utf8_lossy(&refused.stderr),
        "Error from server (BadRequest): previous terminated container \"ctr0\" in pod \"pod0\" not found\n"
    );
    let pending = kubectl.ok(&["logs", "-n", "test8", "pod0"]);
    assert_eq!(pending.0, "", "a pod on no node has no logs yet");
    let (crash, _) = kubectl.ok(&["logs", "-n", "extra", "crash", "--previous"]);
    // stdout and stderr are two pipes, read apart (by containerd too): their lines may
    // interleave either way.
    let mut lines: Vec<&str> = crash.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines, ["run", "to-stderr"], "{crash}");
    let (first, stderr) = kubectl.ok(&["logs", "-n", "extra", "done"]);
    assert_eq!(first, "line1\nline2\nline3\n");
    assert!(
        stderr.contains("Defaulted container \"a\" out of: a, b"),
        "{stderr}"
    );
    let (b, _) = kubectl.ok(&["logs", "-n", "extra", "done", "-c", "b"]);
    assert_eq!(b, "b-line\n");
    let bad = kubectl.run(&["logs", "-n", "extra", "done", "-c", "zzz"]);
    // kubectl checks this itself; 1.37 adds " out of: a, b".
    assert!(
        String::from_utf8_lossy(&bad.stderr)
            .starts_with("error: container zzz is not valid for pod done"),
        "{bad:?}"
    );
    let (followed, _) = kubectl.ok(&["logs", "-n", "extra", "ticker", "-f"]);
    assert_eq!(followed, "tick 0\ntick 1\ntick 2\nfinished\n");
    let negative = kubectl.run(&[
        "get",
        "--raw",
        "/api/v1/namespaces/extra/pods/crash/log?tailLines=-1",
    ]);
    assert!(
        String::from_utf8_lossy(&negative.stderr).contains(
            "PodLogOptions \"crash\" is invalid: tailLines: Invalid value: -1: must be greater than or equal to 0"
        ),
        "{negative:?}"
    );
    kubectl.ok(&["delete", "pod", "-n", "extra", "done", "--wait=true"]);
    let gone = kubectl.run(&["logs", "-n", "extra", "done", "-c", "a"]);
    assert!(
        String::from_utf8_lossy(&gone.stderr).contains("pods \"done\" not found"),
        "{gone:?}"
    );

    // describe: the kinds of Events the real kubelet and scheduler write for a running pod.
    let (described, _) = kubectl.ok(&["describe", "pod", "-n", "test5", "pod0"]);
    let events = described.split("Events:").nth(1).unwrap_or_default();
    for reason in ["Scheduled", "Pulled", "Created", "Started"] {
        assert!(
            events.contains(&format!("  {reason}  ")),
            "{reason} not in {described}"
        );
    }
    assert!(!events.contains("FailedScheduling"), "{described}");
    // 1.35+ wording, about the container (kubectl 1.37 prints the fieldPath before it).
    assert!(events.contains("Container started"), "{described}");
    let (paths, _) = kubectl.ok(&[
        "get",
        "events",
        "-n",
        "test5",
        "--field-selector",
        "involvedObject.name=pod0,reason=Started",
        "-o",
        "jsonpath={.items[*].involvedObject.fieldPath}",
    ]);
    assert_eq!(paths, "spec.containers{ctr0}");
    let (crashing, _) = kubectl.ok(&["describe", "pod", "-n", "extra", "crash"]);
    assert!(crashing.contains("BackOff"), "{crashing}");
    assert!(
        crashing.contains("Last State:     Terminated"),
        "{crashing}"
    );

    // describe node (issue 35 item 5): the node's Lease and what it offers, as a
    // kubelet reports them, so the pod rows show percentages instead of
    // (-9223372036854775808%) and the Lease line names its holder.
    let (node, _) = kubectl.ok(&["describe", "node", "kind-worker"]);
    assert!(!node.contains("Failed to get lease"), "{node}");
    assert!(
        node.lines()
            .any(|l| l.trim_start().starts_with("HolderIdentity:") && l.ends_with(" kind-worker")),
        "{node}"
    );
    assert!(!node.contains("-9223372036854775808"), "{node}");
    let capacity = node.split("Capacity:").nth(1).unwrap_or_default();
    assert!(
        capacity.contains("pods:") && capacity.contains("cpu:"),
        "{node}"
    );
    sim.shutdown().await;
}

/// The "which devices does each pod hold" recipe of docs/emulator.md, against the sim.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn which_devices_each_pod_holds() {
    let Some(program) = kubectl_or_skip() else {
        return;
    };
    let sim = start(fake_dra_emulator::sim::SimConfig {
        overlay: "structured".into(),
        ..fake_dra_emulator::sim::SimConfig::default()
    })
    .await;
    let kubectl = Kubectl::new(program, &sim.work_dir().join("kubeconfig"));
    sim.apply(&example("structured/4-count-4.yaml"))
        .await
        .unwrap();
    let columns = "custom-columns=NAMESPACE:.metadata.namespace,CLAIM:.metadata.name,POD:.status.reservedFor[*].name,NODE:.status.allocation.nodeSelector.nodeSelectorTerms[*].matchFields[*].values[*],DEVICES:.status.allocation.devices.results[*].device";
    // The claim's name starts with its pod's ("pod0-fake-…"), so wait on the POD column:
    // the claim exists before the scheduler reserves it for the pod.
    let table = eventually("the claim allocated and reserved", || async {
        let (table, _) = kubectl.ok(&["get", "resourceclaims", "-A", "-o", columns]);
        let reserved = table
            .lines()
            .nth(1)
            .and_then(|row| row.split_whitespace().nth(2))
            == Some("pod0");
        reserved.then_some(table)
    })
    .await;
    assert_eq!(
        header(&table),
        ["NAMESPACE", "CLAIM", "POD", "NODE", "DEVICES"]
    );
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(row[0], "test4");
    assert_eq!(row[2], "pod0");
    assert!(row[3].starts_with("kind-worker"), "{table}");
    assert_eq!(row[4].split(',').count(), 4, "{table}");
    sim.shutdown().await;
}
