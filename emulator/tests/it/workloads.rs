//! The emulated Deployment, ReplicaSet and Job controllers, against the emulated apiserver
//! (no scheduler or kubelet: Pods stay unscheduled, so deleting one removes it at once).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use fake_dra_emulator::apiserver::ApiServer;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, ObjectMeta, Patch, PatchParams,
    PostParams,
};
use serde_json::{Value, json};

const NS: &str = "workloads";

struct Harness {
    server: ApiServer,
    client: kube::Client,
    controllers: tokio::task::JoinHandle<()>,
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.controllers.abort();
    }
}

async fn start() -> Harness {
    // `RUST_LOG=fake_dra_emulator=debug` shows the controllers' failed passes.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let server = ApiServer::start()
        .await
        .expect("start the emulated apiserver");
    let client = server.client().expect("client");
    let controllers = tokio::spawn(fake_dra_emulator::cluster::workloads::run(
        server.client().expect("client"),
        server.store().subscribe(),
        server.server_version(),
    ));
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(NS.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    Harness {
        server,
        client,
        controllers,
    }
}

fn api<K: kube::Resource<DynamicType = ()>>(client: &kube::Client) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), NS, &ApiResource::erase::<K>(&()))
}

/// A Deployment whose Pods use a classic (1.27–1.30) claim from a template.
fn deployment(replicas: i32) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "gpu-app", "namespace": NS, "labels": {"app": "gpu-app"}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "gpu-app"}},
            "template": {
                "metadata": {"labels": {"app": "gpu-app"}, "annotations": {"note": "copied"}},
                "spec": {
                    "resourceClaims": [{"name": "gpu", "source": {"resourceClaimTemplateName": "gpu-template"}}],
                    "containers": [{
                        "name": "ctr",
                        "image": "busybox",
                        "command": ["sleep", "infinity"],
                        "resources": {"claims": [{"name": "gpu"}]}
                    }]
                }
            }
        }
    }))
    .unwrap()
}

