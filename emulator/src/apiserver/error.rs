//! API errors rendered as `Status` bodies, the way kube-apiserver reports failures.

use serde_json::{Value, json};

/// One failed request: the HTTP code, the `Status.reason` and a message for humans.
///
/// Reasons are the `metav1.StatusReason` strings clients switch on (kube-rs exposes them as
/// `ErrorResponse.reason`), so a client sees the same error it would see from a cluster.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    /// `Status.details`: the object the error is about and, for `Invalid`, the field causes.
    pub details: Option<Value>,
}

/// A field-level problem of an `Invalid` (422) error, as in `StatusCause`.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldCause {
    /// `FieldValueInvalid`, `FieldValueRequired`, `FieldValueNotSupported`, `FieldValueForbidden`, ...
    pub reason: &'static str,
    /// Dotted path, e.g. `spec.count`.
    pub field: String,
    pub message: String,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message)
    }

    /// `<resource>.<group> "<name>" not found`, the apiserver's wording.
    pub fn not_found(qualified_resource: &str, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{qualified_resource} \"{name}\" not found"),
        )
        .with_details(name, qualified_resource)
    }

    /// For paths that name no resource this server serves.
    pub fn no_route(path: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!(
                "the server could not find the requested resource (emulator: no route for {path})"
            ),
        )
    }

    /// A verb the path does not serve. go-restful finds no route for the method and
    /// kube-apiserver's service error handler renders it with apimachinery's
    /// `NewGenericServerResponse(405, ...)`: this fixed message and empty details.
    pub fn method_not_allowed() -> Self {
        let mut err = Self::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        );
        err.details = Some(json!({}));
        err
    }

    pub fn already_exists(qualified_resource: &str, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{qualified_resource} \"{name}\" already exists"),
        )
        .with_details(name, qualified_resource)
    }

    /// The optimistic-concurrency failure (stale `resourceVersion` or failed precondition).
    pub fn conflict(qualified_resource: &str, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {qualified_resource} \"{name}\": {why}"),
        )
        .with_details(name, qualified_resource)
    }

    pub fn stale_resource_version(qualified_resource: &str, name: &str) -> Self {
        Self::conflict(
            qualified_resource,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 410 for a resourceVersion older than the retained history.
    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        Self::new(415, "UnsupportedMediaType", message)
    }

    /// 422 with one cause per invalid field, worded like apimachinery's field errors.
    pub fn invalid(kind_group: &str, name: &str, causes: Vec<FieldCause>) -> Self {
        let summary: Vec<String> = causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        let message = if summary.len() == 1 {
            format!("{kind_group} \"{name}\" is invalid: {}", summary[0])
        } else {
            format!(
                "{kind_group} \"{name}\" is invalid: [{}]",
                summary.join(", ")
            )
        };
        let causes: Vec<Value> = causes
            .iter()
            .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
            .collect();
        let (kind, group) = kind_group.split_once('.').unwrap_or((kind_group, ""));
        Self {
            code: 422,
            reason: "Invalid",
            message,
            details: Some(json!({"name": name, "group": group, "kind": kind, "causes": causes})),
        }
    }

    /// Something the emulator deliberately does not implement: said loudly, never faked.
    pub fn not_implemented(what: impl std::fmt::Display) -> Self {
        Self::new(
            501,
            "NotImplemented",
            format!("emulator: {what} is not implemented"),
        )
    }

    /// A read from a resourceVersion newer than the store's: kube-apiserver's watch cache
    /// waits for it (3 s), then gives up with a Timeout asking for a retry after 1 s
    /// (k8s.io/apiserver storage `NewTooLargeResourceVersionError`: `NewTimeoutError` with
    /// the cause `ResourceVersionTooLarge`). The emulator's store is always current, so the
    /// version can never arrive: it answers at once.
    pub fn resource_version_too_large(asked: u64, current: u64) -> Self {
        Self {
            details: Some(json!({
                "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                "retryAfterSeconds": 1,
            })),
            ..Self::new(
                504,
                "Timeout",
                format!("Timeout: Too large resource version: {asked}, current: {current}"),
            )
        }
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// An error kube-apiserver answers with no reason (`StatusReasonUnknown`) and 500: one
    /// that is not an API status when it reaches the handler, such as structured-merge-diff's
    /// (k8s.io/apiserver endpoints/handlers/responsewriters/status.go, `ErrorToAPIStatus`).
    pub fn unknown(message: impl Into<String>) -> Self {
        Self::new(500, "", message)
    }

    fn with_details(mut self, name: &str, qualified_resource: &str) -> Self {
        let (kind, group) = qualified_resource
            .split_once('.')
            .unwrap_or((qualified_resource, ""));
        self.details = Some(json!({"name": name, "group": group, "kind": kind}));
        self
    }

    /// The `meta.k8s.io/v1` `Status` body.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(map) = status.as_object_mut() {
            if let Some(details) = &self.details {
                map.insert("details".into(), details.clone());
            }
            // `reason` is `omitempty` in metav1.Status.
            if self.reason.is_empty() {
                map.remove("reason");
            }
        }
        status
    }
}

impl FieldCause {
    pub fn invalid(
        field: impl Into<String>,
        value: &Value,
        detail: impl std::fmt::Display,
    ) -> Self {
        let field = field.into();
        Self {
            reason: "FieldValueInvalid",
            message: format!("Invalid value: {value}: {detail}"),
            field,
        }
    }

    /// `Required value`, with `: <detail>` when there is one (apimachinery's `ErrorBody`).
    pub fn required(field: impl Into<String>, detail: impl std::fmt::Display) -> Self {
        let detail = detail.to_string();
        Self {
            reason: "FieldValueRequired",
            message: if detail.is_empty() {
                "Required value".to_string()
            } else {
                format!("Required value: {detail}")
            },
            field: field.into(),
        }
    }

    pub fn forbidden(field: impl Into<String>, detail: impl std::fmt::Display) -> Self {
        Self {
            reason: "FieldValueForbidden",
            message: format!("Forbidden: {detail}"),
            field: field.into(),
        }
    }

    /// apimachinery's `field.TooLong` (the value is omitted).
    pub fn too_long(field: impl Into<String>, max: usize) -> Self {
        Self {
            reason: "FieldValueTooLong",
            message: format!("Too long: may not be more than {max} bytes"),
            field: field.into(),
        }
    }

    pub fn too_many(field: impl Into<String>, actual: usize, max: usize) -> Self {
        Self {
            reason: "FieldValueTooMany",
            message: format!("Too many: {actual}: must have at most {max} items"),
            field: field.into(),
        }
    }

    pub fn not_supported(field: impl Into<String>, value: &Value, allowed: &[Value]) -> Self {
        let allowed: Vec<String> = allowed.iter().map(|v| v.to_string()).collect();
        Self {
            reason: "FieldValueNotSupported",
            message: format!(
                "Unsupported value: {value}: supported values: {}",
                allowed.join(", ")
            ),
            field: field.into(),
        }
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
