//! Structural-schema handling of custom resources: pruning, defaulting and validation, in
//! the order the apiextensions-apiserver applies them (decode → prune → default → validate).
//!
//! Upstream: k8s.io/apiextensions-apiserver/pkg/apiserver/schema/{pruning,defaulting} and
//! kube-openapi's validate package. Keywords this module does not implement make the CRD's
//! registration fail ([`check_supported`]), so nothing is accepted unchecked.

use serde_json::{Map, Value};

use super::error::{ApiError, ApiResult, FieldCause};

/// Keywords that only describe: they never reject a value.
const DESCRIPTIVE: &[&str] = &[
    "description",
    "title",
    "format",
    "example",
    "externalDocs",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "x-kubernetes-embedded-resource",
];
/// Keywords enforced here.
const ENFORCED: &[&str] = &[
    "type",
    "properties",
    "required",
    "items",
    "additionalProperties",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "enum",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "nullable",
    "default",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-int-or-string",
    "uniqueItems",
];

/// Refuses a schema that uses a keyword this emulator would silently ignore
/// (CEL `x-kubernetes-validations`, `oneOf`/`anyOf`/`allOf`/`not`, ...).
pub fn check_supported(schema: &Value, path: &str) -> ApiResult<()> {
    let Some(map) = schema.as_object() else {
        return Err(ApiError::bad_request(format!(
            "openAPIV3Schema at {path} is not an object"
        )));
    };
    for (key, value) in map {
        if !DESCRIPTIVE.contains(&key.as_str()) && !ENFORCED.contains(&key.as_str()) {
            return Err(ApiError::not_implemented(format!(
                "schema keyword {key:?} (at {path})"
            )));
        }
        match key.as_str() {
            "properties" => {
                for (name, sub) in value.as_object().into_iter().flatten() {
                    check_supported(sub, &format!("{path}.{name}"))?;
                }
            }
            "items" => check_supported(value, &format!("{path}[]"))?,
            "additionalProperties" if value.is_object() => {
                check_supported(value, &format!("{path}.*"))?
            }
            _ => {}
        }
    }
    Ok(())
}

/// Prunes, defaults and validates `obj` (a whole custom object) in place.
///
/// `metadata`, `apiVersion` and `kind` are left to the generic object-meta handling, as
/// upstream treats them as embedded, always-preserved fields.
pub fn admit(schema: &Value, obj: &mut Value, kind_group: &str, name: &str) -> ApiResult<()> {
    let Some(root) = obj.as_object_mut() else {
        return Err(ApiError::bad_request("the object is not a JSON object"));
    };
    let properties = schema.get("properties").and_then(Value::as_object);
    let preserve = preserves_unknown(schema);
    root.retain(|key, value| {
        matches!(key.as_str(), "apiVersion" | "kind" | "metadata") || {
            // Unknown fields are pruned; a null is dropped unless the field is nullable.
            let known = preserve || properties.is_some_and(|p| p.contains_key(key));
            let null_kept =
                !value.is_null() || properties.and_then(|p| p.get(key)).is_some_and(nullable);
            known && null_kept
        }
    });
    let mut causes = Vec::new();
    if let Some(properties) = properties {
        for (key, sub) in properties {
            if matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                continue;
            }
            if !root.contains_key(key)
                && let Some(default) = sub.get("default")
            {
                root.insert(key.clone(), default.clone());
            }
            if let Some(value) = root.get_mut(key) {
                prune_and_default(sub, value);
                validate(sub, value, key, &mut causes);
            }
        }
    }
    for required in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if !root.contains_key(required) {
            causes.push(FieldCause::required(required, ""));
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(kind_group, name, causes))
    }
}

