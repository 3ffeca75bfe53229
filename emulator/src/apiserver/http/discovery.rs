//! API discovery: `/apis`, `/apis/<group>`, `/apis/<group>/<version>` (and the core
//! group's), as kube-apiserver's aggregated discovery answers them.

use super::*;

pub(super) fn group_list(store: &Store) -> Value {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for rt in store.types().filter(|t| !t.group.is_empty()) {
        match groups.iter_mut().find(|(g, _)| *g == rt.group) {
            Some((_, versions)) => {
                for v in &rt.versions {
                    if !versions.contains(v) {
                        versions.push(v.clone());
                    }
                }
            }
            None => groups.push((rt.group.clone(), rt.versions.clone())),
        }
    }
    let groups: Vec<Value> = groups
        .into_iter()
        .map(|(name, versions)| {
            let versions: Vec<Value> = versions
                .iter()
                .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
                .collect();
            json!({"name": name, "versions": versions, "preferredVersion": versions.first()})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `GET /apis/<group>`: the group's `APIGroup`, the served versions with the preferred
/// (storage) one first, as `group_list` has it.
pub(super) fn api_group(store: &Store, group: &str) -> ApiResult<Value> {
    group_list(store)
        .get("groups")
        .and_then(Value::as_array)
        .and_then(|groups| {
            groups
                .iter()
                .find(|g| g.get("name").and_then(Value::as_str) == Some(group))
        })
        .map(|g| {
            let mut g = g.clone();
            g["kind"] = json!("APIGroup");
            g["apiVersion"] = json!("v1");
            g
        })
        .ok_or_else(|| ApiError::no_route(&format!("/apis/{group}")))
}

pub(super) fn resource_list(store: &Store, group: &str, version: &str) -> ApiResult<Value> {
    let verbs = json!([
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch"
    ]);
    let mut resources = Vec::new();
    for rt in store
        .types()
        .filter(|t| t.group == group && t.serves(version))
    {
        let verbs = if rt.review {
            json!(["create"])
        } else {
            verbs.clone()
        };
        let mut resource = json!({"name": rt.plural, "singularName": rt.singular, "namespaced": rt.namespaced, "kind": rt.kind, "verbs": verbs, "shortNames": rt.short_names});
        if !rt.categories.is_empty() {
            resource["categories"] = json!(rt.categories);
        }
        resources.push(resource);
        if rt.status_subresource {
            resources.push(json!({"name": format!("{}/status", rt.plural), "singularName": "", "namespaced": rt.namespaced, "kind": rt.kind, "verbs": ["get", "patch", "update"]}));
        }
    }
    if resources.is_empty() {
        return Err(ApiError::no_route(&format!("{group}/{version}")));
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Ok(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}),
    )
}
