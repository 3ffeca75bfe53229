//! Kueue v0.17.0 queues Jobs whose pods ask for fake devices, on the real cluster of
//! `hack/local-cluster.sh` with fake-dra deployed (one node, 8 devices): the scenario
//! `hack/kueue.sh` drives (it builds Kueue, deploys it with its alpha
//! `DynamicResourceAllocation` gate and `resources.deviceClassMappings` mapping DeviceClass
//! `fake.3-shake.com` to the quota resource `fake.3-shake.com/devices`, runs this test and
//! tears everything down; docs/kueue.md).
//!
//! 1. A ClusterQueue with a nominal quota of 8 devices, its LocalQueue, and three Jobs in
//!    that queue, each pod with a ResourceClaimTemplate of 4 devices. Kueue's webhook
//!    suspends every Job (the queue label is all they carry); two Workloads are admitted
//!    (4 devices each counted against the quota, 8 in use) and their pods run with 4
//!    distinct devices each, no device in both; the third Workload stays pending for quota
//!    and its Job suspended, with no pod.
//! 2. One of the running Jobs finishes (its container waits for a file the test creates with
//!    `kubectl exec`): the third Workload is admitted and its pod runs, with the devices the
//!    finished pod held (the other 4 are still in use on the node). Then the other two
//!    finish and the quota in use goes back to 0.
//! 3. A ClusterQueue whose quota (2) is smaller than one request (4): the Workload stays
//!    pending, with Kueue's message.
//! 4. A Job whose pod names a ResourceClaim directly (`resourceClaimName`): Kueue v0.17.0
//!    does not admit it (its workload controller marks it inadmissible), the Job stays
//!    suspended.
//! 5. Jobs whose templates Kueue's DRA quota accounting does not take: the seed demo's
//!    opaque `FakeClaimParameters` (split) and a CEL selector in the request; both stay
//!    suspended, inadmissible.
//!
//! Driven by `FAKE_DRA_KUEUE_KUBECONFIG` (the cluster's kubeconfig) and
//! `FAKE_DRA_KUEUE_KUBECTL` (the kubectl for `exec`; default `kubectl`); the report goes to
//! `FAKE_DRA_KUEUE_REPORT`. Without the kubeconfig it prints `SKIPPED: …` and passes, or
//! fails when `FAKE_DRA_REQUIRE_KUEUE=1` (hack/kueue.sh sets it).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::external;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimTemplate};
use kube::api::{Api, ApiResource, DynamicObject, ListParams, LogParams, PostParams};
use serde_json::{Value, json};

use external::{Scenario, wait_until};

const KUBECONFIG_ENV: &str = "FAKE_DRA_KUEUE_KUBECONFIG";
const SCENARIO: Scenario = Scenario {
    test: "kueue::kueue_queues_jobs_by_fake_devices",
    what: "the Kueue scenario",
    script: "hack/kueue.sh",
    require_env: "FAKE_DRA_REQUIRE_KUEUE",
};
/// deploy/structured/deviceclass.yaml, which hack/deploy.sh applies.
const CLASS: &str = "fake.3-shake.com";
const DRIVER: &str = "fake.resource.3-shake.com";
/// The quota resource hack/kueue/controller_manager_config.yaml maps the class to.
const RESOURCE: &str = "fake.3-shake.com/devices";
const NAMESPACE: &str = "kueue-fake";
const QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";
const FLAVOR: &str = "default-flavor";
/// Devices each Job's pod asks for, and the main ClusterQueue's quota.
const PER_JOB: usize = 4;
const QUOTA: usize = 8;
/// The quota of the ClusterQueue smaller than one request.
const SMALL_QUOTA: usize = 2;
/// Safety net for each wait (never an assertion on speed): a pod starts in seconds, Kueue
/// admits within a second or two; two shared cores can be slow.
const PATIENCE: Duration = Duration::from_secs(300);

struct Report(String);

impl Report {
    fn line(&mut self, text: String) {
        eprintln!("kueue: {text}");
        let _ = writeln!(self.0, "{text}");
    }
}

fn kueue_resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "kueue.x-k8s.io".into(),
        version: "v1beta2".into(),
        api_version: "kueue.x-k8s.io/v1beta2".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

