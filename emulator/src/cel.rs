//! The DRA CEL environment (`staging/src/k8s.io/dynamic-resource-allocation/cel`): what
//! the apiserver's validation compiles and the structured allocator evaluates. Below both
//! `apiserver` and `cluster`, so neither reaches into the other for it.

use std::collections::HashMap;
use std::sync::LazyLock;

use k8s_openapi::api::resource::v1::Device;

/// Compiles a selector expression (the `cel` crate is a real CEL implementation).
pub fn compile(expression: &str) -> Result<cel::Program, String> {
    cel::Program::compile(expression).map_err(|e| e.to_string())
}

/// `device.attributes["<domain>"]` / `device.capacity["<domain>"]` with a literal domain.
static DOMAIN_LOOKUP: LazyLock<Option<regex::Regex>> =
    LazyLock::new(|| regex::Regex::new(r#"(?:attributes|capacity)\s*\[\s*"([^"]+)"\s*\]"#).ok());

/// The `device` variable of the DRA CEL environment
/// (`staging/src/k8s.io/dynamic-resource-allocation/cel/compile.go`): `driver`,
/// `attributes` and `capacity` as maps from domain to maps from name. A name without a
/// domain belongs to the driver's domain; a domain the device has nothing in is an empty
/// map (upstream resolves unknown domains lazily to empty maps, so
/// `device.attributes["other.example.com"].x` is a "no such key" error, not a type error).
///
/// Deviations, on purpose and documented: `version` attributes are strings (upstream: the
/// `semver` type, so `isGreaterThan` etc. fail to evaluate here), capacities are their
/// quantity strings (upstream: `quantity`).
pub fn device_variable(driver: &str, device: &Device, expression: &str) -> cel::Value {
    let mut attributes: HashMap<String, HashMap<String, cel::Value>> = HashMap::new();
    let mut capacity: HashMap<String, HashMap<String, cel::Value>> = HashMap::new();
    attributes.entry(driver.into()).or_default();
    capacity.entry(driver.into()).or_default();
    if let Some(re) = DOMAIN_LOOKUP.as_ref() {
        for domain in re.captures_iter(expression).filter_map(|c| c.get(1)) {
            attributes.entry(domain.as_str().into()).or_default();
            capacity.entry(domain.as_str().into()).or_default();
        }
    }
    let split = |name: &str| match name.split_once('/') {
        Some((domain, id)) => (domain.to_string(), id.to_string()),
        None => (driver.to_string(), name.to_string()),
    };
    for (name, attribute) in device.attributes.iter().flatten() {
        let value = if let Some(b) = attribute.bool {
            cel::Value::Bool(b)
        } else if let Some(i) = attribute.int {
            cel::Value::Int(i)
        } else if let Some(s) = &attribute.string {
            cel::Value::from(s.clone())
        } else if let Some(v) = &attribute.version {
            cel::Value::from(v.clone())
        } else {
            continue;
        };
        let (domain, id) = split(name);
        attributes.entry(domain).or_default().insert(id, value);
    }
    for (name, cap) in device.capacity.iter().flatten() {
        let (domain, id) = split(name);
        capacity
            .entry(domain)
            .or_default()
            .insert(id, cel::Value::from(cap.value.0.clone()));
    }
    let mut variable: HashMap<String, cel::Value> = HashMap::new();
    variable.insert("driver".into(), cel::Value::from(driver));
    variable.insert("attributes".into(), attributes.into());
    variable.insert("capacity".into(), capacity.into());
    variable.into()
}

/// Evaluates a compiled selector for one device; a non-bool result is an error, as
/// upstream's type check makes it.
pub fn evaluate(
    program: &cel::Program,
    expression: &str,
    driver: &str,
    device: &Device,
) -> Result<bool, String> {
    let mut context = cel::Context::default();
    context.add_variable_from_value("device", device_variable(driver, device, expression));
    match program.execute(&context) {
        Ok(cel::Value::Bool(b)) => Ok(b),
        Ok(other) => Err(format!("must evaluate to bool, got {other:?}")),
        Err(e) => Err(e.to_string()),
    }
}
