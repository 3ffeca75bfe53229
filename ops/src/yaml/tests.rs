use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

/// The depth the scanner counts: the least limit it accepts `text` under.
fn depth(text: &str) -> usize {
    (0..=200)
        .find(|&limit| check_depth_with(text.as_bytes(), limit).is_ok())
        .unwrap_or(usize::MAX)
}

/// What libyaml makes of `text`, through serde.
fn parse(text: &str) -> Result<Value, serde_yaml_ng::Error> {
    serde_yaml_ng::from_str(text)
}

fn value_depth(v: &Value) -> usize {
    match v {
        Value::Array(items) => 1 + items.iter().map(value_depth).max().unwrap_or(0),
        Value::Object(map) => 1 + map.values().map(value_depth).max().unwrap_or(0),
        _ => 0,
    }
}

#[test]
fn deep_flow_mappings_are_refused_at_the_limit() {
    let nest = |n: usize| format!("{}1{}", "{a: ".repeat(n), "}".repeat(n));
    assert_eq!(depth(&nest(MAX_DEPTH)), MAX_DEPTH);
    assert!(check_depth(nest(MAX_DEPTH).as_bytes()).is_ok());
    assert!(parse(&nest(MAX_DEPTH)).is_ok(), "libyaml reads the limit");
    let err = check_depth(nest(MAX_DEPTH + 1).as_bytes()).unwrap_err();
    assert_eq!(
        err,
        DepthError {
            limit: MAX_DEPTH,
            line: 1
        }
    );
    assert_eq!(
        err.to_string(),
        "YAML nested deeper than 64 levels at line 1: at most 64 mappings and sequences may nest"
    );
    // Without spaces, as an attacker writes them: `a:{` ends the plain scalar in flow context.
    let tight = format!("{}1{}", "{a:".repeat(100_000), "}".repeat(100_000));
    assert!(check_depth(tight.as_bytes()).is_err());
}

#[test]
fn deep_flow_sequences_are_refused() {
    let nest = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    assert_eq!(depth(&nest(40)), 40);
    assert!(check_depth(nest(MAX_DEPTH + 1).as_bytes()).is_err());
    // Across lines, after a key, in a multi-line flow sequence.
    let multi = format!("key:\n{}\n{}\n", "  [\n".repeat(70), "]".repeat(70));
    assert_eq!(depth(&multi), 71);
}

#[test]
fn deep_block_sequences_on_one_line_are_refused() {
    let dashes = |n: usize| format!("{}x\n", "- ".repeat(n));
    assert_eq!(depth(&dashes(10)), 10);
    assert_eq!(parse(&dashes(3)).unwrap(), json!([[["x"]]]));
    assert!(check_depth(dashes(MAX_DEPTH + 1).as_bytes()).is_err());
    assert!(check_depth(dashes(100_000).as_bytes()).is_err());
}

#[test]
fn deep_indentation_is_refused() {
    let indented = |n: usize| -> String {
        (0..n)
            .map(|i| format!("{}a:\n", " ".repeat(i)))
            .chain([format!("{}1\n", " ".repeat(n))])
            .collect()
    };
    assert_eq!(depth(&indented(20)), 20);
    assert_eq!(value_depth(&parse(&indented(20)).unwrap()), 20);
    assert!(check_depth(indented(MAX_DEPTH + 1).as_bytes()).is_err());
    // A sequence at its key's column is one level more.
    let stairs: String = (0..40)
        .map(|i| format!("{}- k{i}:\n", "  ".repeat(i)))
        .collect();
    let stairs = format!("{stairs}{}- end\n", "  ".repeat(40));
    assert_eq!(
        value_depth(&parse(&stairs).unwrap()),
        depth(&stairs),
        "{stairs}"
    );
    assert_eq!(depth(&stairs), 81);
}

