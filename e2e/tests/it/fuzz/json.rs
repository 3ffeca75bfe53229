//! Strategies for JSON a user could write: values of every type where a field expects
//! one, names near the limits, nesting past the decoders' limits, and the encodings the
//! apiserver takes (JSON, YAML) or must refuse.

use proptest::prelude::*;
use serde_json::{Value, json};

/// Strings that break parsers and validators: empty, long, non-ASCII, control
/// characters, path and selector syntax, numbers as text.
pub fn tricky_string() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "[a-z0-9]([-a-z0-9.]{0,20}[a-z0-9])?",
        "[ -~]{0,40}",
        "\\PC{0,20}",
        Just("a".repeat(63)),
        Just("a".repeat(64)),
        Just("b".repeat(254)),
        Just("c".repeat(300)),
        (1usize..=70_000).prop_map(|n| "x".repeat(n)),
        Just("../../etc/passwd".to_string()),
        Just("a/b".to_string()),
        Just("~1".to_string()),
        Just("\u{0}".to_string()),
        Just("9223372036854775808".to_string()),
        Just("-1".to_string()),
        Just("1e400".to_string()),
    ]
}

/// A JSON number at and past the edges of i64, u64 and f64.
fn tricky_number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        Just(json!(0)),
        Just(json!(-1)),
        Just(json!(i64::MAX)),
        Just(json!(u64::MAX)),
        Just(json!(1.5)),
    ]
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        tricky_number(),
        tricky_string().prop_map(Value::String),
    ]
}

/// `{"a": {"a": … }}` or `[[[…]]]`, `levels` deep: past serde_json's 128 and the
/// apiserver's 100.
pub fn nested(levels: usize, in_lists: bool) -> Value {
    let mut v = json!("leaf");
    for _ in 0..levels {
        v = if in_lists {
            json!([v])
        } else {
            json!({ "a": v })
        };
    }
    v
}

/// Any JSON value: shallow trees of every type, or one deep chain.
pub fn any_json() -> impl Strategy<Value = Value> {
    let tree = leaf().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(tricky_string(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    });
    prop_oneof![
        8 => tree,
        1 => (1usize..300, any::<bool>()).prop_map(|(n, lists)| nested(n, lists)),
    ]
}

/// A value that is usually what the field wants and sometimes anything.
pub fn or_any(good: impl Strategy<Value = Value>) -> impl Strategy<Value = Value> {
    prop_oneof![4 => good, 1 => any_json()]
}

/// A map of string to string, or something that is not one.
pub fn string_map() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => prop::collection::btree_map(tricky_string(), tricky_string(), 0..4)
            .prop_map(|m| json!(m)),
        1 => any_json(),
    ]
}

/// `metadata`: a name (often a valid one), labels, annotations, and now and then a field
/// of the wrong type.
pub fn metadata() -> impl Strategy<Value = Value> {
    (
        prop_oneof![
            4 => "[a-z][a-z0-9-]{0,12}".prop_map(Value::String),
            1 => tricky_string().prop_map(Value::String),
            1 => any_json(),
        ],
        string_map(),
        string_map(),
        prop::option::of(any_json()),
    )
        .prop_map(|(name, labels, annotations, extra)| {
            let mut m = json!({"name": name, "labels": labels, "annotations": annotations});
            if let Some(extra) = extra {
                m["finalizers"] = extra;
            }
            m
        })
}

/// How a body reaches the apiserver.
#[derive(Debug, Clone, Copy)]
pub enum Encoding {
    Json,
    Yaml,
    /// JSON cut short.
    Truncated,
    /// A media type the apiserver does not take.
    Protobuf,
}

pub fn encoding() -> impl Strategy<Value = Encoding> {
    prop_oneof![
        6 => Just(Encoding::Json),
        2 => Just(Encoding::Yaml),
        1 => Just(Encoding::Truncated),
        1 => Just(Encoding::Protobuf),
    ]
}

/// The body and its content type.
pub fn encode(value: &Value, encoding: Encoding) -> (&'static str, Vec<u8>) {
    let json = serde_json::to_vec(value).unwrap_or_default();
    match encoding {
        Encoding::Json => ("application/json", json),
        Encoding::Yaml => (
            "application/yaml",
            serde_yaml_ng::to_string(value)
                .map(String::into_bytes)
                .unwrap_or(json),
        ),
        Encoding::Truncated => {
            let cut = json.len() / 2;
            ("application/json", json[..cut].to_vec())
        }
        Encoding::Protobuf => ("application/vnd.kubernetes.protobuf", json),
    }
}
