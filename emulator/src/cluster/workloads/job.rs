//! The Job controller (`pkg/controller/job`) for NonIndexed Jobs: pods from the template
//! up to `parallelism` until `completions` succeeded, failed pods replaced after upstream's
//! back-off until `backoffLimit` is exceeded, `suspend`, `activeDeadlineSeconds` and
//! `ttlSecondsAfterFinished` (the TTL-after-finished controller), with the status fields
//! and conditions `kubectl get jobs` and `kubectl wait --for=condition=complete` read.
//!
//! Left out (refused nowhere, documented in docs/emulator.md): Indexed completion mode,
//! `podFailurePolicy`, `successPolicy`, `backoffLimitPerIndex`, and counting container
//! restarts of `OnFailure` pods towards the back-off limit. Finished pods are counted
//! from the pods themselves (upstream tracks them with the `batch.kubernetes.io/job-tracking`
//! finalizer); the counts never go down, so deleting finished pods loses nothing.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ObjectReference;

use super::*;
use crate::cluster::Events;

/// `DefaultJobPodFailureBackOff` and `MaxJobPodFailureBackOff`.
const BACKOFF_BASE_SECONDS: i64 = 10;
const BACKOFF_MAX_SECONDS: i64 = 360;

/// The release from which the controller writes `FailureTarget` and `SuccessCriteriaMet`
/// before the final condition (KEP-3998 and KEP-4368; 1.30's controller does not).
const INTERIM_CONDITIONS_SINCE: (u32, u32) = (1, 31);

pub(super) async fn jobs_pass(
    client: &kube::Client,
    events: &Events,
    server_version: (u32, u32),
) -> Result<(), kube::Error> {
    let jobs = list_all::<Job>(client).await?;
    if jobs.is_empty() {
        return Ok(());
    }
    let pods = list_all::<Pod>(client).await?;
    for job in &jobs {
        if let Err(error) = sync_job(client, events, job, &pods, server_version).await {
            tracing::debug!(job = ?job.metadata.name, %error, "syncing a job failed");
        }
    }
    Ok(())
}

/// What the pods of one Job say.
#[derive(Debug, Default)]
struct Counts {
    active: i64,
    ready: i64,
    succeeded: i64,
    failed: i64,
    terminating: i64,
    /// When the last pod failed: the back-off runs from there.
    last_failure: Option<jiff::Timestamp>,
}

fn finished_at(pod: &DynamicObject) -> Option<jiff::Timestamp> {
    pod.data
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)?
        .iter()
        .filter_map(|c| {
            c.pointer("/state/terminated/finishedAt")
                .and_then(Value::as_str)
        })
        .filter_map(|t| t.parse().ok())
        .max()
}

fn count(pods: &[&DynamicObject]) -> Counts {
    let mut counts = Counts::default();
    for pod in pods {
        match phase(pod) {
            Some("Succeeded") => counts.succeeded += 1,
            Some("Failed") => {
                counts.failed += 1;
                let at = finished_at(pod)
                    .or_else(|| pod.metadata.creation_timestamp.as_ref().map(|t| t.0));
                counts.last_failure = counts.last_failure.max(at);
            }
            _ if pod.metadata.deletion_timestamp.is_some() => counts.terminating += 1,
            _ => {
                counts.active += 1;
                counts.ready += i64::from(ready_condition(pod).is_some());
            }
        }
    }
    counts
}

fn condition_true(job: &Value, kind: &str) -> bool {
    job.pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| c["type"] == kind && c["status"] == "True")
}

fn condition(kind: &str, reason: &str, message: &str, now: &str) -> Value {
    json!({"type": kind, "status": "True", "reason": reason, "message": message,
        "lastProbeTime": now, "lastTransitionTime": now})
}

/// `getBackoff`: 10 s doubled per failure after the first, at most 6 minutes.
fn backoff_seconds(failures: i64) -> i64 {
    if failures <= 0 {
        return 0;
    }
    let doublings = u32::try_from(failures - 1).unwrap_or(u32::MAX).min(16);
    (BACKOFF_BASE_SECONDS << doublings).min(BACKOFF_MAX_SECONDS)
}