/// Brackets and quotes that are text: in quoted and plain scalars, comments, block
/// scalars. Each document here is read by libyaml, and counted as deep as it is.
#[test]
fn realistic_documents_are_accepted_and_counted_exactly() {
    let manifest = r#"# a Deployment [with] {brackets} in comments
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web   # it's [not] a list
  annotations:
    note: "braces { and [ in quotes"
    other: 'single [quoted] it''s'
    plain: a[0] {b} it's fine:really
    url: http://example.com/a?b=[1]
spec:
  template:
    spec:
      containers:
      - name: c
        command: ["sh", "-c", "echo '[x]' && echo \"{y}\""]
        args:
          - --flag={a,b}
          - "- not a sequence"
        env:
        - {name: A, value: "x:[y]"}
        script: |
          if [ -f x ]; then { echo "- [ok"; }
          - not: [a, sequence
        folded: >-
          text with [brackets
          and {braces
      - name: d
        image: busybox
---
# a second document
list: [a, 'b]', "c}", d e, {k: v}]   # trailing [comment
"quoted key": value
? complex
: value
"#;
    let docs: Vec<Value> = manifest
        .split("\n---\n")
        .map(|d| parse(d).unwrap())
        .collect();
    assert_eq!(docs.len(), 2);
    let deepest = docs.iter().map(value_depth).max().unwrap();
    assert_eq!(deepest, 8, "{docs:?}");
    assert_eq!(depth(manifest), deepest);
    assert!(check_depth(manifest.as_bytes()).is_ok());

    let json = r##"{"a": "x [", "b": [1, {"c": "}}}", "d": ["'", "\"["]}], "e": "#[{"}"##;
    assert_eq!(value_depth(&parse(json).unwrap()), 4);
    assert_eq!(depth(json), 4);

    let inventory = "apiVersion: fake.resource.3-shake.com/v1alpha1\nkind: Inventory\nnodes:\n- names: [\"gpu-*\"]\n  profile: gpu\n  gpus: [{model: A100-80GB, count: 8, sharing: partitioned}]\n- names: [\"*\"]\n  numDevices: 8\n";
    assert_eq!(depth(inventory), value_depth(&parse(inventory).unwrap()));
}

/// Where a naive scanner and libyaml disagree, the scanner counts: each of these is valid
/// YAML that libyaml nests 200 deep (serde refuses it at its recursion limit, after the
/// slow scan).
#[test]
fn nesting_hidden_from_a_naive_scanner_is_counted() {
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    for text in [
        // A quote inside a plain scalar does not open a quoted one.
        format!("{{a: it's, b: {deep}}}"),
        format!("key: it's\nnext: {deep}"),
        format!("# it's\n{deep}"),
        format!("[a\"b, {deep}]"),
        // A `#` inside a plain scalar is text, not a comment.
        format!("[a#b, {deep}]"),
        // Line breaks other than \n end a block scalar's header line.
        format!("- |\r- {deep}"),
        format!("- |\u{85}- {deep}"),
        format!("- |\u{2028}- {deep}"),
        // A block scalar's lines are those indented more than its collection, not more
        // than the line it starts on.
        format!("- - |\n      text\n  - {deep}\n"),
    ] {
        assert!(check_depth(text.as_bytes()).is_err(), "{text:?}");
        let err = parse(&text).unwrap_err().to_string();
        assert!(err.contains("recursion limit exceeded"), "{text:?}: {err}");
    }
    // UTF-16 with a byte order mark, as libyaml decodes it.
    let mut utf16 = vec![0xFF, 0xFE];
    utf16.extend(deep.encode_utf16().flat_map(u16::to_le_bytes));
    assert!(check_depth(&utf16).is_err());
    assert!(check_depth(&utf16[..utf16.len() / 4]).is_err());
}

/// And where libyaml reads text, the scanner does not count.
#[test]
fn text_that_looks_nested_is_not_counted() {
    let deep = "[".repeat(200);
    for text in [
        format!("key: |\n  {deep}\n  - - - -\n"),
        format!("key: \"{deep}\"\n"),
        format!("key: '{deep}\n  {deep}'\n"),
        format!("key: plain {deep}\n  continued {deep}\n"),
        format!("- a\n  {deep}\n"),
        format!("# {deep}\nk: v # {deep}\n"),
    ] {
        let value = parse(&text).unwrap();
        assert!(value_depth(&value) <= 2, "{text:?}");
        assert_eq!(depth(&text), value_depth(&value), "{text:?}");
    }
}

fn text() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        proptest::sample::select(
            &[
                'a', 'z', '0', ' ', '[', ']', '{', '}', '#', ':', '\'', '"', '-', ',', '?', '&',
                '*', '!', '|', '>', '%', '@', '\n', '\t', 'é', '\u{85}',
            ][..],
        ),
        0..12,
    )
    .prop_map(String::from_iter)
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        text().prop_map(Value::String),
        any::<i64>().prop_map(Value::from),
        any::<bool>().prop_map(Value::Bool),
        Just(Value::Null),
    ]
}

