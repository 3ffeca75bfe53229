//! The oracles: a cluster that is given a world's objects and schedules its pods, one pod
//! at a time, and what it did with each, read back from the API (the pod's `nodeName` or
//! its `PodScheduled=False` condition, the claims' `status.allocation`).
//!
//! [`run_world`] speaks only the Kubernetes API, so any cluster serves: the emulator
//! ([`Emulator`], its own scheduler and nothing else: no kubelets, the nodes are API
//! objects), or a real kube-scheduler's cluster given its client.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::check::PodOutcome;
use crate::world::{DRIVER, NAMESPACE, World};

/// How long one pod may take to be bound or reported unschedulable: a guard against a
/// hang, not a pace.
const SETTLE: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum OracleError {
    /// The API server refused an object: the world is invalid, not a disagreement.
    #[error("the API server refused {what}: {message}")]
    Refused { what: String, message: String },
    #[error("{what}: {error}")]
    Api { what: String, error: kube::Error },
    #[error("pod {0} neither bound nor unschedulable after {SETTLE:?}")]
    Unsettled(String),
    #[error("starting the emulator: {0}")]
    Start(String),
}

fn resource_of(object: &Value) -> ApiResource {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let plural = match kind {
        "DeviceClass" => "deviceclasses".to_string(),
        other => format!("{}s", other.to_lowercase()),
    };
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: api_version.into(),
        kind: kind.into(),
        plural,
    }
}

fn describe(object: &Value) -> String {
    format!(
        "{} {}",
        object["kind"].as_str().unwrap_or_default(),
        object["metadata"]["name"].as_str().unwrap_or_default()
    )
}

async fn create(client: &kube::Client, object: &Value) -> Result<(), OracleError> {
    let resource = resource_of(object);
    let api: Api<DynamicObject> = match object["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    let typed: DynamicObject =
        serde_json::from_value(object.clone()).map_err(|e| OracleError::Refused {
            what: describe(object),
            message: e.to_string(),
        })?;
    let what = describe(object);
    match api.create(&PostParams::default(), &typed).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 422 || status.code == 400 => {
            return Err(OracleError::Refused {
                what,
                message: status.message,
            });
        }
        Err(error) => return Err(OracleError::Api { what, error }),
    }
    if object["kind"] == "Node" {
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let status = json!({"status": object["status"]});
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .map_err(|error| OracleError::Api {
                what: format!("{what} status"),
                error,
            })?;
    }
    Ok(())
}

/// What became of the pod, once it is bound or the scheduler gave up on it.
async fn settle(
    client: &kube::Client,
    world_pod: &crate::world::PodSpec,
) -> Result<PodOutcome, OracleError> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), NAMESPACE);
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let pod = pods
            .get(&world_pod.name)
            .await
            .map_err(|error| OracleError::Api {
                what: format!("pod {}", world_pod.name),
                error,
            })?;
        if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
            let mut allocated = Vec::new();
            for name in World::claim_names(world_pod) {
                let claim = claims.get(&name).await.map_err(|error| OracleError::Api {
                    what: format!("claim {name}"),
                    error,
                })?;
                let results = claim
                    .status
                    .and_then(|s| s.allocation)
                    .and_then(|a| a.devices)
                    .and_then(|d| d.results)
                    .unwrap_or_default();
                allocated.push(
                    results
                        .into_iter()
                        .filter(|r| r.driver == DRIVER)
                        .map(|r| (r.request, r.pool, r.device))
                        .collect(),
                );
            }
            return Ok(PodOutcome::Scheduled {
                node,
                claims: allocated,
            });
        }
        let unschedulable = pod
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .find(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.reason.as_deref() == Some("Unschedulable")
            });
        if let Some(condition) = unschedulable {
            return Ok(PodOutcome::Unschedulable {
                message: condition.message.unwrap_or_default(),
            });
        }
        if tokio::time::Instant::now() > deadline {
            return Err(OracleError::Unsettled(world_pod.name.clone()));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Creates the world on the cluster of `client` and schedules its pods one by one.
pub async fn run_world(
    client: &kube::Client,
    world: &World,
) -> Result<Vec<PodOutcome>, OracleError> {
    for object in world.objects() {
        create(client, &object).await?;
    }
    let mut outcomes = Vec::new();
    for pod in &world.pods {
        for object in World::pod_objects(pod) {
            create(client, &object).await?;
        }
        outcomes.push(settle(client, pod).await?);
    }
    Ok(outcomes)
}

/// The emulator at a release: a fresh API server and control plane per world.
#[derive(Debug, Clone, Copy)]
pub struct Emulator {
    pub release: (u32, u32),
}

impl Emulator {
    pub async fn run(&self, world: &World) -> Result<Vec<PodOutcome>, OracleError> {
        use fake_dra_emulator::apiserver::{ApiServer, ApiServerOptions};
        use fake_dra_emulator::cluster::{ClusterConfig, ContainerRuntime, EmulatedCluster};
        let work_dir = tempfile::tempdir().map_err(|e| OracleError::Start(e.to_string()))?;
        let server = ApiServer::start_with(ApiServerOptions {
            server_version: self.release,
            ..ApiServerOptions::default()
        })
        .await
        .map_err(|e| OracleError::Start(e.to_string()))?;
        let cluster = EmulatedCluster::start(
            server,
            ClusterConfig {
                nodes: Vec::new(),
                node_labels: Vec::new(),
                work_dir: work_dir.path().to_path_buf(),
                runtime: ContainerRuntime::Process,
                wiping_delay: Duration::from_secs(30),
                host_run: Vec::new(),
            },
        )
        .await
        .map_err(|e| OracleError::Start(e.to_string()))?;
        let client = cluster
            .client()
            .map_err(|e| OracleError::Start(e.to_string()))?;
        let outcome = run_world(&client, world).await;
        cluster.shutdown().await;
        outcome
    }
}
