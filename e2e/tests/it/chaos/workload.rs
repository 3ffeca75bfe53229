//! The churn: pods with claims made from templates (1–4 devices, split 1–3), pods with
//! several claims (prepared in one batch), standalone claims shared by 2–3 pods, and a
//! Deployment scaled up and down. Every pod prints its env and waits; each unit waits
//! until its pods ran (or are accounted for by the observer), keeps them a moment,
//! deletes them and waits until they are gone.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimTemplate, ResourceSlice};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::report::invariant;
use super::rng::Rng;
use super::{Soak, lock};
use crate::common::DRIVER;

pub const NS: &str = "soak";
pub const KIND_LABEL: &str = "soak.fake-dra/kind";
pub const DEPLOYMENT: &str = "deployment";
const CLASS: &str = "fake.3-shake.com";
const DEPLOYMENT_NAME: &str = "churn";
/// The Deployment's replicas go up to this; its pods hold one device each.
const MAX_REPLICAS: u64 = 4;
/// Devices kept free for the recovery probes and the batch pods of the faults.
const FAULT_DEVICES: u32 = 8;
/// The longest an API call is retried while kube-apiserver is away.
const API_PATIENCE: Duration = Duration::from_secs(240);

/// What a claim asks for: `count` devices, each split in `split`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub count: u32,
    pub split: u32,
}

impl Shape {
    /// The template of this shape (one per shape, made at install).
    pub fn template(self) -> String {
        format!("c{}s{}", self.count, self.split)
    }

    /// The pod's claim entry `k` of this shape; the observer reads the shape back.
    pub fn entry(self, k: usize) -> String {
        format!("c{}s{}-{k}", self.count, self.split)
    }

    pub fn of_entry(entry: &str) -> Option<Self> {
        let (shape, _) = entry.split_once('-')?;
        let (count, split) = shape.strip_prefix('c')?.split_once('s')?;
        Some(Self {
            count: count.parse().ok()?,
            split: split.parse().ok()?,
        })
    }

    /// The ids a container of this claim sees.
    pub fn devices(self) -> usize {
        (self.count * self.split) as usize
    }

    fn pick(rng: &mut Rng, max_count: u32) -> Self {
        Self {
            count: rng.range(1, u64::from(max_count)) as u32,
            split: rng.range(1, 3) as u32,
        }
    }
}

/// Where a pod's claim entry comes from.
pub enum Source {
    Template(Shape),
    Claim(String),
}

pub fn kind_of(pod: &Pod) -> &'static str {
    let label = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(KIND_LABEL))
        .map(String::as_str);
    match label {
        Some("template") => "template",
        Some("multi") => "multi",
        Some("shared") => "shared",
        Some(DEPLOYMENT) => DEPLOYMENT,
        Some("probe") => "probe",
        Some("batch") => "batch",
        _ => "other",
    }
}

fn pod_spec(entries: &[(String, Source)]) -> Value {
    let uses: Vec<Value> = entries.iter().map(|(e, _)| json!({"name": e})).collect();
    let sources: Vec<Value> = entries
        .iter()
        .map(|(e, source)| match source {
            Source::Template(shape) => {
                json!({"name": e, "resourceClaimTemplateName": shape.template()})
            }
            Source::Claim(claim) => json!({"name": e, "resourceClaimName": claim}),
        })
        .collect();
    json!({
        "terminationGracePeriodSeconds": 5,
        "containers": [{
            "name": "ctr0",
            "image": "busybox:1.36",
            // The env once, then wait; SIGTERM ends it at once.
            "command": ["sh", "-c", "trap 'exit 0' TERM; export; sleep 3600 & wait"],
            "resources": {"claims": uses},
        }],
        "resourceClaims": sources,
    })
}

fn claim_spec(shape: Shape) -> Value {
    json!({"devices": {
        "requests": [{"name": "fake", "exactly": {"deviceClassName": CLASS, "count": shape.count}}],
        "config": [{"opaque": {"driver": DRIVER, "parameters": {
            "apiVersion": "fake.resource.3-shake.com/v1alpha1",
            "kind": "FakeClaimParameters",
            "spec": {"count": shape.count, "split": shape.split},
        }}}],
    }})
}

fn from_json<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap_or_else(|e| panic!("the soak's own manifest: {e}"))
}

