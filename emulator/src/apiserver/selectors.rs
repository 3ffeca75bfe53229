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
}

/// A parsed `labelSelector` (the `k8s.io/apimachinery/pkg/labels` grammar:
/// `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`, `!a`, comma-separated, all ANDed).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(Vec<LabelRequirement>);

impl LabelSelector {
    pub fn parse(text: &str) -> ApiResult<Self> {
        let mut requirements = Vec::new();
        for term in split_terms(text) {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            requirements.push(parse_label_term(term)?);
        }
        Ok(Self(requirements))
    }

    pub fn matches(&self, labels: Option<&serde_json::Map<String, Value>>) -> bool {
        let get = |key: &str| labels.and_then(|l| l.get(key)).and_then(Value::as_str);
        self.0.iter().all(|req| match req {
            LabelRequirement::Equals(k, v) => get(k) == Some(v.as_str()),
            // `!=` also matches objects without the label, as upstream.
            LabelRequirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            LabelRequirement::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelRequirement::NotIn(k, vs) => get(k).is_none_or(|x| vs.iter().all(|v| v != x)),
            LabelRequirement::Exists(k) => get(k).is_some(),
            LabelRequirement::DoesNotExist(k) => get(k).is_none(),
        })
    }
}

/// Splits on commas that are not inside `( ... )`.
fn split_terms(text: &str) -> Vec<&str> {
    let mut terms = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                terms.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&text[start..]);
    terms
}

fn invalid_selector(term: &str, why: &str) -> ApiError {
    ApiError::bad_request(format!("unable to parse requirement: {why}: {term:?}"))
}

fn parse_label_term(term: &str) -> ApiResult<LabelRequirement> {
    let check_key = |k: &str| -> ApiResult<String> {
        let k = k.trim();
        let valid = !k.is_empty()
            && k.len() <= 317
            && k.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
        if valid {
            Ok(k.to_string())
        } else {
            Err(invalid_selector(term, "invalid label key"))
        }
    };
    let check_value = |v: &str| -> ApiResult<String> {
        let v = v.trim();
        let valid = v.len() <= 63
            && v.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if valid {
            Ok(v.to_string())
        } else {
            Err(invalid_selector(term, "invalid label value"))
        }
    };
    let set = |rest: &str| -> ApiResult<Vec<String>> {
        let rest = rest.trim();
        let inner = rest
            .strip_prefix('(')
            .and_then(|r| r.strip_suffix(')'))
            .ok_or_else(|| invalid_selector(term, "expected a set in parentheses"))?;
        inner.split(',').map(check_value).collect()
    };
    if let Some(key) = term.strip_prefix('!') {
        return Ok(LabelRequirement::DoesNotExist(check_key(key)?));
    }
    if let Some((k, v)) = term.split_once("!=") {
        return Ok(LabelRequirement::NotEquals(check_key(k)?, check_value(v)?));
    }
    if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
        return Ok(LabelRequirement::Equals(check_key(k)?, check_value(v)?));
    }
    if let Some((k, rest)) = term.split_once(" notin ") {
        return Ok(LabelRequirement::NotIn(check_key(k)?, set(rest)?));
    }
    if let Some((k, rest)) = term.split_once(" in ") {
        return Ok(LabelRequirement::In(check_key(k)?, set(rest)?));
    }
    if term.contains(|c: char| c.is_whitespace() || "()<>".contains(c)) {
        return Err(invalid_selector(term, "unsupported operator"));
    }
    Ok(LabelRequirement::Exists(check_key(term)?))
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
