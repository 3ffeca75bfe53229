//! Checks of the rendered deploy manifests (`kubectl kustomize` of every overlay):
//! RBAC equals the verbs the code uses, security settings, hostPath mounts, the classes,
//! the structured overlay's admission policy, and the examples of both generations.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

const OVERLAYS: &[&str] = &["classic", "structured"];
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
        // Each overlay is for one DRA generation: no discovery guess at start.
        assert_eq!(env(c, "DRA_MODE")["value"], *overlay, "{overlay}: DRA_MODE");
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
            fake_dra_crds::DEFAULT_DRIVER_NAME
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
    let sa_user = format!("system:serviceaccount:{NAMESPACE}:{PLUGIN_SA}");
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
        "request.userInfo.extra[?'authentication.kubernetes.io/node-name']",
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

fn check_env_and_command(objects: &[Value], kind: &str, name: &str, bin: &str) {
    let c = &find(objects, kind, name)["spec"]["template"]["spec"]["containers"][0];
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
    for overlay in OVERLAYS {
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

fn load_docs(path: &std::path::Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|v: &Value| !v.is_null())
        .collect()
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
                        d = fake_dra_crds::DEFAULT_DRIVER_NAME
                    ),
                    "{file}: model selector"
                ),
                None => assert!(exactly.get("selectors").is_none(), "{file}"),
            }
            let configs = claim_spec["devices"]["config"].as_array();
            match params["spec"]["split"].as_u64() {
                Some(split) => {
                    let opaque = &configs.expect("split needs a config")[0]["opaque"];
                    assert_eq!(opaque["driver"], fake_dra_crds::DEFAULT_DRIVER_NAME);
                    let p = &opaque["parameters"];
                    assert_eq!(
                        p["apiVersion"],
                        format!("{}/v1alpha1", fake_dra_crds::DEFAULT_DRIVER_NAME)
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
