//! DRA CEL selectors from a grammar: the device variable's fields, literals at the edges,
//! operators, list literals and the comprehension macros that multiply cost, and nesting
//! past the parser's limit. The target compiles, estimates and evaluates each as the
//! emulated apiserver and scheduler do; the API targets send the same ones in classes and
//! claims.

use super::{bounded_refusal, run, within_deadline};
use fake_dra_emulator::cel as dra_cel;
use k8s_openapi::api::resource::v1::Device;
use proptest::prelude::*;
use serde_json::json;

const DRIVER: &str = "fake.resource.3-shake.com";

fn atom() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("true".to_string()),
        Just("false".to_string()),
        Just("device.driver".to_string()),
        Just(format!("device.driver == \"{DRIVER}\"")),
        Just("device.attributes[\"fake.resource.3-shake.com\"].model".to_string()),
        Just("device.attributes[\"other.example.com\"].x".to_string()),
        Just("device.capacity[\"fake.resource.3-shake.com\"].memory".to_string()),
        Just("device.attributes".to_string()),
        Just("9223372036854775807".to_string()),
        Just("-9223372036854775808".to_string()),
        Just("18446744073709551615u".to_string()),
        Just("1.0e308".to_string()),
        Just("\"ULTRA_10\"".to_string()),
        Just("b\"\\xff\"".to_string()),
        Just("null".to_string()),
        Just("x".to_string()),
        Just("[]".to_string()),
        Just("{}".to_string()),
        any::<i32>().prop_map(|i| i.to_string()),
        "\"[ -!#-\\[\\]-~]{0,12}\"",
    ]
}

/// A list literal `[0, 1, …, n-1]`, written out: comprehensions over it cost n per level.
fn list_literal() -> impl Strategy<Value = String> {
    (0usize..2500).prop_map(|n| {
        let items: Vec<String> = (0..n).map(|i| i.to_string()).collect();
        format!("[{}]", items.join(","))
    })
}

/// An expression of the grammar, a few levels deep.
pub fn expression() -> impl Strategy<Value = String> {
    let tree = atom().prop_recursive(5, 40, 3, |inner| {
        const BINARY: [&str; 12] = [
            "+", "-", "*", "/", "%", "==", "!=", "<", ">=", "&&", "||", "in",
        ];
        prop_oneof![
            (
                inner.clone(),
                prop::sample::select(&BINARY[..]),
                inner.clone()
            )
                .prop_map(|(a, op, b)| format!("{a} {op} {b}")),
            inner.clone().prop_map(|a| format!("!({a})")),
            inner.clone().prop_map(|a| format!("({a})")),
            inner.clone().prop_map(|a| format!("size({a})")),
            (inner.clone(), inner.clone(), inner.clone())
                .prop_map(|(c, a, b)| format!("{c} ? {a} : {b}")),
            (inner.clone(), "[a-z.*+()\\[\\]]{0,12}")
                .prop_map(|(a, re)| format!("{a}.matches(\"{re}\")")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("{a}.startsWith({b})")),
            prop::collection::vec(inner.clone(), 0..4)
                .prop_map(|items| format!("[{}]", items.join(", "))),
            (
                prop_oneof![list_literal(), inner.clone()],
                prop::sample::select(&["all", "exists", "exists_one", "map", "filter"][..]),
                inner
            )
                .prop_map(|(list, mac, body)| format!("{list}.{mac}(x, {body})")),
        ]
    });
    prop_oneof![
        12 => tree,
        // Nesting past the parser's limit, in parentheses or in lists.
        1 => (1usize..400).prop_map(|n| format!("{}true{}", "(".repeat(n), ")".repeat(n))),
        1 => (1usize..400).prop_map(|n| format!("{}1{} == []", "[".repeat(n), "]".repeat(n))),
        // Quadratic: two nested comprehensions over written-out lists.
        1 => (list_literal(), list_literal())
            .prop_map(|(a, b)| format!("{a}.all(x, {b}.all(y, x + y >= 0))")),
        // Past the length limit.
        1 => (10_000usize..40_000).prop_map(|n| format!("\"{}\" == \"\"", "a".repeat(n))),
    ]
}

fn device() -> Device {
    serde_json::from_value(json!({
        "name": "fake-0",
        "attributes": {
            "model": {"string": "ULTRA_10"},
            "index": {"int": 0},
            "healthy": {"bool": true},
            "driverVersion": {"version": "1.2.3"},
            "other.example.com/x": {"int": 5},
        },
        "capacity": {"memory": {"value": "80Gi"}},
    }))
    .expect("a device")
}

/// Compile, estimate and (when the estimate is within the limit, as the apiserver
/// requires at create) evaluate: within the deadline, without a panic or a stack
/// overflow, with a message of bounded size.
#[test]
fn cel_selectors() {
    let device = device();
    run("cel_selectors", expression(), |expression| {
        let expression = expression.clone();
        let device = device.clone();
        // A fresh thread has the 2 MiB stack of a runtime thread: the stack a sim
        // overflowed with a dozen parentheses.
        let outcome = within_deadline("compile, estimate, evaluate", move || {
            let program = match dra_cel::compile(&expression) {
                Ok(p) => p,
                Err(e) => return Err(e.to_string()),
            };
            let cost = dra_cel::with_stack(|| dra_cel::estimate(&program));
            if cost > dra_cel::MAX_COST {
                return Err(format!("estimated cost {cost}"));
            }
            dra_cel::evaluate(&program, &expression, DRIVER, &device).map(|_| ())
        })?;
        bounded_refusal(outcome)
    });
}