fn preserves_unknown(schema: &Value) -> bool {
    schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

fn nullable(schema: &Value) -> bool {
    schema
        .get("nullable")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// Drops unknown fields and non-nullable nulls, then fills in defaults, recursively.
fn prune_and_default(schema: &Value, value: &mut Value) {
    match value {
        Value::Object(map) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            let keep_unknown = preserves_unknown(schema)
                || additional.is_some_and(|a| a.is_object() || a == &Value::Bool(true));
            map.retain(|key, v| {
                let sub = properties
                    .and_then(|p| p.get(key))
                    .or(additional.filter(|a| a.is_object()));
                let known = keep_unknown || sub.is_some();
                let null_kept = !v.is_null() || sub.is_some_and(nullable);
                known && null_kept
            });
            if let Some(properties) = properties {
                for (key, sub) in properties {
                    if !map.contains_key(key)
                        && let Some(default) = sub.get("default")
                    {
                        map.insert(key.clone(), default.clone());
                    }
                    if let Some(v) = map.get_mut(key) {
                        prune_and_default(sub, v);
                    }
                }
            } else if let Some(sub) = additional.filter(|a| a.is_object()) {
                for v in map.values_mut() {
                    prune_and_default(sub, v);
                }
            }
        }
        Value::Array(items) => {
            if let Some(sub) = schema.get("items") {
                for item in items {
                    prune_and_default(sub, item);
                }
            }
        }
        _ => {}
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn validate(schema: &Value, value: &Value, path: &str, causes: &mut Vec<FieldCause>) {
    if value.is_null() {
        if !nullable(schema) {
            causes.push(FieldCause::invalid(
                path,
                value,
                format!(
                    "{path} in body must be of type {}: \"null\"",
                    schema_type(schema)
                ),
            ));
        }
        return;
    }
    let int_or_string = schema
        .get("x-kubernetes-int-or-string")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if let Some(expected) = schema.get("type").and_then(Value::as_str) {
        let actual = type_name(value);
        let fits = expected == actual || (expected == "number" && actual == "integer");
        if !fits {
            causes.push(FieldCause::invalid(
                path,
                &Value::String(actual.into()),
                format!("{path} in body must be of type {expected}: \"{actual}\""),
            ));
            return;
        }
    } else if int_or_string && !matches!(type_name(value), "integer" | "string") {
        causes.push(FieldCause::invalid(
            path,
            value,
            format!("{path} in body must be of type integer or string"),
        ));
        return;
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        causes.push(FieldCause::not_supported(path, value, allowed));
    }
    match value {
        Value::Number(n) => {
            validate_number(schema, n.as_f64().unwrap_or(f64::NAN), value, path, causes)
        }
        Value::String(s) => validate_string(schema, s, value, path, causes),
        Value::Array(items) => {
            let len = items.len();
            if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
                && len as u64 > max
            {
                causes.push(FieldCause::too_many(path, len, max as usize));
            }
            if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
                && (len as u64) < min
            {
                causes.push(FieldCause::invalid(
                    path,
                    value,
                    format!("{path} in body should have at least {min} items"),
                ));
            }
            if let Some(sub) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    validate(sub, item, &format!("{path}[{i}]"), causes);
                }
            }
        }
        Value::Object(map) => validate_object(schema, map, path, causes),
        _ => {}
    }
}

fn schema_type(schema: &Value) -> &str {
    schema
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("object")
}

fn validate_number(
    schema: &Value,
    n: f64,
    value: &Value,
    path: &str,
    causes: &mut Vec<FieldCause>,
) {
    let exclusive = |key: &str| schema.get(key).and_then(Value::as_bool).unwrap_or(false);
    if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
        if exclusive("exclusiveMinimum") && n <= min {
            causes.push(FieldCause::invalid(
                path,
                value,
                format!("{path} in body should be greater than {min}"),
            ));
        } else if n < min {
            causes.push(FieldCause::invalid(
                path,
                value,
                format!("{path} in body should be greater than or equal to {min}"),
            ));
        }
    }
    if let Some(max) = schema.get("maximum").and_then(Value::as_f64) {
        if exclusive("exclusiveMaximum") && n >= max {
            causes.push(FieldCause::invalid(
                path,
                value,
                format!("{path} in body should be less than {max}"),
            ));
        } else if n > max {
            causes.push(FieldCause::invalid(
                path,
                value,
                format!("{path} in body should be less than or equal to {max}"),
            ));
        }
    }
}

