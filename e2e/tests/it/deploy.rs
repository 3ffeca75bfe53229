//! Checks of the rendered deploy manifests (`kubectl kustomize` of every overlay):
//! RBAC equals the verbs the code uses, security settings, hostPath mounts, the classes,
//! the structured overlay's admission policy, and the examples of both generations; that
//! `deploy/rendered/` (what the emulator installs) is what kubectl renders; and that the
//! Helm chart with default values renders the same objects as the overlays.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

const OVERLAYS: &[&str] = &["classic", "structured"];
const FAKE_DRA_NAMESPACE: &str = "fake-dra";
const CONTROLLER_SA: &str = "fake-dra-controller";
const PLUGIN_SA: &str = "fake-dra-kubelet-plugin";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Renders an overlay with kubectl, as `kubectl apply -k` would (no flags); a missing
/// kubectl fails the test (never skips).
fn render(overlay: &str) -> Vec<Value> {
    let dir = repo().join("deploy").join(overlay);
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(&dir)
        .output()
        .expect("kubectl is required to render deploy/ (install kubectl)");
    assert!(
        out.status.success(),
        "kubectl kustomize {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let objects = parse_docs(&String::from_utf8(out.stdout).unwrap());
    assert!(!objects.is_empty(), "{overlay} rendered nothing");
    objects
}

fn parse_docs(text: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|v: &Value| !v.is_null())
        .collect()
}

/// Every overlay of deploy/: the directories with a kustomization.yaml, base aside.
fn all_overlays() -> Vec<String> {
    let mut overlays: Vec<String> = std::fs::read_dir(repo().join("deploy"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("kustomization.yaml").is_file())
        .map(|p| p.file_name().unwrap().to_str().unwrap().to_owned())
        .filter(|name| name != "base")
        .collect();
    overlays.sort();
    assert!(
        OVERLAYS.iter().all(|o| overlays.iter().any(|x| x == o)),
        "{overlays:?}"
    );
    overlays
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} rendered"))
}

type Access = BTreeMap<(String, String), BTreeSet<String>>;

/// All rules granted to a ServiceAccount through (Cluster)RoleBindings, as
/// (group, resource) -> verbs. Fails on any `*`.
fn granted(objects: &[Value], sa: &str) -> Access {
    let mut access = Access::new();
    for b in objects
        .iter()
        .filter(|o| o["kind"] == "ClusterRoleBinding" || o["kind"] == "RoleBinding")
    {
        let bound = b["subjects"].as_array().unwrap().iter().any(|s| {
            s["kind"] == "ServiceAccount" && s["name"] == sa && s["namespace"] == FAKE_DRA_NAMESPACE
        });
        if !bound {
            continue;
        }
        let role_kind = b["roleRef"]["kind"].as_str().unwrap();
        let role_name = b["roleRef"]["name"].as_str().unwrap();
        let role = find(objects, role_kind, role_name);
        if b["kind"] == "RoleBinding" {
            // The driver's namespace; fleet mode's node heartbeats live in kube-node-lease.
            assert!(
                b["metadata"]["namespace"] == FAKE_DRA_NAMESPACE
                    || b["metadata"]["namespace"] == "kube-node-lease",
                "{b}"
            );
        }
        for rule in role["rules"].as_array().unwrap() {
            let list = |k: &str| -> Vec<String> {
                rule[k]
                    .as_array()
                    .map(|a| a.iter().map(|s| s.as_str().unwrap().to_owned()).collect())
                    .unwrap_or_default()
            };
            let (groups, resources, verbs) = (list("apiGroups"), list("resources"), list("verbs"));
            for s in groups.iter().chain(&resources).chain(&verbs) {
                assert!(
                    !s.contains('*'),
                    "{role_kind} {role_name}: wildcard in {rule}"
                );
            }
            assert!(
                rule.get("nonResourceURLs").is_none(),
                "{role_name}: nonResourceURLs not expected"
            );
            for g in &groups {
                for r in &resources {
                    access
                        .entry((g.clone(), r.clone()))
                        .or_default()
                        .extend(verbs.iter().cloned());
                }
            }
        }
    }
    access
}

fn expected(table: &[(&str, &str, &[&str])]) -> Access {
    let mut access = Access::new();
    for (g, r, verbs) in table {
        access
            .entry(((*g).to_owned(), (*r).to_owned()))
            .or_default()
            .extend(verbs.iter().map(|v| (*v).to_owned()));
    }
    access
}

type Table = &'static [(&'static str, &'static str, &'static [&'static str])];

/// Per overlay: the controller's table (none: no controller) and the plugin's, for the mode
/// the overlay's DaemonSet runs it in.
fn api_access(overlay: &str) -> (Option<Table>, Table) {
    match overlay {
        "classic" => (
            Some(fake_dra_controller::API_ACCESS),
            fake_dra_kubelet_plugin::API_ACCESS_CLASSIC,
        ),
        "structured" => (None, fake_dra_kubelet_plugin::API_ACCESS_STRUCTURED),
        other => panic!("overlay {other}: add its API access tables to this test"),
    }
}

#[test]
fn rbac_equals_the_api_access_tables() {
    for overlay in OVERLAYS {
        let objects = render(overlay);
        let (controller, plugin) = api_access(overlay);
        assert_eq!(
            granted(&objects, CONTROLLER_SA),
            controller.map(expected).unwrap_or_default(),
            "{overlay}: controller RBAC (left) differs from fake_dra_controller::API_ACCESS (right)"
        );
        assert_eq!(
            granted(&objects, PLUGIN_SA),
            expected(plugin),
            "{overlay}: plugin RBAC (left) differs from the plugin's API access table for this mode (right)"
        );
    }
}

#[test]
fn the_wildcard_check_bites() {
    let objects: Vec<Value> = serde_json::from_str(
        r#"[{"kind":"ClusterRole","metadata":{"name":"r"},
             "rules":[{"apiGroups":[""],"resources":["pods"],"verbs":["*"]}]},
            {"kind":"ClusterRoleBinding","metadata":{"name":"b"},
             "roleRef":{"kind":"ClusterRole","name":"r"},
             "subjects":[{"kind":"ServiceAccount","name":"x","namespace":"fake-dra"}]}]"#,
    )
    .unwrap();
    let r = std::panic::catch_unwind(|| granted(&objects, "x"));
    assert!(r.is_err(), "a `*` verb must fail");
}

