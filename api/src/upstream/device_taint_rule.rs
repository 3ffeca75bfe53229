//! `resource.k8s.io/v1` DeviceTaintRule of Kubernetes 1.37 (KEP-5055), which k8s-openapi
//! 0.29's `v1_34` types lack: one taint on every device its selector matches, as if each
//! device's ResourceSlice published it. Served from 1.37 (`DRADeviceTaintRules` GA); 1.33 to
//! 1.36 serve older versions of it behind the gate, which this type does not speak.

use k8s_openapi::api::resource::v1::DeviceTaint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use serde::{Deserialize, Serialize, Serializer};

use crate::upstream::v1alpha2::{serialize_object, serialize_opt};

/// The first Kubernetes minor release of 1.x that serves this type.
pub const SERVED_SINCE_MINOR: u32 = 37;
/// `DeviceTaintRuleStatusMaxConditions`.
pub const MAX_CONDITIONS: usize = 8;

/// A taint for the devices a selector matches. Cluster-scoped.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceTaintRule {
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// What is tainted, and how.
    #[serde(default)]
    pub spec: DeviceTaintRuleSpec,
    /// The eviction's progress, written by kube-controller-manager.
    #[serde(default)]
    pub status: Option<DeviceTaintRuleStatus>,
}

/// The selector and the taint.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceTaintRuleSpec {
    /// No selector matches no device; an empty one matches every device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_selector: Option<DeviceTaintSelector>,
    /// The taint; the API server sets `timeAdded` when it is missing.
    #[serde(default)]
    pub taint: DeviceTaint,
}

/// Which devices: each field that is set must match.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceTaintSelector {
    /// `spec.driver` of the device's slice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    /// `spec.pool.name` of the device's slice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// The device's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
}

/// `EvictionInProgress` and any later conditions.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceTaintRuleStatus {
    /// At most [`MAX_CONDITIONS`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
}

impl k8s_openapi::Resource for DeviceTaintRule {
    const API_VERSION: &'static str = "resource.k8s.io/v1";
    const GROUP: &'static str = "resource.k8s.io";
    const KIND: &'static str = "DeviceTaintRule";
    const VERSION: &'static str = "v1";
    const URL_PATH_SEGMENT: &'static str = "devicetaintrules";
    type Scope = k8s_openapi::ClusterResourceScope;
}

impl k8s_openapi::ListableResource for DeviceTaintRule {
    const LIST_KIND: &'static str = "DeviceTaintRuleList";
}

impl k8s_openapi::Metadata for DeviceTaintRule {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl Serialize for DeviceTaintRule {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct as _;
        serialize_object::<Self, _, _>(ser, 3, |obj| {
            obj.serialize_field("metadata", &self.metadata)?;
            obj.serialize_field("spec", &self.spec)?;
            serialize_opt(obj, "status", &self.status)
        })
    }
}

impl DeviceTaintRule {
    /// Whether the rule's taint is on `device` of `pool` of `driver`.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_with_api_version_and_kind() {
        let rule = DeviceTaintRule {
            metadata: ObjectMeta {
                name: Some("r".into()),
                ..Default::default()
            },
            spec: DeviceTaintRuleSpec {
                device_selector: Some(DeviceTaintSelector {
                    driver: Some("gpu.example.com".into()),
                    ..Default::default()
                }),
                taint: DeviceTaint {
                    key: "example.com/broken".into(),
                    effect: "NoExecute".into(),
                    ..Default::default()
                },
            },
            status: None,
        };
        let value = serde_json::to_value(&rule).unwrap_or_default();
        assert_eq!(value["apiVersion"], "resource.k8s.io/v1");
        assert_eq!(value["kind"], "DeviceTaintRule");
        assert_eq!(
            value["spec"]["deviceSelector"],
            serde_json::json!({"driver": "gpu.example.com"})
        );
        let back: Result<DeviceTaintRule, _> = serde_json::from_value(value);
        assert_eq!(back.ok(), Some(rule.clone()));
        assert!(rule.selects("gpu.example.com", "any", "gpu-0"));
        assert!(!rule.selects("nic.example.com", "any", "gpu-0"));
    }
}