/// Retries `call` while the API server is away (any error but a conflict or a 4xx that
/// says the request itself is wrong), up to [`API_PATIENCE`].
pub async fn retry<T, F, Fut>(what: &str, mut call: F) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let deadline = Instant::now() + API_PATIENCE;
    loop {
        let e = match tokio::time::timeout(Duration::from_secs(15), call()).await {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(kube::Error::Api(s))) if (400..500).contains(&s.code) && s.code != 429 => {
                return Err(format!("{what}: {} {}", s.code, s.message));
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => "no answer in 15 s".to_string(),
        };
        if Instant::now() > deadline {
            return Err(format!(
                "{what}: still failing after {} s: {e}",
                API_PATIENCE.as_secs()
            ));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Creates an object; AlreadyExists counts as done (an earlier try may have got through
/// before the connection broke).
async fn create<K>(api: &Api<K>, what: &str, object: &K) -> Result<(), String>
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = PostParams::default();
    match retry(what, || api.create(&params, object)).await {
        Ok(_) => Ok(()),
        Err(e) if e.contains(": 409 ") => Ok(()),
        Err(e) => Err(e),
    }
}

async fn delete<K>(api: &Api<K>, name: &str) -> Result<(), String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = DeleteParams::default();
    match retry(&format!("delete {name}"), || api.delete(name, &params)).await {
        Ok(_) => Ok(()),
        Err(e) if e.contains(": 404 ") => Ok(()),
        Err(e) => Err(e),
    }
}

pub async fn create_pod(
    soak: &Soak,
    name: &str,
    kind: &str,
    entries: &[(String, Source)],
) -> Result<(), String> {
    let pod: Pod = from_json(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {KIND_LABEL: kind}},
        "spec": pod_spec(entries),
    }));
    create(
        &Api::namespaced(soak.client.clone(), NS),
        &format!("create pod {name}"),
        &pod,
    )
    .await
}

async fn create_claim(soak: &Soak, name: &str, shape: Shape) -> Result<(), String> {
    let claim: ResourceClaim = from_json(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NS},
        "spec": claim_spec(shape),
    }));
    create(
        &Api::namespaced(soak.client.clone(), NS),
        &format!("create claim {name}"),
        &claim,
    )
    .await
}

/// The node's published parent ids, once its slices list `devices` devices.
pub async fn wait_for_parents(client: &kube::Client, node: &str, devices: u32) -> Vec<String> {
    crate::real::scenarios::wait_until(
        &format!("{devices} devices published for {node}"),
        || async {
            let ids = published_parents(client, node).await.ok()?;
            (ids.len() == devices as usize).then_some(ids)
        },
    )
    .await
}

/// The `uuid` attributes of the node's devices in our driver's slices.
pub async fn published_parents(client: &kube::Client, node: &str) -> Result<Vec<String>, String> {
    let slices = Api::<ResourceSlice>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?;
    Ok(slices
        .items
        .iter()
        .filter(|s| s.spec.driver == DRIVER && s.spec.node_name.as_deref() == Some(node))
        .flat_map(|s| s.spec.devices.iter().flatten())
        .filter_map(|d| d.attributes.as_ref()?.get("uuid")?.string.clone())
        .collect())
}

/// The namespace, a template per shape, the Deployment (no replicas yet).
pub async fn install(soak: &Soak) {
    let client = soak.client.clone();
    let ns: Namespace =
        from_json(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}));
    create(&Api::all(client.clone()), "create namespace", &ns)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let templates = Api::<ResourceClaimTemplate>::namespaced(client.clone(), NS);
    for count in 1..=4 {
        for split in 1..=3 {
            let shape = Shape { count, split };
            let t: ResourceClaimTemplate = from_json(json!({
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": shape.template(), "namespace": NS},
                "spec": {"spec": claim_spec(shape)},
            }));
            create(&templates, "create template", &t)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        }
    }
    let shape = Shape { count: 1, split: 2 };
    let deployment: Deployment = from_json(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": DEPLOYMENT_NAME, "namespace": NS},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": DEPLOYMENT_NAME}},
            "template": {
                "metadata": {"labels": {"app": DEPLOYMENT_NAME, KIND_LABEL: DEPLOYMENT}},
                "spec": pod_spec(&[(shape.entry(0), Source::Template(shape))]),
            },
        },
    }));
    create(
        &Api::namespaced(client, NS),
        "create deployment",
        &deployment,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
}