fn validate_string(
    schema: &Value,
    s: &str,
    value: &Value,
    path: &str,
    causes: &mut Vec<FieldCause>,
) {
    let chars = s.chars().count() as u64;
    if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
        && chars > max
    {
        causes.push(FieldCause {
            reason: "FieldValueTooLong",
            field: path.into(),
            message: format!("Too long: may not be longer than {max}"),
        });
    }
    if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
        && chars < min
    {
        causes.push(FieldCause::invalid(
            path,
            value,
            format!("{path} in body should be at least {min} chars long"),
        ));
    }
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
        match regex::Regex::new(pattern) {
            Ok(re) if re.is_match(s) => {}
            Ok(_) => causes.push(FieldCause::invalid(
                path,
                value,
                format!("{path} in body should match '{pattern}'"),
            )),
            Err(e) => causes.push(FieldCause::invalid(
                path,
                value,
                format!("schema pattern {pattern:?} does not compile: {e}"),
            )),
        }
    }
}

fn validate_object(
    schema: &Value,
    map: &Map<String, Value>,
    path: &str,
    causes: &mut Vec<FieldCause>,
) {
    for required in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if !map.contains_key(required) {
            causes.push(FieldCause::required(format!("{path}.{required}"), ""));
        }
    }
    let count = map.len() as u64;
    if let Some(max) = schema.get("maxProperties").and_then(Value::as_u64)
        && count > max
    {
        causes.push(FieldCause::too_many(path, map.len(), max as usize));
    }
    if let Some(min) = schema.get("minProperties").and_then(Value::as_u64)
        && count < min
    {
        causes.push(FieldCause::invalid(
            path,
            &Value::from(count),
            format!("{path} in body should have at least {min} properties"),
        ));
    }
    let properties = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties").filter(|a| a.is_object());
    for (key, v) in map {
        if let Some(sub) = properties.and_then(|p| p.get(key)).or(additional) {
            validate(sub, v, &format!("{path}.{key}"), causes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {
                        "name": {"type": "string", "maxLength": 3},
                        "count": {"type": "integer", "minimum": 1, "maximum": 8, "default": 1},
                        "mode": {"type": "string", "enum": ["A", "B"]},
                        "opt": {"type": "string", "nullable": true}
                    }
                }
            }
        })
    }

    fn admit_spec(spec: Value) -> ApiResult<Value> {
        let mut obj = json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "n"}, "spec": spec, "junk": 1});
        admit(&schema(), &mut obj, "K.x", "n").map(|()| obj)
    }

    #[test]
    fn prunes_unknown_and_applies_defaults() {
        let obj = admit_spec(json!({"name": "ab", "extra": true, "opt": null, "mode": null})).ok();
        assert_eq!(
            obj,
            Some(
                json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "n"}, "spec": {"name": "ab", "count": 1, "opt": null}})
            )
        );
    }

    #[test]
    fn rejects_with_field_named() {
        let message = |spec: Value| admit_spec(spec).err().map(|e| (e.code, e.message));
        assert_eq!(
            message(json!({"name": "ab", "count": 0})).map(|m| m.0),
            Some(422)
        );
        let cases = [
            (
                json!({"name": "ab", "count": 0}),
                "spec.count in body should be greater than or equal to 1",
            ),
            (
                json!({"name": "ab", "count": 9}),
                "spec.count in body should be less than or equal to 8",
            ),
            (
                json!({"name": "ab", "count": "4"}),
                "spec.count in body must be of type integer: \"string\"",
            ),
            (
                json!({"name": "ab", "count": 4.5}),
                "spec.count in body must be of type integer: \"number\"",
            ),
            (
                json!({"name": "abcd"}),
                "spec.name: Too long: may not be longer than 3",
            ),
            (json!({"count": 2}), "spec.name: Required value"),
            (
                json!({"name": "a", "mode": "C"}),
                "spec.mode: Unsupported value: \"C\"",
            ),
        ];
        for (spec, expected) in cases {
            let got = message(spec.clone()).map(|m| m.1).unwrap_or_default();
            assert!(got.contains(expected), "{spec}: {got:?} lacks {expected:?}");
        }
    }

    #[test]
    fn refuses_unimplemented_keywords() {
        let cel = json!({"type": "object", "properties": {"a": {"type": "string", "x-kubernetes-validations": []}}});
        assert!(check_supported(&cel, "").is_err_and(|e| e.code == 501));
        assert!(check_supported(&schema(), "").is_ok());
    }
}
