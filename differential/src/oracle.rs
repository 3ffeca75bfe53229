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
use crate::world::{DRIVER, World};

/// How long one pod may take to be bound or reported unschedulable: a guard against a
/// hang, not a pace.
const SETTLE: Duration = Duration::from_secs(60);
/// How long a pod bound to a device with a `NoExecute` taint is watched for an eviction
/// before it counts as scheduled (kube-controller-manager evicts within milliseconds).
const EVICTION_WAIT: Duration = Duration::from_secs(3);

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
    world: &World,
    world_pod: &crate::world::PodSpec,
) -> Result<PodOutcome, OracleError> {
    let namespace = world.namespace();
    let namespace = namespace.as_str();
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), namespace);
    let deadline = tokio::time::Instant::now() + SETTLE;
    let mut bound_to: Option<String> = None;
    let mut eviction_deadline: Option<tokio::time::Instant> = None;
    loop {
        let pod = pods
            .get_opt(&world_pod.name)
            .await
            .map_err(|error| OracleError::Api {
                what: format!("pod {}", world_pod.name),
                error,
            })?;
        let Some(pod) = pod.filter(|p| p.metadata.deletion_timestamp.is_none()) else {
            return Ok(PodOutcome::Evicted {
                node: bound_to.unwrap_or_default(),
            });
        };
        if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
            bound_to = Some(node.clone());
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
            // A device with a NoExecute taint may get the pod evicted right away (the
            // device taint eviction controller): give that a moment to show.
            let no_execute =
                allocated
                    .iter()
                    .flatten()
                    .any(|(_, pool, device): &(String, String, String)| {
                        world
                            .nodes
                            .iter()
                            .filter(|n| &n.name == pool)
                            .flat_map(|n| &n.devices)
                            .filter(|d| &d.name == device)
                            .flat_map(|d| &d.taints)
                            .any(|t| t.effect == "NoExecute")
                    });
            let watch_until = *eviction_deadline
                .get_or_insert_with(|| tokio::time::Instant::now() + EVICTION_WAIT);
            if no_execute && tokio::time::Instant::now() < watch_until {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
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
                    && matches!(
                        c.reason.as_deref(),
                        Some("Unschedulable" | "SchedulerError")
                    )
            });
        // kube-scheduler reports some allocations that can never succeed as errors, not
        // as unschedulable (`All` with an unmet `matchAttribute`: "cannot add device ...
        // because a claim constraint would not be satisfied"); the pod stays Pending
        // either way, so both count as not scheduled, the reason kept in the message.
        if let Some(condition) = unschedulable {
            let reason = condition.reason.unwrap_or_default();
            let message = condition.message.unwrap_or_default();
            return Ok(PodOutcome::Unschedulable {
                message: if reason == "Unschedulable" {
                    message
                } else {
                    format!("{reason}: {message}")
                },
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
        for object in world.pod_objects(pod) {
            create(client, &object).await?;
        }
        outcomes.push(settle(client, world, pod).await?);
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

/// A cluster that is already there (a real kube-scheduler's): each world is tagged
/// ([`World::tagged`]) so it shares the cluster with the others, and its objects are
/// deleted after it (without waiting: its pods select its own nodes only).
pub struct Cluster {
    client: kube::Client,
    runs: std::sync::atomic::AtomicU64,
    /// Tells this process's worlds from those an earlier run left (`--keep`).
    nonce: u32,
    /// Leave every world's objects in the cluster (to look at them afterwards).
    pub keep: bool,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("runs", &self.runs)
            .finish_non_exhaustive()
    }
}

impl Cluster {
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            runs: std::sync::atomic::AtomicU64::new(0),
            nonce: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos() & 0xff_ffff),
            keep: false,
        }
    }

    pub async fn run(&self, world: &World) -> Result<Vec<PodOutcome>, OracleError> {
        let run = self.runs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tag = format!("w{}-{:x}-{run}", world.seed, self.nonce);
        let tagged = world.tagged(&tag);
        let result = run_world(&self.client, &tagged).await;
        if !self.keep {
            self.clean(&tagged).await;
        }
        let prefix = format!("{tag}-");
        let untag = |s: String| s.strip_prefix(&prefix).map(str::to_owned).unwrap_or(s);
        result.map(|outcomes| {
            outcomes
                .into_iter()
                .map(|o| match o {
                    PodOutcome::Scheduled { node, claims } => PodOutcome::Scheduled {
                        node: untag(node),
                        claims: claims
                            .into_iter()
                            .map(|c| c.into_iter().map(|(r, p, d)| (r, untag(p), d)).collect())
                            .collect(),
                    },
                    other => other,
                })
                .collect()
        })
    }

    /// Deletes the world's objects; what fails to go is left to the next cleanup by
    /// hand (`kubectl delete ns -l ...`), and logged.
    async fn clean(&self, world: &World) {
        let mut objects = world.objects();
        objects.reverse();
        for object in objects {
            let resource = resource_of(&object);
            let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource);
            let name = object["metadata"]["name"].as_str().unwrap_or_default();
            if let Err(e) = api.delete(name, &Default::default()).await {
                tracing::debug!(%name, "deleting a world's object: {e}");
            }
        }
    }
}

/// Where worlds are scheduled.
#[derive(Debug)]
pub enum Oracle {
    Emulator(Emulator),
    Cluster(Cluster),
}

impl Oracle {
    pub fn name(&self) -> &'static str {
        match self {
            Oracle::Emulator(_) => "emulator",
            Oracle::Cluster(_) => "kube-scheduler",
        }
    }

    pub async fn run(&self, world: &World) -> Result<Vec<PodOutcome>, OracleError> {
        match self {
            Oracle::Emulator(e) => e.run(world).await,
            Oracle::Cluster(c) => c.run(world).await,
        }
    }
}
