//! What a driver says about the devices of a claim it prepared (the claim's
//! `status.devices`): conditions, data, network data, held to the API's limits, each
//! refusal naming the field. Written by the plugin ([`crate::claim_status`]).

use std::net::IpAddr;

use serde_json::Value;

use crate::claim_data::shorten;

/// Most conditions of one device (`AllocatedDeviceStatusMaxConditions`).
pub const MAX_CONDITIONS: usize = 8;
/// Most bytes of a device's `data` as JSON (`AllocatedDeviceStatusDataMaxLength`).
pub const MAX_DATA_BYTES: usize = 10 * 1024;
/// Most IPs of a device's network data (`NetworkDeviceDataMaxIPs`).
pub const MAX_IPS: usize = 16;
/// Longest interface name (`NetworkDeviceDataInterfaceNameMaxLength`).
pub const MAX_INTERFACE_NAME: usize = 256;
/// Longest hardware address (`NetworkDeviceDataHardwareAddressMaxLength`).
pub const MAX_HARDWARE_ADDRESS: usize = 128;

/// A condition's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConditionStatus {
    /// `True`.
    True,
    /// `False`.
    False,
    /// `Unknown`.
    Unknown,
}

impl ConditionStatus {
    /// The API's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::True => "True",
            Self::False => "False",
            Self::Unknown => "Unknown",
        }
    }
}

/// One condition of a device (a `metav1.Condition`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeviceCondition {
    /// CamelCase, e.g. `Ready`.
    pub type_: String,
    /// True, False, Unknown.
    pub status: ConditionStatus,
    /// CamelCase, why.
    pub reason: String,
    /// For people.
    pub message: String,
}

impl DeviceCondition {
    /// Condition `type_` with `status`, `reason` and `message`.
    pub fn new(
        type_: impl Into<String>,
        status: ConditionStatus,
        reason: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            type_: type_.into(),
            status,
            reason: reason.into(),
            message: message.into(),
        }
    }
}

/// A network device's data: its interface, addresses (CIDRs) and hardware address.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct NetworkData {
    /// The interface in the container, e.g. `net1`.
    pub interface_name: String,
    /// Addresses with their prefix, e.g. `10.1.2.3/24`.
    pub ips: Vec<String>,
    /// E.g. `ea:9f:...`.
    pub hardware_address: String,
}

impl NetworkData {
    /// Interface `interface_name` with `ips` and `hardware_address`.
    pub fn new(
        interface_name: impl Into<String>,
        ips: Vec<String>,
        hardware_address: impl Into<String>,
    ) -> Self {
        Self {
            interface_name: interface_name.into(),
            ips,
            hardware_address: hardware_address.into(),
        }
    }
}

/// What a driver says of one allocated device of a claim it prepared.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct DeviceStatus {
    /// The device (a name in this node's pool) the claim was allocated.
    pub device: String,
    /// The share, for a device allocated to several claims.
    pub share_id: Option<String>,
    /// At most [`MAX_CONDITIONS`].
    pub conditions: Vec<DeviceCondition>,
    /// Anything the driver wants users to see, at most [`MAX_DATA_BYTES`] as JSON.
    pub data: Option<Value>,
    /// For network devices.
    pub network_data: Option<NetworkData>,
}

impl DeviceStatus {
    /// The status of `device`, empty.
    pub fn new(device: impl Into<String>) -> Self {
        Self {
            device: device.into(),
            ..Self::default()
        }
    }

    /// With `condition`.
    pub fn condition(mut self, condition: DeviceCondition) -> Self {
        self.conditions.push(condition);
        self
    }

    /// With `data`.
    pub fn data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// With `network_data`.
    pub fn network_data(mut self, network_data: NetworkData) -> Self {
        self.network_data = Some(network_data);
        self
    }

