//! Server-side printing: the `Table` (and `PartialObjectMetadata`) representations a client
//! asks for in its `Accept` header, as kube-apiserver serves them — what `kubectl get`
//! prints.
//!
//! - Negotiation (`k8s.io/apiserver/pkg/endpoints/handlers/negotiation`): the first media
//!   range of the `Accept` list the server can produce wins; `application/json;as=Table;
//!   g=meta.k8s.io;v=v1` (or `v1beta1`) gives a Table, `as=PartialObjectMetadata[List]`
//!   the metadata alone; a list with nothing the server can produce is 406 `NotAcceptable`.
//! - Rows (`TableConvertor`): built-in kinds print the columns of kube-apiserver's printers
//!   (`pkg/printers/internalversion/printers.go`, [`printers`]) with the wide columns
//!   included, as the server always generates them (`GenerateOptions{Wide: true}`);
//!   custom resources their CRD version's `additionalPrinterColumns`, or `Age` when it has
//!   none (`apiextensions-apiserver` `serveDefaultColumnsIfEmpty`); kinds without a printer
//!   `Name` and `Created At` (`rest.NewDefaultTableConvertor`).
//! - `includeObject` (`None`, `Metadata` — the default —, `Object`) sets each row's
//!   `object`; kubectl reads the namespace of `-A` from it.

mod printers;

use serde_json::{Map, Value, json};

use super::error::{ApiError, ApiResult};
use super::registry::ResourceType;

/// What the client asked the body to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Representation {
    /// The objects themselves.
    Object,
    /// `meta.k8s.io/<version>` Table.
    Table(&'static str),
    /// `meta.k8s.io/v1` PartialObjectMetadata (List).
    Metadata,
}

/// Picks the representation from an `Accept` header; no header, `*/*` and
/// `application/json` are the objects themselves.
pub fn negotiate(accept: &str) -> ApiResult<Representation> {
    if accept.trim().is_empty() {
        return Ok(Representation::Object);
    }
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or_default().to_ascii_lowercase();
        let params: Vec<(String, String)> = parts
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        let param = |k: &str| {
            params
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.as_str())
        };
        if !matches!(media.as_str(), "application/json" | "application/*" | "*/*") {
            continue;
        }
        match param("as") {
            None => return Ok(Representation::Object),
            Some(r#as) if param("g") == Some("meta.k8s.io") => match (r#as, param("v")) {
                ("Table", Some("v1")) => return Ok(Representation::Table("v1")),
                ("Table", Some("v1beta1")) => return Ok(Representation::Table("v1beta1")),
                ("PartialObjectMetadata" | "PartialObjectMetadataList", Some("v1")) => {
                    return Ok(Representation::Metadata);
                }
                _ => {}
            },
            Some(_) => {}
        }
    }
    Err(ApiError {
        code: 406,
        reason: "NotAcceptable",
        // kube-apiserver also lists yaml and protobuf, which the emulator does not produce.
        message: "only the following media types are accepted: application/json".into(),
        details: None,
    })
}

/// `includeObject` of TableOptions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IncludeObject {
    None,
    Metadata,
    Object,
}

impl IncludeObject {
    pub fn from_query(value: Option<&str>) -> ApiResult<Self> {
        match value {
            None | Some("" | "Metadata") => Ok(Self::Metadata),
            Some("None") => Ok(Self::None),
            Some("Object") => Ok(Self::Object),
            Some(other) => Err(ApiError::bad_request(format!(
                "includeObject must be one of None, Metadata, Object, not {other:?}"
            ))),
        }
    }
}

/// A GET's body (one object or a list) in the representation asked for.
pub fn represent(
    representation: Representation,
    rt: &ResourceType,
    version: &str,
    server_version: (u32, u32),
    body: &Value,
    include: IncludeObject,
) -> Value {
    match representation {
        Representation::Object => body.clone(),
        Representation::Metadata => metadata_of(body),
        Representation::Table(table_version) => {
            let items: Vec<&Value> = match body.get("items").and_then(Value::as_array) {
                Some(items) if is_list(body) => items.iter().collect(),
                _ => vec![body],
            };
            let (columns, printer) = columns_for(rt, version, server_version);
            let now = jiff::Timestamp::now();
            let rows: Vec<Value> = items
                .iter()
                .map(|object| {
                    let cells = match &printer {
                        Printer::Builtin(print) => print(object, now),
                        Printer::Custom(paths) => printers::custom_cells(object, paths, now),
                        Printer::Default => vec![
                            json!(name_of(object)),
                            object
                                .pointer("/metadata/creationTimestamp")
                                .cloned()
                                .unwrap_or(Value::Null),
                        ],
                    };
                    json!({"cells": cells, "object": row_object(object, include)})
                })
                .collect();
            let mut metadata = Map::new();
            for key in ["resourceVersion", "continue", "remainingItemCount"] {
                if let Some(v) = body.pointer(&format!("/metadata/{key}")) {
                    metadata.insert(key.into(), v.clone());
                }
            }
            json!({
                "kind": "Table",
                "apiVersion": format!("meta.k8s.io/{table_version}"),
                "metadata": metadata,
                "columnDefinitions": columns,
                "rows": rows,
            })
        }
    }
}

