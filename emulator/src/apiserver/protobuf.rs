//! The protobuf bodies the emulator decodes: kubectl's typed clients send
//! `application/vnd.kubernetes.protobuf` for built-in kinds, and `kubectl auth can-i` /
//! `whoami` have no JSON fallback. Only the review kinds are decoded (into the JSON the rest
//! of the server reads); every other protobuf body is refused with 415 (see `http.rs`).
//!
//! The envelope is apimachinery's: the magic `k8s\0`, then a `runtime.Unknown` whose `raw`
//! holds the object. Field numbers from `k8s.io/api/authorization/v1/generated.proto` and
//! `k8s.io/apimachinery/pkg/runtime/generated.proto`; fields the reviews do not read are
//! skipped (prost ignores unknown fields).

use prost::Message;
use serde_json::{Value, json};

use super::error::{ApiError, ApiResult};

const MAGIC: &[u8] = b"k8s\0";

#[derive(Clone, PartialEq, Message)]
struct Unknown {
    #[prost(bytes = "vec", optional, tag = "2")]
    raw: Option<Vec<u8>>,
}

#[derive(Clone, PartialEq, Message)]
struct AccessReview {
    #[prost(message, optional, tag = "2")]
    spec: Option<AccessReviewSpec>,
}

#[derive(Clone, PartialEq, Message)]
struct AccessReviewSpec {
    #[prost(message, optional, tag = "1")]
    resource_attributes: Option<ResourceAttributes>,
    #[prost(message, optional, tag = "2")]
    non_resource_attributes: Option<NonResourceAttributes>,
}

#[derive(Clone, PartialEq, Message)]
struct ResourceAttributes {
    #[prost(string, optional, tag = "1")]
    namespace: Option<String>,
    #[prost(string, optional, tag = "2")]
    verb: Option<String>,
    #[prost(string, optional, tag = "3")]
    group: Option<String>,
    #[prost(string, optional, tag = "4")]
    version: Option<String>,
    #[prost(string, optional, tag = "5")]
    resource: Option<String>,
    #[prost(string, optional, tag = "6")]
    subresource: Option<String>,
    #[prost(string, optional, tag = "7")]
    name: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
struct NonResourceAttributes {
    #[prost(string, optional, tag = "1")]
    path: Option<String>,
    #[prost(string, optional, tag = "2")]
    verb: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
struct RulesReview {
    #[prost(message, optional, tag = "2")]
    spec: Option<RulesReviewSpec>,
}

#[derive(Clone, PartialEq, Message)]
struct RulesReviewSpec {
    #[prost(string, optional, tag = "1")]
    namespace: Option<String>,
}

fn malformed(kind: &str, error: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request(format!(
        "the protobuf body of the {kind} does not decode: {error}"
    ))
}

/// A review of `kind` sent as protobuf, as the JSON body it stands for.
pub fn review_as_json(kind: &str, body: &[u8]) -> ApiResult<Value> {
    let envelope = body
        .strip_prefix(MAGIC)
        .ok_or_else(|| malformed(kind, "it does not start with the k8s\\0 magic"))?;
    let raw = Unknown::decode(envelope)
        .map_err(|e| malformed(kind, e))?
        .raw
        .unwrap_or_default();
    let raw = raw.as_slice();
    match kind {
        "SelfSubjectAccessReview" => {
            let spec = AccessReview::decode(raw)
                .map_err(|e| malformed(kind, e))?
                .spec
                .unwrap_or_default();
            let mut out = json!({});
            if let Some(r) = spec.resource_attributes {
                out["resourceAttributes"] = json!({
                    "namespace": r.namespace, "verb": r.verb, "group": r.group,
                    "version": r.version, "resource": r.resource,
                    "subresource": r.subresource, "name": r.name,
                });
            }
            if let Some(n) = spec.non_resource_attributes {
                out["nonResourceAttributes"] = json!({"path": n.path, "verb": n.verb});
            }
            Ok(json!({"spec": out}))
        }
        "SelfSubjectRulesReview" => {
            let spec = RulesReview::decode(raw)
                .map_err(|e| malformed(kind, e))?
                .spec
                .unwrap_or_default();
            Ok(json!({"spec": {"namespace": spec.namespace}}))
        }
        _ => Ok(json!({})),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn decodes_an_access_review_in_its_envelope() {
        let review = AccessReview {
            spec: Some(AccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    verb: Some("list".into()),
                    group: Some("resource.k8s.io".into()),
                    resource: Some("resourceslices".into()),
                    ..ResourceAttributes::default()
                }),
                non_resource_attributes: None,
            }),
        };
        let envelope = Unknown {
            raw: Some(review.encode_to_vec()),
        };
        let body = [MAGIC, &envelope.encode_to_vec()].concat();
        let json = review_as_json("SelfSubjectAccessReview", &body).unwrap();
        assert_eq!(
            json["spec"]["resourceAttributes"]["resource"],
            "resourceslices"
        );
        assert_eq!(json["spec"]["resourceAttributes"]["verb"], "list");
        let err = review_as_json("SelfSubjectAccessReview", b"{}").unwrap_err();
        assert!(err.to_string().contains("magic"), "{err}");
    }
}
