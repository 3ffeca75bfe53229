//! Checks of the rendered deploy manifests (`kubectl kustomize` of every overlay):
//! RBAC equals the verbs the code uses, security settings, hostPath mounts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

const OVERLAYS: &[&str] = &["classic"];
const NAMESPACE: &str = "fake-dra";
const CONTROLLER_SA: &str = "fake-dra-controller";
const PLUGIN_SA: &str = "fake-dra-kubelet-plugin";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Renders an overlay with kubectl; a missing kubectl fails the test (never skips).
fn render(overlay: &str) -> Vec<Value> {
    let dir = repo().join("deploy").join(overlay);
    let out = Command::new("kubectl")
        .args(["kustomize", "--load-restrictor", "LoadRestrictionsNone"])
        .arg(&dir)
        .output()
        .expect("kubectl is required to render deploy/ (install kubectl)");
    assert!(
        out.status.success(),
        "kubectl kustomize {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let mut objects = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let v: Value = serde::Deserialize::deserialize(doc).unwrap();
        if !v.is_null() {
            objects.push(v);
        }
    }
    assert!(!objects.is_empty(), "{overlay} rendered nothing");
    objects
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
            s["kind"] == "ServiceAccount" && s["name"] == sa && s["namespace"] == NAMESPACE
        });
        if !bound {
            continue;
        }
        let role_kind = b["roleRef"]["kind"].as_str().unwrap();
        let role_name = b["roleRef"]["name"].as_str().unwrap();
        let role = find(objects, role_kind, role_name);
        if b["kind"] == "RoleBinding" {
            assert_eq!(b["metadata"]["namespace"], NAMESPACE);
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

#[test]
fn rbac_equals_the_api_access_tables() {
    for overlay in OVERLAYS {
        let objects = render(overlay);
        assert_eq!(
            granted(&objects, CONTROLLER_SA),
            expected(fake_dra_controller::API_ACCESS),
            "{overlay}: controller RBAC (left) differs from fake_dra_controller::API_ACCESS (right)"
        );
        assert_eq!(
            granted(&objects, PLUGIN_SA),
            expected(fake_dra_kubelet_plugin::API_ACCESS),
            "{overlay}: plugin RBAC (left) differs from fake_dra_kubelet_plugin::API_ACCESS (right)"
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
        let d = find(&objects, "Deployment", "fake-dra-controller");
        assert_eq!(d["metadata"]["namespace"], NAMESPACE);
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
        assert_eq!(ds["metadata"]["namespace"], NAMESPACE);
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
            env(c, "NODE_NAME")["valueFrom"]["fieldRef"]["fieldPath"],
            "spec.nodeName"
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
        let plugin_dir = env(c, "PLUGIN_DIR")["value"].as_str().unwrap();
        let driver = env(c, "DRIVER_NAME")["value"].as_str().unwrap();
        assert_eq!(plugin_dir, format!("/var/lib/kubelet/plugins/{driver}"));
        assert_eq!(driver, fake_dra_crds::DEFAULT_DRIVER_NAME);
    }
}

#[test]
fn classic_overlay_has_the_resource_class() {
    let objects = render("classic");
    let rc = find(&objects, "ResourceClass", "fake.3-shake.com");
    assert_eq!(rc["apiVersion"], "resource.k8s.io/v1alpha2");
    assert_eq!(rc["driverName"], fake_dra_crds::DEFAULT_DRIVER_NAME);
}

/// The manifests configure the binaries through env twins of their flags: every env
/// var a container sets must be one the binary reads (as its `--help` lists it), and the
/// command must be the binary the image installs.
#[test]
fn manifest_env_and_commands_match_the_binaries() {
    let objects = render("classic");
    for (kind, name, bin) in [
        ("Deployment", "fake-dra-controller", "fake-dra-controller"),
        (
            "DaemonSet",
            "fake-dra-kubelet-plugin",
            "fake-dra-kubelet-plugin",
        ),
    ] {
        let c = &find(&objects, kind, name)["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(
            c["command"][0],
            format!("/usr/bin/{bin}"),
            "{kind} {name} command"
        );
        let help = Command::new(fake_dra_e2e::binaries::locate(bin, None).unwrap())
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
            .find(|e| e["name"].as_str().unwrap().ends_with("HTTP_ADDRESS"))
            .and_then(|e| e["value"].as_str())
            .unwrap_or_else(|| panic!("{kind} {name}: no HTTP_ADDRESS for the probes"));
        assert!(
            addr.ends_with(&format!(":{port}")),
            "{addr} vs containerPort {port}"
        );
    }
}

/// `fake-dra-sim` installs the driver with its own small renderer (no kubectl needed for
/// the demo); it must give exactly what `kubectl kustomize` gives, images aside (the
/// emulator runs no images).
#[test]
fn the_sims_renderer_matches_kubectl_kustomize() {
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
    fn without_images(mut v: Value) -> Value {
        if let Some(containers) = v
            .pointer_mut("/spec/template/spec/containers")
            .and_then(Value::as_array_mut)
        {
            for c in containers {
                c.as_object_mut().unwrap().remove("image");
            }
        }
        normalized(v)
    }
    let key = |v: &Value| {
        format!(
            "{}/{}/{}",
            v["kind"], v["metadata"]["namespace"], v["metadata"]["name"]
        )
    };
    for overlay in ["classic"] {
        let mut kubectl: Vec<Value> = render(overlay).into_iter().map(without_images).collect();
        let mut ours: Vec<Value> =
            fake_dra_e2e::manifests::kustomize(&repo().join("deploy").join(overlay))
                .unwrap()
                .into_iter()
                .map(|m| without_images(m.object))
                .collect();
        kubectl.sort_by_key(key);
        ours.sort_by_key(key);
        assert_eq!(
            ours.iter().map(key).collect::<Vec<_>>(),
            kubectl.iter().map(key).collect::<Vec<_>>(),
            "deploy/{overlay}: objects"
        );
        for (a, b) in ours.iter().zip(&kubectl) {
            assert_eq!(a, b, "deploy/{overlay}: {}", key(a));
        }
    }
}
