//! Typed opaque config: the `opaque.parameters` of a claim's (or its class's) config
//! entries for this driver, decoded into the profile's own [`OpaqueConfig`] type and
//! checked, before the profile sees them. Every refusal names the field, from
//! `status.allocation.devices.config[<i>].opaque.parameters` down, and the limit.

use std::fmt::Debug;

use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::claim::{ClaimError, ClaimRef};
use crate::profile::{ConfigSource, DriverAllocation, ProfileError};

/// The most bytes of `opaque.parameters` (as JSON) decoded: the API server's own limit
/// (`OpaqueParametersMaxLength`, 10 KiB), so nothing it accepts is refused and nothing
/// bigger is parsed.
pub const MAX_PARAMETERS_BYTES: usize = 10 * 1024;

/// A driver's opaque config type: a Kubernetes-style object (`apiVersion`, `kind` and
/// the type's own fields), decoded from `opaque.parameters` by the plugin. The plugin
/// checks `apiVersion` and `kind` and takes them off before decoding, so the type holds
/// only its own fields (use `#[serde(deny_unknown_fields)]` to refuse typos).
pub trait OpaqueConfig: DeserializeOwned + Clone + Debug + Send + Sync + 'static {
    /// The `apiVersion` and `kind` a config must have; `None` for a driver that takes
    /// no opaque config (every config entry for it is then refused).
    const TYPE: Option<(&'static str, &'static str)>;

    /// Checks a decoded config against the driver's limits; the error names the field
    /// below `parameters`, e.g. `spec.split`.
    fn validate(&self) -> Result<(), FieldError> {
        Ok(())
    }
}

/// The config of a driver that takes none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct NoConfig;

impl OpaqueConfig for NoConfig {
    const TYPE: Option<(&'static str, &'static str)> = None;
}

/// What is wrong with one field of a config.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    /// The field below `parameters`, e.g. `spec.split`; empty for the whole object.
    pub field: String,
    /// What is wrong, with the limit.
    pub message: String,
}

impl FieldError {
    /// `field` is wrong: `message`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// One config entry of this driver, decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigEntry<C> {
    /// Where it came from; anything but `FromClass` counts as the claim's.
    pub source: ConfigSource,
    /// The requests it applies to; `None` means all.
    pub requests: Option<Vec<String>>,
    /// The decoded `opaque.parameters`.
    pub config: C,
    /// Its index in `status.allocation.devices.config`, for error messages.
    pub index: usize,
}

impl<C> ConfigEntry<C> {
    /// Whether it applies to `request` (a `request/subrequest` result is named by its
    /// request too).
    pub fn applies_to(&self, request: &str) -> bool {
        let base = request.split('/').next().unwrap_or(request);
        // A config naming the subrequest applies to it; one naming the request, to all
        // of its subrequests.
        self.requests
            .as_deref()
            .is_none_or(|rs| rs.iter().any(|r| r == request || r == base))
    }

    /// `status.allocation.devices.config[<index>].opaque.parameters`.
    pub fn field(&self) -> String {
        format!(
            "status.allocation.devices.config[{}].opaque.parameters",
            self.index
        )
    }
}

/// Decodes every config of `allocation` as `C`: what the plugin does before
/// [`crate::DeviceProfile::prepare_allocation`].
pub(crate) fn decode_allocation<C: OpaqueConfig>(
    driver: &str,
    allocation: DriverAllocation<serde_json::Value>,
) -> Result<DriverAllocation<C>, ProfileError> {
    let configs = allocation
        .configs
        .into_iter()
        .map(|c| decode::<C>(driver, c))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(DriverAllocation {
        devices: allocation.devices,
        configs,
    })
}

/// What the plugin makes of `claim` (as the API returns it) for `driver` on `node`
/// before asking the profile: the claim checked against what the kubelet asked for
/// (`claim_ref`'s uid), narrowed to this driver's devices in this node's pool, its
/// opaque configs decoded as `C` (class configs first). For a profile's unit tests.
pub fn allocation_of<C: OpaqueConfig>(
    driver: &str,
    node: &str,
    claim_ref: &ClaimRef,
    claim: &k8s_openapi::api::resource::v1::ResourceClaim,
) -> Result<DriverAllocation<C>, ClaimError> {
    let raw = crate::allocation::ours(
        driver,
        node,
        claim_ref,
        &crate::claim_reader::from_v1(claim),
    )?;
    decode_allocation(driver, raw).map_err(|source| ClaimError::Device {
        claim: claim_ref.to_string(),
        source,
    })
}

