//! The reviews a client asks about itself: `kubectl auth can-i` (SelfSubjectAccessReview;
//! SelfSubjectRulesReview for `--list`) and `kubectl auth whoami` (SelfSubjectReview).
//! Answered from the request, never stored, as kube-apiserver's review registries do.
//!
//! The emulator authenticates nobody and authorizes every request: each caller is the
//! cluster's admin, as kind's kubeconfig user `kubernetes-admin` is (group
//! `kubeadm:cluster-admins`, bound to `cluster-admin`). Asked as someone else (`--as`,
//! `--as-group`: the `Impersonate-*` headers), the answer comes from the Roles, ClusterRoles
//! and bindings stored, matched as the RBAC authorizer matches them
//! (`plugin/pkg/auth/authorizer/rbac`, `pkg/apis/rbac/v1/evaluation_helpers.go`). Not
//! modelled: the bootstrap roles (`system:basic-user`, …; none is stored here) and role
//! aggregation (stored `rules` only). The other requests still are not authorized.

use serde_json::{Value, json};

use super::error::{ApiError, ApiResult};
use super::registry::{ResourceKey, ResourceType, string_list};
use super::store::Store;

/// Who asks: the admin unless impersonating.
#[derive(Debug, Clone, PartialEq)]
pub struct Requester {
    pub user: String,
    pub groups: Vec<String>,
    /// Whether this is the unimpersonated admin, whom every request is allowed.
    admin: bool,
}

const ADMIN_USER: &str = "kubernetes-admin";
const ADMIN_GROUP: &str = "kubeadm:cluster-admins";
const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";

impl Requester {
    /// From the `Impersonate-User` and `Impersonate-Group` headers, as the impersonation
    /// filter builds the user: `system:authenticated` added for anyone but
    /// `system:anonymous`, and a service account's groups when no group is asked for.
    pub fn from_headers(user: Option<&str>, groups: &[String]) -> ApiResult<Self> {
        let Some(user) = user.filter(|u| !u.is_empty()) else {
            if !groups.is_empty() {
                return Err(ApiError::internal(
                    "requested [{Group ...}] without impersonating a user",
                ));
            }
            return Ok(Self {
                user: ADMIN_USER.into(),
                groups: vec![ADMIN_GROUP.into(), "system:authenticated".into()],
                admin: true,
            });
        };
        let mut all = groups.to_vec();
        if groups.is_empty()
            && let Some((namespace, _)) = user
                .strip_prefix(SERVICE_ACCOUNT_PREFIX)
                .and_then(|rest| rest.split_once(':'))
        {
            all.push("system:serviceaccounts".into());
            all.push(format!("system:serviceaccounts:{namespace}"));
        }
        if user != "system:anonymous" && !all.iter().any(|g| g == "system:authenticated") {
            all.push("system:authenticated".into());
        }
        Ok(Self {
            user: user.into(),
            groups: all,
            admin: false,
        })
    }
}

/// What an access review asks.
#[derive(Debug, Default)]
struct Attributes {
    verb: String,
    group: String,
    resource: String,
    subresource: String,
    name: String,
    namespace: String,
    /// A non-resource request's path (`/healthz`), when there is one.
    path: Option<String>,
}

fn text<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn strings(value: &Value, field: &str) -> Vec<String> {
    string_list(value.get(field))
}

fn has(list: &[String], wanted: &str) -> bool {
    list.iter().any(|v| v == "*" || v == wanted)
}

/// `RuleAllows`: verbs, groups, resources (with `resource/subresource` and `*/sub`) and
/// names for resource requests; verbs and paths (a trailing `*` is a prefix) otherwise.
fn rule_allows(rule: &Value, attrs: &Attributes) -> bool {
    if !has(&strings(rule, "verbs"), &attrs.verb) {
        return false;
    }
    if let Some(path) = &attrs.path {
        return strings(rule, "nonResourceURLs").iter().any(|url| {
            url == "*"
                || url == path
                || url
                    .strip_suffix('*')
                    .is_some_and(|prefix| path.starts_with(prefix))
        });
    }
    if !has(&strings(rule, "apiGroups"), &attrs.group) {
        return false;
    }
    let resources = strings(rule, "resources");
    let resource_ok = if attrs.subresource.is_empty() {
        has(&resources, &attrs.resource)
    } else {
        let combined = format!("{}/{}", attrs.resource, attrs.subresource);
        let any_sub = format!("*/{}", attrs.subresource);
        resources
            .iter()
            .any(|r| r == "*" || *r == combined || *r == any_sub)
    };
    let names = strings(rule, "resourceNames");
    resource_ok && (names.is_empty() || names.contains(&attrs.name))
}