fn env<'a>(container: &'a Value, name: &str) -> &'a Value {
    container["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
        .unwrap_or_else(|| panic!("env {name} missing"))
}

fn hardened(sc: &Value, what: &str) {
    assert_eq!(sc["allowPrivilegeEscalation"], false, "{what}");
    assert_eq!(sc["readOnlyRootFilesystem"], true, "{what}");
    assert_eq!(
        sc["capabilities"]["drop"],
        serde_json::json!(["ALL"]),
        "{what}"
    );
    assert!(sc["capabilities"].get("add").is_none(), "{what}: adds caps");
    assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault", "{what}");
    assert_ne!(sc["privileged"], true, "{what}: privileged");
}

#[test]
fn controller_deployment_is_hardened() {
    for overlay in OVERLAYS {
        let objects = render(overlay);
        if api_access(overlay).0.is_none() {
            // Structured DRA: kube-scheduler allocates; no controller, nor its identity.
            for kind in ["Deployment", "PriorityClass", "ServiceAccount"] {
                assert!(
                    !objects
                        .iter()
                        .any(|o| o["kind"] == kind && o["metadata"]["name"] == CONTROLLER_SA),
                    "{overlay}: a controller {kind} is rendered"
                );
            }
            assert!(
                !objects.iter().any(|o| o["kind"] == "Deployment"),
                "{overlay}: no Deployment expected"
            );
            continue;
        }
        let d = find(&objects, "Deployment", "fake-dra-controller");
        assert_eq!(d["metadata"]["namespace"], FAKE_DRA_NAMESPACE);
        let pod = &d["spec"]["template"]["spec"];
        assert_eq!(pod["serviceAccountName"], CONTROLLER_SA);
        let pc = pod["priorityClassName"]
            .as_str()
            .expect("priorityClassName");
        if !pc.starts_with("system-") {
            find(&objects, "PriorityClass", pc);
        }
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
        let c = &pod["containers"][0];
        hardened(&c["securityContext"], "controller");
        assert_eq!(c["securityContext"]["runAsNonRoot"], true);
        assert_eq!(env(c, "FAKE_DRA_LEADER_ELECT")["value"], "true");
        assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
        assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
        for k in ["requests", "limits"] {
            for r in ["cpu", "memory"] {
                assert!(c["resources"][k][r].is_string(), "controller {k}.{r}");
            }
        }
    }
}

#[test]
fn plugin_daemonset_is_hardened_and_mounts_only_the_kubelet_dirs() {
    for overlay in OVERLAYS {
        let objects = render(overlay);
        let ds = find(&objects, "DaemonSet", "fake-dra-kubelet-plugin");
        assert_eq!(ds["metadata"]["namespace"], FAKE_DRA_NAMESPACE);
        let pod = &ds["spec"]["template"]["spec"];
        assert_eq!(pod["serviceAccountName"], PLUGIN_SA);
        assert_eq!(pod["priorityClassName"], "system-node-critical");
        assert!(pod["terminationGracePeriodSeconds"].as_u64().unwrap() >= 10);
        assert!(!pod["tolerations"].as_array().unwrap().is_empty());
        assert_ne!(pod["hostNetwork"], true);
        assert_ne!(pod["hostPID"], true);
        let containers = pod["containers"].as_array().unwrap();
        assert_eq!(containers.len(), 1);
        let c = &containers[0];
        hardened(&c["securityContext"], "plugin");
        assert_eq!(
            env(c, "FAKE_DRA_NODE_NAME")["valueFrom"]["fieldRef"]["fieldPath"],
            "spec.nodeName"
        );
        // Each overlay is for one DRA generation: no discovery guess at start.
        assert_eq!(
            env(c, "FAKE_DRA_MODE")["value"],
            *overlay,
            "{overlay}: FAKE_DRA_MODE"
        );
        let host: BTreeMap<String, String> = pod["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| {
                let path = v["hostPath"]["path"]
                    .as_str()
                    .unwrap_or_else(|| panic!("volume {v} is not a hostPath"));
                (v["name"].as_str().unwrap().to_owned(), path.to_owned())
            })
            .collect();
        let paths: BTreeSet<&str> = host.values().map(String::as_str).collect();
        assert_eq!(
            paths,
            BTreeSet::from([
                "/var/lib/kubelet/plugins_registry",
                "/var/lib/kubelet/plugins/fake.resource.3-shake.com",
                "/var/run/cdi",
            ])
        );
        // Mounted at the same paths, so the socket paths the plugin hands the kubelet are
        // valid on the host.
        for m in c["volumeMounts"].as_array().unwrap() {
            let name = m["name"].as_str().unwrap();
            assert_eq!(m["mountPath"].as_str(), host.get(name).map(String::as_str));
        }
        let plugin_dir = env(c, "FAKE_DRA_PLUGIN_DIR")["value"].as_str().unwrap();
        let driver = env(c, "FAKE_DRA_DRIVER_NAME")["value"].as_str().unwrap();
        assert_eq!(plugin_dir, format!("/var/lib/kubelet/plugins/{driver}"));
        assert_eq!(driver, fake_dra_api::DEFAULT_DRIVER_NAME);
    }
}

#[test]
fn classic_overlay_has_the_resource_class() {
    let objects = render("classic");
    let rc = find(&objects, "ResourceClass", "fake.3-shake.com");
    assert_eq!(rc["apiVersion"], "resource.k8s.io/v1alpha2");
    assert_eq!(rc["driverName"], fake_dra_api::DEFAULT_DRIVER_NAME);
}

/// The claims of the structured overlay name this class; the scheduler offers them the
/// devices its CEL selector admits: exactly our driver's.
#[test]
fn structured_overlay_has_the_device_class() {
    let objects = render("structured");
    let dc = find(&objects, "DeviceClass", "fake.3-shake.com");
    assert_eq!(dc["apiVersion"], "resource.k8s.io/v1");
    assert_eq!(
        dc["spec"]["selectors"],
        serde_json::json!([{"cel": {"expression": format!(
            "device.driver == \"{}\"",
            fake_dra_api::DEFAULT_DRIVER_NAME
        )}}])
    );
    assert!(
        !objects.iter().any(|o| o["kind"] == "ResourceClass"),
        "structured: no classic ResourceClass"
    );
}

