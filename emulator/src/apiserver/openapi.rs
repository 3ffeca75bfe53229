//! `/openapi/v3`: the OpenAPI v3 discovery document and one document per served
//! group/version, holding the **paths and the query parameters this emulator honours** and
//! the kinds' schemas (`components.schemas`: `k8s-openapi`'s for built-in kinds, the CRDs'
//! own), which `kubectl explain` reads.
//!
//! That is what `kubectl apply`/`create` read before sending anything: for each kind, whether
//! the PATCH operation of its group/version lists a `fieldValidation` query parameter. If it
//! does, kubectl sends `fieldValidation=Strict` and leaves validation to the server (which
//! [`super::fields`] does); if the documents are missing it falls back to OpenAPI v2 and,
//! without that, refuses to run unless told `--validate=false`. Strategic merge patch is not
//! listed among the PATCH media types (the emulator only implements it without lists and
//! `$` directives), so kubectl builds its apply patches from its compiled-in types instead
//! of looking for schemas here. `/openapi/v2` is not served (404): kubectl only needs it
//! when v3 fails, and for `kind: List` documents, which then need `--validate=false`.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock, PoisonError};

use serde_json::{Map, Value, json};

use super::registry::ResourceType;
use super::store::Store;

/// The path key of a group/version in the discovery document: `api/v1`, `apis/<g>/<v>`.
fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// Every served group/version.
fn group_versions(store: &Store) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for rt in store.types() {
        for version in &rt.versions {
            let gv = (rt.group.clone(), version.clone());
            if !out.contains(&gv) {
                out.push(gv);
            }
        }
    }
    out.sort();
    out
}

/// FNV-1a of the document: the `hash` query parameter that lets clients cache a
/// group/version document until it changes (a CRD added or updated).
fn content_hash(text: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016X}")
}

/// `GET /openapi/v3`.
pub fn v3_discovery(store: &Store) -> Value {
    let mut paths = Map::new();
    for (group, version) in group_versions(store) {
        let Some(document) = v3_group_version(store, &group, &version) else {
            continue;
        };
        let path = gv_path(&group, &version);
        let url = format!(
            "/openapi/v3/{path}?hash={}",
            content_hash(&document.to_string())
        );
        paths.insert(path, json!({"serverRelativeURL": url}));
    }
    json!({"paths": paths})
}

fn query_param(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "query", "description": description, "schema": {"type": "string", "uniqueItems": true}})
}

fn path_param(name: &str) -> Value {
    json!({"name": name, "in": "path", "required": true, "schema": {"type": "string", "uniqueItems": true}})
}

fn operation(rt: &ResourceType, version: &str, action: &str, parameters: Vec<Value>) -> Value {
    let mut op = json!({
        "operationId": format!("{action}{}", rt.kind),
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": rt.group, "version": version, "kind": rt.kind},
        "parameters": parameters,
        "responses": {"200": {"description": "OK"}},
    });
    let content = match action {
        "patch" => Some(json!({
            "application/json-patch+json": {"schema": {"type": "object"}},
            "application/merge-patch+json": {"schema": {"type": "object"}},
            "application/apply-patch+yaml": {"schema": {"type": "object"}},
        })),
        "post" | "put" => Some(json!({"application/json": {"schema": {"type": "object"}}})),
        _ => None,
    };
    if let Some(content) = content {
        op["requestBody"] = json!({"content": content, "required": true});
    }
    op
}

