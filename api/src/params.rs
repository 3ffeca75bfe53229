//! What users ask for: `FakeClaimParameters` (per claim) and `DeviceClassParameters` (per
//! class).
//!
//! The limits are enforced twice: in the CRD schema, so `kubectl apply` rejects bad objects
//! up front, and in [`FakeClaimParametersSpec::validate`], because the controller must not
//! trust that the CRD installed in the cluster is the one generated from this code.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Most parent devices one claim may ask for.
///
/// 128 is the most devices one ResourceSlice may list, and so the most a node can have with
/// `--num-devices`; a claim must fit on one node, so asking for more can never succeed.
pub const MAX_COUNT: i32 = 128;

/// Most children per parent device.
///
/// With [`MAX_COUNT`] parents this keeps a claim at ≤ 8192 `FAKE_DEVICE_<i>` variables,
/// which container runtimes and shells handle without trouble.
pub const MAX_SPLIT: i32 = 64;

/// Longest model name; a DNS label's length, so a model can also be used as a label value.
pub const MAX_MODEL_LEN: usize = 63;

/// The characters of a model name, as a schema pattern (kept in step with [`validate_model`]).
pub const MODEL_PATTERN: &str = "^[A-Za-z0-9._-]+$";

/// Why parameters were refused. The messages name the field, so they can go into an Event
/// on the claim as they are.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParamsError {
    /// An integer field outside its bounds.
    #[error("{field} must be between {min} and {max}, got {got}")]
    OutOfRange {
        /// The field's path in the object, e.g. `spec.count`.
        field: &'static str,
        /// Smallest allowed value.
        min: i32,
        /// Largest allowed value.
        max: i32,
        /// What the object had.
        got: i64,
    },
    /// A model name that is empty, too long, or has characters outside `[A-Za-z0-9._-]`.
    #[error("{field} {reason}")]
    InvalidModel {
        /// The field's path in the object, e.g. `spec.selector.model`.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The class and the claim each select a model, and not the same one: no device can
    /// satisfy both.
    #[error(
        "the class parameters select model {class:?} but the claim parameters select model {claim:?}"
    )]
    ModelConflict {
        /// The model the DeviceClassParameters select.
        class: String,
        /// The model the FakeClaimParameters select.
        claim: String,
    },
}

/// Narrows which devices may be allocated. Every field is optional; an absent field
/// matches any device.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelSelector {
    /// Only devices of this model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), pattern(r"^[A-Za-z0-9._-]+$"))]
    pub model: Option<String>,
}

impl ModelSelector {
    /// Checks the selector's fields; `field` is the selector's path, used in the error.
    fn validate(&self, field: &'static str) -> Result<(), ParamsError> {
        match &self.model {
            Some(model) => {
                validate_model(model).map_err(|reason| ParamsError::InvalidModel { field, reason })
            }
            None => Ok(()),
        }
    }
}

/// Checks a model name: 1 to [`MAX_MODEL_LEN`] characters of `[A-Za-z0-9._-]`. Returns
/// what is wrong, for the caller to prefix with the field name.
pub fn validate_model(model: &str) -> Result<(), String> {
    if model.is_empty() {
        return Err("must not be empty".to_string());
    }
    if model.len() > MAX_MODEL_LEN {
        return Err(format!(
            "must be at most {MAX_MODEL_LEN} characters, got {}",
            model.len()
        ));
    }
    if let Some(bad) = model
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "may only contain letters, digits, '.', '_' and '-', found {bad:?} in {model:?}"
        ));
    }
    Ok(())
}

/// Parameters of one claim, referenced by the claim's `parametersRef` (classic DRA) or
/// embedded as opaque config (structured DRA).
///
/// A claim gets `count` parent devices on one node; each parent is exposed to the
/// containers as `split` child devices.
#[derive(CustomResource, Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
// clippy mistakes repeated `type_ = "integer"` in the printcolumns for duplicate attributes.
#[allow(clippy::duplicated_attributes)]
#[kube(
    group = "fake.resource.3-shake.com",
    version = "v1alpha1",
    kind = "FakeClaimParameters",
    plural = "fakeclaimparameters",
    namespaced,
    derive = "PartialEq",
    doc = "Parameters of a claim for fake devices: how many, how finely split, which model.",
    printcolumn(name = "Count", type_ = "integer", json_path = ".spec.count"),
    printcolumn(name = "Split", type_ = "integer", json_path = ".spec.split"),
    printcolumn(name = "Model", type_ = "string", json_path = ".spec.selector.model"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct FakeClaimParametersSpec {
    /// Number of parent devices, all on one node.
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = 128))]
    pub count: i32,

    /// Number of child devices each parent is split into.
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = 64))]
    pub split: i32,

    /// Which devices qualify; absent means any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<ModelSelector>,
}