fn tree() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(8, 48, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map(text(), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A chain of `levels` collections, each a mapping (under a random key, with a sibling)
/// or a sequence (with an item before it), around `leaf`.
fn chain(levels: Vec<(bool, String, Value)>, leaf: Value) -> Value {
    levels.into_iter().fold(leaf, |inner, (map, key, sibling)| {
        if map {
            let mut m = serde_json::Map::new();
            m.insert(format!("{key}~"), sibling);
            m.insert(key, inner);
            Value::Object(m)
        } else {
            Value::Array(vec![sibling, inner])
        }
    })
}

proptest! {
    /// YAML (block style) and JSON as serializers write them are counted exactly.
    #[test]
    fn serialized_documents_are_counted_exactly(value in tree()) {
        let expected = value_depth(&value);
        for text in [
            serde_yaml_ng::to_string(&value).unwrap(),
            serde_json::to_string(&value).unwrap(),
            serde_json::to_string_pretty(&value).unwrap(),
        ] {
            prop_assert_eq!(depth(&text), expected, "{}", text);
        }
    }

    #[test]
    fn deep_chains_are_counted_exactly(
        levels in proptest::collection::vec((any::<bool>(), text(), scalar()), 50..75),
        leaf in tree(),
    ) {
        let value = chain(levels, leaf);
        let expected = value_depth(&value);
        let yaml = serde_yaml_ng::to_string(&value).unwrap();
        prop_assert_eq!(depth(&yaml), expected, "{}", yaml);
        prop_assert_eq!(check_depth(yaml.as_bytes()).is_ok(), expected <= MAX_DEPTH);
        prop_assert_eq!(depth(&serde_json::to_string(&value).unwrap()), expected);
    }
}

fn yamlish() -> impl Strategy<Value = String> {
    let tokens = proptest::sample::select(
        &[
            "a", "b: ", "- ", "[", "]", "{", "}", ", ", ",", ": ", ":", "\n", "  ", " ", "'", "\"",
            "#", " #", "|", ">", "|-\n", "? ", "\\", "x'y", "---\n", "\r", "\t", "\n  ", "\n    ",
            "\n- ", "\u{85}",
        ][..],
    );
    proptest::collection::vec(tokens, 0..48).prop_map(|t| t.concat())
}

/// How deep libyaml nests `text`, keys included, if it reads it.
fn libyaml_depth(text: &str) -> Option<usize> {
    let value = serde_yaml_ng::from_str::<serde_yaml_ng::Value>(text).ok()?;
    let mut deepest = 0;
    let mut stack = vec![(&value, 0)];
    while let Some((v, d)) = stack.pop() {
        match v {
            serde_yaml_ng::Value::Sequence(s) => {
                deepest = deepest.max(d + 1);
                stack.extend(s.iter().map(|c| (c, d + 1)));
            }
            serde_yaml_ng::Value::Mapping(m) => {
                deepest = deepest.max(d + 1);
                for (k, c) in m {
                    stack.push((k, d + 1));
                    stack.push((c, d + 1));
                }
            }
            serde_yaml_ng::Value::Tagged(t) => stack.push((&t.value, d)),
            _ => {}
        }
    }
    Some(deepest)
}

/// A `key: value` entry of a flow sequence is a mapping of its own, and so is the mapping
/// around a flow collection that turns out to be a key.
#[test]
fn pairs_in_flow_sequences_and_flow_keys_count() {
    for text in [
        format!("{}x{}", "[a: ".repeat(30), "]".repeat(30)),
        format!("{}x{}", "[? a: ".repeat(30), "]".repeat(30)),
        "[[[a]]: b]".to_string(),
        "[[[a]]: b, c]".to_string(),
        "[[a]]: b".to_string(),
        "k: v\n[[a]]: b\n".to_string(),
        "- x\n- [[a]]: b\n".to_string(),
        "{[[a]]: b}".to_string(),
        "[a, b: c, [d]]".to_string(),
        // Found by never_shallower_than_libyaml_reads.
        "[? \\]: ".to_string(),
    ] {
        assert_eq!(Some(depth(&text)), libyaml_depth(&text), "{text:?}");
    }
    let pairs = format!("{}x{}", "[a: ".repeat(40), "]".repeat(40));
    assert!(check_depth(pairs.as_bytes()).is_err());
    let keys = format!("{}a{}", "[".repeat(40), "]: b".repeat(40));
    assert!(check_depth(keys.as_bytes()).is_err(), "{keys}");
}

proptest! {
    // About one input in ten is YAML libyaml reads.
    #![proptest_config(ProptestConfig::with_cases(3000))]

    /// Whatever libyaml reads, the scanner counts at least as deep.
    #[test]
    fn never_shallower_than_libyaml_reads(text in yamlish()) {
        if let Some(expected) = libyaml_depth(&text) {
            prop_assert!(depth(&text) >= expected, "{:?}: {} < {}", text, depth(&text), expected);
        }
    }
}
