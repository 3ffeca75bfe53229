//! `resource.k8s.io/v1` DeviceTaintRule, served from Kubernetes 1.37 (KEP-5055,
//! `DRADeviceTaintRules` GA and on by default): one taint for every device its selector
//! matches, as if each of those devices published it in its ResourceSlice.
//!
//! The type is written here from `k8s.io/api@v0.37.2` `resource/v1/types.go`, because the
//! `k8s-openapi` types the emulator builds on are 1.34's. The selector's `deviceClassName`
//! and CEL `selectors` were tombstoned in 1.35: they are unknown fields (dropped, with a
//! warning), as upstream decodes them. `fake_dra_api::upstream::device_taint_rule` is
//! the clients' twin; the server keeps its own, as it keeps no client code on the
//! interface it stands in for, and its type carries the OpenAPI schema it serves.

use k8s_openapi::api::resource::v1::DeviceTaint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `DeviceTaintRule`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "io.k8s.api.resource.v1.DeviceTaintRule")]
pub struct DeviceTaintRule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Required; `taint` is always written (a Go struct field without a pointer).
    #[serde(default)]
    pub spec: DeviceTaintRuleSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<DeviceTaintRuleStatus>,
}

/// `DeviceTaintRuleSpec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "io.k8s.api.resource.v1.DeviceTaintRuleSpec")]
pub struct DeviceTaintRuleSpec {
    /// No selector matches no device; an empty one matches every device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_selector: Option<DeviceTaintSelector>,
    #[serde(default)]
    pub taint: DeviceTaint,
}

/// `DeviceTaintSelector`: every field set must match.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "io.k8s.api.resource.v1.DeviceTaintSelector")]
pub struct DeviceTaintSelector {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
}

/// `DeviceTaintRuleStatus`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "io.k8s.api.resource.v1.DeviceTaintRuleStatus")]
pub struct DeviceTaintRuleStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
}

impl DeviceTaintRule {
    /// Whether the rule's taint applies to `device` of `pool` of `driver`.
    pub fn selects(&self, driver: &str, pool: &str, device: &str) -> bool {
        let Some(selector) = &self.spec.device_selector else {
            return false;
        };
        let matches = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
        matches(&selector.driver, driver)
            && matches(&selector.pool, pool)
            && matches(&selector.device, device)
    }
}

/// What the rule's strategy does to `spec.taint.timeAdded` before validation: set to now
/// when missing, and on an update that changes the effect while keeping the old time
/// (`DeviceTaint.TimeAdded`'s contract in `resource/v1/types.go`).
pub(super) fn stamp_time_added(old: Option<&Value>, new: &mut Value, now: &str) {
    let old_taint = old.and_then(|o| o.pointer("/spec/taint"));
    let Some(taint) = new
        .pointer_mut("/spec/taint")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    let time = taint.get("timeAdded").filter(|t| !t.is_null());
    let effect_changed = old_taint.is_some_and(|o| o.get("effect") != taint.get("effect"));
    let kept_old_time = old_taint.is_some_and(|o| o.get("timeAdded") == time);
    if time.is_none() || (effect_changed && kept_old_time) {
        taint.insert("timeAdded".into(), Value::String(now.into()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(selector: Option<DeviceTaintSelector>) -> DeviceTaintRule {
        DeviceTaintRule {
            spec: DeviceTaintRuleSpec {
                device_selector: selector,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn time_added_is_set_when_missing_and_when_the_effect_changes_alone() {
        use serde_json::json;
        let mut created = json!({"spec": {"taint": {"key": "k", "effect": "None"}}});
        stamp_time_added(None, &mut created, "T1");
        assert_eq!(created["spec"]["taint"]["timeAdded"], "T1");
        let mut renamed =
            json!({"spec": {"taint": {"key": "k2", "effect": "None", "timeAdded": "T1"}}});
        stamp_time_added(Some(&created), &mut renamed, "T2");
        assert_eq!(renamed["spec"]["taint"]["timeAdded"], "T1");
        let mut escalated =
            json!({"spec": {"taint": {"key": "k2", "effect": "NoExecute", "timeAdded": "T1"}}});
        stamp_time_added(Some(&renamed), &mut escalated, "T3");
        assert_eq!(escalated["spec"]["taint"]["timeAdded"], "T3");
        let mut given =
            json!({"spec": {"taint": {"key": "k2", "effect": "NoSchedule", "timeAdded": "T0"}}});
        stamp_time_added(Some(&escalated), &mut given, "T4");
        assert_eq!(given["spec"]["taint"]["timeAdded"], "T0");
    }

    #[test]
    fn no_selector_matches_nothing_and_an_empty_one_everything() {
        assert!(!rule(None).selects("d", "p", "x"));
        assert!(rule(Some(DeviceTaintSelector::default())).selects("d", "p", "x"));
    }

    #[test]
    fn every_field_set_must_match() {
        let selector = DeviceTaintSelector {
            driver: Some("gpu.example.com".into()),
            pool: None,
            device: Some("gpu-0".into()),
        };
        let r = rule(Some(selector));
        assert!(r.selects("gpu.example.com", "node-a", "gpu-0"));
        assert!(r.selects("gpu.example.com", "node-b", "gpu-0"));
        assert!(!r.selects("gpu.example.com", "node-a", "gpu-1"));
        assert!(!r.selects("nic.example.com", "node-a", "gpu-0"));
    }
}
