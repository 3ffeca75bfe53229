//! Reads ResourceClaims for structured prepare, through `resource.k8s.io/v1` or
//! `v1beta1`, and turns them into the version-neutral [`FetchedClaim`] that
//! [`crate::allocation::ours`] judges. Thin: a GET and field copies.

use k8s_openapi::api::resource::{v1, v1beta1};
use kube::{Api, Client};

use crate::allocation::{AllocatedConfig, AllocatedResult, FetchedAllocation, FetchedClaim};
use crate::claim_data::ConfigSource;
use crate::dra_mode::ResourceApi;

/// Why a claim could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The claim does not exist (any more).
    #[error("ResourceClaim {namespace}/{name} not found")]
    NotFound {
        /// The claim's namespace.
        namespace: String,
        /// The claim's name.
        name: String,
    },
    /// Not a name the API could hold; never put into a request path.
    #[error("claim {field} {value:?} is not a valid Kubernetes {what}")]
    InvalidName {
        /// `namespace` or `name`.
        field: &'static str,
        /// What the kubelet sent (shortened).
        value: String,
        /// DNS label or subdomain.
        what: &'static str,
    },
    /// The API server failed or refused.
    #[error("reading ResourceClaim {namespace}/{name} through resource.k8s.io/{version}: {source}")]
    Api {
        /// The claim's namespace.
        namespace: String,
        /// The claim's name.
        name: String,
        /// The API version used.
        version: &'static str,
        /// kube's error.
        source: kube::Error,
    },
}

/// Reads claims through one API version.
#[derive(Clone)]
pub struct ClaimReader {
    client: Client,
    api: ResourceApi,
}

impl std::fmt::Debug for ClaimReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClaimReader")
            .field("api", &self.api)
            .finish_non_exhaustive()
    }
}

fn source(s: &str) -> ConfigSource {
    // Only FromClass is the class's; FromClaim and anything newer count as the claim's,
    // which then wins, as the user's own setting should.
    if s == "FromClass" {
        ConfigSource::FromClass
    } else {
        ConfigSource::FromClaim
    }
}

/// Copies the fields prepare needs; the two versions' allocation layouts are the same.
macro_rules! fetched_from {
    ($ver:ident, $claim:expr) => {{
        let claim: &$ver::ResourceClaim = $claim;
        let devices = claim
            .status
            .as_ref()
            .and_then(|s| s.allocation.as_ref())
            .map(|a| a.devices.clone().unwrap_or_default());
        FetchedClaim {
            uid: claim.metadata.uid.clone().unwrap_or_default(),
            pod_claim_name: claim
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(POD_CLAIM_NAME_ANNOTATION))
                .cloned(),
            allocation: devices.map(|d| FetchedAllocation {
                results: d
                    .results
                    .unwrap_or_default()
                    .into_iter()
                    .map(|r| AllocatedResult {
                        request: r.request,
                        driver: r.driver,
                        pool: r.pool,
                        device: r.device,
                        admin_access: r.admin_access.unwrap_or(false),
                        share_id: r.share_id,
                        consumed_capacity: r
                            .consumed_capacity
                            .unwrap_or_default()
                            .into_iter()
                            .map(|(k, q)| (k, q.0))
                            .collect(),
                    })
                    .collect(),
                config: d
                    .config
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(|c| {
                        let opaque = c.opaque?;
                        Some(AllocatedConfig {
                            source: source(&c.source),
                            requests: c.requests,
                            driver: opaque.driver,
                            parameters: opaque.parameters.0,
                        })
                    })
                    .collect(),
            }),
        }
    }};
}

/// A `v1` claim in neutral form.
pub fn from_v1(claim: &v1::ResourceClaim) -> FetchedClaim {
    fetched_from!(v1, claim)
}

/// A `v1beta1` claim in neutral form.
pub fn from_v1beta1(claim: &v1beta1::ResourceClaim) -> FetchedClaim {
    fetched_from!(v1beta1, claim)
}

impl ClaimReader {
    /// A reader through `api`.
    pub fn new(client: Client, api: ResourceApi) -> Self {
        Self { client, api }
    }

    /// The client it reads with.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The version it reads through.
    pub fn api(&self) -> ResourceApi {
        self.api
    }

