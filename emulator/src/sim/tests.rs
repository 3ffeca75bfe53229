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

fn manifest(origin: &str, object: Value) -> Manifest {
    Manifest {
        origin: origin.into(),
        object,
    }
}

/// D12: a 60 MB object passed the check before start, then the apply failed after start
/// with a Debug dump of a 413. The check holds each object to what the API server takes:
/// the request body (3 MiB) and the object etcd stores (1.5 MiB).
#[test]
fn objects_over_the_size_limits_are_refused_before_start() {
    let deployed = crate::manifests::rendered(Path::new(DEPLOY_DIR), "structured").unwrap();
    let fault = |bytes: usize| {
        json!({"apiVersion": "fake.resource.3-shake.com/v1alpha1", "kind": "DeviceFault",
            "metadata": {"name": "big"}, "spec": {"deviceStatus": {"data": {"x": "y".repeat(bytes)}}}})
    };
    for (bytes, want) in [
        (
            60 << 20,
            "Request entity too large: limit is 3145728 (the object is 62914",
        ),
        (
            2 << 20,
            "Request entity too large: DeviceFault \"big\" would be 2097",
        ),
    ] {
        let big = manifest("big.yaml#0", fault(bytes));
        let err = check_manifests((1, 34), &FeatureGates::default(), &deployed, &[big])
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("big.yaml#0: DeviceFault big: "),
            "{}",
            &err[..err.len().min(400)]
        );
        assert!(err.contains(want), "{}", &err[..err.len().min(400)]);
        assert!(err.len() < 600, "{}", &err[..600]);
    }
}

/// What reaches a user of an API error after start: the status' words, no Debug dump
/// (kube's `Display` appends one: `ApiError: … (Status { … })`).
#[test]
fn api_errors_read_without_a_debug_dump() {
    let status = kube::core::Status::failure(
        "Request entity too large: limit is 3145728",
        "RequestEntityTooLarge",
    )
    .with_code(413);
    let e = kube::Error::Api(Box::new(status));
    assert!(e.to_string().contains("Status {"), "{e}");
    assert_eq!(
        crate::cluster::plain(&e),
        "Request entity too large: limit is 3145728 (413 RequestEntityTooLarge)"
    );
}

/// D19 through `run -f`: built-in kinds are type-checked before start as the API server
/// checks them.
#[test]
fn wrongly_typed_built_in_objects_are_refused_before_start() {
    let deployed = crate::manifests::rendered(Path::new(DEPLOY_DIR), "structured").unwrap();
    for (object, want) in [
        (
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": 5}}),
            "x.yaml#0: ConfigMap c: ConfigMap in version \"v1\" cannot be handled as a ConfigMap: data.a: invalid type: integer `5`, expected a string",
        ),
        (
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
                "spec": {"replicas": "many", "selector": {"matchLabels": {"a": "b"}},
                    "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}}),
            "spec.replicas: invalid type: string \"many\", expected i32",
        ),
    ] {
        let err = check_manifests(
            (1, 34),
            &FeatureGates::default(),
            &deployed,
            &[manifest("x.yaml#0", object)],
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains(want), "{err}");
    }
}
