//! Label and field selectors, with the syntax and the supported fields of kube-apiserver.

use serde_json::Value;

use super::error::{ApiError, ApiResult};

#[derive(Debug, Clone, PartialEq)]
enum LabelRequirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
    /// `key>N`: the label, read as an integer, is greater than N.
    GreaterThan(String, i64),
    /// `key<N`.
    LessThan(String, i64),
}

/// A parsed `labelSelector` (the `k8s.io/apimachinery/pkg/labels` grammar: `a=b`, `a==b`,
/// `a!=b`, `a in (x,y)`, `a notin (x)`, `a`, `!a`, `a>5`, `a<5`, comma-separated, all
/// ANDed). The lexer and parser follow upstream's `selector.go`, with its error words.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(Vec<LabelRequirement>);

impl LabelSelector {
    pub fn parse(text: &str) -> ApiResult<Self> {
        LabelParser {
            tokens: label_tokens(text),
            at: 0,
        }
        .parse()
        .map(Self)
        .map_err(ApiError::bad_request)
    }

    pub fn matches(&self, labels: Option<&serde_json::Map<String, Value>>) -> bool {
        let get = |key: &str| labels.and_then(|l| l.get(key)).and_then(Value::as_str);
        // Gt and Lt compare the label as an int64; a label that is none matches neither
        // (upstream `Requirement.Matches`).
        let int = |key: &str| get(key).and_then(|v| v.parse::<i64>().ok());
        self.0.iter().all(|req| match req {
            LabelRequirement::Equals(k, v) => get(k) == Some(v.as_str()),
            // `!=` also matches objects without the label, as upstream.
            LabelRequirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            LabelRequirement::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelRequirement::NotIn(k, vs) => get(k).is_none_or(|x| vs.iter().all(|v| v != x)),
            LabelRequirement::Exists(k) => get(k).is_some(),
            LabelRequirement::DoesNotExist(k) => get(k).is_none(),
            LabelRequirement::GreaterThan(k, n) => int(k).is_some_and(|x| x > *n),
            LabelRequirement::LessThan(k, n) => int(k).is_some_and(|x| x < *n),
        })
    }
}

/// The lexer's tokens (upstream `Token`).
#[derive(Debug, Clone, PartialEq)]
enum LabelToken {
    Identifier(String),
    DoesNotExist,
    Equals,
    DoubleEquals,
    NotEquals,
    GreaterThan,
    LessThan,
    In,
    NotIn,
    OpenPar,
    ClosedPar,
    Comma,
}

impl LabelToken {
    /// The literal, for errors (`found '>', expected: ...`).
    fn literal(&self) -> &str {
        match self {
            Self::Identifier(s) => s,
            Self::DoesNotExist => "!",
            Self::Equals => "=",
            Self::DoubleEquals => "==",
            Self::NotEquals => "!=",
            Self::GreaterThan => ">",
            Self::LessThan => "<",
            Self::In => "in",
            Self::NotIn => "notin",
            Self::OpenPar => "(",
            Self::ClosedPar => ")",
            Self::Comma => ",",
        }
    }
}

/// Upstream's `Lexer`: whitespace separates; `!`, `!=`, `=`, `==`, `>`, `<`, `(`, `)`, `,`
/// are symbols; `in` and `notin` keywords; any other run of characters an identifier.
fn label_tokens(text: &str) -> Vec<LabelToken> {
    let special = |c: char| "=!(),><".contains(c);
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let token = match c {
            c if c.is_whitespace() => continue,
            '(' => LabelToken::OpenPar,
            ')' => LabelToken::ClosedPar,
            ',' => LabelToken::Comma,
            '>' => LabelToken::GreaterThan,
            '<' => LabelToken::LessThan,
            '=' if chars.next_if_eq(&'=').is_some() => LabelToken::DoubleEquals,
            '=' => LabelToken::Equals,
            '!' if chars.next_if_eq(&'=').is_some() => LabelToken::NotEquals,
            '!' => LabelToken::DoesNotExist,
            c => {
                let mut word = String::from(c);
                while let Some(c) = chars.next_if(|c| !c.is_whitespace() && !special(*c)) {
                    word.push(c);
                }
                match word.as_str() {
                    "in" => LabelToken::In,
                    "notin" => LabelToken::NotIn,
                    _ => LabelToken::Identifier(word),
                }
            }
        };
        out.push(token);
    }
    out
}

/// Upstream's `Parser`, over the tokens of one selector.
struct LabelParser {
    tokens: Vec<LabelToken>,
    at: usize,
}

/// What upstream's errors say for the end of the input.
const END: &str = "";

impl LabelParser {
    fn peek(&self) -> Option<&LabelToken> {
        self.tokens.get(self.at)
    }

    fn next(&mut self) -> Option<LabelToken> {
        let token = self.tokens.get(self.at).cloned();
        self.at += 1;
        token
    }

