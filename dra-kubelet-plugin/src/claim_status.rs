//! Writing what a driver says about the devices of a claim it prepared
//! ([`crate::device_status`]) as the claim's `status.devices` entries of this driver and
//! pool, checked against the API's limits first; a read-modify-write of `resourceclaims/<name>/status` that keeps every other driver's
//! entries (on 1.36+ the API server also asks for `resourceclaims/driver`, see
//! [`crate::API_ACCESS`]).

use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use serde_json::{Value, json};

use crate::claim_data::ClaimRef;
use crate::device_status::{DeviceStatus, StatusError};
use crate::dra_mode::ResourceApi;

/// Why a claim's device status was not written.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The driver's status is not what the API takes.
    #[error(transparent)]
    Invalid(#[from] StatusError),
    /// A device the claim was not allocated from this driver's pool on this node.
    #[error(
        "status.devices[{index}].device: {device:?} is not a device the claim was allocated from the pools of node {pool:?}"
    )]
    NotAllocated {
        /// Its index.
        index: usize,
        /// The device.
        device: String,
        /// This node's pool.
        pool: String,
    },
    /// The claim is gone or is another object now.
    #[error("the claim is gone or was recreated (uid {0})")]
    Gone(String),
    /// The API refused or failed.
    #[error(transparent)]
    Api(#[from] kube::Error),
}

/// The `status.devices` entry of `status` for `driver`'s `pool`.
fn entry(driver: &str, pool: &str, status: &DeviceStatus, old: Option<&Value>) -> Value {
    let now = chrono_now();
    let mut e = json!({"driver": driver, "pool": pool, "device": status.device});
    if let Some(share) = &status.share_id {
        e["shareID"] = json!(share);
    }
    if !status.conditions.is_empty() {
        let conditions: Vec<Value> = status
            .conditions
            .iter()
            .map(|c| {
                // A condition whose status did not change keeps when it last changed.
                let since = old
                    .and_then(|o| o.get("conditions"))
                    .and_then(Value::as_array)
                    .and_then(|cs| {
                        cs.iter().find(|o| {
                            o.get("type").and_then(Value::as_str) == Some(c.type_.as_str())
                                && o.get("status").and_then(Value::as_str) == Some(c.status.as_str())
                        })
                    })
                    .and_then(|o| o.get("lastTransitionTime").cloned())
                    .unwrap_or_else(|| json!(now));
                json!({"type": c.type_, "status": c.status.as_str(), "reason": c.reason, "message": c.message, "lastTransitionTime": since})
            })
            .collect();
        e["conditions"] = Value::Array(conditions);
    }
    if let Some(data) = &status.data {
        e["data"] = data.clone();
    }
    if let Some(net) = &status.network_data {
        let mut n = serde_json::Map::new();
        if !net.interface_name.is_empty() {
            n.insert("interfaceName".into(), json!(net.interface_name));
        }
        if !net.ips.is_empty() {
            n.insert("ips".into(), json!(net.ips));
        }
        if !net.hardware_address.is_empty() {
            n.insert("hardwareAddress".into(), json!(net.hardware_address));
        }
        e["networkData"] = Value::Object(n);
    }
    e
}

/// RFC 3339 in UTC, seconds, without a date crate.
fn chrono_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let days = secs / 86_400;
    let (h, m, s) = (secs % 86_400 / 3600, secs % 3600 / 60, secs % 60);
    // Civil from days (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let mo = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(mo <= 2);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{m:02}:{s:02}Z")
}

/// Writes `statuses` as the claim's `status.devices` entries of `driver`'s pools on node
/// `pool` (its own, and `<pool>/<name>`), each with its device's pool, replacing that
/// driver and those pools' entries and keeping everyone else's; nothing is written when
/// they are already so. Retries a conflict (another writer in between).
pub async fn write(
    client: &kube::Client,
    api: ResourceApi,
    driver: &str,
    pool: &str,
    claim: &ClaimRef,
    statuses: &[DeviceStatus],
) -> Result<bool, WriteError> {
    for (i, s) in statuses.iter().enumerate() {
        s.check(i)?;
    }
    let resource = ApiResource {
        group: "resource.k8s.io".into(),
        version: api.version().into(),
        api_version: format!("resource.k8s.io/{}", api.version()),
        kind: "ResourceClaim".into(),
        plural: "resourceclaims".into(),
    };
    let claims: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &claim.namespace, &resource);
    let mut attempts = 0;
    loop {
        attempts += 1;
        let Some(mut object) = claims.get_opt(&claim.name).await? else {
            return Err(WriteError::Gone(claim.uid.to_string()));
        };
        if object.metadata.uid.as_deref() != Some(claim.uid.as_str()) {
            return Err(WriteError::Gone(claim.uid.to_string()));
        }
        let ours = |d: &Value| {
            d.get("driver").and_then(Value::as_str) == Some(driver)
                && d.get("pool")
                    .and_then(Value::as_str)
                    .is_some_and(|p| crate::allocation::is_node_pool(p, pool))
        };
        let allocated: Vec<(String, Option<String>, String)> = object.data["status"]["allocation"]
            ["devices"]["results"]
            .as_array()
            .map(|rs| {
                rs.iter()
                    .filter(|r| ours(r))
                    .map(|r| {
                        (
                            r["device"].as_str().unwrap_or_default().to_owned(),
                            r.get("shareID").and_then(Value::as_str).map(str::to_owned),
                            r["pool"].as_str().unwrap_or_default().to_owned(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let old: Vec<Value> = object.data["status"]["devices"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let mut devices: Vec<Value> = old.iter().filter(|d| !ours(d)).cloned().collect();
        for (index, s) in statuses.iter().enumerate() {
            let Some((_, _, device_pool)) = allocated
                .iter()
                .find(|(d, share, _)| *d == s.device && *share == s.share_id)
            else {
                return Err(WriteError::NotAllocated {
                    index,
                    device: s.device.clone(),
                    pool: pool.to_owned(),
                });
            };
            let before = old.iter().find(|d| {
                ours(d)
                    && d.get("pool").and_then(Value::as_str) == Some(device_pool.as_str())
                    && d.get("device").and_then(Value::as_str) == Some(s.device.as_str())
                    && d.get("shareID").and_then(Value::as_str) == s.share_id.as_deref()
            });
            devices.push(entry(driver, device_pool, s, before));
        }
        let unchanged = {
            let mut a = old.clone();
            let mut b = devices.clone();
            let key = |v: &Value| v.to_string();
            a.sort_by_key(key);
            b.sort_by_key(key);
            a == b
        };
        if unchanged {
            return Ok(false);
        }
        object.data["status"]["devices"] = Value::Array(devices);
        match claims
            .replace_status(&claim.name, &PostParams::default(), &object)
            .await
        {
            Ok(_) => return Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 && attempts < 5 => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339() {
        let now = chrono_now();
        assert_eq!(now.len(), 20, "{now}");
        assert!(
            now.starts_with("20") && now.ends_with('Z') && now.as_bytes()[10] == b'T',
            "{now}"
        );
    }
}
