//! Typed opaque config: the `opaque.parameters` of a claim's (or its class's) config
//! entries for this driver, decoded into the profile's own [`OpaqueConfig`] type and
//! checked, before the profile sees them. Every refusal names the field, from
//! `status.allocation.devices.config[<i>].opaque.parameters` down, and the limit.

use std::fmt::Debug;

use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::claim_data::{ConfigEntry, DriverAllocation, ProfileError, shorten_to};

/// The most bytes of `opaque.parameters` (as JSON) decoded: the API server's own limit
/// (`OpaqueParametersMaxLength`, 10 KiB), so nothing it accepts is refused and nothing
/// bigger is parsed.
pub const MAX_PARAMETERS_BYTES: usize = 10 * 1024;

/// The longest field path below `parameters` an error shows, in bytes.
const MAX_PATH_BYTES: usize = 256;
/// The longest message about a config an error shows, in bytes.
const MAX_MESSAGE_BYTES: usize = 1024;

/// A driver's opaque config type: a Kubernetes-style object (`apiVersion`, `kind` and
/// the type's own fields), decoded from `opaque.parameters` by the plugin. The plugin
/// checks `apiVersion` and `kind` and takes them off before decoding, so the type holds
/// only its own fields (use `#[serde(deny_unknown_fields)]` to refuse typos).
///
/// ```
/// use dra_kubelet_plugin::claim::{ConfigEntry, ConfigSource};
/// use dra_kubelet_plugin::config::{FieldError, OpaqueConfig, decode};
/// use serde_json::json;
///
/// #[derive(Debug, Clone, serde::Deserialize)]
/// #[serde(deny_unknown_fields)]
/// struct Lanes {
///     lanes: u32,
/// }
///
/// impl OpaqueConfig for Lanes {
///     const TYPE: Option<(&'static str, &'static str)> = Some(("nic.example.com/v1", "Lanes"));
///     fn validate(&self) -> Result<(), FieldError> {
///         if self.lanes == 0 || self.lanes > 16 {
///             return Err(FieldError::new("lanes", format!("must be 1 to 16, got {}", self.lanes)));
///         }
///         Ok(())
///     }
/// }
///
/// let entry = |v| ConfigEntry::new(ConfigSource::FromClaim, v, 0);
/// let ok = decode::<Lanes>("nic.example.com", entry(json!({"apiVersion": "nic.example.com/v1", "kind": "Lanes", "lanes": 4})));
/// assert_eq!(ok.unwrap().config.lanes, 4);
/// let err = decode::<Lanes>("nic.example.com", entry(json!({"apiVersion": "nic.example.com/v1", "kind": "Lanes", "lanes": 32})));
/// assert_eq!(
///     err.unwrap_err().message,
///     "status.allocation.devices.config[0].opaque.parameters.lanes: must be 1 to 16, got 32"
/// );
/// ```
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
#[non_exhaustive]
pub struct NoConfig;

impl OpaqueConfig for NoConfig {
    const TYPE: Option<(&'static str, &'static str)> = None;
}

/// What is wrong with one field of a config.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
#[non_exhaustive]
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

/// Decodes every config of `allocation` as `C`: what the plugin does before
/// `DeviceProfile::prepare_allocation`.
pub(crate) fn decode_allocation<C: OpaqueConfig>(
    driver: &str,
    allocation: DriverAllocation<serde_json::Value>,
) -> Result<DriverAllocation<C>, ProfileError> {
    let configs = allocation
        .configs
        .into_iter()
        .map(|c| decode::<C>(driver, c))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(DriverAllocation::new(allocation.devices, configs))
}

/// Decodes one entry's parameters as `C`, or says which field is wrong.
pub fn decode<C: OpaqueConfig>(
    driver: &str,
    raw: ConfigEntry<serde_json::Value>,
) -> Result<ConfigEntry<C>, ProfileError> {
    let field = raw.field();
    // Bounded: the path and serde's message quote the user's keys and values, which may
    // be thousands of characters long (a 13 KB message, found by fuzzing).
    let fail = |sub: &str, message: String| {
        ProfileError::new(
            "bad_parameters",
            format!(
                "{field}{}: {}",
                shorten_to(sub, MAX_PATH_BYTES),
                shorten_to(&message, MAX_MESSAGE_BYTES)
            ),
        )
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
        ConfigEntry::new(crate::claim_data::ConfigSource::FromClaim, v, 2)
    }

    fn err<C: OpaqueConfig>(v: serde_json::Value) -> String {
        decode::<C>("w.example.com", entry(v)).unwrap_err().message
    }

    /// Found by fuzzing (`fuzz::plugin_opaque_configs`): an unknown key of 6,000 characters
    /// made a 13 KB message (the path and serde's message both quote it).
    #[test]
    fn a_refusal_quoting_a_long_key_is_bounded() {
        let key = "k".repeat(6000);
        let message =
            err::<Width>(json!({"apiVersion": "w.example.com/v1", "kind": "Width", key: 1}));
        assert!(message.len() < 1600, "{} bytes: {message}", message.len());
        assert!(
            message.starts_with("status.allocation.devices.config[2].opaque.parameters.kkk"),
            "{message}"
        );
        assert!(message.contains("(6001 bytes)"), "{message}");
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