    /// A token where a value is read: `in` and `notin` are identifiers there.
    fn next_value(&mut self) -> Option<LabelToken> {
        self.next().map(|t| match t {
            LabelToken::In | LabelToken::NotIn => LabelToken::Identifier(t.literal().to_owned()),
            t => t,
        })
    }

    fn parse(mut self) -> Result<Vec<LabelRequirement>, String> {
        let mut requirements = Vec::new();
        if self.peek().is_none() {
            return Ok(requirements);
        }
        loop {
            match self.peek() {
                Some(LabelToken::Identifier(_) | LabelToken::DoesNotExist) => {}
                other => {
                    return Err(format!(
                        "found '{}', expected: !, identifier, or 'end of string'",
                        other.map_or(END, LabelToken::literal)
                    ));
                }
            }
            let requirement = self
                .requirement()
                .map_err(|e| format!("unable to parse requirement: {e}"))?;
            requirements.push(requirement);
            match self.next_value() {
                None => return Ok(requirements),
                Some(LabelToken::Comma) => match self.peek() {
                    Some(LabelToken::Identifier(_) | LabelToken::DoesNotExist) => {}
                    other => {
                        return Err(format!(
                            "found '{}', expected: identifier after ','",
                            other.map_or(END, LabelToken::literal)
                        ));
                    }
                },
                Some(other) => {
                    return Err(format!(
                        "found '{}', expected: ',' or 'end of string'",
                        other.literal()
                    ));
                }
            }
        }
    }

    fn requirement(&mut self) -> Result<LabelRequirement, String> {
        let negated = self.peek() == Some(&LabelToken::DoesNotExist);
        if negated {
            self.at += 1;
        }
        let key = match self.next() {
            Some(LabelToken::Identifier(key)) => key,
            other => {
                return Err(format!(
                    "found '{}', expected: identifier",
                    other.as_ref().map_or(END, LabelToken::literal)
                ));
            }
        };
        fake_dra_api::names::qualified_name(&key)
            .map_err(|e| format!("key: Invalid value: {e}"))?;
        if matches!(self.peek(), None | Some(LabelToken::Comma)) {
            return Ok(if negated {
                LabelRequirement::DoesNotExist(key)
            } else {
                LabelRequirement::Exists(key)
            });
        }
        if negated {
            return Err(format!(
                "found '{}', expected: ',' or 'end of string' after !{key}",
                self.peek().map_or(END, LabelToken::literal)
            ));
        }
        let operator = self.next();
        let value_ok = |v: &str| -> Result<(), String> {
            fake_dra_api::names::label_value(v)
                .map_err(|e| format!("values[0]: Invalid value: {e}"))
        };
        match operator {
            Some(op @ (LabelToken::Equals | LabelToken::DoubleEquals | LabelToken::NotEquals)) => {
                let value = self.exact_value()?;
                value_ok(&value)?;
                Ok(if op == LabelToken::NotEquals {
                    LabelRequirement::NotEquals(key, value)
                } else {
                    LabelRequirement::Equals(key, value)
                })
            }
            Some(op @ (LabelToken::GreaterThan | LabelToken::LessThan)) => {
                let value = self.exact_value()?;
                // `NewRequirement`: "for 'Gt', 'Lt' operators, the value must be an integer".
                let n = value.parse::<i64>().map_err(|_| {
                    format!(
                        "values[0]: Invalid value: {value:?}: for 'Gt', 'Lt' operators, the value must be an integer"
                    )
                })?;
                Ok(if op == LabelToken::GreaterThan {
                    LabelRequirement::GreaterThan(key, n)
                } else {
                    LabelRequirement::LessThan(key, n)
                })
            }
            Some(op @ (LabelToken::In | LabelToken::NotIn)) => {
                let values = self.value_set()?;
                for v in &values {
                    value_ok(v)?;
                }
                Ok(if op == LabelToken::In {
                    LabelRequirement::In(key, values)
                } else {
                    LabelRequirement::NotIn(key, values)
                })
            }
            other => Err(format!(
                "found '{}', expected: in, notin, =, ==, !=, gt, lt",
                other.as_ref().map_or(END, LabelToken::literal)
            )),
        }
    }

    /// `parseExactValue`: an identifier, or nothing (the empty value) before `,` or the end.
    fn exact_value(&mut self) -> Result<String, String> {
        match self.peek() {
            None | Some(LabelToken::Comma) => return Ok(String::new()),
            _ => {}
        }
        match self.next_value() {
            Some(LabelToken::Identifier(v)) => Ok(v),
            other => Err(format!(
                "found '{}', expected: identifier",
                other.as_ref().map_or(END, LabelToken::literal)
            )),
        }
    }

