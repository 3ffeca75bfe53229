//! Reading a claim's parameters from the objects its `parametersRef` and its class's
//! `parametersRef` point at. Pure: the caller fetches the objects.
//!
//! The objects are read as JSON, not as the CRD types, because the schema in the cluster
//! may be older than ours (or bypassed): `count: "4"` or `4.5` must give an Event that
//! names the field, not a deserialization error about a struct.

use fake_dra_api::params::{
    DeviceClassParametersSpec, FakeClaimParametersSpec, ModelSelector, ParamsError,
};
use fake_dra_api::upstream::v1alpha2::{
    ResourceClaimParametersReference, ResourceClassParametersReference,
};
use fake_dra_api::{PARAMS_GROUP, params::MAX_COUNT, params::MAX_SPLIT};
use serde_json::Value;

use crate::allocator::Unsatisfiable;

/// Kind a claim's `parametersRef` must name.
pub const CLAIM_PARAMETERS_KIND: &str = "FakeClaimParameters";
/// Kind a class's `parametersRef` must name.
pub const CLASS_PARAMETERS_KIND: &str = "DeviceClassParameters";

/// Why a claim cannot be allocated until a user changes something. Each variant has an
/// Event reason ([`Problem::reason`]); the message names the object and field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    /// `parametersRef` names an object that does not exist.
    #[error("{kind} {name} not found{namespace_note}")]
    ParametersNotFound {
        /// The kind referenced.
        kind: &'static str,
        /// The name referenced.
        name: String,
        /// ` in namespace "x"`, or empty for cluster-scoped.
        namespace_note: String,
    },
    /// `parametersRef` names another kind or group.
    #[error(
        "{field} must reference apiGroup {PARAMS_GROUP:?} kind {expected:?}, got apiGroup {api_group:?} kind {kind:?}"
    )]
    WrongParametersKind {
        /// `spec.parametersRef` (claim) or `parametersRef` (class).
        field: &'static str,
        /// The kind we accept.
        expected: &'static str,
        /// The group given (empty for core).
        api_group: String,
        /// The kind given.
        kind: String,
    },
    /// The parameters object has bad values.
    #[error("{object}: {message}")]
    InvalidParameters {
        /// `FakeClaimParameters ns/name`.
        object: String,
        /// What is wrong, naming the field and the limit.
        message: String,
    },
    /// The inventory can never satisfy the request.
    #[error("{0}")]
    Unsatisfiable(#[from] Unsatisfiable),
}

impl Problem {
    /// The Event reason: short, PascalCase, says what to fix.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::ParametersNotFound { .. } => "ParametersNotFound",
            Self::WrongParametersKind { .. } => "WrongParametersKind",
            Self::InvalidParameters { .. } => "InvalidParameters",
            Self::Unsatisfiable(Unsatisfiable::UnknownModel { .. }) => "UnknownModel",
            Self::Unsatisfiable(Unsatisfiable::CountAboveInventory { .. }) => "CountAboveInventory",
            Self::Unsatisfiable(Unsatisfiable::NoNodes) => "NoNodes",
        }
    }
}

fn group_and_kind_ok(api_group: Option<&str>, kind: &str, expected: &str) -> bool {
    api_group == Some(PARAMS_GROUP) && kind == expected
}

/// Checks a claim's `parametersRef` names a `FakeClaimParameters`.
pub fn check_claim_ref(r: &ResourceClaimParametersReference) -> Result<(), Problem> {
    if group_and_kind_ok(r.api_group.as_deref(), &r.kind, CLAIM_PARAMETERS_KIND) {
        Ok(())
    } else {
        Err(Problem::WrongParametersKind {
            field: "spec.parametersRef",
            expected: CLAIM_PARAMETERS_KIND,
            api_group: r.api_group.clone().unwrap_or_default(),
            kind: r.kind.clone(),
        })
    }
}

/// Checks a class's `parametersRef` names a `DeviceClassParameters`.
pub fn check_class_ref(r: &ResourceClassParametersReference) -> Result<(), Problem> {
    if group_and_kind_ok(r.api_group.as_deref(), &r.kind, CLASS_PARAMETERS_KIND) {
        Ok(())
    } else {
        Err(Problem::WrongParametersKind {
            field: "ResourceClass parametersRef",
            expected: CLASS_PARAMETERS_KIND,
            api_group: r.api_group.clone().unwrap_or_default(),
            kind: r.kind.clone(),
        })
    }
}

fn invalid(object: &str, message: impl Into<String>) -> Problem {
    Problem::InvalidParameters {
        object: object.to_owned(),
        message: message.into(),
    }
}

