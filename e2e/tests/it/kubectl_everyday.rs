//! A newcomer's first kubectl commands on the sim, as on a kind cluster: `cluster-info`,
//! `get all`, Services, the `default` ServiceAccount and `kube-root-ca.crt` of every
//! namespace, `explain`, `auth can-i` / `whoami` (kubectl sends those reviews as
//! protobuf), and a Job
//! whose pods hold claims, run to completion by the emulated job controller.

use crate::common::*;
use crate::kubectl::{Kubectl, header, kubectl_or_skip};

const JOBS: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: jobs}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {namespace: jobs, name: two-fakes}
spec:
  spec:
    devices:
      requests:
      - name: fakes
        exactly: {deviceClassName: fake.3-shake.com, count: 2}
---
apiVersion: batch/v1
kind: Job
metadata: {namespace: jobs, name: gpu-job}
spec:
  completions: 3
  parallelism: 2
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: work
        image: busybox
        command: ["sh", "-c", "env | grep FAKE_DEVICE_ | sort"]
        resources: {claims: [{name: fakes}]}
      resourceClaims:
      - {name: fakes, resourceClaimTemplateName: two-fakes}
---
apiVersion: batch/v1
kind: Job
metadata: {namespace: jobs, name: fails-at-once}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers:
      - {name: work, image: busybox, command: ["sh", "-c", "exit 3"]}
---
apiVersion: v1
kind: Service
metadata: {namespace: jobs, name: web}
spec:
  type: NodePort
  selector: {app: web}
  ports:
  - {name: http, port: 80, targetPort: 8080}
"#;

