//! The plugin's ServiceAccount may do exactly what the binary's API access table says (on
//! both backends: the emulator answers `kubectl auth can-i --as` from the RBAC it stores),
//! and the admission policy of deploy/structured keeps it to the ResourceSlices of its own
//! node (the real cluster only: the emulator evaluates no admission policies).

use std::collections::BTreeSet;

use super::backend::Backend;
use super::cluster::{DRIVER_NAMESPACE, RealCluster};
use super::protocol::Protocol;

const PLUGIN_SA: &str = "system:serviceaccount:fake-dra:fake-dra-kubelet-plugin";
/// A ServiceAccount nobody grants anything: what every ServiceAccount may do anyway.
const BASELINE_SA: &str = "system:serviceaccount:default:default";
const NODE_NAME_EXTRA: &str = "authentication.kubernetes.io/node-name";

/// Resources of the access table that older releases do not serve, with the first minor
/// that does: RBAC grants them anyway (and the table is compared whole), but a release's
/// record lists only what it serves, as the records of older releases were made before
/// these rows existed.
const SERVED_SINCE: &[(&str, &str, u32)] = &[("resource.k8s.io", "devicetaintrules", 37)];

/// (group, resource, verb) of `kubectl auth can-i --list`'s resource rows; non-resource
/// URLs as ("", "<url>", verb).
fn can_i_list<B: Backend>(b: &B, who: &str) -> BTreeSet<(String, String, String)> {
    let out = b
        .kubectl(&[
            "auth",
            "can-i",
            "--list",
            "--no-headers",
            "-n",
            DRIVER_NAMESPACE,
            &format!("--as={who}"),
        ])
        .unwrap_or_else(|e| panic!("kubectl auth can-i --list --as={who}: {e}"));
    let row = regex::Regex::new(r"^\s*(\S*?)\s*\[([^\]]*)\]\s+\[([^\]]*)\]\s+\[([^\]]*)\]\s*$")
        .unwrap_or_else(|e| panic!("{e}"));
    let mut access = BTreeSet::new();
    for line in out.lines().filter(|l| !l.trim().is_empty()) {
        let caps = row
            .captures(line)
            .unwrap_or_else(|| panic!("unexpected can-i row: {line:?}"));
        let (resource, urls, names, verbs) = (&caps[1], &caps[2], &caps[3], &caps[4]);
        // `resourceclaims.resource.k8s.io/driver`: resource, group, subresource.
        let (resource_group, sub) = match resource.split_once('/') {
            Some((rg, sub)) => (rg, format!("/{sub}")),
            None => (resource, String::new()),
        };
        let (group, what) = if resource.is_empty() {
            (String::new(), format!("<{}>", urls.trim()))
        } else {
            match resource_group.split_once('.') {
                Some((r, g)) => (g.to_string(), format!("{r}{sub}")),
                None => (String::new(), format!("{resource_group}{sub}")),
            }
        };
        // Only the synthetic driver permission is limited to names: the driver's own.
        if what == "resourceclaims/driver" {
            assert_eq!(
                names.trim(),
                crate::common::DRIVER,
                "{who}: resourceclaims/driver must be granted for the driver only: {line}"
            );
        } else {
            assert!(
                names.trim().is_empty(),
                "{who}: rule limited to resource names: {line}"
            );
        }
        for verb in verbs.split_whitespace() {
            access.insert((group.clone(), what.clone(), verb.to_string()));
        }
    }
    access
}