fn describe(value: &Value) -> String {
    match value {
        Value::String(s) => format!("the string {s:?}"),
        Value::Null => "null".into(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
        Value::Number(n) => n.to_string(),
    }
}

/// An integer field of `spec` with a default of 1 and bounds `1..=max`.
fn int_field(
    object: &str,
    spec: &serde_json::Map<String, Value>,
    key: &str,
    field: &'static str,
    max: i32,
) -> Result<i32, Problem> {
    let Some(value) = spec.get(key) else {
        return Ok(1);
    };
    let out_of_range = |got: i64| {
        invalid(
            object,
            ParamsError::OutOfRange {
                field,
                min: 1,
                max,
                got,
            }
            .to_string(),
        )
    };
    match value {
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                i32::try_from(i)
                    .ok()
                    .filter(|v| (1..=max).contains(v))
                    .ok_or_else(|| out_of_range(i))
            } else if n.as_u64().is_some() {
                Err(out_of_range(i64::MAX))
            } else {
                Err(invalid(
                    object,
                    format!("{field} must be an integer between 1 and {max}, got {n}"),
                ))
            }
        }
        other => Err(invalid(
            object,
            format!(
                "{field} must be an integer between 1 and {max}, got {}",
                describe(other)
            ),
        )),
    }
}

fn selector(
    object: &str,
    spec: &serde_json::Map<String, Value>,
) -> Result<Option<ModelSelector>, Problem> {
    match spec.get("selector") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => serde_json::from_value(v.clone())
            .map(Some)
            .map_err(|e| invalid(object, format!("spec.selector: {e}"))),
    }
}

fn spec_of<'a>(
    object: &str,
    obj: &'a Value,
) -> Result<&'a serde_json::Map<String, Value>, Problem> {
    match obj.get("spec") {
        Some(Value::Object(spec)) => Ok(spec),
        None | Some(Value::Null) => Err(invalid(object, "has no spec")),
        Some(other) => Err(invalid(
            object,
            format!("spec must be an object, got {}", describe(other)),
        )),
    }
}

/// Reads a `FakeClaimParameters` object (as JSON) named `object` in messages.
pub fn claim_parameters(object: &str, obj: &Value) -> Result<FakeClaimParametersSpec, Problem> {
    let spec = spec_of(object, obj)?;
    let parsed = FakeClaimParametersSpec {
        count: int_field(object, spec, "count", "spec.count", MAX_COUNT)?,
        split: int_field(object, spec, "split", "spec.split", MAX_SPLIT)?,
        selector: selector(object, spec)?,
    };
    parsed
        .validate()
        .map_err(|e| invalid(object, e.to_string()))?;
    Ok(parsed)
}

/// Reads a `DeviceClassParameters` object (as JSON). A missing `spec` means no restriction.
pub fn class_parameters(object: &str, obj: &Value) -> Result<DeviceClassParametersSpec, Problem> {
    let parsed = match obj.get("spec") {
        None | Some(Value::Null) => DeviceClassParametersSpec::default(),
        Some(_) => DeviceClassParametersSpec {
            selector: selector(object, spec_of(object, obj)?)?,
        },
    };
    parsed
        .validate()
        .map_err(|e| invalid(object, e.to_string()))?;
    Ok(parsed)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn err(spec: Value) -> String {
        claim_parameters("FakeClaimParameters ns/p", &json!({ "spec": spec }))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn defaults_and_values() {
        let p = claim_parameters("p", &json!({"spec": {}})).unwrap();
        assert_eq!((p.count, p.split), (1, 1));
        let p = claim_parameters(
            "p",
            &json!({"spec": {"count": 4, "split": 2, "selector": {"model": "m"}}}),
        )
        .unwrap();
        assert_eq!((p.count, p.split), (4, 2));
    }

    #[test]
    fn bad_values_name_the_field() {
        let prefix = "FakeClaimParameters ns/p: ";
        assert_eq!(
            err(json!({"count": 0})),
            format!("{prefix}spec.count must be between 1 and 128, got 0")
        );
        assert_eq!(
            err(json!({"count": -1})),
            format!("{prefix}spec.count must be between 1 and 128, got -1")
        );
        assert_eq!(
            err(json!({"count": 1_000_000_000})),
            format!("{prefix}spec.count must be between 1 and 128, got 1000000000")
        );
        assert_eq!(
            err(json!({"count": "4"})),
            format!(
                "{prefix}spec.count must be an integer between 1 and 128, got the string \"4\""
            )
        );
        assert_eq!(
            err(json!({"count": 4.5})),
            format!("{prefix}spec.count must be an integer between 1 and 128, got 4.5")
        );
        assert_eq!(
            err(json!({"split": 1_000_000})),
            format!("{prefix}spec.split must be between 1 and 64, got 1000000")
        );
        assert_eq!(
            claim_parameters("FakeClaimParameters ns/p", &json!({}))
                .unwrap_err()
                .to_string(),
            format!("{prefix}has no spec")
        );
        assert!(err(json!({"selector": {"model": "a b"}})).contains("spec.selector.model"));
    }

    #[test]
    fn references_are_checked() {
        let ok = ResourceClaimParametersReference {
            api_group: Some(PARAMS_GROUP.into()),
            kind: CLAIM_PARAMETERS_KIND.into(),
            name: "p".into(),
        };
        check_claim_ref(&ok).unwrap();
        let wrong = ResourceClaimParametersReference {
            api_group: None,
            kind: "ConfigMap".into(),
            name: "p".into(),
        };
        assert_eq!(
            check_claim_ref(&wrong).unwrap_err().reason(),
            "WrongParametersKind"
        );
    }
}