fn subject_matches(subject: &Value, binding_namespace: &str, who: &Requester) -> bool {
    let name = text(subject, "/name");
    match text(subject, "/kind") {
        "User" => name == who.user,
        "Group" => who.groups.iter().any(|g| g == name),
        "ServiceAccount" => {
            let namespace = match text(subject, "/namespace") {
                "" => binding_namespace,
                ns => ns,
            };
            who.user == format!("{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}")
        }
        _ => false,
    }
}

fn key(plural: &str) -> ResourceKey {
    ResourceKey {
        group: "rbac.authorization.k8s.io".into(),
        plural: plural.into(),
    }
}

/// Every rule granted to `who` cluster-wide, and in `namespace` when one is given, each
/// with the binding that grants it (for the review's `reason`).
fn granted_rules(store: &Store, who: &Requester, namespace: &str) -> Vec<(Value, String)> {
    let roles = |plural: &str, ns: Option<&str>| store.objects_in(&key(plural), ns);
    let cluster_roles = roles("clusterroles", None);
    let mut out = Vec::new();
    let mut collect = |binding: &Value, binding_kind: &str, role_namespace: Option<&str>| {
        let binding_ns = text(binding, "/metadata/namespace");
        let bound = binding
            .get("subjects")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|s| subject_matches(s, binding_ns, who));
        if !bound {
            return;
        }
        let role_kind = text(binding, "/roleRef/kind");
        let role_name = text(binding, "/roleRef/name");
        let role = match (role_kind, role_namespace) {
            ("ClusterRole", _) => cluster_roles
                .iter()
                .find(|r| text(r, "/metadata/name") == role_name)
                .cloned(),
            ("Role", Some(ns)) => roles("roles", Some(ns))
                .into_iter()
                .find(|r| text(r, "/metadata/name") == role_name),
            _ => None,
        };
        let reason = format!(
            "RBAC: allowed by {binding_kind} {:?} of {role_kind} {role_name:?}",
            text(binding, "/metadata/name")
        );
        for rule in role
            .as_ref()
            .and_then(|r| r.get("rules"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            out.push((rule.clone(), reason.clone()));
        }
    };
    for binding in roles("clusterrolebindings", None) {
        collect(&binding, "ClusterRoleBinding", None);
    }
    if !namespace.is_empty() {
        for binding in roles("rolebindings", Some(namespace)) {
            collect(&binding, "RoleBinding", Some(namespace));
        }
    }
    out
}

/// The answer to a `POST` of a review, or `None` when `rt` is not a review.
pub fn answer(
    store: &Store,
    rt: &ResourceType,
    who: &Requester,
    body: &Value,
) -> Option<ApiResult<Value>> {
    if !rt.review {
        return None;
    }
    let mut review = body.clone();
    if !review.is_object() {
        return Some(Err(ApiError::bad_request(format!(
            "the body of a {} must be an object",
            rt.kind
        ))));
    }
    review["apiVersion"] = json!(rt.api_version("v1"));
    review["kind"] = json!(rt.kind);
    let status = match rt.kind.as_str() {
        "SelfSubjectAccessReview" => access_review(store, who, body),
        "SelfSubjectRulesReview" => Ok(rules_review(store, who, body)),
        "SelfSubjectReview" => {
            Ok(json!({"userInfo": {"username": who.user, "groups": who.groups}}))
        }
        other => Err(ApiError::not_implemented(format!("the review {other}"))),
    };
    Some(status.map(|status| {
        review["status"] = status;
        review
    }))
}

