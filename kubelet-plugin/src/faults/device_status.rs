//! What the driver writes into `status.devices` of a claim, without I/O: the binding
//! conditions a `binding` fault turns out (`Ready`: the attached condition `True`;
//! `Fail`: the failure condition `True`; `Timeout`: nothing, so the scheduler gives up),
//! and a `deviceStatus` fault's conditions and data. Only for the devices of this
//! driver's pools that a fault selects; entries are keyed as the API keys them (driver,
//! pool, device, shareID).

use std::time::Duration;

use fake_dra_api::fault::BindingOutcome;
use serde_json::{Value, json};

use super::{NodeFaults, attach_failed_condition, attached_condition};

/// One `status.allocation.devices.results[]` entry, as far as this matters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocatedResult {
    pub driver: String,
    pub pool: String,
    pub device: String,
    pub share_id: Option<String>,
    /// Whether the scheduler copied binding conditions into it (it waits for them).
    pub has_binding_conditions: bool,
}

/// A condition to write, without its time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
}

/// One `status.devices[]` entry to write, without condition times.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub pool: String,
    pub device: String,
    pub share_id: Option<String>,
    pub conditions: Vec<Condition>,
    pub data: Option<Value>,
}

/// The entries `driver` writes for `results` of a claim allocated `age` ago, given the
/// faults of each pool (`faults_of(pool)`, `None` for pools not ours), and when to look
/// again (a binding outcome still waiting for its `afterSeconds`).
pub fn entries<'a>(
    driver: &str,
    results: &[AllocatedResult],
    faults_of: impl Fn(&str) -> Option<&'a NodeFaults>,
    age: Duration,
) -> (Vec<Entry>, Option<Duration>) {
    let mut entries = Vec::new();
    let mut again: Option<Duration> = None;
    for r in results.iter().filter(|r| r.driver == driver) {
        let Some(faults) = faults_of(&r.pool) else {
            continue;
        };
        let mut conditions = Vec::new();
        let mut data = None;
        if let Some((fault, b)) = faults.binding(&r.device)
            && r.has_binding_conditions
        {
            let due = Duration::from_secs(u64::from(b.after_seconds));
            if age < due {
                let wait = due - age;
                again = Some(again.map_or(wait, |a| a.min(wait)));
            } else {
                match b.outcome {
                    BindingOutcome::Ready => conditions.push(Condition {
                        type_: attached_condition(driver),
                        status: "True".into(),
                        reason: "Attached".into(),
                        message: format!("attached as DeviceFault {fault} asks"),
                    }),
                    BindingOutcome::Fail => conditions.push(Condition {
                        type_: attach_failed_condition(driver),
                        status: "True".into(),
                        reason: "AttachFailed".into(),
                        message: format!("attaching failed as DeviceFault {fault} asks"),
                    }),
                    BindingOutcome::Timeout => {}
                }
            }
        }
        if let Some((_, s)) = faults.device_status(&r.device) {
            for c in &s.conditions {
                if !conditions.iter().any(|x| x.type_ == c.type_) {
                    conditions.push(Condition {
                        type_: c.type_.clone(),
                        status: c.status.as_str().into(),
                        reason: c.reason.clone().unwrap_or_else(|| "DeviceFault".into()),
                        message: c.message.clone().unwrap_or_default(),
                    });
                }
            }
            data = s.data.clone();
        }
        if !conditions.is_empty() || data.is_some() {
            entries.push(Entry {
                pool: r.pool.clone(),
                device: r.device.clone(),
                share_id: r.share_id.clone(),
                conditions,
                data,
            });
        }
    }
    (entries, again)
}