/// RBAC lets the plugin write any ResourceSlice; the ValidatingAdmissionPolicy narrows that
/// to the slices of the node its pod runs on (the token's node-name extra), for create,
/// update and delete, and a binding puts it in force (Deny).
#[test]
fn structured_overlay_confines_slice_writes_to_the_plugins_node() {
    let objects = render("structured");
    let policies: Vec<&Value> = objects
        .iter()
        .filter(|o| o["kind"] == "ValidatingAdmissionPolicy")
        .collect();
    assert_eq!(policies.len(), 1, "one ValidatingAdmissionPolicy");
    let policy = policies[0];
    assert_eq!(
        policy["apiVersion"], "admissionregistration.k8s.io/v1",
        "GA since 1.30"
    );
    let spec = &policy["spec"];
    assert_eq!(spec["failurePolicy"], "Fail");
    let rules = spec["matchConstraints"]["resourceRules"]
        .as_array()
        .unwrap();
    let strings = |v: &Value| -> BTreeSet<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_owned())
            .collect()
    };
    assert!(
        rules.iter().any(|r| {
            strings(&r["apiGroups"]).contains("resource.k8s.io")
                && strings(&r["resources"]).contains("resourceslices")
                && ["v1", "v1beta1"]
                    .iter()
                    .all(|v| strings(&r["apiVersions"]).contains(*v))
                && ["CREATE", "UPDATE", "DELETE"]
                    .iter()
                    .all(|op| strings(&r["operations"]).contains(*op))
        }),
        "the policy must match create/update/delete of resourceslices (v1, v1beta1): {rules:?}"
    );
    // It applies to the plugin's ServiceAccount (and only to it).
    let sa_user = format!("system:serviceaccount:{FAKE_DRA_NAMESPACE}:{PLUGIN_SA}");
    let conditions = spec["matchConditions"].as_array().unwrap();
    assert!(
        conditions.iter().any(|c| c["expression"]
            .as_str()
            .unwrap()
            .contains(&format!("request.userInfo.username == \"{sa_user}\""))),
        "matchConditions must select {sa_user}: {conditions:?}"
    );
    // The node of the request against the slice's nodeName (the old object's on DELETE).
    let all_cel: String = spec["variables"]
        .as_array()
        .unwrap()
        .iter()
        .chain(spec["validations"].as_array().unwrap())
        .map(|v| v["expression"].as_str().unwrap().to_owned() + "\n")
        .collect();
    for needle in [
        "request.userInfo.?extra[?'authentication.kubernetes.io/node-name']",
        "oldObject",
        "spec.?nodeName",
        "variables.userNodeName == variables.objectNodeName",
        "variables.userNodeName != \"\"",
    ] {
        assert!(
            all_cel.contains(needle),
            "the policy's CEL lacks {needle:?}:\n{all_cel}"
        );
    }
    let name = policy["metadata"]["name"].as_str().unwrap();
    let binding = objects
        .iter()
        .find(|o| {
            o["kind"] == "ValidatingAdmissionPolicyBinding" && o["spec"]["policyName"] == name
        })
        .unwrap_or_else(|| panic!("no ValidatingAdmissionPolicyBinding for {name}"));
    assert!(
        strings(&binding["spec"]["validationActions"]).contains("Deny"),
        "the binding must Deny"
    );
    assert!(
        binding["spec"].get("matchResources").is_none()
            || binding["spec"]["matchResources"] == serde_json::json!({}),
        "the binding must not narrow the policy to some slices"
    );
}

/// The manifests configure the binaries through env twins of their flags: every env
/// var a container sets must be one the binary reads (as its `--help` lists it), and the
/// command must be the binary the image installs.
#[test]
fn manifest_env_and_commands_match_the_binaries() {
    let workloads = [
        ("Deployment", "fake-dra-controller", "fake-dra-controller"),
        (
            "DaemonSet",
            "fake-dra-kubelet-plugin",
            "fake-dra-kubelet-plugin",
        ),
    ];
    for overlay in OVERLAYS {
        let objects = render(overlay);
        for (kind, name, bin) in workloads {
            if kind == "Deployment" && api_access(overlay).0.is_none() {
                continue;
            }
            check_env_and_command(&objects, kind, name, bin);
        }
    }
}

/// Fleet mode: its own Deployment, ServiceAccount and table; no per-node DaemonSet.
#[test]
fn the_fleet_overlay_grants_the_fleet_table_and_runs_the_fleet_subcommand() {
    let objects = render("fleet");
    assert_eq!(
        granted(&objects, "fake-dra-fleet"),
        expected(fake_dra_kubelet_plugin::API_ACCESS_FLEET),
        "fleet RBAC (left) differs from fake_dra_kubelet_plugin::API_ACCESS_FLEET (right)"
    );
    assert!(
        !objects.iter().any(|o| o["kind"] == "DaemonSet"),
        "the fleet overlay runs no node plugin"
    );
    let deployment = find(&objects, "Deployment", "fake-dra-fleet");
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "fake-dra-fleet");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    hardened(&pod["containers"][0]["securityContext"], "fleet container");
    assert_eq!(deployment["spec"]["strategy"]["type"], "Recreate");
    assert_eq!(pod["containers"][0]["command"][1], "fleet");
    check_env_and_command_of(
        &objects,
        "Deployment",
        "fake-dra-fleet",
        "fake-dra-kubelet-plugin",
        &["fleet"],
    );
    // The structured objects come along: the DeviceClass, the CRDs.
    find(&objects, "DeviceClass", "fake.3-shake.com");
    find(
        &objects,
        "CustomResourceDefinition",
        "devicefaults.fake.resource.3-shake.com",
    );
}

fn check_env_and_command(objects: &[Value], kind: &str, name: &str, bin: &str) {
    check_env_and_command_of(objects, kind, name, bin, &[]);
}