/// Polls until `check` returns something. The deadline only turns a hang into a failure;
/// nothing here asserts on speed.
async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    for _ in 0..600 {
        if let Some(value) = check().await {
            return value;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("gave up waiting for: {what}");
}

async fn live_pods(client: &kube::Client) -> Vec<DynamicObject> {
    api::<Pod>(client)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

async fn wait_for_pods(client: &kube::Client, count: usize) -> Vec<DynamicObject> {
    eventually(&format!("{count} pods"), || async {
        let pods = live_pods(client).await;
        (pods.len() == count).then_some(pods)
    })
    .await
}

async fn replica_sets(client: &kube::Client) -> Vec<DynamicObject> {
    api::<ReplicaSet>(client)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
}

async fn scale(client: &kube::Client, replicas: i32) {
    api::<Deployment>(client)
        .patch(
            "gpu-app",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .unwrap();
}

fn controller(
    meta: &ObjectMeta,
) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
    let refs = meta.owner_references.as_deref().unwrap_or_default();
    assert_eq!(
        refs.len(),
        1,
        "owner references of {:?}: {refs:?}",
        meta.name
    );
    let owner = &refs[0];
    assert_eq!(owner.controller, Some(true));
    assert_eq!(owner.block_owner_deletion, Some(true));
    owner
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployment_runs_scales_replaces_and_is_collected() {
    let h = start().await;
    let created = api::<Deployment>(&h.client)
        .create(&PostParams::default(), &deployment(2))
        .await
        .unwrap();

    let pods = wait_for_pods(&h.client, 2).await;
    let sets = replica_sets(&h.client).await;
    assert_eq!(sets.len(), 1);
    let rs = &sets[0];
    let rs_owner = controller(&rs.metadata);
    assert_eq!(
        (rs_owner.api_version.as_str(), rs_owner.kind.as_str()),
        ("apps/v1", "Deployment")
    );
    assert_eq!(Some(&rs_owner.uid), created.metadata.uid.as_ref());
    let hash = rs.metadata.labels.as_ref().unwrap()["pod-template-hash"].clone();
    assert_eq!(
        rs.metadata.name.as_deref(),
        Some(format!("gpu-app-{hash}").as_str())
    );
    assert_eq!(
        rs.data
            .pointer("/spec/selector/matchLabels/pod-template-hash"),
        Some(&json!(hash))
    );
    for pod in &pods {
        let owner = controller(&pod.metadata);
        assert_eq!(
            (owner.api_version.as_str(), owner.kind.as_str()),
            ("apps/v1", "ReplicaSet")
        );
        assert_eq!(Some(&owner.uid), rs.metadata.uid.as_ref());
        let name = pod.metadata.name.as_deref().unwrap();
        assert!(name.starts_with(&format!("gpu-app-{hash}-")), "{name}");
        let labels = pod.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["app"], "gpu-app");
        assert_eq!(labels["pod-template-hash"], hash);
        assert_eq!(pod.metadata.annotations.as_ref().unwrap()["note"], "copied");
        assert_eq!(
            pod.data
                .pointer("/spec/resourceClaims/0/source/resourceClaimTemplateName"),
            Some(&json!("gpu-template")),
            "the classic claim source survives: {pod:?}"
        );
        assert_eq!(
            pod.data
                .pointer("/spec/containers/0/resources/claims/0/name"),
            Some(&json!("gpu"))
        );
    }

    // Readiness reaches the ReplicaSet and the Deployment status.
    for pod in &pods {
        let ready = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
        api::<Pod>(&h.client)
            .patch_status(
                pod.metadata.name.as_deref().unwrap(),
                &PatchParams::default(),
                &Patch::Merge(ready),
            )
            .await
            .unwrap();
    }
    let status = eventually("the deployment reports 2 available replicas", || async {
        let d = api::<Deployment>(&h.client).get("gpu-app").await.unwrap();
        let status = d.data.get("status").cloned().unwrap_or(Value::Null);
        (status.get("availableReplicas") == Some(&json!(2))
            && status.get("observedGeneration") == Some(&json!(d.metadata.generation)))
        .then_some(status)
    })
    .await;
    assert_eq!(status["replicas"], 2);
    assert_eq!(status["updatedReplicas"], 2);
    assert_eq!(status["readyReplicas"], 2);
    let available = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Available")
        .unwrap();
    assert_eq!(available["status"], "True");

    scale(&h.client, 3).await;
    wait_for_pods(&h.client, 3).await;
    scale(&h.client, 1).await;
    let pods = wait_for_pods(&h.client, 1).await;
    assert_eq!(
        replica_sets(&h.client).await.len(),
        1,
        "scaling keeps the ReplicaSet"
    );

    let victim = pods[0].metadata.name.clone().unwrap();
    api::<Pod>(&h.client)
        .delete(&victim, &DeleteParams::default())
        .await
        .unwrap();
    eventually("a replacement pod", || async {
        let pods = live_pods(&h.client).await;
        (pods.len() == 1 && pods[0].metadata.name.as_deref() != Some(victim.as_str())).then_some(())
    })
    .await;

    api::<Deployment>(&h.client)
        .delete("gpu-app", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the replica set and pods collected", || async {
        h.server.collect_garbage();
        let pods = api::<Pod>(&h.client)
            .list(&ListParams::default())
            .await
            .unwrap();
        (replica_sets(&h.client).await.is_empty() && pods.items.is_empty()).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn template_change_recreates_pods_under_a_new_replica_set() {
    let h = start().await;
    api::<Deployment>(&h.client)
        .create(&PostParams::default(), &deployment(2))
        .await
        .unwrap();
    let first = wait_for_pods(&h.client, 2).await;
    let old_hash = first[0].metadata.labels.as_ref().unwrap()["pod-template-hash"].clone();

    let change = json!({"spec": {"template": {"metadata": {"annotations": {"note": "changed"}}}}});
    api::<Deployment>(&h.client)
        .patch("gpu-app", &PatchParams::default(), &Patch::Merge(change))
        .await
        .unwrap();
    let pods = eventually("2 pods of the new template", || async {
        let pods = live_pods(&h.client).await;
        let renewed = pods.len() == 2
            && pods.iter().all(|p| {
                p.metadata.annotations.as_ref().unwrap()["note"] == "changed"
                    && p.metadata.labels.as_ref().unwrap()["pod-template-hash"] != old_hash
            });
        renewed.then_some(pods)
    })
    .await;
    let sets = replica_sets(&h.client).await;
    assert_eq!(sets.len(), 2, "the old ReplicaSet is kept, scaled to zero");
    let old = sets
        .iter()
        .find(|rs| rs.metadata.labels.as_ref().unwrap()["pod-template-hash"] == old_hash)
        .unwrap();
    assert_eq!(old.data.pointer("/spec/replicas"), Some(&json!(0)));
    let new = sets
        .iter()
        .find(|rs| rs.metadata.uid != old.metadata.uid)
        .unwrap();
    assert_eq!(
        new.metadata.annotations.as_ref().unwrap()["deployment.kubernetes.io/revision"],
        "2"
    );
    for pod in &pods {
        assert_eq!(
            Some(&controller(&pod.metadata).uid),
            new.metadata.uid.as_ref()
        );
    }
}

/// A Job of `completions` pods, one at a time, that may fail `backoff_limit` times.
fn job(name: &str, completions: i32, backoff_limit: i32, extra: Value) -> DynamicObject {
    let mut spec = json!({
        "completions": completions,
        "backoffLimit": backoff_limit,
        "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "work", "image": "busybox", "command": ["true"]}],
        }},
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    }))
    .unwrap()
}

/// Ends a pod as a kubelet would report it, its container finished an hour ago (so the
/// back-off after a failure has passed).
async fn finish(client: &kube::Client, pod: &DynamicObject, phase: &str) {
    let finished = (jiff::Timestamp::now() - jiff::SignedDuration::from_hours(1)).to_string();
    let exit = if phase == "Failed" { 1 } else { 0 };
    let status = json!({"status": {"phase": phase, "containerStatuses": [{
        "name": "work", "ready": false, "restartCount": 0, "image": "busybox", "imageID": "",
        "state": {"terminated": {"exitCode": exit, "finishedAt": finished}},
    }]}});
    api::<Pod>(client)
        .patch_status(
            pod.metadata.name.as_deref().unwrap(),
            &PatchParams::default(),
            &Patch::Merge(status),
        )
        .await
        .unwrap();
}

async fn job_status(client: &kube::Client, name: &str) -> Value {
    let job = api::<k8s_openapi::api::batch::v1::Job>(client)
        .get(name)
        .await
        .unwrap();
    job.data.get("status").cloned().unwrap_or(Value::Null)
}

fn condition_reasons(status: &Value) -> Vec<(String, String)> {
    status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            (
                c["type"].as_str().unwrap_or_default().to_string(),
                c["reason"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// Unfinished pods of the Job, by name.
async fn running_pods_of(client: &kube::Client, job: &str) -> Vec<DynamicObject> {
    live_pods(client)
        .await
        .into_iter()
        .filter(|p| {
            p.metadata.labels.as_ref().and_then(|l| l.get("job-name")) == Some(&job.to_string())
                && !matches!(
                    p.data.pointer("/status/phase").and_then(Value::as_str),
                    Some("Succeeded" | "Failed")
                )
        })
        .collect()
}

async fn one_running_pod(client: &kube::Client, job: &str) -> DynamicObject {
    eventually(&format!("one running pod of {job}"), || async {
        let mut pods = running_pods_of(client, job).await;
        (pods.len() == 1).then(|| pods.remove(0))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_replaces_failed_pods_until_its_backoff_limit() {
    let h = start().await;
    api::<k8s_openapi::api::batch::v1::Job>(&h.client)
        .create(&PostParams::default(), &job("flaky", 2, 1, json!({})))
        .await
        .unwrap();
    let first = one_running_pod(&h.client, "flaky").await;
    let job_uid = controller(&first.metadata).uid.clone();
    finish(&h.client, &first, "Failed").await;
    // One failure is within the limit: a new pod replaces it.
    let second = one_running_pod(&h.client, "flaky").await;
    assert_ne!(second.metadata.uid, first.metadata.uid);
    assert_eq!(controller(&second.metadata).uid, job_uid);
    finish(&h.client, &second, "Succeeded").await;
    // One of two completions: the next pod.
    let third = eventually("a third pod", || async {
        let pods = running_pods_of(&h.client, "flaky").await;
        pods.into_iter()
            .find(|p| p.metadata.uid != second.metadata.uid)
    })
    .await;
    finish(&h.client, &third, "Failed").await;
    let status = eventually("the Job failed", || async {
        let status = job_status(&h.client, "flaky").await;
        (status["failed"] == 2).then_some(status)
    })
    .await;
    assert_eq!(status["succeeded"], 1, "{status}");
    assert!(
        condition_reasons(&status).contains(&("Failed".into(), "BackoffLimitExceeded".into())),
        "{status}"
    );
    assert!(running_pods_of(&h.client, "flaky").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspended_job_waits_and_a_finished_one_expires() {
    let h = start().await;
    let jobs = api::<k8s_openapi::api::batch::v1::Job>(&h.client);
    jobs.create(
        &PostParams::default(),
        &job(
            "later",
            1,
            0,
            json!({"suspend": true, "ttlSecondsAfterFinished": 0}),
        ),
    )
    .await
    .unwrap();
    let status = eventually("the Job suspended", || async {
        let status = job_status(&h.client, "later").await;
        condition_reasons(&status)
            .contains(&("Suspended".into(), "JobSuspended".into()))
            .then_some(status)
    })
    .await;
    assert!(status.get("startTime").is_none(), "{status}");
    assert!(running_pods_of(&h.client, "later").await.is_empty());
    jobs.patch(
        "later",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"suspend": false}})),
    )
    .await
    .unwrap();
    let pod = one_running_pod(&h.client, "later").await;
    finish(&h.client, &pod, "Succeeded").await;
    // Complete, then deleted at once by its TTL of 0 s.
    eventually("the finished Job deleted by its TTL", || async {
        matches!(jobs.get_opt("later").await, Ok(None)).then_some(())
    })
    .await;
}
