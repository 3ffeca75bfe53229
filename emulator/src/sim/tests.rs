use super::*;
use serde_json::json;

#[test]
fn env_maps_downward_api_host_paths_and_ports() {
    let container = json!({
        "env": [
            {"name": "FAKE_DRA_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "FAKE_DRA_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "FAKE_DRA_CDI_ROOT", "value": "/var/run/cdi"},
            {"name": "FAKE_DRA_PLUGIN_DIR", "value": "/var/lib/kubelet/plugins/drv"},
            {"name": "FAKE_DRA_HTTP_ADDRESS", "value": "0.0.0.0:8080"},
            {"name": "FAKE_DRA_DRIVER_NAME", "value": "drv"}
        ],
        "volumeMounts": [
            {"name": "cdi", "mountPath": "/var/run/cdi"},
            {"name": "plugin", "mountPath": "/var/lib/kubelet/plugins/drv"}
        ]
    });
    let dirs = NodeDirs {
        registry_dir: "/n/reg".into(),
        plugin_dir: "/n/plugin".into(),
        cdi_root: "/n/cdi".into(),
        pod_logs: "/n/pods".into(),
    };
    let pod = PodIdentity {
        name: "p".into(),
        namespace: "fake-dra".into(),
        node: "node-a".into(),
    };
    let env: BTreeMap<_, _> = container_env(&container, &pod, &|p| node_dir_for(&dirs, p))
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(env["FAKE_DRA_NODE_NAME"], "node-a");
    assert_eq!(env["FAKE_DRA_NAMESPACE"], "fake-dra");
    assert_eq!(env["FAKE_DRA_CDI_ROOT"], "/n/cdi");
    assert_eq!(env["FAKE_DRA_PLUGIN_DIR"], "/n/plugin");
    assert_eq!(env["FAKE_DRA_HTTP_ADDRESS"], "127.0.0.1:0");
    assert_eq!(env["FAKE_DRA_DRIVER_NAME"], "drv");
    let unknown = json!({"env": [{"name": "X", "value": "/srv/x"}], "volumeMounts": [{"name": "s", "mountPath": "/srv"}]});
    let err = container_env(&unknown, &pod, &|p| node_dir_for(&dirs, p))
        .unwrap_err()
        .to_string();
    assert!(err.contains("/srv"), "{err}");
}