    /// Checks it against the API's limits; the error names the field
    /// (`status.devices[<index>]...`) and the limit.
    pub fn check(&self, index: usize) -> Result<(), StatusError> {
        let fail = |field: String, problem: String| StatusError {
            field: format!("status.devices[{index}]{field}"),
            problem,
        };
        if self.device.is_empty() {
            return Err(fail(".device".into(), "must name a device".into()));
        }
        if self.conditions.len() > MAX_CONDITIONS {
            return Err(fail(
                ".conditions".into(),
                format!(
                    "has {} conditions, at most {MAX_CONDITIONS}",
                    self.conditions.len()
                ),
            ));
        }
        for (i, c) in self.conditions.iter().enumerate() {
            let camel = |s: &str| {
                s.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
                    && s.len() <= 316
                    && s.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "_.-/".contains(c))
            };
            if !camel(&c.type_) {
                return Err(fail(
                    format!(".conditions[{i}].type"),
                    format!(
                        "{:?} must be a qualified name starting with a letter",
                        shorten(&c.type_)
                    ),
                ));
            }
            if c.reason.is_empty()
                || c.reason.len() > 1024
                || !c
                    .reason
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphabetic())
                || !c
                    .reason
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ',' || c == ':')
            {
                return Err(fail(
                    format!(".conditions[{i}].reason"),
                    format!(
                        "{:?} must be 1 to 1024 letters, digits, '_', ',' and ':', starting with a letter",
                        shorten(&c.reason)
                    ),
                ));
            }
            if c.message.len() > 32 * 1024 {
                return Err(fail(
                    format!(".conditions[{i}].message"),
                    format!("is {} bytes, at most 32768", c.message.len()),
                ));
            }
        }
        if let Some(data) = &self.data {
            let bytes = serde_json::to_vec(data)
                .map(|b| b.len())
                .unwrap_or(usize::MAX);
            if bytes > MAX_DATA_BYTES {
                return Err(fail(
                    ".data".into(),
                    format!("is {bytes} bytes as JSON, at most {MAX_DATA_BYTES}"),
                ));
            }
        }
        if let Some(net) = &self.network_data {
            if net.interface_name.len() > MAX_INTERFACE_NAME {
                return Err(fail(
                    ".networkData.interfaceName".into(),
                    format!(
                        "is {} bytes, at most {MAX_INTERFACE_NAME}",
                        net.interface_name.len()
                    ),
                ));
            }
            if net.hardware_address.len() > MAX_HARDWARE_ADDRESS {
                return Err(fail(
                    ".networkData.hardwareAddress".into(),
                    format!(
                        "is {} bytes, at most {MAX_HARDWARE_ADDRESS}",
                        net.hardware_address.len()
                    ),
                ));
            }
            if net.ips.len() > MAX_IPS {
                return Err(fail(
                    ".networkData.ips".into(),
                    format!("has {} addresses, at most {MAX_IPS}", net.ips.len()),
                ));
            }
            for (i, ip) in net.ips.iter().enumerate() {
                if !is_cidr(ip) {
                    return Err(fail(
                        format!(".networkData.ips[{i}]"),
                        format!(
                            "{:?} must be an address with its prefix length, e.g. 10.1.2.3/24 or fd00::1/64",
                            shorten(ip)
                        ),
                    ));
                }
                if net.ips[..i].contains(ip) {
                    return Err(fail(
                        format!(".networkData.ips[{i}]"),
                        format!("{:?} is listed twice", shorten(ip)),
                    ));
                }
            }
        }
        Ok(())
    }
}

fn is_cidr(s: &str) -> bool {
    let Some((ip, prefix)) = s.split_once('/') else {
        return false;
    };
    let Ok(ip) = ip.parse::<IpAddr>() else {
        return false;
    };
    let max = if ip.is_ipv4() { 32 } else { 128 };
    !prefix.starts_with('+')
        && (prefix == "0" || !prefix.starts_with('0'))
        && prefix.parse::<u8>().is_ok_and(|p| p <= max)
}

/// A device status the API would refuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
#[non_exhaustive]
pub struct StatusError {
    /// The field, from `status.devices[<i>]` down.
    pub field: String,
    /// What is wrong, with the limit.
    pub problem: String,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_status_past_the_api_limits_is_refused_naming_the_field() {
        let ok = DeviceStatus::new("vf-0")
            .condition(DeviceCondition::new(
                "Ready",
                ConditionStatus::True,
                "Configured",
                "MTU 9000",
            ))
            .data(json!({"mtu": 9000}))
            .network_data(NetworkData::new(
                "net1",
                vec!["10.1.2.3/24".into(), "fd00::1/64".into()],
                "ea:9f:00:11:22:33",
            ));
        assert_eq!(ok.check(0), Ok(()));
        let err = |s: DeviceStatus| s.check(2).unwrap_err().to_string();
        let bad_ip = ok
            .clone()
            .network_data(NetworkData::new("net1", vec!["10.1.2.3".into()], ""));
        assert_eq!(
            err(bad_ip),
            "status.devices[2].networkData.ips[0]: \"10.1.2.3\" must be an address with its prefix length, e.g. 10.1.2.3/24 or fd00::1/64"
        );
        let many = (0..9).fold(DeviceStatus::new("vf-0"), |s, i| {
            s.condition(DeviceCondition::new(
                format!("C{i}"),
                ConditionStatus::False,
                "No",
                "",
            ))
        });
        assert_eq!(
            err(many),
            "status.devices[2].conditions: has 9 conditions, at most 8"
        );
        let big = DeviceStatus::new("vf-0").data(json!("x".repeat(MAX_DATA_BYTES)));
        assert!(
            err(big).starts_with("status.devices[2].data: is 10242 bytes as JSON, at most 10240")
        );
        let reason = DeviceStatus::new("vf-0").condition(DeviceCondition::new(
            "Ready",
            ConditionStatus::True,
            "not camel",
            "",
        ));
        assert!(
            err(reason)
                .starts_with("status.devices[2].conditions[0].reason: \"not camel\" must be")
        );
        for bad in [
            "10.0.0.1/33",
            "10.0.0.1/08",
            "fd00::1/129",
            "x/24",
            "10.0.0.1/+8",
        ] {
            assert!(!is_cidr(bad), "{bad}");
        }
        assert!(is_cidr("0.0.0.0/0"));
    }
}