/// `kubectl auth can-i --list` as the plugin's ServiceAccount, minus what every
/// ServiceAccount may do, is exactly `fake_dra_kubelet_plugin::API_ACCESS_STRUCTURED`.
pub async fn rbac_equals_the_api_access_table<B: Backend>(b: &mut B, p: &mut Protocol) {
    p.scenario("rbac-equals-the-api-access-table");
    let plugin = can_i_list(b, PLUGIN_SA);
    let baseline = can_i_list(b, BASELINE_SA);
    let granted: BTreeSet<(String, String, String)> =
        plugin.difference(&baseline).cloned().collect();
    let table: BTreeSet<(String, String, String)> = fake_dra_kubelet_plugin::API_ACCESS_STRUCTURED
        .iter()
        .flat_map(|(g, r, verbs)| {
            verbs
                .iter()
                .map(|v| (g.to_string(), r.to_string(), v.to_string()))
        })
        .collect();
    assert_eq!(
        granted, table,
        "what the cluster grants the plugin (left) differs from API_ACCESS_STRUCTURED (right)"
    );
    let minor = b.release().version.1;
    let served = |g: &str, r: &str| {
        SERVED_SINCE
            .iter()
            .all(|(sg, sr, since)| (*sg, *sr) != (g, r) || minor >= *since)
    };
    for (g, r, v) in granted.iter().filter(|(g, r, _)| served(g, r)) {
        p.record(
            format!("may {v}"),
            if g.is_empty() {
                r.clone()
            } else {
                format!("{r}.{g}")
            },
        );
    }
}

/// A slice of `node` in the version the cluster serves (`v1beta1` on 1.32/1.33).
fn slice_yaml(cluster: &RealCluster, name: &str, node: &str) -> String {
    let (version, device) = if cluster.release().serves_v1() {
        ("v1", "{name: fake-0}")
    } else {
        ("v1beta1", "{name: fake-0, basic: {}}")
    };
    format!(
        r#"apiVersion: resource.k8s.io/{version}
kind: ResourceSlice
metadata: {{name: {name}}}
spec:
  driver: fake.resource.3-shake.com
  nodeName: {node}
  pool: {{name: {node}, generation: 1, resourceSliceCount: 1}}
  devices:
    - {device}
"#
    )
}