/// Decodes one entry's parameters as `C`, or says which field is wrong.
pub fn decode<C: OpaqueConfig>(
    driver: &str,
    raw: ConfigEntry<serde_json::Value>,
) -> Result<ConfigEntry<C>, ProfileError> {
    let field = raw.field();
    let fail = |sub: &str, message: String| {
        ProfileError::new("bad_parameters", format!("{field}{sub}: {message}"))
    };
    let Some((api_version, kind)) = C::TYPE else {
        return Err(ProfileError::new(
            "bad_parameters",
            format!(
                "status.allocation.devices.config[{}].opaque: driver {driver:?} takes no parameters; remove the opaque config",
                raw.index
            ),
        ));
    };
    let size = serde_json::to_vec(&raw.config).map_or(usize::MAX, |b| b.len());
    if size > MAX_PARAMETERS_BYTES {
        return Err(fail(
            "",
            format!(
                "is {size} bytes; at most {MAX_PARAMETERS_BYTES} (the API server's limit for opaque parameters)"
            ),
        ));
    }
    let serde_json::Value::Object(mut object) = raw.config else {
        return Err(fail(
            "",
            format!(
                "must be a {kind} object ({{\"apiVersion\": \"{api_version}\", \"kind\": \"{kind}\", ...}}), got {}",
                json_type(&raw.config)
            ),
        ));
    };
    for (key, wanted) in [("apiVersion", api_version), ("kind", kind)] {
        match object.remove(key) {
            Some(serde_json::Value::String(got)) if got == wanted => {}
            other => {
                let got = match &other {
                    Some(serde_json::Value::String(s)) => format!("{s:?}"),
                    Some(v) => json_type(v).to_owned(),
                    None => "nothing".to_owned(),
                };
                return Err(fail(
                    &format!(".{key}"),
                    format!("must be {wanted:?}, got {got}"),
                ));
            }
        }
    }
    let config: C =
        serde_path_to_error::deserialize(serde_json::Value::Object(object)).map_err(|e| {
            let path = e.path().to_string();
            let sub = if path == "." {
                String::new()
            } else {
                format!(".{path}")
            };
            fail(&sub, format!("is not a valid {kind}: {}", e.inner()))
        })?;
    config.validate().map_err(|e| {
        let sub = if e.field.is_empty() {
            String::new()
        } else {
            format!(".{}", e.field)
        };
        fail(&sub, e.message)
    })?;
    Ok(ConfigEntry {
        source: raw.source,
        requests: raw.requests,
        config,
        index: raw.index,
    })
}

fn json_type(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use serde_json::json;

    use super::*;

    #[derive(Debug, Clone, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Width {
        width: u32,
    }

    impl OpaqueConfig for Width {
        const TYPE: Option<(&'static str, &'static str)> = Some(("w.example.com/v1", "Width"));
        fn validate(&self) -> Result<(), FieldError> {
            if self.width > 64 {
                return Err(FieldError::new(
                    "width",
                    format!("must be at most 64, got {}", self.width),
                ));
            }
            Ok(())
        }
    }

    fn entry(v: serde_json::Value) -> ConfigEntry<serde_json::Value> {
        ConfigEntry {
            source: ConfigSource::FromClaim,
            requests: None,
            config: v,
            index: 2,
        }
    }

    fn err<C: OpaqueConfig>(v: serde_json::Value) -> String {
        decode::<C>("w.example.com", entry(v)).unwrap_err().message
    }

    #[test]
    fn decodes_the_type_and_names_the_field_of_every_refusal() {
        let ok = decode::<Width>(
            "w.example.com",
            entry(json!({"apiVersion": "w.example.com/v1", "kind": "Width", "width": 8})),
        )
        .unwrap();
        assert_eq!((ok.config.width, ok.index), (8, 2));
        let base = "status.allocation.devices.config[2].opaque.parameters";
        for (v, want) in [
            (json!([1]), ": must be a Width object"),
            (
                json!({"apiVersion": "w.example.com/v2", "kind": "Width"}),
                ".apiVersion: must be \"w.example.com/v1\", got \"w.example.com/v2\"",
            ),
            (
                json!({"apiVersion": "w.example.com/v1", "kind": "ConfigMap"}),
                ".kind: must be \"Width\", got \"ConfigMap\"",
            ),
            (
                json!({"apiVersion": "w.example.com/v1"}),
                ".kind: must be \"Width\", got nothing",
            ),
            (
                json!({"apiVersion": "w.example.com/v1", "kind": "Width", "width": "8"}),
                ".width: is not a valid Width: invalid type",
            ),
            (
                json!({"apiVersion": "w.example.com/v1", "kind": "Width", "widht": 8}),
                ": is not a valid Width: unknown field `widht`",
            ),
            (
                json!({"apiVersion": "w.example.com/v1", "kind": "Width", "width": 65}),
                ".width: must be at most 64, got 65",
            ),
        ] {
            let e = err::<Width>(v.clone());
            assert!(e.starts_with(base), "{v}: {e}");
            assert!(e.contains(want), "{v}: {e}\nwanted {want}");
        }
    }

    #[test]
    fn oversized_parameters_are_refused_unread() {
        let big =
            json!({"apiVersion": "w.example.com/v1", "kind": "Width", "pad": "x".repeat(1 << 20)});
        let e = err::<Width>(big);
        assert!(e.contains(".parameters: is 1048"), "{e}");
        assert!(e.contains("at most 10240"), "{e}");
    }

    #[test]
    fn a_driver_without_config_refuses_any() {
        let e = err::<NoConfig>(json!({}));
        assert_eq!(
            e,
            "status.allocation.devices.config[2].opaque: driver \"w.example.com\" takes no parameters; remove the opaque config"
        );
    }
}