fn check_env_and_command_of(
    objects: &[Value],
    kind: &str,
    name: &str,
    bin: &str,
    subcommand: &[&str],
) {
    let c = &find(objects, kind, name)["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        c["command"][0],
        format!("/usr/bin/{bin}"),
        "{kind} {name} command"
    );
    let help = Command::new(fake_dra_emulator::binaries::locate(bin, None).unwrap())
        .args(subcommand)
        .arg("--help")
        .output()
        .unwrap();
    assert!(help.status.success());
    let help = String::from_utf8(help.stdout).unwrap();
    for e in c["env"].as_array().unwrap() {
        let var = e["name"].as_str().unwrap();
        assert!(
            help.contains(&format!("[env: {var}=")),
            "{kind} {name} sets {var}, which {bin} does not read:\n{help}"
        );
    }
    let port = c["ports"][0]["containerPort"].as_u64().unwrap();
    let addr = c["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| {
            e["name"]
                .as_str()
                .unwrap()
                .ends_with("FAKE_DRA_HTTP_ADDRESS")
        })
        .and_then(|e| e["value"].as_str())
        .unwrap_or_else(|| panic!("{kind} {name}: no FAKE_DRA_HTTP_ADDRESS for the probes"));
    assert!(
        addr.ends_with(&format!(":{port}")),
        "{addr} vs containerPort {port}"
    );
}

/// YAML `128.0` and `128` are the same number to the apiserver.
fn normalized(v: Value) -> Value {
    match v {
        Value::Number(n)
            if n.as_f64().is_some_and(|f| f.fract() == 0.0) && !n.is_i64() && !n.is_u64() =>
        {
            Value::from(n.as_f64().unwrap_or_default() as i64)
        }
        Value::Array(items) => Value::Array(items.into_iter().map(normalized).collect()),
        Value::Object(map) => {
            Value::Object(map.into_iter().map(|(k, v)| (k, normalized(v))).collect())
        }
        other => other,
    }
}

fn object_key(v: &Value) -> String {
    format!(
        "{} {}/{}/{}",
        v["apiVersion"].as_str().unwrap_or_default(),
        v["kind"].as_str().unwrap_or_default(),
        v["metadata"]["namespace"].as_str().unwrap_or_default(),
        v["metadata"]["name"].as_str().unwrap_or_default()
    )
}

/// Two renders hold the same objects (in any order), each equal field for field.
fn assert_same_objects(what: &str, left: Vec<Value>, right: Vec<Value>) {
    let by_key = |objects: Vec<Value>| -> BTreeMap<String, Value> {
        let n = objects.len();
        let map: BTreeMap<String, Value> = objects
            .into_iter()
            .map(|o| (object_key(&o), normalized(o)))
            .collect();
        assert_eq!(map.len(), n, "{what}: an object is rendered twice");
        map
    };
    let (left, right) = (by_key(left), by_key(right));
    assert_eq!(
        left.keys().collect::<Vec<_>>(),
        right.keys().collect::<Vec<_>>(),
        "{what}: objects"
    );
    for (key, l) in &left {
        let mut diffs = Vec::new();
        differences(l, &right[key], String::new(), &mut diffs);
        assert!(
            diffs.is_empty(),
            "{what}: {key} differs:\n{}",
            diffs.join("\n")
        );
    }
}

/// The JSON pointers where two values differ, with both sides.
fn differences(left: &Value, right: &Value, at: String, out: &mut Vec<String>) {
    match (left, right) {
        (Value::Object(l), Value::Object(r)) => {
            let keys: BTreeSet<&String> = l.keys().chain(r.keys()).collect();
            for k in keys {
                let (lv, rv) = (
                    l.get(k).unwrap_or(&Value::Null),
                    r.get(k).unwrap_or(&Value::Null),
                );
                differences(lv, rv, format!("{at}/{k}"), out);
            }
        }
        (Value::Array(l), Value::Array(r)) if l.len() == r.len() => {
            for (i, (lv, rv)) in l.iter().zip(r).enumerate() {
                differences(lv, rv, format!("{at}/{i}"), out);
            }
        }
        (l, r) if l != r => out.push(format!("  {at}: {l} (left) vs {r} (right)")),
        _ => {}
    }
}

/// `fake-dra-sim` and the emulator's suites install the driver from `deploy/rendered/`
/// (the emulator has no kustomize of its own): each file must be exactly what
/// `kubectl kustomize` renders for its overlay, every overlay has one and no other file is
/// there (`hack/render-deploy.sh --write` regenerates them).
#[test]
fn the_rendered_manifests_equal_kubectl_kustomize() {
    let dir = repo().join("deploy/rendered");
    let overlays = all_overlays();
    for overlay in &overlays {
        let path = dir.join(format!("{overlay}.yaml"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (run hack/render-deploy.sh --write)",
                path.display()
            )
        });
        assert_eq!(
            parse_docs(&text),
            render(overlay),
            "deploy/rendered/{overlay}.yaml is not what kubectl kustomize deploy/{overlay} renders \
             (run hack/render-deploy.sh --write)"
        );
        // What the emulator reads is that file.
        let loaded =
            fake_dra_emulator::manifests::rendered(&repo().join("deploy"), overlay).unwrap();
        assert_eq!(loaded.len(), parse_docs(&text).len(), "{overlay}");
    }
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let overlay = name.strip_suffix(".yaml").unwrap_or(&name);
        assert!(
            overlays.iter().any(|o| o == overlay),
            "deploy/rendered/{name}: no overlay deploy/{overlay}"
        );
    }
}

