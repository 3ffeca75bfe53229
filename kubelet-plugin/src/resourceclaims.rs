//! Reads ResourceClaims for structured prepare, through `resource.k8s.io/v1` or
//! `v1beta1`, and turns them into the version-neutral [`FetchedClaim`] that
//! [`crate::structured::resolve`] judges. Thin: a GET and field copies.

use k8s_openapi::api::resource::{v1, v1beta1};
use kube::{Api, Client};

use crate::mode::ResourceApi;
use crate::structured::{
    AllocatedConfig, AllocatedResult, ConfigSource, FetchedAllocation, FetchedClaim,
};

/// Why a claim could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The claim does not exist (any more).
    #[error("ResourceClaim {namespace}/{name} not found")]
    NotFound {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
    /// The API server failed or refused.
    #[error("reading ResourceClaim {namespace}/{name} through resource.k8s.io/{version}: {source}")]
    Api {
        /// Namespace.
        namespace: String,
        /// Name.
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

    /// GETs the claim `namespace/name`.
    pub async fn get(&self, namespace: &str, name: &str) -> Result<FetchedClaim, ReadError> {
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
    fn unallocated_claim_has_no_allocation() {
        let c: v1::ResourceClaim = serde_json::from_value(json!({
            "metadata": {"name": "c", "namespace": "ns", "uid": "u1"}, "spec": {}, "status": {}
        }))
        .unwrap();
        assert_eq!(from_v1(&c).allocation, None);
    }
}