/// Waits until each pod ran (env read) or is accounted for, up to the pod deadline and
/// two more minutes for the observer to look.
pub async fn wait_settled(soak: &Soak, pods: &[String]) {
    let deadline = Instant::now() + soak.config.pod_deadline + Duration::from_secs(120);
    while Instant::now() < deadline {
        let settled = {
            let tracks = lock(&soak.pods);
            pods.iter()
                .all(|p| tracks.get(p).is_some_and(|t| t.settled()))
        };
        if settled {
            return;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Deletes the pods, waits until they are gone, then deletes the claims.
pub async fn retire(soak: &Soak, pods: &[String], claims: &[String]) {
    let api = Api::<Pod>::namespaced(soak.client.clone(), NS);
    for pod in pods {
        if let Some(t) = lock(&soak.pods).get_mut(pod) {
            t.deleted = true;
        }
        if let Err(e) = delete(&api, pod).await {
            soak.violation(invariant::POD_GONE, format!("pod {pod}: {e}"));
        }
    }
    let asked = Instant::now();
    let limit = Duration::from_secs(300);
    loop {
        let left: Vec<String> = {
            let tracks = lock(&soak.pods);
            pods.iter()
                .filter(|p| tracks.get(*p).is_some_and(|t| !t.gone))
                .map(|p| {
                    format!(
                        "{p} ({})",
                        tracks.get(p).map(|t| t.status.as_str()).unwrap_or("")
                    )
                })
                .collect()
        };
        if left.is_empty() {
            break;
        }
        if asked.elapsed() > limit {
            soak.violation(
                invariant::POD_GONE,
                format!(
                    "pods not gone {} s after their deletion: {left:?}",
                    limit.as_secs()
                ),
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    soak.checked(invariant::POD_GONE, pods.len() as u64);
    let claims_api = Api::<ResourceClaim>::namespaced(soak.client.clone(), NS);
    for claim in claims {
        if let Err(e) = delete(&claims_api, claim).await {
            soak.violation(invariant::POD_GONE, format!("claim {claim}: {e}"));
        }
    }
}

/// One piece of the churn.
#[derive(Debug, Clone)]
enum Plan {
    /// A pod with a claim from a template.
    Template(Shape),
    /// A pod with two or three claims from templates: prepared in one call.
    Multi(Vec<Shape>),
    /// A standalone claim and the pods sharing it.
    Shared(Shape, u32),
}

impl Plan {
    fn pick(rng: &mut Rng) -> Self {
        match rng.range(1, 100) {
            1..=45 => Self::Template(Shape::pick(rng, 4)),
            46..=65 => {
                let n = rng.range(2, 3);
                Self::Multi((0..n).map(|_| Shape::pick(rng, 2)).collect())
            }
            _ => Self::Shared(Shape::pick(rng, 2), rng.range(2, 3) as u32),
        }
    }

    fn devices(&self) -> u32 {
        match self {
            Self::Template(s) | Self::Shared(s, _) => s.count,
            Self::Multi(shapes) => shapes.iter().map(|s| s.count).sum(),
        }
    }
}

async fn unit(soak: Arc<Soak>, plan: Plan, mut rng: Rng) {
    let mut pods = Vec::new();
    let mut claims = Vec::new();
    let made = match &plan {
        Plan::Template(shape) => {
            let pod = soak.name("tpl");
            pods.push(pod.clone());
            create_pod(
                &soak,
                &pod,
                "template",
                &[(shape.entry(0), Source::Template(*shape))],
            )
            .await
        }
        Plan::Multi(shapes) => {
            let pod = soak.name("multi");
            pods.push(pod.clone());
            let entries: Vec<(String, Source)> = shapes
                .iter()
                .enumerate()
                .map(|(k, s)| (s.entry(k), Source::Template(*s)))
                .collect();
            create_pod(&soak, &pod, "multi", &entries).await
        }
        Plan::Shared(shape, n) => {
            let claim = soak.name("shared");
            claims.push(claim.clone());
            let mut made = create_claim(&soak, &claim, *shape).await;
            for _ in 0..*n {
                if made.is_err() {
                    break;
                }
                let pod = soak.name("shr");
                pods.push(pod.clone());
                made = create_pod(
                    &soak,
                    &pod,
                    "shared",
                    &[(shape.entry(0), Source::Claim(claim.clone()))],
                )
                .await;
            }
            made
        }
    };
    if let Err(e) = made {
        soak.violation(
            invariant::RECOVERY,
            format!("the workload could not create its objects: {e}"),
        );
    }
    wait_settled(&soak, &pods).await;
    tokio::time::sleep(Duration::from_millis(rng.range(500, 2500))).await;
    retire(&soak, &pods, &claims).await;
}

/// Runs the churn until the soak is done: `size` lifecycles, the quiet time after the
/// last fault, and at least `duration`.
pub async fn drive(soak: &Arc<Soak>) {
    let c = &soak.config;
    let mut rng = Rng::stream(c.seed, "workload");
    let budget = (c.devices - MAX_REPLICAS as u32 - FAULT_DEVICES) * 3 / 4;
    let used = Arc::new(AtomicU32::new(0));
    let mut units = tokio::task::JoinSet::new();
    let mut next: Option<Plan> = None;
    let mut n = 0u64;
    loop {
        while units.try_join_next().is_some() {}
        let done = soak.lifecycles() >= c.size
            && soak.elapsed() >= c.duration
            && soak
                .faults_stopped()
                .is_some_and(|t| t.elapsed() >= c.quiet);
        if done {
            break;
        }
        let plan = next.take().unwrap_or_else(|| Plan::pick(&mut rng));
        if units.len() >= c.concurrency || used.load(Ordering::SeqCst) + plan.devices() > budget {
            next = Some(plan);
            if units.join_next().await.is_none() {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            continue;
        }
        n += 1;
        used.fetch_add(plan.devices(), Ordering::SeqCst);
        let (task_soak, used, unit_rng) =
            (soak.clone(), used.clone(), Rng::stream(c.seed ^ n, "unit"));
        units.spawn(async move {
            let devices = plan.devices();
            unit(task_soak, plan, unit_rng).await;
            used.fetch_sub(devices, Ordering::SeqCst);
        });
        if n.is_multiple_of(50) {
            soak.log(format!(
                "{n} units started, {} lifecycles",
                soak.lifecycles()
            ));
        }
    }
    soak.stop_churn.store(true, Ordering::SeqCst);
    soak.log(format!(
        "churn stops after {n} units and {} lifecycles; waiting for the units under way",
        soak.lifecycles()
    ));
    while units.join_next().await.is_some() {}
}

/// Scales the Deployment between 0 and [`MAX_REPLICAS`] at random moments until the
/// churn stops, then to 0, and waits until its pods are gone.
pub async fn scale_deployment(soak: Arc<Soak>) {
    let mut rng = Rng::stream(soak.config.seed, "deployment");
    let api = Api::<Deployment>::namespaced(soak.client.clone(), NS);
    let scale = |n: u64| {
        let api = api.clone();
        async move {
            let patch = Patch::Merge(json!({"spec": {"replicas": n}}));
            api.patch_scale(DEPLOYMENT_NAME, &PatchParams::default(), &patch)
                .await
        }
    };
    while !soak.churn_stopped() {
        let until = Instant::now() + Duration::from_millis(rng.range(4000, 12000));
        while Instant::now() < until && !soak.churn_stopped() {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let n = rng.range(0, MAX_REPLICAS);
        // The API server may be away (a fault): the next round scales again.
        let _ = tokio::time::timeout(Duration::from_secs(10), scale(n)).await;
    }
    if let Err(e) = retry("scale the deployment to 0", || scale(0)).await {
        soak.violation(invariant::POD_GONE, e);
    }
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let left = lock(&soak.pods)
            .values()
            .filter(|t| t.kind == DEPLOYMENT && !t.gone)
            .count();
        if left == 0 {
            break;
        }
        if Instant::now() > deadline {
            soak.violation(
                invariant::POD_GONE,
                format!("{left} pods of the Deployment not gone 300 s after it was scaled to 0"),
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Deletes the workload's namespace and waits until it is gone.
pub async fn uninstall(soak: &Soak) {
    let api = Api::<Namespace>::all(soak.client.clone());
    if let Err(e) = delete(&api, NS).await {
        soak.violation(invariant::NOTHING_LEFT, format!("namespace {NS}: {e}"));
        return;
    }
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        match api.get_opt(NS).await {
            Ok(None) => return,
            _ if Instant::now() > deadline => {
                soak.violation(
                    invariant::NOTHING_LEFT,
                    format!("namespace {NS} not gone 300 s after its deletion"),
                );
                return;
            }
            _ => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    }
}
