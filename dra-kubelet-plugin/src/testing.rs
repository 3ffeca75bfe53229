//! A small device profile for the library's own unit tests: `counter-0 … counter-<n-1>`,
//! a claim holds the counters it was allocated and may start them at `start` (≤ 10⁶).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde::{Deserialize, Serialize};

use crate::cdi_spec::{ContainerEdits, Device};
use crate::claim_data::{AllocatedDevice, ClaimRef, ClaimUid, DriverAllocation, ProfileError};
use crate::model::{Attribute, SliceDevice};
use crate::profile::DeviceProfile;

/// The largest `start`.
pub const MAX_START: u32 = 1_000_000;

#[derive(Debug, Clone)]
pub struct TestProfile {
    counters: usize,
}

impl TestProfile {
    pub fn new(counters: usize) -> Self {
        Self { counters }
    }

    fn is_counter(&self, name: &str) -> bool {
        name.strip_prefix("counter-")
            .and_then(|i| i.parse::<usize>().ok())
            .is_some_and(|i| i < self.counters && name == format!("counter-{i}"))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TestPrepared {
    pub counters: Vec<String>,
    pub start: u32,
}

impl DeviceProfile for TestProfile {
    type Prepared = TestPrepared;
    type Config = crate::opaque::NoConfig;

    fn cdi_class(&self) -> &str {
        "counter"
    }

    fn slice_devices(&self) -> Vec<SliceDevice> {
        (0..self.counters)
            .map(|i| {
                SliceDevice::new(format!("counter-{i}")).attribute("width", Attribute::Int(64))
            })
            .collect()
    }

    fn prepare_allocation(
        &self,
        _claim: &ClaimRef,
        allocation: &DriverAllocation<crate::opaque::NoConfig>,
    ) -> Result<TestPrepared, ProfileError> {
        let prepared = TestPrepared {
            counters: allocation
                .devices
                .iter()
                .map(|d| d.device.clone())
                .collect(),
            start: 0,
        };
        self.check(&prepared)?;
        Ok(prepared)
    }

    fn held_devices(&self, prepared: &TestPrepared) -> Vec<String> {
        prepared.counters.clone()
    }

    fn check(&self, prepared: &TestPrepared) -> Result<(), ProfileError> {
        if let Some(bad) = prepared.counters.iter().find(|c| !self.is_counter(c)) {
            return Err(ProfileError::new(
                "unknown_device",
                format!("{bad:?} is not a counter of this node"),
            ));
        }
        if prepared.start > MAX_START {
            return Err(ProfileError::new(
                "bad_parameters",
                format!("start must be at most {MAX_START}, got {}", prepared.start),
            ));
        }
        Ok(())
    }

    fn common_edits(&self) -> ContainerEdits {
        ContainerEdits::new().env("COUNTER_NODE", "node-1")
    }

    fn cdi_devices(&self, uid: &ClaimUid, prepared: &TestPrepared) -> Vec<Device> {
        let env = |c: &str| format!("COUNTER_{}", c.replace('-', "_").to_uppercase());
        let mut claim = ContainerEdits::new();
        let mut devices = Vec::new();
        for c in &prepared.counters {
            claim = claim.env(&env(c), &prepared.start.to_string());
            devices.push(Device::new(
                format!("{uid}:{c}"),
                ContainerEdits::new().env(&env(c), &prepared.start.to_string()),
            ));
        }
        devices.insert(0, Device::new(uid.to_string(), claim));
        devices
    }

    fn claim_cdi_devices(&self, uid: &ClaimUid, _prepared: &TestPrepared) -> Vec<String> {
        vec![uid.to_string()]
    }

    fn device_cdi_devices(
        &self,
        uid: &ClaimUid,
        prepared: &TestPrepared,
        device: &AllocatedDevice,
    ) -> Option<Vec<String>> {
        prepared
            .counters
            .contains(&device.device)
            .then(|| vec![format!("{uid}:{}", device.device)])
    }
}