/// The helm binary: `$FAKE_DRA_HELM`, else the one `hack/helm.sh` builds (once, from the Go
/// module proxy, cached under target/helm). None only with FAKE_DRA_SKIP_HELM=1; a helm that
/// cannot be had fails the test otherwise.
fn helm() -> Option<&'static Path> {
    static HELM: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let found = HELM.get_or_init(|| {
        if let Some(path) = std::env::var_os("FAKE_DRA_HELM") {
            return Ok(PathBuf::from(path));
        }
        let out = Command::new(repo().join("hack/helm.sh"))
            .output()
            .map_err(|e| format!("running hack/helm.sh: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "hack/helm.sh failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        let path = stdout.lines().last().unwrap_or_default().trim();
        Ok(PathBuf::from(path))
    });
    match found {
        Ok(path) => Some(path.as_path()),
        Err(_) if std::env::var("FAKE_DRA_SKIP_HELM").is_ok_and(|v| v == "1") => {
            eprintln!("SKIPPED: no helm (FAKE_DRA_SKIP_HELM=1)");
            None
        }
        Err(e) => panic!(
            "{e}\nhelm is needed to render deploy/helm/fake-dra: hack/helm.sh builds it (Go and \
             the Go module proxy), or set FAKE_DRA_HELM=<path to helm>; FAKE_DRA_SKIP_HELM=1 skips"
        ),
    }
}

/// `helm template` of the chart as release fake-dra in `namespace`, with `--set` values.
fn helm_template(helm: &Path, namespace: &str, set: &[&str]) -> Vec<Value> {
    let mut command = Command::new(helm);
    command
        .args(["template", "fake-dra"])
        .arg(repo().join("deploy/helm/fake-dra"))
        .args(["--namespace", namespace]);
    for s in set {
        command.args(["--set", s]);
    }
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "helm template {set:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    parse_docs(&String::from_utf8(out.stdout).unwrap())
}

/// Labels Helm's conventions put on every object of a release (`fake-dra.labels`), which
/// the kustomize overlays do not have; `app.kubernetes.io/instance` is also in the chart's
/// selectors, so two releases' pods never mix.
const HELM_LABELS: [&str; 4] = [
    "helm.sh/chart",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
];
/// Kinds only the chart renders: the metrics Services (and the optional ServiceMonitors).
const HELM_ONLY_KINDS: [&str; 2] = ["Service", "ServiceMonitor"];

/// A chart render as the overlays would have it: without the objects and labels only the
/// chart has (each checked to be there, on every object).
fn as_kustomize(objects: Vec<Value>) -> Vec<Value> {
    fn strip(v: Value) -> Value {
        match v {
            Value::Object(map) => Value::Object(
                map.into_iter()
                    .filter_map(|(k, v)| match (k.as_str(), v) {
                        ("labels" | "matchLabels", Value::Object(labels)) => {
                            let kept: serde_json::Map<String, Value> = labels
                                .into_iter()
                                .filter(|(l, _)| !HELM_LABELS.contains(&l.as_str()))
                                .collect();
                            (!kept.is_empty()).then_some((k, Value::Object(kept)))
                        }
                        (_, v) => Some((k, strip(v))),
                    })
                    .collect(),
            ),
            Value::Array(items) => Value::Array(items.into_iter().map(strip).collect()),
            other => other,
        }
    }
    objects
        .into_iter()
        .inspect(|o| {
            for label in HELM_LABELS.iter().chain(&["helm.sh/chart"]) {
                assert!(
                    o["metadata"]["labels"][*label].is_string(),
                    "{}: no label {label}",
                    object_key(o)
                );
            }
        })
        .filter(|o| !HELM_ONLY_KINDS.contains(&o["kind"].as_str().unwrap_or_default()))
        .map(strip)
        .collect()
}

/// The Helm chart with default values (per mode) renders the objects the kustomize overlays
/// render, field for field, once the chart's own additions are set aside ([`as_kustomize`]:
/// Helm's standard labels, the metrics Services) and with the image tag the overlays use
/// (the chart's defaults to its appVersion). The Namespace, which `helm install
/// --create-namespace` makes, is rendered only with namespace.create=true.
/// admissionPolicy.classic=true adds what deploy/classic-admission adds; fleet.enabled=true
/// renders deploy/fleet.
#[test]
fn the_helm_chart_renders_what_the_overlays_render() {
    let Some(helm) = helm() else { return };
    let without_namespace = |objects: Vec<Value>| -> Vec<Value> {
        objects
            .into_iter()
            .filter(|o| o["kind"] != "Namespace")
            .collect()
    };
    for mode in OVERLAYS {
        let kustomize = render(mode);
        let mode_value = format!("mode={mode}");
        assert_same_objects(
            &format!("helm --set {mode_value} (left) vs deploy/{mode} without its Namespace"),
            as_kustomize(helm_template(
                helm,
                FAKE_DRA_NAMESPACE,
                &[&mode_value, "image.tag=dev"],
            )),
            without_namespace(kustomize.clone()),
        );
        assert_same_objects(
            &format!("helm --set {mode_value},namespace.create=true (left) vs deploy/{mode}"),
            as_kustomize(helm_template(
                helm,
                FAKE_DRA_NAMESPACE,
                &[&mode_value, "namespace.create=true", "image.tag=dev"],
            )),
            kustomize,
        );
    }
    let mut classic_admission = render("classic");
    classic_admission.extend(render("classic-admission"));
    assert_same_objects(
        "helm --set mode=classic,admissionPolicy.classic=true (left) vs deploy/classic + deploy/classic-admission",
        as_kustomize(helm_template(
            helm,
            FAKE_DRA_NAMESPACE,
            &[
                "mode=classic",
                "namespace.create=true",
                "admissionPolicy.classic=true",
                "image.tag=dev",
            ],
        )),
        classic_admission,
    );
    assert_same_objects(
        "helm --set fleet.enabled=true (left) vs deploy/fleet",
        as_kustomize(helm_template(
            helm,
            FAKE_DRA_NAMESPACE,
            &[
                "fleet.enabled=true",
                "namespace.create=true",
                "image.tag=dev",
            ],
        )),
        render("fleet"),
    );
    // The default mode is structured (Kubernetes 1.34+ take it as it is).
    assert_same_objects(
        "helm defaults (left) vs helm --set mode=structured",
        helm_template(helm, FAKE_DRA_NAMESPACE, &[]),
        helm_template(helm, FAKE_DRA_NAMESPACE, &["mode=structured"]),
    );
}

/// Each value the chart offers reaches every place that depends on it: the release
/// namespace (objects, binding subjects, the admission policies' user), the driver name
/// (plugin env and directories, the class), the kubelet directory, devices, image, log
/// format, scheduling; and a bad mode is refused.
/// The opt-ins reach the plugin: its pod UID and the rollout strategy that lets two
/// instances overlap, and the device metadata switch; neither is there by default.
#[test]
fn the_helm_opt_ins_reach_the_plugin() {
    let Some(helm) = helm() else { return };
    let plugin = |values: &[&str]| {
        let objects = helm_template(helm, "fake-dra", values);
        find(&objects, "DaemonSet", PLUGIN_SA).clone()
    };
    let ds = plugin(&[
        "mode=structured",
        "kubeletPlugin.seamlessUpgrade=true",
        "kubeletPlugin.deviceMetadata=true",
    ]);
    let c = &ds["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        env(c, "FAKE_DRA_POD_UID")["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.uid"
    );
    assert_eq!(env(c, "FAKE_DRA_DEVICE_METADATA")["value"], "true");
    assert_eq!(
        ds["spec"]["updateStrategy"],
        serde_json::json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}})
    );
    let ds = plugin(&["mode=structured"]);
    let names: Vec<&str> = ds["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert!(
        !names.contains(&"FAKE_DRA_POD_UID") && !names.contains(&"FAKE_DRA_DEVICE_METADATA"),
        "{names:?}"
    );
    assert_eq!(
        ds["spec"]["updateStrategy"],
        serde_json::json!({"type": "RollingUpdate"})
    );
}