/// The operations on one resource (and its `/status`), with the parameters honoured.
fn resource_paths(rt: &ResourceType, version: &str, paths: &mut Map<String, Value>) {
    let validation = || {
        vec![
            query_param(
                "fieldValidation",
                "Ignore, Warn (the default) or Strict: what to do with unknown and duplicate fields",
            ),
            query_param("fieldManager", "the name of the actor making the change"),
        ]
    };
    let mut patch_params = validation();
    patch_params.push(query_param(
        "force",
        "apply patches only: take over conflicting fields",
    ));
    let list_params: Vec<Value> = [
        "labelSelector",
        "fieldSelector",
        "limit",
        "continue",
        "resourceVersion",
        "resourceVersionMatch",
        "watch",
        "allowWatchBookmarks",
        "sendInitialEvents",
        "timeoutSeconds",
    ]
    .iter()
    .map(|p| query_param(p, ""))
    .collect();
    let delete_params: Vec<Value> = ["gracePeriodSeconds", "propagationPolicy"]
        .iter()
        .map(|p| query_param(p, ""))
        .collect();
    let base = format!(
        "/{}{}/{}",
        gv_path(&rt.group, version),
        if rt.namespaced {
            "/namespaces/{namespace}"
        } else {
            ""
        },
        rt.plural
    );
    let mut scope = Vec::new();
    if rt.namespaced {
        scope.push(path_param("namespace"));
    }
    if rt.review {
        paths.insert(
            base,
            json!({"parameters": scope, "post": operation(rt, version, "post", validation())}),
        );
        return;
    }
    let mut item_scope = scope.clone();
    item_scope.push(path_param("name"));
    paths.insert(
        base.clone(),
        json!({
            "parameters": scope,
            "get": operation(rt, version, "list", list_params),
            "post": operation(rt, version, "post", validation()),
            "delete": operation(rt, version, "deletecollection", delete_params.clone()),
        }),
    );
    paths.insert(
        format!("{base}/{{name}}"),
        json!({
            "parameters": item_scope,
            "get": operation(rt, version, "get", Vec::new()),
            "put": operation(rt, version, "put", validation()),
            "patch": operation(rt, version, "patch", patch_params.clone()),
            "delete": operation(rt, version, "delete", delete_params),
        }),
    );
    if rt.status_subresource {
        paths.insert(
            format!("{base}/{{name}}/status"),
            json!({
                "parameters": item_scope,
                "get": operation(rt, version, "get", Vec::new()),
                "put": operation(rt, version, "put", validation()),
                "patch": operation(rt, version, "patch", patch_params),
            }),
        );
    }
}

/// `GET /openapi/v3/api/v1` or `/openapi/v3/apis/<group>/<version>`; `None` when nothing
/// is served there.
pub fn v3_group_version(store: &Store, group: &str, version: &str) -> Option<Value> {
    let mut paths = Map::new();
    for rt in store
        .types()
        .filter(|t| t.group == group && t.serves(version))
    {
        resource_paths(rt, version, &mut paths);
    }
    if paths.is_empty() {
        return None;
    }
    let (major, minor) = store.server_version();
    let mut schemas = Map::new();
    for rt in store
        .types()
        .filter(|t| t.group == group && t.serves(version))
    {
        kind_schemas(rt, version, &mut schemas);
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (fake-dra emulator)", "version": format!("v{major}.{minor}.0")},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

/// Built-in schemas by `(group, version, plural)`: generated once, they do not change.
type SchemaCache = HashMap<(String, String, String), Option<(String, Map<String, Value>)>>;

fn builtin_schema(rt: &ResourceType, version: &str) -> Option<(String, Map<String, Value>)> {
    static CACHE: OnceLock<Mutex<SchemaCache>> = OnceLock::new();
    let key = (rt.group.clone(), version.to_string(), rt.plural.clone());
    let mut cache = CACHE
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    cache
        .entry(key)
        .or_insert_with(|| super::fields::openapi_schema(&rt.group, version, &rt.plural))
        .clone()
}

/// The schema of `rt` in `version` and those it refers to, the kind's marked with its
/// `x-kubernetes-group-version-kind`, which is how `kubectl explain` finds it: a CRD's
/// `openAPIV3Schema` (named `<reversed group>.<version>.<Kind>` as upstream names it), or
/// the `k8s-openapi` type of a built-in kind. Classic DRA's `v1alpha2` kinds have none.
fn kind_schemas(rt: &ResourceType, version: &str, schemas: &mut Map<String, Value>) {
    let found = if rt.custom {
        rt.schemas.get(version).map(|schema| {
            let reversed: Vec<&str> = rt.group.split('.').rev().collect();
            let name = format!("{}.{version}.{}", reversed.join("."), rt.kind);
            (name.clone(), Map::from_iter([(name, schema.clone())]))
        })
    } else {
        builtin_schema(rt, version)
    };
    let Some((name, definitions)) = found else {
        return;
    };
    schemas.extend(definitions);
    if let Some(kind) = schemas.get_mut(&name).and_then(Value::as_object_mut) {
        kind.insert(
            "x-kubernetes-group-version-kind".into(),
            json!([{"group": rt.group, "version": version, "kind": rt.kind}]),
        );
    }
}