/// Two pods behind a Service whose `targetPort` names the containers' port.
const WEB: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: web}
---
apiVersion: apps/v1
kind: Deployment
metadata: {namespace: web, name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: busybox
        command: ["sh", "-c", "trap 'exit 0' TERM; sleep infinity & wait"]
        ports: [{name: http, containerPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {namespace: web, name: web}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: http}]
"#;

const RESTARTS_FOREVER: &str = r#"
apiVersion: batch/v1
kind: Job
metadata: {namespace: jobs, name: always}
spec:
  template:
    spec:
      containers:
      - {name: work, image: busybox}
"#;

const TAKEN_ADDRESS: &str = r#"
apiVersion: v1
kind: Service
metadata: {namespace: jobs, name: squatter}
spec:
  clusterIP: 10.96.0.1
  ports:
  - {port: 80}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_newcomers_first_kubectl_commands() {
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

    let (info, _) = kubectl.ok(&["cluster-info"]);
    assert!(
        info.contains("Kubernetes control plane is running at http://127.0.0.1:"),
        "{info}"
    );
    let (services, _) = kubectl.ok(&["get", "services", "-n", "default"]);
    assert_eq!(
        header(&services),
        [
            "NAME",
            "TYPE",
            "CLUSTER-IP",
            "EXTERNAL-IP",
            "PORT(S)",
            "AGE"
        ]
    );
    let kubernetes: Vec<&str> = services
        .lines()
        .nth(1)
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(
        kubernetes[..5],
        ["kubernetes", "ClusterIP", "10.96.0.1", "<none>", "443/TCP"]
    );

    // What the controller-manager puts in every namespace, the driver's included.
    let accounts = eventually("default ServiceAccounts in every namespace", || async {
        let (accounts, _) = kubectl.ok(&["get", "serviceaccounts", "-A"]);
        let defaults = accounts
            .lines()
            .filter(|l| l.split_whitespace().nth(1) == Some("default"))
            .count();
        (defaults >= 5).then_some(accounts)
    })
    .await;
    assert!(accounts.contains("fake-dra-kubelet-plugin"), "{accounts}");
    kubectl.ok(&["get", "configmap", "kube-root-ca.crt", "-n", "fake-dra"]);

    let (all, _) = kubectl.ok(&["get", "all", "-A"]);
    for kind in [
        "pod/",
        "service/kubernetes",
        "daemonset.apps/fake-dra-kubelet-plugin",
    ] {
        assert!(all.contains(kind), "{kind} not in `get all`:\n{all}");
    }

    // explain: the schemas with upstream's descriptions, a CRD's its own.
    let (requests, _) = kubectl.ok(&["explain", "resourceclaim.spec.devices.requests"]);
    assert!(
        requests.contains("FIELD: requests <[]DeviceRequest>"),
        "{requests}"
    );
    assert!(
        requests.contains("exactly\t<ExactDeviceRequest>"),
        "{requests}"
    );
    let (params, _) = kubectl.ok(&["explain", "fakeclaimparameters.spec"]);
    assert!(
        params.contains("KIND:       FakeClaimParameters"),
        "{params}"
    );

    // can-i: the caller is the admin; impersonated, the driver's stored RBAC answers.
    let plugin = "--as=system:serviceaccount:fake-dra:fake-dra-kubelet-plugin";
    assert_eq!(
        kubectl.ok(&["auth", "can-i", "create", "pods"]).0.trim(),
        "yes"
    );
    let (slices, _) = kubectl.ok(&[
        "auth",
        "can-i",
        "delete",
        "resourceslices.resource.k8s.io",
        plugin,
    ]);
    assert_eq!(slices.trim(), "yes");
    let refused = kubectl.run(&["auth", "can-i", "create", "pods", "-n", "default", plugin]);
    assert_eq!(
        String::from_utf8_lossy(&refused.stdout).trim(),
        "no",
        "{refused:?}"
    );
    assert_eq!(refused.status.code(), Some(1));
    let (who, _) = kubectl.ok(&["auth", "whoami"]);
    assert!(who.contains("kubernetes-admin"), "{who}");

    // Jobs: pods from the template, each with its claim, until three succeeded; a pod that
    // fails with backoffLimit 0 fails the Job.
    kubectl.ok(&["apply", "-f", &kubectl.file("jobs.yaml", JOBS)]);
    for (job, condition) in [("gpu-job", "complete"), ("fails-at-once", "failed")] {
        kubectl.ok(&[
            "wait",
            "-n",
            "jobs",
            &format!("--for=condition={condition}"),
            &format!("job/{job}"),
            "--timeout=120s",
        ]);
    }
    let (jobs, _) = kubectl.ok(&["get", "jobs", "-n", "jobs"]);
    assert_eq!(
        header(&jobs),
        ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]
    );
    let row = |name: &str| -> Vec<String> {
        jobs.lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    assert_eq!(row("gpu-job")[1..3], ["Complete", "3/3"], "{jobs}");
    assert_eq!(row("fails-at-once")[1..3], ["Failed", "0/1"], "{jobs}");
    let (pods, _) = kubectl.ok(&["get", "pods", "-n", "jobs", "-l", "job-name=gpu-job"]);
    assert_eq!(pods.matches("Completed").count(), 3, "{pods}");
    let (logs, _) = kubectl.ok(&["logs", "-n", "jobs", "-l", "job-name=gpu-job"]);
    assert_eq!(logs.matches("FAKE_DEVICE_1=").count(), 3, "{logs}");
    let (events, _) = kubectl.ok(&["describe", "job", "-n", "jobs", "gpu-job"]);
    assert!(events.contains("Job completed"), "{events}");

    // A Job whose pods would restart forever is refused, naming the field and the values.
    let always = kubectl.run(&[
        "apply",
        "-f",
        &kubectl.file("always.yaml", RESTARTS_FOREVER),
    ]);
    let said = String::from_utf8_lossy(&always.stderr);
    assert!(
        said.contains(r#"spec.template.spec.restartPolicy: Required value: valid values: "OnFailure", "Never""#),
        "{said}"
    );

    // Services: a NodePort from 30000–32767; an address already taken is refused.
    let (web, _) = kubectl.ok(&["get", "service", "-n", "jobs", "web", "-o", "wide"]);
    let cells: Vec<&str> = web.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(cells[1], "NodePort", "{web}");
    assert!(cells[2].starts_with("10.96."), "{web}");
    let node_port: u16 = cells[4]
        .strip_prefix("80:")
        .and_then(|p| p.strip_suffix("/TCP"))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no node port in {web}"));
    assert!((30000..=32767).contains(&node_port), "{web}");
    assert_eq!(cells[6], "app=web", "{web}");
    // Pods get addresses from their node's pod CIDR; the Service's EndpointSlice lists
    // them with the named port resolved.
    kubectl.ok(&["apply", "-f", &kubectl.file("web.yaml", WEB)]);
    let slices = eventually(
        "the web Service's EndpointSlice lists both pods",
        || async {
            let (slices, _) = kubectl.ok(&["get", "endpointslices", "-n", "web"]);
            (slices.matches("10.244.").count() == 2).then_some(slices)
        },
    )
    .await;
    assert_eq!(
        header(&slices),
        ["NAME", "ADDRESSTYPE", "PORTS", "ENDPOINTS", "AGE"]
    );
    let cells: Vec<&str> = slices.lines().nth(1).unwrap().split_whitespace().collect();
    assert!(cells[0].starts_with("web-"), "{slices}");
    assert_eq!(cells[1..3], ["IPv4", "8080"], "{slices}");
    let (ips, _) = kubectl.ok(&[
        "get",
        "pods",
        "-n",
        "web",
        "-o",
        "jsonpath={.items[*].status.podIP}",
    ]);
    for ip in ips.split_whitespace() {
        assert!(cells[3].contains(ip), "{ip} not in {slices}");
    }

    // What the sim cannot do, it says, naming the command and what to do instead.
    let exec = kubectl.run(&["exec", "-n", "web", "deploy/web", "--", "ls"]);
    let said = String::from_utf8_lossy(&exec.stderr);
    assert!(
        said.contains("(kubectl exec)") && said.contains("kubectl logs"),
        "{said}"
    );

    let taken = kubectl.run(&["apply", "-f", &kubectl.file("taken.yaml", TAKEN_ADDRESS)]);
    let said = String::from_utf8_lossy(&taken.stderr);
    assert!(
        said.contains("failed to allocate IP 10.96.0.1: provided IP is already allocated"),
        "{said}"
    );
    sim.shutdown().await;
}