fn is_list(body: &Value) -> bool {
    body.get("kind")
        .and_then(Value::as_str)
        .is_some_and(|k| k.ends_with("List"))
}

fn name_of(object: &Value) -> &str {
    object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn partial(object: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": object.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

fn row_object(object: &Value, include: IncludeObject) -> Value {
    match include {
        IncludeObject::None => Value::Null,
        IncludeObject::Metadata => partial(object),
        IncludeObject::Object => object.clone(),
    }
}

fn metadata_of(body: &Value) -> Value {
    match body.get("items").and_then(Value::as_array) {
        Some(items) if is_list(body) => json!({
            "kind": "PartialObjectMetadataList",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": body.get("metadata").cloned().unwrap_or_else(|| json!({})),
            "items": items.iter().map(partial).collect::<Vec<_>>(),
        }),
        _ => partial(body),
    }
}

/// How the rows of a type are made.
enum Printer {
    Builtin(printers::PrintFn),
    /// `(column type, JSONPath)` per additional column after `Name`.
    Custom(Vec<(String, String)>),
    Default,
}

fn column(name: &str, type_: &str, format: &str, priority: i64, description: &str) -> Value {
    json!({"name": name, "type": type_, "format": format, "description": description, "priority": priority})
}

fn columns_for(
    rt: &ResourceType,
    version: &str,
    server_version: (u32, u32),
) -> (Vec<Value>, Printer) {
    if rt.custom {
        let defined = rt.printer_columns.get(version).cloned().unwrap_or_default();
        // No columns: kube-apiserver serves `Age` (serveDefaultColumnsIfEmpty).
        let defined = if defined.is_empty() {
            vec![json!({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"})]
        } else {
            defined
        };
        let mut columns = vec![column("Name", "string", "name", 0, printers::NAME_DOC)];
        let mut paths = Vec::new();
        for c in &defined {
            let text = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or_default();
            let path = text("jsonPath");
            let description = match text("description") {
                "" => format!("Custom resource definition column (in JSONPath format): {path}"),
                given => given.to_string(),
            };
            columns.push(column(
                text("name"),
                text("type"),
                text("format"),
                c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                &description,
            ));
            paths.push((text("type").to_string(), path.to_string()));
        }
        return (columns, Printer::Custom(paths));
    }
    match printers::builtin(&rt.group, &rt.plural, version, server_version) {
        Some((defs, print)) => (
            defs.iter()
                .map(|(name, type_, format, priority, doc)| {
                    column(name, type_, format, *priority, doc)
                })
                .collect(),
            Printer::Builtin(print),
        ),
        None => (
            vec![
                column("Name", "string", "name", 0, printers::NAME_DOC),
                column("Created At", "date", "", 0, printers::CREATED_DOC),
            ],
            Printer::Default,
        ),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn kubectl_get_asks_for_a_v1_table() {
        let kubectl = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(negotiate(kubectl).unwrap(), Representation::Table("v1"));
        assert_eq!(
            negotiate("application/json;as=Table;v=v1beta1;g=meta.k8s.io").unwrap(),
            Representation::Table("v1beta1")
        );
        assert_eq!(negotiate("").unwrap(), Representation::Object);
        assert_eq!(negotiate("*/*").unwrap(), Representation::Object);
        assert_eq!(
            negotiate("application/vnd.kubernetes.protobuf, application/json").unwrap(),
            Representation::Object
        );
        assert_eq!(
            negotiate("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1").unwrap(),
            Representation::Metadata
        );
        let refused = negotiate("application/json;as=Foo;v=v1;g=meta.k8s.io").unwrap_err();
        assert_eq!((refused.code, refused.reason), (406, "NotAcceptable"));
        assert_eq!(negotiate("application/yaml").unwrap_err().code, 406);
    }

    #[test]
    fn human_durations_as_kubectl_prints_ages() {
        for (secs, text) in [
            (-5, "<invalid>"),
            (-1, "0s"),
            (0, "0s"),
            (119, "119s"),
            (120, "2m"),
            (125, "2m5s"),
            (600, "10m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 60, "3h1m"),
            (8 * 3600, "8h"),
            (48 * 3600, "2d"),
            (49 * 3600, "2d1h"),
            (8 * 24 * 3600, "8d"),
            (2 * 365 * 24 * 3600, "2y"),
            (2 * 365 * 24 * 3600 + 24 * 3600, "2y1d"),
            (9 * 365 * 24 * 3600, "9y"),
        ] {
            assert_eq!(printers::human_duration(secs), text, "{secs} s");
        }
    }
}