async fn sync_job(
    client: &kube::Client,
    events: &Events,
    object: &DynamicObject,
    pods: &[DynamicObject],
    server_version: (u32, u32),
) -> Result<(), SyncError> {
    let interim = server_version >= INTERIM_CONDITIONS_SINCE;
    let job: Job = typed(object)?;
    let meta = &job.metadata;
    let (Some(namespace), Some(name), Some(uid)) = (
        meta.namespace.as_deref(),
        meta.name.as_deref(),
        meta.uid.as_deref(),
    ) else {
        return Ok(());
    };
    let spec = job.spec.clone().unwrap_or_default();
    let status = object.data.get("status").cloned().unwrap_or(json!({}));
    let job_api = namespaced::<Job>(client, namespace);
    let now = jiff::Timestamp::now();
    let now_text = now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let reference = ObjectReference {
        api_version: Some("batch/v1".into()),
        kind: Some("Job".into()),
        name: Some(name.into()),
        namespace: Some(namespace.into()),
        uid: Some(uid.into()),
        ..ObjectReference::default()
    };

    let finished =
        condition_true(&object.data, "Complete") || condition_true(&object.data, "Failed");
    if finished {
        return expire_after_ttl(
            &job_api,
            name,
            spec.ttl_seconds_after_finished,
            &status,
            now,
        )
        .await;
    }
    if meta.deletion_timestamp.is_some() {
        return Ok(());
    }
    let mine: Vec<&DynamicObject> = pods
        .iter()
        .filter(|p| {
            p.metadata.namespace.as_deref() == Some(namespace)
                && controller_uid(&p.metadata) == Some(uid)
        })
        .collect();
    let counts = count(&mine);
    let before = |field: &str| status.get(field).and_then(Value::as_i64).unwrap_or(0);
    let succeeded = counts.succeeded.max(before("succeeded"));
    let failed = counts.failed.max(before("failed"));
    let completions = spec.completions.map(i64::from);
    let parallelism = i64::from(spec.parallelism.unwrap_or(1));
    let backoff_limit = i64::from(spec.backoff_limit.unwrap_or(6));
    let suspended = spec.suspend.unwrap_or(false);
    let started = status
        .get("startTime")
        .and_then(Value::as_str)
        .map(str::to_string);
    let start_time = started
        .clone()
        .or_else(|| (!suspended).then(|| now_text.clone()));
    let past_deadline = match (spec.active_deadline_seconds, start_time.as_deref()) {
        (Some(limit), Some(start)) => start
            .parse::<jiff::Timestamp>()
            .is_ok_and(|s| s + jiff::SignedDuration::from_secs(limit) <= now),
        _ => false,
    };

    let mut conditions: Vec<Value> = status
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|c| suspended || c["type"] != "Suspended")
        .collect();
    let pod_api = namespaced::<Pod>(client, namespace);
    let failure = if failed > backoff_limit {
        Some((
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
        ))
    } else if past_deadline {
        Some((
            "DeadlineExceeded",
            "Job was active longer than specified deadline",
        ))
    } else {
        None
    };
    let complete = match completions {
        Some(total) => succeeded >= total,
        // Without completions, the first success ends the Job once nothing else runs.
        None => succeeded > 0 && counts.active == 0,
    };
    let mut completion_time = status.get("completionTime").cloned();
    let mut active = counts.active;
    if let Some((reason, message)) = failure {
        delete_pods(&pod_api, &mine).await?;
        active = 0;
        if interim {
            conditions.push(condition("FailureTarget", reason, message, &now_text));
        }
        conditions.push(condition("Failed", reason, message, &now_text));
        events
            .warn(reference, reason, "Failing", message.into())
            .await;
    } else if complete {
        if interim {
            conditions.push(condition(
                "SuccessCriteriaMet",
                "CompletionsReached",
                "Reached expected number of succeeded pods",
                &now_text,
            ));
        }
        conditions.push(condition(
            "Complete",
            "CompletionsReached",
            "Reached expected number of succeeded pods",
            &now_text,
        ));
        completion_time = Some(json!(now_text));
        events
            .normal(reference, "Completed", "Completing", "Job completed".into())
            .await;
    } else if suspended {
        delete_pods(&pod_api, &mine).await?;
        active = 0;
        if !conditions.iter().any(|c| c["type"] == "Suspended") {
            conditions.push(condition(
                "Suspended",
                "JobSuspended",
                "Job suspended",
                &now_text,
            ));
        }
    } else {
        let remaining = completions.map_or(parallelism, |total| total - succeeded);
        let wanted = parallelism.min(remaining).max(0);
        let waiting = counts
            .last_failure
            .is_some_and(|at| at + jiff::SignedDuration::from_secs(backoff_seconds(failed)) > now);
        if active < wanted && !waiting {
            let Some(template) = object.data.pointer("/spec/template") else {
                return Ok(());
            };
            let owner = owner_reference("batch/v1", "Job", name, uid);
            let pod = pod_from_template(template, namespace, owner)?;
            for _ in active..wanted {
                let created = pod_api.create(&PostParams::default(), &pod).await?;
                let pod_name = created.metadata.name.unwrap_or_default();
                events
                    .normal(
                        reference.clone(),
                        "SuccessfulCreate",
                        "Create",
                        format!("Created pod: {pod_name}"),
                    )
                    .await;
            }
            active = wanted;
        }
    }

    // `active`, `succeeded` and `failed` are omitted when zero (`omitempty`); `ready` and
    // `terminating` are pointers, written as 0.
    let mut new_status = json!({
        "ready": counts.ready,
        "terminating": counts.terminating,
        "uncountedTerminatedPods": {},
    });
    for (field, value) in [
        ("active", active),
        ("succeeded", succeeded),
        ("failed", failed),
    ] {
        if value != 0 {
            new_status[field] = json!(value);
        }
    }
    if !conditions.is_empty() {
        new_status["conditions"] = json!(conditions);
    }
    if let Some(start) = start_time {
        new_status["startTime"] = json!(start);
    }
    if let Some(done) = completion_time {
        new_status["completionTime"] = done;
    }
    if new_status == status {
        return Ok(());
    }
    let patch =
        json!({"metadata": {"resourceVersion": meta.resource_version}, "status": new_status});
    job_api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    Ok(())
}