fn dynamic(ar: &ApiResource, body: Value) -> DynamicObject {
    let mut o: DynamicObject = serde_json::from_value(body).expect("a Kueue object");
    o.types = Some(kube::api::TypeMeta {
        api_version: ar.api_version.clone(),
        kind: ar.kind.clone(),
    });
    o
}

/// A ClusterQueue for every namespace with `quota` of the device resource in one flavor.
fn cluster_queue(ar: &ApiResource, name: &str, quota: usize) -> DynamicObject {
    dynamic(
        ar,
        json!({
            "metadata": {"name": name},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [{
                    "coveredResources": [RESOURCE],
                    "flavors": [{"name": FLAVOR, "resources": [
                        {"name": RESOURCE, "nominalQuota": quota}]}],
                }],
            },
        }),
    )
}

fn local_queue(ar: &ApiResource, name: &str, cluster_queue: &str) -> DynamicObject {
    dynamic(
        ar,
        json!({
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"clusterQueue": cluster_queue},
        }),
    )
}

/// A Job of one pod in `queue` (only the label: Kueue's webhook suspends it), whose
/// container prints its environment, then waits until /tmp/done exists. `claim` is the
/// pod's entry `dev`: a template's or a claim's name.
fn job(name: &str, queue: &str, claim: (&str, &str)) -> Job {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {QUEUE_LABEL: queue}},
        "spec": {
            "parallelism": 1,
            "completions": 1,
            "backoffLimit": 0,
            "template": {"spec": {
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 1,
                "containers": [{
                    "name": "c",
                    "image": "busybox:1.36",
                    "command": ["sh", "-c",
                        "env | grep ^FAKE_ | sort; echo waiting; \
                         while [ ! -e /tmp/done ]; do sleep 1; done; echo done"],
                    "resources": {"claims": [{"name": "dev"}]},
                }],
                "resourceClaims": [{"name": "dev", claim.0: claim.1}],
            }},
        },
    }))
    .unwrap()
}

fn claim_spec(count: usize) -> Value {
    json!({"devices": {"requests": [{"name": "dev", "exactly": {
        "deviceClassName": CLASS, "allocationMode": "ExactCount", "count": count}}]}})
}

/// The Workloads of the namespace by the name of the Job that owns them.
async fn workloads(api: &Api<DynamicObject>) -> Result<BTreeMap<String, DynamicObject>, String> {
    let list = api
        .list(&ListParams::default())
        .await
        .map_err(|e| format!("list workloads: {e}"))?;
    let mut by_job = BTreeMap::new();
    for w in list.items {
        let owner = w
            .metadata
            .owner_references
            .as_ref()
            .and_then(|o| o.iter().find(|o| o.kind == "Job"))
            .map(|o| o.name.clone());
        if let Some(job) = owner {
            by_job.insert(job, w);
        }
    }
    Ok(by_job)
}

/// The workload's condition `type`: (status, reason, message).
fn condition(w: &DynamicObject, type_: &str) -> Option<(String, String, String)> {
    let cs = w.data.get("status")?.get("conditions")?.as_array()?;
    let c = cs.iter().find(|c| c["type"] == type_)?;
    let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    Some((s("status"), s("reason"), s("message")))
}

fn is_true(w: &DynamicObject, type_: &str) -> bool {
    condition(w, type_).is_some_and(|c| c.0 == "True")
}

/// A workload's conditions in one line, for reports and failure messages.
fn conditions_seen(w: &DynamicObject) -> String {
    w.data
        .get("status")
        .and_then(|s| s.get("conditions"))
        .and_then(|c| c.as_array())
        .map(|cs| {
            cs.iter()
                .map(|c| {
                    format!(
                        "{}={} ({}: {})",
                        c["type"], c["status"], c["reason"], c["message"]
                    )
                })
                .collect::<Vec<_>>()
                .join("; ")
        })
        .unwrap_or_else(|| "no conditions".into())
}