fn access_review(store: &Store, who: &Requester, body: &Value) -> ApiResult<Value> {
    let attrs = if let Some(resource) = body.pointer("/spec/resourceAttributes") {
        Attributes {
            verb: text(resource, "/verb").into(),
            group: text(resource, "/group").into(),
            resource: text(resource, "/resource").into(),
            subresource: text(resource, "/subresource").into(),
            name: text(resource, "/name").into(),
            namespace: text(resource, "/namespace").into(),
            path: None,
        }
    } else if let Some(non_resource) = body.pointer("/spec/nonResourceAttributes") {
        Attributes {
            verb: text(non_resource, "/verb").into(),
            path: Some(text(non_resource, "/path").into()),
            ..Attributes::default()
        }
    } else {
        return Err(ApiError::invalid(
            "SelfSubjectAccessReview.authorization.k8s.io",
            "",
            vec![super::error::FieldCause::invalid(
                "spec.resourceAttributes",
                &Value::Null,
                "exactly one of nonResourceAttributes or resourceAttributes must be specified",
            )],
        ));
    };
    if who.admin {
        return Ok(json!({
            "allowed": true,
            "reason": "the emulator authorizes every request: the caller is the cluster's admin",
        }));
    }
    let granted = granted_rules(store, who, &attrs.namespace);
    Ok(
        match granted.iter().find(|(rule, _)| rule_allows(rule, &attrs)) {
            Some((_, reason)) => json!({"allowed": true, "reason": reason}),
            None => json!({"allowed": false}),
        },
    )
}

fn rules_review(store: &Store, who: &Requester, body: &Value) -> Value {
    if who.admin {
        return json!({
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            "incomplete": false,
        });
    }
    let namespace = text(body, "/spec/namespace");
    let (non_resource, resource): (Vec<Value>, Vec<Value>) = granted_rules(store, who, namespace)
        .into_iter()
        .map(|(rule, _)| rule)
        .partition(|rule| rule.get("nonResourceURLs").is_some());
    json!({"resourceRules": resource, "nonResourceRules": non_resource, "incomplete": false})
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn attrs(verb: &str, resource: &str, subresource: &str, name: &str) -> Attributes {
        Attributes {
            verb: verb.into(),
            group: "resource.k8s.io".into(),
            resource: resource.into(),
            subresource: subresource.into(),
            name: name.into(),
            ..Attributes::default()
        }
    }

    #[test]
    fn rules_match_as_rbac_does() {
        let rule = json!({"verbs": ["get", "list"], "apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims", "resourceclaims/status"]});
        assert!(rule_allows(&rule, &attrs("get", "resourceclaims", "", "")));
        assert!(rule_allows(
            &rule,
            &attrs("list", "resourceclaims", "status", "")
        ));
        assert!(!rule_allows(
            &rule,
            &attrs("delete", "resourceclaims", "", "")
        ));
        assert!(!rule_allows(&rule, &attrs("get", "resourceslices", "", "")));
        let named = json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*/status"], "resourceNames": ["a"]});
        assert!(rule_allows(&named, &attrs("patch", "pods", "status", "a")));
        assert!(!rule_allows(&named, &attrs("patch", "pods", "status", "b")));
        assert!(!rule_allows(&named, &attrs("patch", "pods", "", "a")));
        let paths = json!({"verbs": ["get"], "nonResourceURLs": ["/healthz/*"]});
        let healthz = Attributes {
            verb: "get".into(),
            path: Some("/healthz/etcd".into()),
            ..Attributes::default()
        };
        assert!(rule_allows(&paths, &healthz));
    }

    #[test]
    fn impersonated_service_accounts_get_their_groups() {
        let who =
            Requester::from_headers(Some("system:serviceaccount:fake-dra:plugin"), &[]).unwrap();
        assert!(
            who.groups
                .contains(&"system:serviceaccounts:fake-dra".to_string())
        );
        assert!(who.groups.contains(&"system:authenticated".to_string()));
        let subject = json!({"kind": "ServiceAccount", "name": "plugin", "namespace": "fake-dra"});
        assert!(subject_matches(&subject, "", &who));
        assert!(!subject_matches(
            &json!({"kind": "User", "name": "plugin"}),
            "",
            &who
        ));
        let admin = Requester::from_headers(None, &[]).unwrap();
        assert!(admin.admin && admin.user == ADMIN_USER);
    }
}
