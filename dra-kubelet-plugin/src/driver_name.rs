//! The driver name, checked as the API server checks `spec.driver` of a ResourceSlice.

/// Why a driver name cannot be used: the API holds every driver name to the rule of CSI
/// driver names (`ValidateCSIDriverName`, `DriverNameMaxLength`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "driver name {name:?} {reason}; a driver name is at most {DRIVER_NAME_MAX_LEN} characters, a DNS subdomain (lowercase letters, digits, '-' and '.', each dot-separated part starting and ending with a letter or digit), and should end with a domain the driver's vendor owns"
)]
#[non_exhaustive]
pub struct DriverNameError {
    /// The name (shortened when long).
    pub name: String,
    /// What is wrong with it.
    pub reason: String,
}

/// The longest driver name the API accepts (`DriverNameMaxLength`).
pub const DRIVER_NAME_MAX_LEN: usize = 63;

/// Checks `name` as the API server checks `spec.driver`.
pub fn check_driver_name(name: &str) -> Result<(), DriverNameError> {
    let fail = |reason: String| DriverNameError {
        name: name.chars().take(80).collect(),
        reason,
    };
    if name.is_empty() {
        return Err(fail("is empty".into()));
    }
    if name.len() > DRIVER_NAME_MAX_LEN {
        return Err(fail(format!("is {} characters", name.len())));
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if !name.to_ascii_lowercase().split('.').all(label_ok) {
        return Err(fail("is not a DNS subdomain".into()));
    }
    Ok(())
}