/// The amount of the device resource the admission of a workload counts.
fn devices_admitted(w: &DynamicObject) -> Option<String> {
    w.data
        .get("status")?
        .get("admission")?
        .get("podSetAssignments")?
        .as_array()?
        .iter()
        .find_map(|a| {
            a.get("resourceUsage")?
                .get(RESOURCE)?
                .as_str()
                .map(String::from)
        })
}

/// The device resource a ClusterQueue has in use (status.flavorsUsage), or "0".
async fn quota_in_use(api: &Api<DynamicObject>, name: &str) -> Result<String, String> {
    let cq = api
        .get(name)
        .await
        .map_err(|e| format!("get clusterqueue {name}: {e}"))?;
    let used = cq
        .data
        .get("status")
        .and_then(|s| s.get("flavorsUsage"))
        .and_then(|f| f.as_array())
        .into_iter()
        .flatten()
        .flat_map(|f| f["resources"].as_array().cloned().unwrap_or_default())
        .find(|r| r["name"] == RESOURCE)
        .and_then(|r| r["total"].as_str().map(String::from));
    Ok(used.unwrap_or_else(|| "0".into()))
}

fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("<none>")
}

async fn pods_of(pods: &Api<Pod>, job: &str) -> Result<Vec<Pod>, String> {
    pods.list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}")))
        .await
        .map(|l| l.items)
        .map_err(|e| format!("list pods of {job}: {e}"))
}