async fn delete_pods(
    pod_api: &Api<DynamicObject>,
    pods: &[&DynamicObject],
) -> Result<(), kube::Error> {
    for pod in pods.iter().filter(|p| is_active(p)) {
        let Some(pod_name) = pod.metadata.name.as_deref() else {
            continue;
        };
        match pod_api.delete(pod_name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

/// The TTL-after-finished controller: a finished Job with `ttlSecondsAfterFinished` is
/// deleted (with its pods, in the background) that long after it finished.
async fn expire_after_ttl(
    job_api: &Api<DynamicObject>,
    name: &str,
    ttl: Option<i32>,
    status: &Value,
    now: jiff::Timestamp,
) -> Result<(), SyncError> {
    let Some(ttl) = ttl else {
        return Ok(());
    };
    let finished = status
        .get("conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| c["type"] == "Complete" || c["type"] == "Failed")
        .filter_map(|c| c.get("lastTransitionTime").and_then(Value::as_str))
        .filter_map(|t| t.parse::<jiff::Timestamp>().ok())
        .max();
    if finished.is_some_and(|at| at + jiff::SignedDuration::from_secs(i64::from(ttl)) <= now) {
        let params = DeleteParams::background();
        match job_api.delete(name, &params).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => return Err(error.into()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::backoff_seconds;

    #[test]
    fn backoff_doubles_up_to_six_minutes() {
        assert_eq!(backoff_seconds(0), 0);
        assert_eq!(backoff_seconds(1), 10);
        assert_eq!(backoff_seconds(3), 40);
        assert_eq!(backoff_seconds(10), 360);
    }
}
