//! ResourceClaims as the scheduler leaves them (allocated from a driver's pool on a node,
//! with opaque configs), and ResourceSlices as another publisher (an earlier run) left
//! them: the API objects a plugin reads, built in a line.

use k8s_openapi::api::resource::v1;
use serde_json::{Value, json};

/// A `resource.k8s.io/v1` ResourceClaim allocated as the scheduler allocates it.
///
/// ```
/// use dra_kubelet_plugin_testing::ClaimBuilder;
///
/// let claim = ClaimBuilder::new("fpga.example.com", "node-1", "default", "two-cards")
///     .device("cards", "fpga-0")
///     .device("cards", "fpga-1")
///     .opaque_config(None, serde_json::json!({"apiVersion": "fpga.example.com/v1alpha1", "kind": "FpgaConfig", "bitstream": "a.bit"}))
///     .build();
/// let results = &claim.status.unwrap().allocation.unwrap().devices.unwrap().results.unwrap();
/// assert_eq!(results[1].device, "fpga-1");
/// ```
#[derive(Debug, Clone)]
pub struct ClaimBuilder {
    driver: String,
    pool: String,
    namespace: String,
    name: String,
    uid: Option<String>,
    results: Vec<Value>,
    config: Vec<Value>,
    allocated: bool,
}

impl ClaimBuilder {
    /// Claim `namespace/name`, allocated devices of `driver` from `node`'s pool.
    pub fn new(
        driver: impl Into<String>,
        node: impl Into<String>,
        namespace: impl Into<String>,
        name: impl Into<String>,
    ) -> Self {
        Self {
            driver: driver.into(),
            pool: node.into(),
            namespace: namespace.into(),
            name: name.into(),
            uid: None,
            results: Vec::new(),
            config: Vec::new(),
            allocated: true,
        }
    }

    /// With this `metadata.uid` (else the API server gives one).
    pub fn uid(mut self, uid: impl Into<String>) -> Self {
        self.uid = Some(uid.into());
        self
    }

    /// Allocates `device` of the pool for `request` (`request/subrequest` for a
    /// prioritized list's choice).
    pub fn device(self, request: &str, device: &str) -> Self {
        let (driver, pool) = (self.driver.clone(), self.pool.clone());
        self.result(json!({"request": request, "driver": driver, "pool": pool, "device": device}))
    }

    /// Adds a `status.allocation.devices.results[]` entry as given (another driver's,
    /// another pool's, a share of a device with `shareID` and `consumedCapacity`).
    pub fn result(mut self, result: Value) -> Self {
        self.results.push(result);
        self
    }

    /// Adds the claim's opaque config for this driver, for `requests` (all when `None`).
    pub fn opaque_config(self, requests: Option<&[&str]>, parameters: Value) -> Self {
        self.config_from("FromClaim", requests, parameters)
    }

    /// Adds an opaque config for this driver from `source` (`FromClass` or `FromClaim`).
    pub fn config_from(
        mut self,
        source: &str,
        requests: Option<&[&str]>,
        parameters: Value,
    ) -> Self {
        let mut entry =
            json!({"source": source, "opaque": {"driver": self.driver, "parameters": parameters}});
        if let Some(requests) = requests {
            entry["requests"] = json!(requests);
        }
        self.config.push(entry);
        self
    }

    /// Not allocated (no `status.allocation`): what a kubelet never asks to prepare.
    pub fn unallocated(mut self) -> Self {
        self.allocated = false;
        self
    }

    /// The claim: a spec asking for what was allocated, and the allocation.
    pub fn build(self) -> v1::ResourceClaim {
        let mut requests: Vec<String> = Vec::new();
        for r in &self.results {
            let base = r["request"].as_str().unwrap_or_default();
            let base = base.split('/').next().unwrap_or(base).to_owned();
            if !requests.contains(&base) {
                requests.push(base);
            }
        }
        let spec_requests: Vec<Value> = requests
            .iter()
            .map(|r| json!({"name": r, "exactly": {"deviceClassName": self.driver}}))
            .collect();
        let mut claim = json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {"devices": {"requests": spec_requests}},
        });
        if let Some(uid) = &self.uid {
            claim["metadata"]["uid"] = json!(uid);
        }
        if self.allocated {
            claim["status"] = json!({"allocation": {
                "devices": {"results": self.results, "config": self.config},
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [self.pool]}
                ]}]},
            }});
        }
        // Every field above is one the type has, of the type's shape.
        serde_json::from_value(claim).unwrap_or_default()
    }
}

/// A `resource.k8s.io/v1` ResourceSlice of a driver's pool on a node, as a publisher
/// (an earlier run, another tool) left it.
#[derive(Debug, Clone)]
pub struct SliceBuilder {
    name: String,
    driver: String,
    node: String,
    generation: i64,
    count: i64,
    devices: Vec<Value>,
}

impl SliceBuilder {
    /// Slice `name` of `driver`'s pool on `node`, generation 1, one slice in the pool.
    pub fn new(
        name: impl Into<String>,
        driver: impl Into<String>,
        node: impl Into<String>,
    ) -> Self {
        Self {
            name: name.into(),
            driver: driver.into(),
            node: node.into(),
            generation: 1,
            count: 1,
            devices: Vec::new(),
        }
    }

    /// `spec.pool.generation`.
    pub fn generation(mut self, generation: i64) -> Self {
        self.generation = generation;
        self
    }

    /// `spec.pool.resourceSliceCount`.
    pub fn slice_count(mut self, count: i64) -> Self {
        self.count = count;
        self
    }

    /// Adds a device with nothing but its name.
    pub fn device(mut self, name: &str) -> Self {
        self.devices.push(json!({"name": name}));
        self
    }

    /// The slice, as JSON (what `ApiServer::create` stores).
    pub fn build(self) -> Value {
        json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": self.name},
            "spec": {
                "driver": self.driver, "nodeName": self.node,
                "pool": {"name": self.node, "generation": self.generation, "resourceSliceCount": self.count},
                "devices": self.devices,
            },
        })
    }
}