/// The one Running pod of a Job and the devices its container saw (`FAKE_DEVICE_<i>`, in
/// order of i), once the container has printed them.
async fn running_with_devices(pods: &Api<Pod>, job: &str) -> Result<(String, Vec<String>), String> {
    let list = pods_of(pods, job).await?;
    let [p] = list.as_slice() else {
        return Err(format!("job {job} has {} pods, not 1", list.len()));
    };
    let name = p.metadata.name.clone().unwrap_or_default();
    if phase(p) != "Running" {
        return Err(format!(
            "pod {name} of {job} is {}: {:?}",
            phase(p),
            p.status.as_ref().and_then(|s| s.conditions.as_ref())
        ));
    }
    let log = pods
        .logs(
            &name,
            &LogParams {
                container: Some("c".into()),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| format!("logs of {name}: {e}"))?;
    if !log.lines().any(|l| l == "waiting") {
        return Err(format!(
            "pod {name} has not printed its environment yet: {log:?}"
        ));
    }
    let mut devices = BTreeMap::new();
    for line in log.lines() {
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        if let Some(i) = key
            .strip_prefix("FAKE_DEVICE_")
            .and_then(|i| i.parse::<usize>().ok())
        {
            devices.insert(i, value.to_string());
        }
    }
    Ok((name, devices.into_values().collect()))
}

/// Creates /tmp/done in the Job's container (`kubectl exec`), so it exits 0.
async fn finish(kubectl: &str, kubeconfig: &str, pod: &str) {
    let out = tokio::process::Command::new(kubectl)
        .args([
            "--kubeconfig",
            kubeconfig,
            "-n",
            NAMESPACE,
            "exec",
            pod,
            "-c",
            "c",
            "--",
        ])
        .args(["touch", "/tmp/done"])
        .output()
        .await
        .unwrap_or_else(|e| panic!("running {kubectl}: {e}"));
    assert!(
        out.status.success(),
        "kubectl exec {pod} -- touch /tmp/done: {}; {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

async fn job_succeeded(jobs: &Api<Job>, name: &str) -> Result<(), String> {
    let j = jobs
        .get(name)
        .await
        .map_err(|e| format!("get job {name}: {e}"))?;
    let status = j.status.unwrap_or_default();
    if status.succeeded == Some(1) {
        Ok(())
    } else {
        Err(format!(
            "job {name}: succeeded {:?}, failed {:?}, conditions {:?}",
            status.succeeded, status.failed, status.conditions
        ))
    }
}

fn suspended(j: &Job) -> bool {
    j.spec.as_ref().and_then(|s| s.suspend) == Some(true)
}

/// Waits until the Job's Workload is pending (QuotaReserved False) with a message, and
/// checks that the Job is still suspended with no pod; returns (reason, message).
async fn pending(
    workloads_api: &Api<DynamicObject>,
    jobs: &Api<Job>,
    pods: &Api<Pod>,
    job: &str,
) -> (String, String) {
    let (reason, message) = wait_until(
        &format!("job {job}'s Workload pending with a reason"),
        PATIENCE,
        async || {
            let all = workloads(workloads_api).await?;
            let w = all.get(job).ok_or(format!(
                "no Workload of job {job} yet; {} others",
                all.len()
            ))?;
            match condition(w, "QuotaReserved") {
                Some((s, reason, message)) if s == "False" && !message.is_empty() => {
                    Ok((reason, message))
                }
                _ => Err(format!("Workload of {job}: {}", conditions_seen(w))),
            }
        },
    )
    .await;
    let j = jobs.get(job).await.expect("get the pending job");
    assert!(
        suspended(&j),
        "job {job} is pending in Kueue but not suspended: {:?}",
        j.spec
    );
    let list = pods_of(pods, job).await.unwrap();
    assert!(
        list.is_empty(),
        "job {job} is pending in Kueue but has {} pods",
        list.len()
    );
    (reason, message)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kueue_queues_jobs_by_fake_devices() {
    let Ok(kubeconfig) = std::env::var(KUBECONFIG_ENV) else {
        return SCENARIO.skip(&format!(
            "{KUBECONFIG_ENV} is not set (not driven by hack/kueue.sh)"
        ));
    };
    let kubectl = std::env::var("FAKE_DRA_KUEUE_KUBECTL").unwrap_or_else(|_| "kubectl".into());
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig)
            .unwrap_or_else(|e| panic!("{kubeconfig}: {e}")),
        &Default::default(),
    )
    .await
    .unwrap_or_else(|e| panic!("{kubeconfig}: {e}"));
    let client = kube::Client::try_from(config).unwrap();
    let flavor_ar = kueue_resource("ResourceFlavor", "resourceflavors");
    let cq_ar = kueue_resource("ClusterQueue", "clusterqueues");
    let lq_ar = kueue_resource("LocalQueue", "localqueues");
    let wl_ar = kueue_resource("Workload", "workloads");
    let flavors: Api<DynamicObject> = Api::all_with(client.clone(), &flavor_ar);
    let cqs: Api<DynamicObject> = Api::all_with(client.clone(), &cq_ar);
    let lqs: Api<DynamicObject> = Api::namespaced_with(client.clone(), NAMESPACE, &lq_ar);
    let wls: Api<DynamicObject> = Api::namespaced_with(client.clone(), NAMESPACE, &wl_ar);
    let jobs: Api<Job> = Api::namespaced(client.clone(), NAMESPACE);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let templates: Api<ResourceClaimTemplate> = Api::namespaced(client.clone(), NAMESPACE);
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), NAMESPACE);
    let pp = PostParams::default();
    let mut report = Report(String::new());

    // 1. Queues, three Jobs of 4 devices against a quota of 8.
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&pp, &ns)
        .await
        .unwrap_or_else(|e| panic!("a fresh cluster has no namespace {NAMESPACE}, but: {e}"));
    let flavor = dynamic(&flavor_ar, json!({"metadata": {"name": FLAVOR}}));
    flavors
        .create(&pp, &flavor)
        .await
        .expect("create the ResourceFlavor");
    cqs.create(&pp, &cluster_queue(&cq_ar, "fake-devices", QUOTA))
        .await
        .expect("create ClusterQueue fake-devices");
    lqs.create(&pp, &local_queue(&lq_ar, "fake", "fake-devices"))
        .await
        .expect("create LocalQueue fake");
    let template: ResourceClaimTemplate = serde_json::from_value(json!({
        "metadata": {"name": "four-devices", "namespace": NAMESPACE},
        "spec": {"spec": claim_spec(PER_JOB)},
    }))
    .unwrap();
    templates
        .create(&pp, &template)
        .await
        .expect("create the ResourceClaimTemplate");
    // A LocalQueue takes jobs once Kueue has seen its ClusterQueue active.
    wait_until("ClusterQueue fake-devices Active", PATIENCE, async || {
        let cq = cqs.get("fake-devices").await.map_err(|e| e.to_string())?;
        let active = cq.data["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Active" && c["status"] == "True");
        if active {
            Ok(())
        } else {
            Err(format!("status {}", cq.data["status"]))
        }
    })
    .await;

    let names = ["job-a", "job-b", "job-c"];
    let started = Instant::now();
    for name in names {
        let created = jobs
            .create(
                &pp,
                &job(name, "fake", ("resourceClaimTemplateName", "four-devices")),
            )
            .await
            .unwrap_or_else(|e| panic!("create job {name}: {e}"));
        assert!(
            suspended(&created),
            "Kueue's webhook did not suspend job {name} (it carries {QUEUE_LABEL}): {:?}",
            created.spec
        );
    }
    // Two admitted and running, the third pending for quota; which is which is Kueue's.
    let (running, waiting) = wait_until(
        "two of the three Jobs admitted with their pods Running, the third pending",
        PATIENCE,
        async || {
            let all = workloads(&wls).await?;
            if all.len() != names.len() {
                return Err(format!("{} Workloads: {:?}", all.len(), all.keys()));
            }
            let (admitted, rest): (Vec<&str>, Vec<&str>) = names
                .iter()
                .copied()
                .partition(|n| is_true(&all[*n], "Admitted"));
            if admitted.len() != 2 {
                let seen: Vec<_> = names
                    .iter()
                    .map(|n| format!("{n}: {}", conditions_seen(&all[*n])))
                    .collect();
                return Err(format!("{} admitted; {}", admitted.len(), seen.join(" | ")));
            }
            let mut running: BTreeMap<String, (String, Vec<String>)> = BTreeMap::new();
            for n in &admitted {
                running.insert(n.to_string(), running_with_devices(&pods, n).await?);
            }
            Ok::<_, String>((running, rest[0].to_string()))
        },
    )
    .await;
    let two_running = started.elapsed();
    let all = workloads(&wls).await.unwrap();
    for n in running.keys() {
        assert_eq!(
            devices_admitted(&all[n]).as_deref(),
            Some("4"),
            "the admission of {n} counts {PER_JOB} of {RESOURCE}: {}",
            all[n].data["status"]["admission"]
        );
    }
    let mut seen = BTreeSet::new();
    for (n, (pod, devices)) in &running {
        assert_eq!(
            devices.len(),
            PER_JOB,
            "pod {pod} of {n} sees devices {devices:?}"
        );
        for d in devices {
            assert!(d.starts_with("FAKE-"), "pod {pod}: device id {d}");
            assert!(
                seen.insert(d.clone()),
                "device {d} of pod {pod} ({n}) is also another pod's"
            );
        }
    }
    // Scheduled onto our slices: each pod's claim holds 4 devices of our driver.
    for (n, (pod, _)) in &running {
        let p = pods.get(pod).await.expect("get a running pod");
        let claim = p
            .status
            .as_ref()
            .and_then(|s| s.resource_claim_statuses.as_ref())
            .and_then(|s| s.iter().find(|s| s.name == "dev"))
            .and_then(|s| s.resource_claim_name.clone())
            .unwrap_or_else(|| panic!("pod {pod} of {n} has no claim for its entry dev"));
        let c = claims.get(&claim).await.expect("get the pod's claim");
        let results = c
            .status
            .as_ref()
            .and_then(|s| s.allocation.as_ref())
            .and_then(|a| a.devices.as_ref())
            .and_then(|d| d.results.clone())
            .unwrap_or_default();
        assert!(
            results.len() == PER_JOB && results.iter().all(|r| r.driver == DRIVER),
            "claim {claim} of pod {pod} ({n}) should hold {PER_JOB} devices of {DRIVER}: {results:?}"
        );
    }
    // The ClusterQueue's status follows the admissions (its own reconcile, a moment later).
    wait_until(
        &format!("ClusterQueue fake-devices with {QUOTA} {RESOURCE} in use"),
        PATIENCE,
        async || match quota_in_use(&cqs, "fake-devices").await? {
            used if used == QUOTA.to_string() => Ok(()),
            used => Err(format!("{used} in use")),
        },
    )
    .await;
    let (reason, message) = pending(&wls, &jobs, &pods, &waiting).await;
    assert!(
        message.contains(&format!(
            "insufficient unused quota for {RESOURCE} in flavor {FLAVOR}"
        )),
        "job {waiting} waits, but not for quota: {reason}: {message}"
    );
    report.line(format!(
        "quota {QUOTA} {RESOURCE}, 3 Jobs of {PER_JOB}: 2 admitted and Running after {:.1} s, 1 pending ({waiting}: {reason}: {message})",
        two_running.as_secs_f64()
    ));
    for (n, (pod, devices)) in &running {
        report.line(format!("{n} pod {pod}: {}", devices.join(" ")));
    }

    // 2. One finishes; the third is admitted and runs on the devices it freed.
    let (first, (first_pod, first_devices)) = running.iter().next().unwrap();
    let (other, (_, other_devices)) = running.iter().nth(1).unwrap();
    let finished_at = Instant::now();
    finish(&kubectl, &kubeconfig, first_pod).await;
    wait_until(&format!("job {first} Complete"), PATIENCE, async || {
        job_succeeded(&jobs, first).await
    })
    .await;
    let (third_pod, third_devices) = wait_until(
        &format!("job {waiting} admitted and Running once {first} finished"),
        PATIENCE,
        async || {
            let all = workloads(&wls).await?;
            let w = &all[&waiting];
            if !is_true(w, "Admitted") {
                return Err(format!(
                    "{waiting}: {}; {first}: {}",
                    conditions_seen(w),
                    conditions_seen(&all[first])
                ));
            }
            running_with_devices(&pods, &waiting).await
        },
    )
    .await;
    let third_after = finished_at.elapsed();
    let all = workloads(&wls).await.unwrap();
    assert!(
        is_true(&all[first], "Finished"),
        "the Workload of the finished job {first}: {}",
        conditions_seen(&all[first])
    );
    assert_eq!(
        third_devices.len(),
        PER_JOB,
        "pod {third_pod} sees {third_devices:?}"
    );
    let third_set: BTreeSet<_> = third_devices.iter().collect();
    assert!(
        other_devices.iter().all(|d| !third_set.contains(d)),
        "pod {third_pod} ({waiting}) got a device of {other}, which still runs: {third_devices:?} vs {other_devices:?}"
    );
    // The node has 8: with the other pod's 4 in use, the third gets those the first freed.
    assert_eq!(
        third_set,
        first_devices.iter().collect::<BTreeSet<_>>(),
        "pod {third_pod} ({waiting}) should hold the 4 devices {first} freed"
    );
    report.line(format!(
        "{first} finished; {waiting} admitted and Running {:.1} s later, pod {third_pod}: {} (the devices {first} freed)",
        third_after.as_secs_f64(),
        third_devices.join(" ")
    ));
    let other_pod = running[other].0.clone();
    finish(&kubectl, &kubeconfig, &other_pod).await;
    finish(&kubectl, &kubeconfig, &third_pod).await;
    for n in [other.as_str(), waiting.as_str()] {
        wait_until(&format!("job {n} Complete"), PATIENCE, async || {
            job_succeeded(&jobs, n).await
        })
        .await;
    }
    wait_until(
        "ClusterQueue fake-devices with no quota in use",
        PATIENCE,
        async || match quota_in_use(&cqs, "fake-devices").await? {
            used if used == "0" => Ok(()),
            used => Err(format!("{used} {RESOURCE} in use")),
        },
    )
    .await;
    report.line(format!(
        "all 3 Jobs Complete, quota in use back to 0; scenario {:.1} s",
        started.elapsed().as_secs_f64()
    ));

    // 3. A quota smaller than one request.
    cqs.create(&pp, &cluster_queue(&cq_ar, "too-small", SMALL_QUOTA))
        .await
        .expect("create ClusterQueue too-small");
    lqs.create(&pp, &local_queue(&lq_ar, "small", "too-small"))
        .await
        .expect("create LocalQueue small");
    jobs.create(
        &pp,
        &job(
            "too-big",
            "small",
            ("resourceClaimTemplateName", "four-devices"),
        ),
    )
    .await
    .expect("create job too-big");
    let (reason, message) = pending(&wls, &jobs, &pods, "too-big").await;
    assert!(
        message.contains(&format!(
            "insufficient quota for {RESOURCE} in flavor {FLAVOR}, previously considered podsets requests (0) + current podset request ({PER_JOB}) > maximum capacity ({SMALL_QUOTA})"
        )),
        "job too-big is pending, but not with Kueue's quota message: {reason}: {message}"
    );
    report.line(format!(
        "quota {SMALL_QUOTA} < request {PER_JOB}: job too-big pending: {reason}: {message}"
    ));

    // 4. A direct ResourceClaim.
    let claim: ResourceClaim = serde_json::from_value(json!({
        "metadata": {"name": "direct", "namespace": NAMESPACE},
        "spec": claim_spec(1),
    }))
    .unwrap();
    claims
        .create(&pp, &claim)
        .await
        .expect("create ResourceClaim direct");
    let created = jobs
        .create(
            &pp,
            &job("direct-claim", "fake", ("resourceClaimName", "direct")),
        )
        .await
        .expect("Kueue's webhook lets a Job with a direct ResourceClaim be created");
    assert!(
        suspended(&created),
        "job direct-claim not suspended: {:?}",
        created.spec
    );
    let (reason, message) = pending(&wls, &jobs, &pods, "direct-claim").await;
    assert_eq!(
        (reason.as_str(), message.as_str()),
        (
            "Inadmissible",
            "DynamicResourceAllocation feature does not support use of resource claims"
        ),
        "job direct-claim"
    );
    let c = claims.get("direct").await.expect("get claim direct");
    assert!(
        c.status
            .as_ref()
            .and_then(|s| s.allocation.as_ref())
            .is_none(),
        "claim direct is allocated although no pod uses it: {:?}",
        c.status
    );
    report.line(format!(
        "direct ResourceClaim (resourceClaimName): job direct-claim stays suspended, no pod: {reason}: {message}"
    ));

    // 5. Templates Kueue's quota accounting does not take: the seed demo's opaque
    //    FakeClaimParameters (split), and a CEL selector on the model.
    let refused = [
        (
            "split-two",
            json!({"devices": {
                "requests": [{"name": "dev", "exactly": {
                    "deviceClassName": CLASS, "allocationMode": "ExactCount", "count": 2}}],
                "config": [{"requests": ["dev"], "opaque": {
                    "driver": DRIVER,
                    "parameters": {"apiVersion": "fake.resource.3-shake.com/v1alpha1",
                                   "kind": "FakeClaimParameters", "spec": {"split": 2}}}}],
            }}),
            "device config is not supported",
        ),
        (
            "model-selector",
            json!({"devices": {"requests": [{"name": "dev", "exactly": {
                "deviceClassName": CLASS, "allocationMode": "ExactCount", "count": 1,
                "selectors": [{"cel": {"expression":
                    "device.attributes[\"fake.resource.3-shake.com\"].model == \"ULTRA_100\""}}]}}]}}),
            "CEL selectors are not supported",
        ),
    ];
    for (name, spec, expected) in refused {
        let t: ResourceClaimTemplate = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"spec": spec},
        }))
        .unwrap();
        templates
            .create(&pp, &t)
            .await
            .unwrap_or_else(|e| panic!("create ResourceClaimTemplate {name}: {e}"));
        let job_name = format!("with-{name}");
        jobs.create(
            &pp,
            &job(&job_name, "fake", ("resourceClaimTemplateName", name)),
        )
        .await
        .unwrap_or_else(|e| panic!("create job {job_name}: {e}"));
        let (reason, message) = pending(&wls, &jobs, &pods, &job_name).await;
        assert!(
            reason == "Inadmissible" && message.contains(expected),
            "job {job_name} (template {name}): expected Inadmissible with '{expected}', got {reason}: {message}"
        );
        report.line(format!(
            "template {name}: job {job_name} stays suspended, no pod: {reason}: {message}"
        ));
    }

    if let Ok(path) = std::env::var("FAKE_DRA_KUEUE_REPORT") {
        std::fs::write(&path, &report.0).unwrap_or_else(|e| panic!("{path}: {e}"));
    }
}