/// The server-side apply body for a claim's `status.devices` (`now`: the conditions'
/// `lastTransitionTime`, RFC 3339).
pub fn apply_body(
    api_version: &str,
    namespace: &str,
    name: &str,
    driver: &str,
    entries: &[Entry],
    now: &str,
) -> Value {
    let devices: Vec<Value> = entries
        .iter()
        .map(|e| {
            let mut v = json!({
                "driver": driver,
                "pool": e.pool,
                "device": e.device,
                "conditions": e.conditions.iter().map(|c| json!({
                    "type": c.type_,
                    "status": c.status,
                    "reason": c.reason,
                    "message": c.message,
                    "lastTransitionTime": now,
                })).collect::<Vec<_>>(),
            });
            if let Some(share) = &e.share_id {
                v["shareID"] = json!(share);
            }
            if let Some(data) = &e.data {
                v["data"] = data.clone();
            }
            v
        })
        .collect();
    json!({
        "apiVersion": format!("resource.k8s.io/{api_version}"),
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "status": {"devices": devices},
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use fake_dra_api::fault::{
        BindingSpec, ConditionStatus, DeviceConditionSpec, DeviceFaultSpec, DeviceStatusSpec,
    };

    use super::*;
    use crate::faults::Fault;

    const DRIVER: &str = "fake.resource.3-shake.com";

    fn result(pool: &str, device: &str, binding: bool) -> AllocatedResult {
        AllocatedResult {
            driver: DRIVER.into(),
            pool: pool.into(),
            device: device.into(),
            share_id: None,
            has_binding_conditions: binding,
        }
    }

    fn node(spec: DeviceFaultSpec) -> NodeFaults {
        let devices: Vec<String> = (0..3).map(|i| format!("fake-{i}")).collect();
        NodeFaults::resolve(
            "n1",
            &devices,
            &[Fault {
                name: "f".into(),
                uid: "uid-f".into(),
                generation: 1,
                spec,
            }],
        )
    }

    fn binding(outcome: BindingOutcome, after: u32) -> DeviceFaultSpec {
        DeviceFaultSpec {
            devices: vec!["fake-1".into()],
            binding: Some(BindingSpec {
                outcome,
                after_seconds: after,
                binds_to_node: false,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn binding_turns_out_as_asked_after_its_delay() {
        let ready = node(binding(BindingOutcome::Ready, 5));
        let results = [
            result("n1", "fake-0", false),
            result("n1", "fake-1", true),
            result("other", "fake-1", true),
        ];
        let of = |p: &str| (p == "n1").then_some(&ready);
        let (early, again) = entries(DRIVER, &results, of, Duration::from_secs(2));
        assert!(early.is_empty());
        assert_eq!(again, Some(Duration::from_secs(3)));
        let (late, again) = entries(DRIVER, &results, of, Duration::from_secs(5));
        assert_eq!(again, None);
        assert_eq!(late.len(), 1);
        assert_eq!(late[0].device, "fake-1");
        assert_eq!(
            late[0].conditions[0].type_,
            "fake.resource.3-shake.com/attached"
        );
        assert_eq!(late[0].conditions[0].status, "True");

        let fail = node(binding(BindingOutcome::Fail, 0));
        let (e, _) = entries(
            DRIVER,
            &results,
            |p| (p == "n1").then_some(&fail),
            Duration::ZERO,
        );
        assert_eq!(
            e[0].conditions[0].type_,
            "fake.resource.3-shake.com/attach-failed"
        );
        let timeout = node(binding(BindingOutcome::Timeout, 0));
        let (e, again) = entries(
            DRIVER,
            &results,
            |p| (p == "n1").then_some(&timeout),
            Duration::ZERO,
        );
        assert!(
            e.is_empty() && again.is_none(),
            "a timeout writes nothing, ever"
        );
    }

    #[test]
    fn device_status_conditions_and_data() {
        let faults = node(DeviceFaultSpec {
            device_status: Some(DeviceStatusSpec {
                conditions: vec![DeviceConditionSpec {
                    type_: "Ready".into(),
                    status: ConditionStatus::False,
                    reason: Some("Warming".into()),
                    message: None,
                }],
                data: Some(json!({"temperature": 71})),
            }),
            ..Default::default()
        });
        let mut shared = result("n1", "fake-2", false);
        shared.share_id = Some("s-1".into());
        let (e, _) = entries(DRIVER, &[shared], |_| Some(&faults), Duration::ZERO);
        let body = apply_body("v1", "ns", "c", DRIVER, &e, "2026-12-03T00:00:00Z");
        assert_eq!(
            body["status"]["devices"][0],
            json!({"driver": DRIVER, "pool": "n1", "device": "fake-2", "shareID": "s-1",
                "data": {"temperature": 71},
                "conditions": [{"type": "Ready", "status": "False", "reason": "Warming", "message": "",
                    "lastTransitionTime": "2026-12-03T00:00:00Z"}]})
        );
        assert_eq!(body["metadata"], json!({"name": "c", "namespace": "ns"}));
    }
}