#[test]
fn the_helm_values_reach_every_place() {
    let Some(helm) = helm() else { return };
    let set = [
        "driverName=gpu.example.com",
        "className=gpu.example.com",
        "kubeletPlugin.kubeletDir=/var/snap/microk8s/common/var/lib/kubelet",
        "kubeletPlugin.cdiRoot=/etc/cdi",
        "kubeletPlugin.numDevices=16",
        "kubeletPlugin.nodeSelector.gpu=yes",
        "image.repository=registry.example.com/fake-dra",
        "image.tag=v0.1.0",
        "image.pullPolicy=Always",
        "logFormat=text",
        "admissionPolicy.classic=true",
    ];
    for mode in OVERLAYS {
        let mode_value = format!("mode={mode}");
        let mut values = vec![mode_value.as_str()];
        values.extend(set);
        let objects = helm_template(helm, "drivers", &values);
        for o in &objects {
            let cluster_scoped = matches!(
                o["kind"].as_str().unwrap(),
                "ClusterRole"
                    | "ClusterRoleBinding"
                    | "CustomResourceDefinition"
                    | "PriorityClass"
                    | "ResourceClass"
                    | "DeviceClass"
                    | "ValidatingAdmissionPolicy"
                    | "ValidatingAdmissionPolicyBinding"
            );
            if !cluster_scoped {
                assert_eq!(o["metadata"]["namespace"], "drivers", "{}", object_key(o));
            }
            for s in o["subjects"].as_array().into_iter().flatten() {
                assert_eq!(s["namespace"], "drivers", "{}", object_key(o));
            }
        }
        let ds = find(&objects, "DaemonSet", PLUGIN_SA);
        let pod = &ds["spec"]["template"]["spec"];
        let c = &pod["containers"][0];
        assert_eq!(c["image"], "registry.example.com/fake-dra:v0.1.0");
        assert_eq!(c["imagePullPolicy"], "Always");
        assert_eq!(env(c, "FAKE_DRA_MODE")["value"], *mode);
        assert_eq!(env(c, "FAKE_DRA_DRIVER_NAME")["value"], "gpu.example.com");
        assert_eq!(env(c, "FAKE_DRA_NUM_DEVICES")["value"], "16");
        assert_eq!(env(c, "FAKE_DRA_LOG_FORMAT")["value"], "text");
        assert_eq!(env(c, "FAKE_DRA_CDI_ROOT")["value"], "/etc/cdi");
        assert_eq!(pod["nodeSelector"]["gpu"], "yes");
        let kubelet = "/var/snap/microk8s/common/var/lib/kubelet";
        assert_eq!(
            env(c, "FAKE_DRA_PLUGIN_DIR")["value"],
            format!("{kubelet}/plugins/gpu.example.com")
        );
        assert_eq!(
            env(c, "FAKE_DRA_REGISTRY_DIR")["value"],
            format!("{kubelet}/plugins_registry")
        );
        let host_paths: BTreeSet<&str> = pod["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["hostPath"]["path"].as_str().unwrap())
            .collect();
        let mount_paths: BTreeSet<&str> = c["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["mountPath"].as_str().unwrap())
            .collect();
        let want = BTreeSet::from([
            format!("{kubelet}/plugins_registry"),
            format!("{kubelet}/plugins/gpu.example.com"),
            "/etc/cdi".to_owned(),
        ]);
        assert_eq!(
            host_paths,
            want.iter().map(String::as_str).collect::<BTreeSet<_>>()
        );
        assert_eq!(
            host_paths, mount_paths,
            "mounted where they are on the host"
        );
        let policy = objects
            .iter()
            .find(|o| o["kind"] == "ValidatingAdmissionPolicy")
            .unwrap_or_else(|| panic!("{mode}: no admission policy"));
        assert!(
            policy
                .to_string()
                .contains(&format!("system:serviceaccount:drivers:{PLUGIN_SA}")),
            "{mode}: the policy must name the plugin's user in the release namespace"
        );
        match *mode {
            "classic" => {
                let rc = find(&objects, "ResourceClass", "gpu.example.com");
                assert_eq!(rc["driverName"], "gpu.example.com");
                let ctl = &find(&objects, "Deployment", CONTROLLER_SA)["spec"]["template"]["spec"]
                    ["containers"][0];
                assert_eq!(env(ctl, "FAKE_DRA_DRIVER_NAME")["value"], "gpu.example.com");
                assert_eq!(env(ctl, "FAKE_DRA_LOG_FORMAT")["value"], "text");
                assert_eq!(ctl["image"], "registry.example.com/fake-dra:v0.1.0");
            }
            _ => {
                let dc = find(&objects, "DeviceClass", "gpu.example.com");
                assert_eq!(
                    dc["spec"]["selectors"][0]["cel"]["expression"],
                    "device.driver == \"gpu.example.com\""
                );
            }
        }
    }
    // 1.32/1.33 serve DeviceClasses as v1beta1 only.
    let objects = helm_template(helm, FAKE_DRA_NAMESPACE, &["deviceClassApiVersion=v1beta1"]);
    assert_eq!(
        find(&objects, "DeviceClass", "fake.3-shake.com")["apiVersion"],
        "resource.k8s.io/v1beta1"
    );
    let refused = |set: &[&str], says: &str| {
        let mut command = Command::new(helm);
        command
            .args(["template", "fake-dra"])
            .arg(repo().join("deploy/helm/fake-dra"));
        for s in set {
            command.args(["--set", s]);
        }
        let out = command.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{set:?} must be refused");
        assert!(stderr.contains(says), "{set:?}: {stderr}");
    };
    refused(&["mode=auto"], "mode");
    refused(&["kubeletPlugin.profile=bad"], "/kubeletPlugin/profile");
    refused(
        &["mode=classic", "kubeletPlugin.profile=gpu"],
        "the gpu profile is structured DRA only",
    );
    refused(
        &["mode=classic", "fleet.enabled=true"],
        "fleet.enabled needs mode=structured",
    );
    refused(
        &["mode=classic", "kubeletPlugin.profile=nvidia"],
        "kubeletPlugin.profile=nvidia needs mode=structured",
    );
    refused(
        &["mode=classic", "kubeletPlugin.seamlessUpgrade=true"],
        "kubeletPlugin.seamlessUpgrade needs mode=structured",
    );
    refused(
        &["kubeletPlugin.deviceMetadata=yes"],
        "/kubeletPlugin/deviceMetadata",
    );
    refused(
        &["kubeletPlugin.nvidiaGpus=A100-80GB:8:partitioned"],
        "kubeletPlugin/nvidiaGpus",
    );
    refused(
        &["metrics.serviceMonitor.enabled=true"],
        "no monitoring.coreos.com/v1 ServiceMonitor",
    );
}

/// What a user of dra-example-driver's chart expects to set: names, the image tag from
/// appVersion, ServiceAccounts, security contexts, the update strategy, the plugin's
/// profile, GPUs, models, inventory, log level and extra env, metrics Services, fleet mode.
#[test]
fn the_helm_chart_has_the_values_users_expect() {
    let Some(helm) = helm() else { return };
    let chart: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(repo().join("deploy/helm/fake-dra/Chart.yaml")).unwrap(),
    )
    .unwrap();
    let app_version = chart["appVersion"].as_str().unwrap();
    let objects = helm_template(
        helm,
        "drivers",
        &[
            "fullnameOverride=acme",
            "kubeletPlugin.profile=gpu",
            "kubeletPlugin.gpus=A100-80GB:8:partitioned",
            "kubeletPlugin.models={M1,M2}",
            "kubeletPlugin.inventory.nodes[0].name=gpu-*",
            "kubeletPlugin.updateStrategy.type=OnDelete",
            "kubeletPlugin.podSecurityContext.runAsUser=0",
            "kubeletPlugin.extraEnv[0].name=FAKE_DRA_MAX_CONNECTIONS",
            "kubeletPlugin.extraEnv[0].value=64",
            "logLevel=debug",
            "serviceAccount.annotations.team=gpu",
        ],
    );
    let ds = find(&objects, "DaemonSet", "acme-kubelet-plugin");
    let pod = &ds["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    assert_eq!(c["image"], format!("fake-dra:{app_version}"));
    assert_eq!(env(c, "FAKE_DRA_PROFILE")["value"], "gpu");
    assert_eq!(env(c, "FAKE_DRA_GPUS")["value"], "A100-80GB:8:partitioned");
    assert_eq!(env(c, "FAKE_DRA_MODELS")["value"], "M1,M2");
    assert_eq!(
        env(c, "FAKE_DRA_INVENTORY")["value"],
        "/etc/fake-dra/inventory.yaml"
    );
    assert_eq!(env(c, "RUST_LOG")["value"], "debug");
    assert_eq!(env(c, "FAKE_DRA_MAX_CONNECTIONS")["value"], "64");
    assert_eq!(ds["spec"]["updateStrategy"]["type"], "OnDelete");
    assert_eq!(pod["securityContext"]["runAsUser"], 0);
    assert_eq!(pod["serviceAccountName"], "acme-kubelet-plugin");
    assert_eq!(
        ds["spec"]["selector"]["matchLabels"]["app.kubernetes.io/instance"],
        "fake-dra"
    );
    let inventory = find(&objects, "ConfigMap", "acme-kubelet-plugin-inventory");
    assert!(
        inventory["data"]["inventory.yaml"]
            .as_str()
            .unwrap()
            .contains("gpu-*"),
        "{inventory}"
    );
    let nvidia = helm_template(
        helm,
        "drivers",
        &[
            "kubeletPlugin.profile=nvidia",
            "kubeletPlugin.nvidiaGpus=H100-80GB:4:mig=1g.10gb/3g.40gb\\,L4:2",
        ],
    );
    let c = &find(&nvidia, "DaemonSet", "fake-dra-kubelet-plugin")["spec"]["template"]["spec"]["containers"]
        [0];
    assert_eq!(env(c, "FAKE_DRA_PROFILE")["value"], "nvidia");
    assert_eq!(
        env(c, "FAKE_DRA_NVIDIA_GPUS")["value"],
        "H100-80GB:4:mig=1g.10gb/3g.40gb,L4:2"
    );
    let sa = find(&objects, "ServiceAccount", "acme-kubelet-plugin");
    assert_eq!(sa["metadata"]["annotations"]["team"], "gpu");
    let service = find(&objects, "Service", "acme-kubelet-plugin-metrics");
    assert_eq!(
        service["spec"]["selector"]["app.kubernetes.io/name"],
        "acme-kubelet-plugin"
    );
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "http");
    let policy = find(&objects, "ValidatingAdmissionPolicy", "acme-resourceslices");
    assert!(
        policy
            .to_string()
            .contains("system:serviceaccount:drivers:acme-kubelet-plugin")
    );
    for o in &objects {
        assert_eq!(
            o["metadata"]["labels"]["app.kubernetes.io/managed-by"],
            "Helm"
        );
        assert_eq!(
            o["metadata"]["labels"]["app.kubernetes.io/version"],
            app_version
        );
    }
    // Fleet mode: a Deployment in place of the DaemonSet, with the same device values.
    let fleet = helm_template(
        helm,
        "drivers",
        &[
            "fleet.enabled=true",
            "fleet.createNodes=100",
            "kubeletPlugin.numDevices=4",
        ],
    );
    assert!(fleet.iter().all(|o| o["kind"] != "DaemonSet"));
    let c =
        &find(&fleet, "Deployment", "fake-dra-fleet")["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["command"][1], "fleet");
    assert_eq!(env(c, "FAKE_DRA_CREATE_NODES")["value"], "100");
    assert_eq!(env(c, "FAKE_DRA_NUM_DEVICES")["value"], "4");
    find(&fleet, "Service", "fake-dra-fleet-metrics");
    // Without the metrics Service.
    let quiet = helm_template(helm, "drivers", &["metrics.service.enabled=false"]);
    assert!(quiet.iter().all(|o| o["kind"] != "Service"));
    // The ServiceMonitor where the Prometheus Operator's CRD is served.
    let mut command = Command::new(helm);
    let out = command
        .args(["template", "fake-dra"])
        .arg(repo().join("deploy/helm/fake-dra"))
        .args(["--api-versions", "monitoring.coreos.com/v1/ServiceMonitor"])
        .args(["--set", "metrics.serviceMonitor.enabled=true"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let monitors = parse_docs(&String::from_utf8(out.stdout).unwrap());
    let monitor = find(&monitors, "ServiceMonitor", "fake-dra-kubelet-plugin");
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "http-metrics");
}

fn load_docs(path: &Path) -> Vec<Value> {
    parse_docs(&std::fs::read_to_string(path).unwrap())
}

/// What the e2e assertions look at: namespaces, workloads and their containers.
fn shape(docs: &[Value]) -> BTreeSet<String> {
    docs.iter()
        .filter(|o| matches!(o["kind"].as_str(), Some("Namespace" | "Pod" | "Deployment")))
        .map(|o| {
            let pod = if o["kind"] == "Deployment" {
                &o["spec"]["template"]["spec"]
            } else {
                &o["spec"]
            };
            let containers: Vec<&str> = pod["containers"]
                .as_array()
                .map(|cs| cs.iter().map(|c| c["name"].as_str().unwrap()).collect())
                .unwrap_or_default();
            format!(
                "{} {}/{} {containers:?} replicas={}",
                o["kind"], o["metadata"]["namespace"], o["metadata"]["name"], o["spec"]["replicas"]
            )
        })
        .collect()
}

/// The structured examples are the classic scenarios 1-8 (same namespaces, pods,
/// containers, so hack/e2e-kind.sh and the emulator's suites assert on both alike), in
/// resource.k8s.io/v1: requests of the class fake.3-shake.com with `exactly`, split as opaque
/// FakeClaimParameters, pods with the 1.31+ `resourceClaims` layout.
#[test]
fn structured_examples_mirror_the_classic_ones() {
    let classic_dir = repo().join("deploy/examples");
    let structured_dir = classic_dir.join("structured");
    let mut seen = 0;
    for entry in std::fs::read_dir(&structured_dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        seen += 1;
        let file = path.file_name().unwrap().to_str().unwrap().to_owned();
        let structured = load_docs(&path);
        let classic = load_docs(&classic_dir.join(&file));
        assert_eq!(
            shape(&structured),
            shape(&classic),
            "{file}: workloads differ"
        );
        // The classic parameters, to compare count/split/model with.
        let params = classic
            .iter()
            .find(|o| o["kind"] == "FakeClaimParameters")
            .unwrap_or_else(|| panic!("classic {file}: no FakeClaimParameters"));
        for o in &structured {
            let kind = o["kind"].as_str().unwrap();
            assert_ne!(
                o["apiVersion"], "resource.k8s.io/v1alpha2",
                "{file}: {kind}"
            );
            assert!(
                !matches!(kind, "FakeClaimParameters" | "ResourceClass"),
                "{file}: classic object {kind}"
            );
            let claim_spec = match kind {
                "ResourceClaimTemplate" => &o["spec"]["spec"],
                "ResourceClaim" => &o["spec"],
                _ => {
                    let pod = if kind == "Deployment" {
                        &o["spec"]["template"]["spec"]
                    } else {
                        &o["spec"]
                    };
                    for rc in pod["resourceClaims"].as_array().into_iter().flatten() {
                        assert!(
                            rc.get("source").is_none(),
                            "{file}: 1.27-1.30 `source` layout"
                        );
                        assert!(
                            rc.get("resourceClaimTemplateName").is_some()
                                || rc.get("resourceClaimName").is_some(),
                            "{file}: pod claim without a claim or template name"
                        );
                    }
                    continue;
                }
            };
            assert_eq!(o["apiVersion"], "resource.k8s.io/v1", "{file}: {kind}");
            let requests = claim_spec["devices"]["requests"].as_array().unwrap();
            assert_eq!(requests.len(), 1, "{file}");
            let exactly = &requests[0]["exactly"];
            assert_eq!(exactly["deviceClassName"], "fake.3-shake.com", "{file}");
            assert_eq!(exactly["count"], params["spec"]["count"], "{file}: count");
            match params["spec"]["selector"]["model"].as_str() {
                Some(model) => assert_eq!(
                    exactly["selectors"][0]["cel"]["expression"],
                    format!(
                        "device.attributes[\"{d}\"].model == \"{model}\"",
                        d = fake_dra_api::DEFAULT_DRIVER_NAME
                    ),
                    "{file}: model selector"
                ),
                None => assert!(exactly.get("selectors").is_none(), "{file}"),
            }
            let configs = claim_spec["devices"]["config"].as_array();
            match params["spec"]["split"].as_u64() {
                Some(split) => {
                    let opaque = &configs.expect("split needs a config")[0]["opaque"];
                    assert_eq!(opaque["driver"], fake_dra_api::DEFAULT_DRIVER_NAME);
                    let p = &opaque["parameters"];
                    assert_eq!(
                        p["apiVersion"],
                        format!("{}/v1alpha1", fake_dra_api::DEFAULT_DRIVER_NAME)
                    );
                    assert_eq!(p["kind"], "FakeClaimParameters");
                    assert_eq!(p["spec"]["split"], split, "{file}: split");
                }
                None => assert!(configs.is_none(), "{file}: config without split"),
            }
        }
    }
    assert_eq!(seen, 8, "structured examples 1-8");
    assert!(
        std::fs::read_to_string(structured_dir.join("README.md"))
            .unwrap()
            .contains("5-count-4-split-2.yaml"),
        "deploy/examples/structured/README.md lists the examples"
    );
}