fn one() -> i32 {
    1
}

impl Default for FakeClaimParametersSpec {
    fn default() -> Self {
        Self {
            count: 1,
            split: 1,
            selector: None,
        }
    }
}

impl FakeClaimParametersSpec {
    /// Checks every field against the limits the schema declares.
    pub fn validate(&self) -> Result<(), ParamsError> {
        check_range("spec.count", self.count, MAX_COUNT)?;
        check_range("spec.split", self.split, MAX_SPLIT)?;
        if let Some(selector) = &self.selector {
            selector.validate("spec.selector.model")?;
        }
        Ok(())
    }

    /// Validates these parameters and combines them with the class's into what the
    /// allocator needs.
    pub fn resolve(
        &self,
        class: Option<&DeviceClassParametersSpec>,
    ) -> Result<ClaimRequest, ParamsError> {
        self.validate()?;
        if let Some(class) = class {
            class.validate()?;
        }
        let model = effective_model(
            class.and_then(|c| c.selector.as_ref()),
            self.selector.as_ref(),
        )?;
        Ok(ClaimRequest {
            // validate() guarantees both are in 1..=MAX, so the conversions cannot fail.
            count: usize::try_from(self.count).unwrap_or(1),
            split: usize::try_from(self.split).unwrap_or(1),
            model: model.map(str::to_owned),
        })
    }
}

fn check_range(field: &'static str, got: i32, max: i32) -> Result<(), ParamsError> {
    if (1..=max).contains(&got) {
        Ok(())
    } else {
        Err(ParamsError::OutOfRange {
            field,
            min: 1,
            max,
            got: i64::from(got),
        })
    }
}

/// A claim's parameters after validation and after merging in the class: what the
/// allocator needs, in the types it computes with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRequest {
    /// Parent devices to allocate, 1..=[`MAX_COUNT`].
    pub count: usize,
    /// Children per parent, 1..=[`MAX_SPLIT`].
    pub split: usize,
    /// Required model, if any.
    pub model: Option<String>,
}

