//! Evaluating a core/v1 `NodeSelector` against a node, as the scheduler does for
//! `ResourceClass.suitableNodes` and `AllocationResult.availableOnNodes`.
//!
//! Semantics follow `k8s.io/component-helpers/scheduling/corev1/nodeaffinity`: the terms
//! are ORed, the requirements of a term ANDed, an empty term matches nothing, and
//! `matchFields` only knows `metadata.name`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSelector, NodeSelectorRequirement, NodeSelectorTerm};

/// What a selector can look at.
#[derive(Debug, Clone, Copy)]
pub struct NodeView<'a> {
    pub name: &'a str,
    pub labels: &'a BTreeMap<String, String>,
}

/// A selector that matches exactly one node by name: what a driver writes into
/// `availableOnNodes` for a node-local allocation.
pub fn for_node(node_name: &str) -> NodeSelector {
    NodeSelector {
        node_selector_terms: vec![NodeSelectorTerm {
            match_fields: Some(vec![NodeSelectorRequirement {
                key: "metadata.name".into(),
                operator: "In".into(),
                values: Some(vec![node_name.into()]),
            }]),
            match_expressions: None,
        }],
    }
}

pub fn matches(selector: &NodeSelector, node: NodeView<'_>) -> bool {
    selector
        .node_selector_terms
        .iter()
        .any(|term| term_matches(term, node))
}

fn term_matches(term: &NodeSelectorTerm, node: NodeView<'_>) -> bool {
    let expressions = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if expressions.is_empty() && fields.is_empty() {
        return false;
    }
    expressions
        .iter()
        .all(|r| requirement_matches(r, node.labels.get(&r.key).map(String::as_str)))
        && fields
            .iter()
            .all(|r| r.key == "metadata.name" && requirement_matches(r, Some(node.name)))
}

fn requirement_matches(req: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = req.values.as_deref().unwrap_or_default();
    let number = |s: &str| s.parse::<i64>().ok();
    match req.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| values.iter().all(|x| x != v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        // Gt/Lt compare a single integer value; anything unparsable does not match.
        "Gt" | "Lt" => match (
            value.and_then(number),
            values.first().and_then(|v| number(v)),
        ) {
            (Some(actual), Some(bound)) if values.len() == 1 => {
                if req.operator == "Gt" {
                    actual > bound
                } else {
                    actual < bound
                }
            }
            _ => false,
        },
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(key: &str, op: &str, values: &[&str]) -> NodeSelectorRequirement {
        NodeSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: Some(values.iter().map(|v| v.to_string()).collect()),
        }
    }

    fn term(
        expressions: Vec<NodeSelectorRequirement>,
        fields: Vec<NodeSelectorRequirement>,
    ) -> NodeSelectorTerm {
        NodeSelectorTerm {
            match_expressions: Some(expressions),
            match_fields: Some(fields),
        }
    }

    #[test]
    fn for_node_matches_only_that_node() {
        let labels = BTreeMap::new();
        let selector = for_node("a");
        assert!(matches(
            &selector,
            NodeView {
                name: "a",
                labels: &labels
            }
        ));
        assert!(!matches(
            &selector,
            NodeView {
                name: "b",
                labels: &labels
            }
        ));
    }

    #[test]
    fn operators_terms_and_empty_terms() {
        let labels = BTreeMap::from([
            ("zone".to_string(), "x".to_string()),
            ("cores".to_string(), "8".to_string()),
        ]);
        let node = NodeView {
            name: "n",
            labels: &labels,
        };
        let one = |r| NodeSelector {
            node_selector_terms: vec![term(vec![r], vec![])],
        };
        assert!(matches(&one(req("zone", "In", &["x", "y"])), node));
        assert!(!matches(&one(req("zone", "NotIn", &["x"])), node));
        assert!(matches(&one(req("missing", "NotIn", &["x"])), node));
        assert!(matches(&one(req("zone", "Exists", &[])), node));
        assert!(matches(&one(req("missing", "DoesNotExist", &[])), node));
        assert!(matches(&one(req("cores", "Gt", &["4"])), node));
        assert!(!matches(&one(req("cores", "Lt", &["4"])), node));
        assert!(!matches(&one(req("zone", "Gt", &["4"])), node));
        assert!(!matches(&one(req("zone", "Bogus", &["x"])), node));
        assert!(
            !matches(
                &NodeSelector {
                    node_selector_terms: vec![term(vec![], vec![])]
                },
                node
            ),
            "an empty term matches nothing"
        );
        let either = NodeSelector {
            node_selector_terms: vec![
                term(vec![req("zone", "In", &["y"])], vec![]),
                term(vec![], vec![req("metadata.name", "In", &["n"])]),
            ],
        };
        assert!(matches(&either, node), "terms are ORed");
        let both = NodeSelector {
            node_selector_terms: vec![term(
                vec![req("zone", "In", &["x"])],
                vec![req("metadata.name", "In", &["m"])],
            )],
        };
        assert!(!matches(&both, node), "requirements of a term are ANDed");
        let unknown_field = NodeSelector {
            node_selector_terms: vec![term(vec![], vec![req("metadata.uid", "In", &["n"])])],
        };
        assert!(!matches(&unknown_field, node));
    }
}