    /// `parseValues`: `(a,b)`; `()` and empty places are the empty value.
    fn value_set(&mut self) -> Result<Vec<String>, String> {
        match self.next_value() {
            Some(LabelToken::OpenPar) => {}
            other => {
                return Err(format!(
                    "found '{}' expected: '('",
                    other.as_ref().map_or(END, LabelToken::literal)
                ));
            }
        }
        let mut values = Vec::new();
        let mut after_value = false;
        loop {
            match self.next_value() {
                Some(LabelToken::Identifier(v)) if !after_value => {
                    values.push(v);
                    after_value = true;
                }
                Some(LabelToken::Comma) => {
                    if !after_value {
                        values.push(String::new());
                    }
                    after_value = false;
                }
                Some(LabelToken::ClosedPar) => {
                    if !after_value {
                        values.push(String::new());
                    }
                    values.sort();
                    values.dedup();
                    return Ok(values);
                }
                other => {
                    return Err(format!(
                        "found '{}', expected: ',', ')' or identifier",
                        other.as_ref().map_or(END, LabelToken::literal)
                    ));
                }
            }
        }
    }
}

/// A parsed `fieldSelector`: `field=value`, `field==value`, `field!=value`, comma-separated.
/// Fields are kept as the stored objects name them (an `events.k8s.io` label is mapped to
/// the core Event field it stands for), so matching reads the stored object.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

/// `events.k8s.io/v1` Events are core Events in storage: their selectable labels are
/// mapped to the core ones (pkg/apis/events/v1/conversion.go, AddFieldLabelConversionsForEvent).
const EVENTS_K8S_IO_LABELS: [(&str, &str); 11] = [
    ("reason", "reason"),
    ("regarding.kind", "involvedObject.kind"),
    ("regarding.namespace", "involvedObject.namespace"),
    ("regarding.name", "involvedObject.name"),
    ("regarding.uid", "involvedObject.uid"),
    ("regarding.apiVersion", "involvedObject.apiVersion"),
    (
        "regarding.resourceVersion",
        "involvedObject.resourceVersion",
    ),
    ("regarding.fieldPath", "involvedObject.fieldPath"),
    ("reportingController", "reportingComponent"),
    ("source", "source"),
    ("type", "type"),
];

/// The label a core Event's `source` field selects by: `source.component`, or
/// `reportingComponent` when that is empty (pkg/registry/core/event/strategy.go).
const EVENT_SOURCE: &str = "source";

/// The fields each kind can be selected by, besides `metadata.name` and `metadata.namespace`
/// which every kind supports (pkg/registry/*/strategy.go `ToSelectableFields` upstream).
fn selectable_fields(group: &str, plural: &str) -> &'static [&'static str] {
    match (group, plural) {
        // pkg/registry/resource/resourceslice/strategy.go: ResourceSliceToSelectableFields.
        ("resource.k8s.io", "resourceslices") => &["spec.nodeName", "spec.driver"],
        ("", "pods") => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        ("", "events") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        ("", "namespaces") => &["status.phase"],
        ("", "nodes") => &["spec.unschedulable"],
        _ => &[],
    }
}

impl FieldSelector {
    pub fn parse(text: &str, group: &str, plural: &str) -> ApiResult<Self> {
        let mut terms = Vec::new();
        for term in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (field, equal, value) = if let Some((f, v)) = term.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                (f, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{text}'; can't understand '{term}'"
                )));
            };
            let field = field.trim();
            let field = if (group, plural) == ("events.k8s.io", "events") {
                match EVENTS_K8S_IO_LABELS
                    .iter()
                    .find(|(label, _)| *label == field)
                {
                    Some((_, core)) => *core,
                    None if matches!(field, "metadata.name" | "metadata.namespace") => field,
                    None => {
                        let known: Vec<&str> = EVENTS_K8S_IO_LABELS
                            .iter()
                            .map(|(label, _)| *label)
                            .collect();
                        return Err(ApiError::bad_request(format!(
                            "field label not supported: {field} (supported: metadata.name, metadata.namespace, {})",
                            known.join(", ")
                        )));
                    }
                }
            } else {
                let extra = selectable_fields(group, plural);
                if !matches!(field, "metadata.name" | "metadata.namespace")
                    && !extra.contains(&field)
                {
                    let mut known = vec!["metadata.name", "metadata.namespace"];
                    known.extend_from_slice(extra);
                    return Err(ApiError::bad_request(format!(
                        "field label not supported: {field} (supported: {})",
                        known.join(", ")
                    )));
                }
                field
            };
            terms.push((field.to_string(), equal, value.trim().to_string()));
        }
        Ok(Self(terms))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(field, equal, value)| {
            let pointer = if field == EVENT_SOURCE {
                // Only Events select by `source`.
                let component = obj
                    .pointer("/source/component")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                if component.is_empty() {
                    "/reportingComponent".to_string()
                } else {
                    "/source/component".to_string()
                }
            } else {
                format!("/{}", field.replace('.', "/"))
            };
            let actual = match obj.pointer(&pointer) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Bool(b)) => b.to_string(),
                Some(Value::Number(n)) => n.to_string(),
                // An absent field selects as the empty string, as upstream.
                _ => String::new(),
            };
            (actual == *value) == *equal
        })
    }
}