    /// GETs the claim `namespace/name`, after checking both are names the API allows (so
    /// nothing the kubelet sends can change the request's path).
    pub async fn get(&self, namespace: &str, name: &str) -> Result<FetchedClaim, ReadError> {
        let invalid = |field, value: &str, what| ReadError::InvalidName {
            field,
            value: value.chars().take(80).collect(),
            what,
        };
        if !is_dns_label(namespace) {
            return Err(invalid(
                "namespace",
                namespace,
                "namespace (a DNS-1123 label)",
            ));
        }
        if !is_dns_subdomain(name) {
            return Err(invalid("name", name, "object name (a DNS-1123 subdomain)"));
        }
        let wrap = |source| ReadError::Api {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            version: self.api.version(),
            source,
        };
        let found = match self.api {
            ResourceApi::V1 => Api::<v1::ResourceClaim>::namespaced(self.client.clone(), namespace)
                .get_opt(name)
                .await
                .map_err(wrap)?
                .map(|c| from_v1(&c)),
            ResourceApi::V1beta1 => {
                Api::<v1beta1::ResourceClaim>::namespaced(self.client.clone(), namespace)
                    .get_opt(name)
                    .await
                    .map_err(wrap)?
                    .map(|c| from_v1beta1(&c))
            }
        };
        found.ok_or_else(|| ReadError::NotFound {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        })
    }
}

/// The annotation the kubelet's claim controller puts on a claim made from a template: the
/// name the pod gives it.
pub const POD_CLAIM_NAME_ANNOTATION: &str = "resource.kubernetes.io/pod-claim-name";

/// RFC 1123 label, as namespaces are: 1–63 of `[a-z0-9-]`, alphanumeric at both ends.
pub(crate) fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// RFC 1123 subdomain, as object names are: dot-separated parts of `[a-z0-9-]`,
/// alphanumeric at both ends, 253 at most in all (`IsDNS1123Subdomain` checks no length
/// per part).
pub(crate) fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use serde_json::json;

    use super::*;

    fn status() -> serde_json::Value {
        json!({"allocation": {"devices": {
            "results": [{"request": "r", "driver": "d", "pool": "n1", "device": "fake-0"}],
            "config": [
                {"source": "FromClaim", "requests": ["r"], "opaque": {"driver": "d", "parameters": {"a": 1}}},
                {"source": "FromClass", "opaque": {"driver": "d", "parameters": {"b": 2}}},
            ]
        }}})
    }

    #[test]
    fn both_versions_read_the_same() {
        let claim = |v: &str| {
            json!({"apiVersion": format!("resource.k8s.io/{v}"), "kind": "ResourceClaim",
                "metadata": {"name": "c", "namespace": "ns", "uid": "u1"},
                "spec": {}, "status": status()})
        };
        let a = from_v1(&serde_json::from_value(claim("v1")).unwrap());
        let b = from_v1beta1(&serde_json::from_value(claim("v1beta1")).unwrap());
        assert_eq!(a, b);
        assert_eq!(a.uid, "u1");
        let alloc = a.allocation.unwrap();
        assert_eq!(alloc.results[0].device, "fake-0");
        assert_eq!(alloc.config[0].source, ConfigSource::FromClaim);
        assert_eq!(alloc.config[0].requests, Some(vec!["r".to_string()]));
        assert_eq!(alloc.config[1].source, ConfigSource::FromClass);
        assert_eq!(alloc.config[1].parameters, json!({"b": 2}));
    }

    #[test]
    fn names_that_could_change_the_request_path_are_refused() {
        assert!(is_dns_label("default"));
        assert!(is_dns_subdomain("claim-1.a"));
        for bad in [
            "", "a?b", "a#b", "../x", "a/b", "A", "-a", "a-", "a..b", "a b", "%2e%2e",
        ] {
            assert!(!is_dns_subdomain(bad), "{bad:?}");
            assert!(!is_dns_label(bad), "{bad:?}");
        }
        assert!(!is_dns_label("a.b"), "a namespace has no dots");
        assert!(!is_dns_label(&"a".repeat(64)));
        assert!(!is_dns_subdomain(&"a.".repeat(127)));
    }

    #[test]
    fn unallocated_claim_has_no_allocation() {
        let c: v1::ResourceClaim = serde_json::from_value(json!({
            "metadata": {"name": "c", "namespace": "ns", "uid": "u1"}, "spec": {}, "status": {}
        }))
        .unwrap();
        assert_eq!(from_v1(&c).allocation, None);
    }
}