/// A kubeconfig of the cluster's admin impersonating `user` with the extra
/// `key: [value]`: the kubeconfig's `as-user-extra` works with the kubectl of every
/// release (the `--as-user-extra` flag only from 1.35).
fn impersonating(
    cluster: &RealCluster,
    user: &str,
    extra: (&str, &str),
) -> tempfile::NamedTempFile {
    let admin = std::fs::read_to_string(cluster.layout().kubeconfig())
        .unwrap_or_else(|e| panic!("admin kubeconfig: {e}"));
    let mut config: serde_json::Value =
        serde_yaml_ng::from_str(&admin).unwrap_or_else(|e| panic!("admin kubeconfig: {e}"));
    for u in config["users"].as_array_mut().into_iter().flatten() {
        u["user"]["as"] = serde_json::json!(user);
        u["user"]["as-user-extra"] = serde_json::json!({extra.0: [extra.1]});
    }
    let file = tempfile::NamedTempFile::new().unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(
        file.path(),
        serde_yaml_ng::to_string(&config).unwrap_or_else(|e| panic!("{e}")),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    file
}

/// The admission policy of deploy/structured: with the plugin pod's own token, a slice
/// of another node is denied and one of its own node allowed; impersonating the plugin on
/// another node, the published slice can be neither changed nor deleted (and is still
/// there, unchanged); without a node at all, nothing.
pub async fn slices_of_another_node_are_denied<B: Backend>(b: &mut B, p: &mut Protocol) {
    let Some(cluster) = b.real() else { return };
    p.scenario("slices-of-another-node-are-denied");
    let node = cluster.node().to_string();
    // RBAC alone would allow all of it: the denials below are the policy's.
    let rbac = cluster.kubectl(&[
        "auth",
        "can-i",
        "create",
        "resourceslices.resource.k8s.io",
        "--as",
        PLUGIN_SA,
    ]);
    p.record(
        "RBAC lets the plugin create any slice",
        rbac.as_deref().map(str::trim) == Ok("yes"),
    );

    let pod = cluster
        .kubectl(&[
            "-n",
            DRIVER_NAMESPACE,
            "get",
            "pods",
            "-l",
            super::cluster::PLUGIN_LABEL,
            "-o",
            "jsonpath={.items[0].metadata.name}",
        ])
        .unwrap_or_else(|e| panic!("plugin pod: {e}"));
    let token = cluster
        .kubectl(&[
            "-n",
            DRIVER_NAMESPACE,
            "create",
            "token",
            "fake-dra-kubelet-plugin",
            "--bound-object-kind",
            "Pod",
            "--bound-object-name",
            pod.trim(),
            "--duration",
            "10m",
        ])
        .unwrap_or_else(|e| panic!("kubectl create token: {e}"));
    let token_flag = format!("--token={}", token.trim());
    let who = cluster
        .kubectl_as(&[&token_flag], &["auth", "whoami", "-o", "json"], "")
        .unwrap_or_else(|e| panic!("whoami with the plugin's token: {e}"));
    let who: serde_json::Value =
        serde_json::from_str(&who).unwrap_or_else(|e| panic!("{e}: {who}"));
    let token_node = who["status"]["userInfo"]["extra"][NODE_NAME_EXTRA][0]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert_eq!(token_node, node, "{who}");
    p.record("the plugin pod's token names its node", token_node == node);

    let denied = cluster
        .kubectl_as(
            &[&token_flag],
            &["create", "-f", "-"],
            &slice_yaml(cluster, "fake-e2e-other", "other-node"),
        )
        .expect_err("a slice of another node must be denied");
    assert!(
        denied.contains(
            "may only write ResourceSlices of that node, not slices of node 'other-node'"
        ),
        "{denied}"
    );
    p.record("token: create a slice of another node", &denied);
    let own = cluster.kubectl_as(
        &[&token_flag],
        &["create", "--dry-run=server", "-f", "-"],
        &slice_yaml(cluster, "fake-e2e-own", &node),
    );
    p.record(
        "token: create a slice of its own node (server dry run)",
        match &own {
            Ok(_) => "allowed".to_string(),
            Err(e) => format!("denied: {e}"),
        },
    );
    assert!(own.is_ok(), "{own:?}");

    let published = cluster
        .kubectl(&["get", "resourceslices", "--field-selector", &format!("spec.nodeName={node}"), "-o", "jsonpath={.items[0].metadata.name} {.items[0].metadata.uid} {.items[0].metadata.generation}"])
        .unwrap_or_else(|e| panic!("the published slice: {e}"));
    let name = published
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string();
    let kubeconfig = impersonating(cluster, PLUGIN_SA, (NODE_NAME_EXTRA, "other-node"));
    let kubeconfig_flag = format!("--kubeconfig={}", kubeconfig.path().display());
    let elsewhere = [kubeconfig_flag.as_str()];
    let attempt = |args: &[&str]| {
        let mut all: Vec<&str> = args.to_vec();
        all.extend_from_slice(&elsewhere);
        cluster.kubectl(&all)
    };
    let deleted = attempt(&["delete", "resourceslice", &name]);
    // An update (PUT) of the slice as read, with a label added: `kubectl label` would
    // need get and patch, which the plugin is not granted.
    let mut changed: serde_json::Value = serde_json::from_str(
        &cluster
            .kubectl(&["get", "resourceslice", &name, "-o", "json"])
            .unwrap_or_else(|e| panic!("get the published slice: {e}")),
    )
    .unwrap_or_else(|e| panic!("the published slice: {e}"));
    changed["metadata"]["labels"] = serde_json::json!({"fake-e2e": "1"});
    let mut replace = vec!["replace", "-f", "-"];
    replace.extend_from_slice(&elsewhere);
    let updated = cluster.kubectl_stdin(&replace, &changed.to_string());
    for (what, result) in [("delete", &deleted), ("update", &updated)] {
        let e = result
            .as_ref()
            .expect_err("writes from another node must be denied");
        assert!(e.contains(&format!("not slices of node '{node}'")), "{e}");
        p.record(
            format!("impersonated on another node: {what} the published slice"),
            e.replace(&name, "<the node's slice>"),
        );
    }
    let now = cluster
        .kubectl(&[
            "get",
            "resourceslice",
            &name,
            "-o",
            "jsonpath={.metadata.name} {.metadata.uid} {.metadata.generation}",
        ])
        .unwrap_or_else(|e| panic!("the published slice after the attempts: {e}"));
    assert_eq!(now, published, "the published slice is untouched");
    p.record("published slice untouched", now == published);

    let nowhere = cluster
        .kubectl_stdin(
            &["create", "-f", "-", "--as", PLUGIN_SA],
            &slice_yaml(cluster, "fake-e2e-nowhere", &node),
        )
        .expect_err("without a node, nothing");
    p.record("impersonated without a node: create", &nowhere);
}