/// Both selectors of a list or watch request.
#[derive(Debug, Clone, Default)]
pub struct Selectors {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Selectors {
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels").and_then(Value::as_object);
        self.labels.matches(labels) && self.fields.matches(obj)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(v: Value) -> serde_json::Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn label_selector_grammar() {
        let l = labels(json!({"app": "web", "tier": "front"}));
        let ok = |s: &str| LabelSelector::parse(s).map(|sel| sel.matches(Some(&l)));
        assert_eq!(ok("app=web"), Ok(true));
        assert_eq!(ok("app==web,tier=front"), Ok(true));
        assert_eq!(ok("app!=web"), Ok(false));
        assert_eq!(ok("missing!=x"), Ok(true));
        assert_eq!(ok("app in (db, web)"), Ok(true));
        assert_eq!(ok("app notin (web)"), Ok(false));
        assert_eq!(ok("tier"), Ok(true));
        assert_eq!(ok("!tier"), Ok(false));
        assert_eq!(ok(""), Ok(true));
        assert!(LabelSelector::parse("app in web").is_err());
        assert!(LabelSelector::parse("a b").is_err());
        assert_eq!(ok("app in (web,)"), Ok(true));
        assert_eq!(
            ok("app=web,"),
            Err(ApiError::bad_request(
                "found '', expected: identifier after ','"
            ))
        );
    }

    /// D18: `>` and `<` (Gt, Lt), as kube-apiserver serves them, were refused, so fleet
    /// mode's `--node-selector 'a>5'` listed no node and retried forever.
    #[test]
    fn greater_and_less_than_compare_integers() {
        let l = labels(json!({"gen": "7", "name": "x"}));
        let ok = |s: &str| LabelSelector::parse(s).map(|sel| sel.matches(Some(&l)));
        assert_eq!(ok("gen>5"), Ok(true));
        assert_eq!(ok("gen > 7"), Ok(false));
        assert_eq!(ok("gen<8,gen>-1"), Ok(true));
        // Not an integer, or absent: matches neither.
        assert_eq!(ok("name>1"), Ok(false));
        assert_eq!(ok("missing<100"), Ok(false));
        assert_eq!(
            LabelSelector::parse("gen>five").map_err(|e| e.message),
            Err("unable to parse requirement: values[0]: Invalid value: \"five\": for 'Gt', 'Lt' operators, the value must be an integer".into())
        );
        assert_eq!(
            LabelSelector::parse("gen>").map_err(|e| e.message),
            Err("unable to parse requirement: values[0]: Invalid value: \"\": for 'Gt', 'Lt' operators, the value must be an integer".into())
        );
    }

    #[test]
    fn field_selector_known_fields_only() {
        let pod = json!({"metadata": {"name": "p", "namespace": "ns"}, "spec": {"nodeName": "n1"}});
        let sel = FieldSelector::parse("spec.nodeName=n1,metadata.name!=q", "", "pods");
        assert_eq!(sel.map(|s| s.matches(&pod)), Ok(true));
        let err = FieldSelector::parse("spec.nodeName=n1", "", "nodes");
        assert!(err.is_err_and(|e| e.code == 400 && e.message.contains("spec.nodeName")));
        let unset = FieldSelector::parse("spec.nodeName=", "", "pods");
        assert_eq!(unset.map(|s| s.matches(&json!({"metadata": {}}))), Ok(true));
    }

    #[test]
    fn event_selectors_of_both_apis_read_the_core_layout() {
        let event = json!({"metadata": {"name": "e"}, "involvedObject": {"kind": "Pod", "name": "p"}, "reportingComponent": "ctl", "type": "Warning"});
        let core = FieldSelector::parse(
            "involvedObject.name=p,involvedObject.kind=Pod,source=ctl",
            "",
            "events",
        );
        assert_eq!(core.map(|s| s.matches(&event)), Ok(true));
        let new = FieldSelector::parse(
            "regarding.name=p,reportingController=ctl,type=Warning",
            "events.k8s.io",
            "events",
        );
        assert_eq!(new.map(|s| s.matches(&event)), Ok(true));
        let with_source = json!({"source": {"component": "kubelet"}, "reportingComponent": "ctl"});
        let source = FieldSelector::parse("source=kubelet", "", "events");
        assert_eq!(source.map(|s| s.matches(&with_source)), Ok(true));
        assert!(FieldSelector::parse("involvedObject.name=p", "events.k8s.io", "events").is_err());
    }
}