/// Parameters of a class, referenced by a ResourceClass's `parametersRef`. Cluster-scoped
/// because classes are; an admin uses them to restrict every claim of the class.
#[derive(
    CustomResource, Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema,
)]
#[kube(
    group = "fake.resource.3-shake.com",
    version = "v1alpha1",
    kind = "DeviceClassParameters",
    plural = "deviceclassparameters",
    derive = "PartialEq",
    doc = "Parameters of a ResourceClass for fake devices: restrictions every claim of the class gets.",
    printcolumn(name = "Model", type_ = "string", json_path = ".spec.selector.model"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct DeviceClassParametersSpec {
    /// Which devices claims of this class may get; absent means any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<ModelSelector>,
}

impl DeviceClassParametersSpec {
    /// Checks every field against the limits the schema declares.
    pub fn validate(&self) -> Result<(), ParamsError> {
        match &self.selector {
            Some(selector) => selector.validate("spec.selector.model"),
            None => Ok(()),
        }
    }
}

/// The model a claim's devices must have, given the class's and the claim's selectors.
///
/// Both apply: if only one names a model, that one; if both do, they must agree, since no
/// device has two models. `None` means any model.
pub fn effective_model<'a>(
    class: Option<&'a ModelSelector>,
    claim: Option<&'a ModelSelector>,
) -> Result<Option<&'a str>, ParamsError> {
    let class = class.and_then(|s| s.model.as_deref());
    let claim = claim.and_then(|s| s.model.as_deref());
    match (class, claim) {
        (Some(class), Some(claim)) if class != claim => Err(ParamsError::ModelConflict {
            class: class.to_owned(),
            claim: claim.to_owned(),
        }),
        (Some(model), _) | (None, Some(model)) => Ok(Some(model)),
        (None, None) => Ok(None),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn spec(count: i32, split: i32, model: Option<&str>) -> FakeClaimParametersSpec {
        FakeClaimParametersSpec {
            count,
            split,
            selector: model.map(|m| ModelSelector {
                model: Some(m.to_owned()),
            }),
        }
    }

    #[test]
    fn defaults_apply_to_an_empty_spec() {
        let spec: FakeClaimParametersSpec = serde_json::from_str("{}").unwrap();
        assert_eq!(spec, FakeClaimParametersSpec::default());
        assert_eq!(spec.count, 1);
        assert_eq!(spec.split, 1);
        spec.validate().unwrap();
    }

    #[test]
    fn bounds_are_inclusive() {
        spec(1, 1, None).validate().unwrap();
        spec(MAX_COUNT, MAX_SPLIT, None).validate().unwrap();
    }

    #[test]
    fn errors_name_the_field_and_the_limit() {
        let err = spec(0, 1, None).validate().unwrap_err();
        assert_eq!(
            err.to_string(),
            "spec.count must be between 1 and 128, got 0"
        );
        let err = spec(129, 1, None).validate().unwrap_err();
        assert_eq!(
            err.to_string(),
            "spec.count must be between 1 and 128, got 129"
        );
        let err = spec(1, 65, None).validate().unwrap_err();
        assert_eq!(
            err.to_string(),
            "spec.split must be between 1 and 64, got 65"
        );
        let err = spec(1, -3, None).validate().unwrap_err();
        assert_eq!(
            err.to_string(),
            "spec.split must be between 1 and 64, got -3"
        );
    }

    #[test]
    fn model_names_are_checked() {
        spec(1, 1, Some("fake-gpu_v2.1")).validate().unwrap();
        spec(1, 1, Some(&"m".repeat(63))).validate().unwrap();

        let err = spec(1, 1, Some(&"m".repeat(64))).validate().unwrap_err();
        assert_eq!(
            err.to_string(),
            "spec.selector.model must be at most 63 characters, got 64"
        );
        let err = spec(1, 1, Some("a b")).validate().unwrap_err();
        assert!(
            err.to_string()
                .starts_with("spec.selector.model may only contain")
        );
        let err = spec(1, 1, Some("")).validate().unwrap_err();
        assert_eq!(err.to_string(), "spec.selector.model must not be empty");
    }

    #[test]
    fn class_and_claim_models_combine() {
        let a = ModelSelector {
            model: Some("a".into()),
        };
        let b = ModelSelector {
            model: Some("b".into()),
        };
        let any = ModelSelector::default();
        assert_eq!(effective_model(None, None).unwrap(), None);
        assert_eq!(effective_model(Some(&any), Some(&any)).unwrap(), None);
        assert_eq!(effective_model(Some(&a), None).unwrap(), Some("a"));
        assert_eq!(effective_model(Some(&any), Some(&b)).unwrap(), Some("b"));
        assert_eq!(effective_model(Some(&a), Some(&a)).unwrap(), Some("a"));
        let err = effective_model(Some(&a), Some(&b)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the class parameters select model \"a\" but the claim parameters select model \"b\""
        );
    }

    #[test]
    fn resolve_merges_class_and_claim() {
        let class = DeviceClassParametersSpec {
            selector: Some(ModelSelector {
                model: Some("x1".into()),
            }),
        };
        let request = spec(4, 2, None).resolve(Some(&class)).unwrap();
        assert_eq!(
            request,
            ClaimRequest {
                count: 4,
                split: 2,
                model: Some("x1".into())
            }
        );
        assert!(spec(0, 2, None).resolve(None).is_err());
        assert!(spec(1, 1, Some("y")).resolve(Some(&class)).is_err());
    }

    #[test]
    fn parses_the_documented_yaml() {
        let yaml = "apiVersion: fake.resource.3-shake.com/v1alpha1\n\
                    kind: FakeClaimParameters\n\
                    metadata: {name: four-by-two, namespace: default}\n\
                    spec: {count: 4, split: 2, selector: {model: fake-x}}\n";
        let params: FakeClaimParameters = serde_yaml_ng::from_str(yaml).unwrap();
        assert_eq!(params.spec, spec(4, 2, Some("fake-x")));
    }
}
