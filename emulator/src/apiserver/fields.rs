//! `fieldValidation`: unknown and duplicate fields of a request body, found and answered as
//! kube-apiserver does since 1.27 (`Strict`: 400 naming every field; `Warn`, the default: a
//! `Warning` header per field, the request succeeds; `Ignore`: silently). Unknown fields are
//! dropped before the object is stored in every mode, as decoding into a Go struct (or
//! pruning a custom resource) drops them upstream.
//!
//! What is known comes from:
//! - custom resources: their CRD's structural schema (what [`super::schema`] prunes);
//! - built-in kinds: the `k8s-openapi` types (the generated Kubernetes API): the body is
//!   decoded into the type and encoded again, and whatever did not survive was unknown;
//!   Pod `spec.resourceClaims` by the emulated release's layout (see
//!   [`super::validation::prune_pod_claims`]);
//! - `resource.k8s.io/v1alpha2` (classic DRA, not in `k8s-openapi`): shapes written here
//!   from the 1.30 API (`k8s.io/api/resource/v1alpha2/types.go`).
//!
//! `metadata` is an `ObjectMeta` everywhere.

use std::cell::RefCell;
use std::collections::HashSet;
use std::fmt;

use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Value, json};

use super::error::{ApiError, ApiResult};
use super::registry::ResourceType;

/// The `fieldValidation` query parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FieldValidation {
    Ignore,
    /// The default when the parameter is absent (as upstream since 1.23).
    #[default]
    Warn,
    Strict,
}

impl FieldValidation {
    pub fn from_query(value: Option<&str>) -> ApiResult<Self> {
        match value.unwrap_or_default() {
            "" | "Warn" => Ok(Self::Warn),
            "Ignore" => Ok(Self::Ignore),
            "Strict" => Ok(Self::Strict),
            other => Err(ApiError::bad_request(format!(
                "fieldValidation: Unsupported value: {other:?}: supported values: \"Ignore\", \"Strict\", \"Warn\""
            ))),
        }
    }
}

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Step {
    Key(String),
    Index(usize),
}

/// A field of an object, written as the apiserver writes it: `spec.containers[0].name`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct FieldPath(pub Vec<Step>);

impl FieldPath {
    fn child(&self, step: Step) -> Self {
        let mut steps = self.0.clone();
        steps.push(step);
        Self(steps)
    }

    fn key(&self, key: &str) -> Self {
        self.child(Step::Key(key.to_string()))
    }

    /// Whether `self` is `other` or lies under it.
    fn within(&self, other: &FieldPath) -> bool {
        self.0.starts_with(&other.0)
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, step) in self.0.iter().enumerate() {
            match step {
                Step::Key(key) if i == 0 => write!(f, "{key}")?,
                Step::Key(key) => write!(f, ".{key}")?,
                Step::Index(index) => write!(f, "[{index}]")?,
            }
        }
        Ok(())
    }
}

/// What a request body had wrong with its fields.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldIssues {
    /// Keys given twice in one JSON object (the last one wins, as upstream).
    pub duplicate: Vec<FieldPath>,
    pub unknown: Vec<FieldPath>,
    /// Problems of a JSON patch's operations themselves (`json patch unknown field "[0].foo"`).
    pub patch_ops: Vec<String>,
}

impl FieldIssues {
    pub fn is_empty(&self) -> bool {
        self.duplicate.is_empty() && self.unknown.is_empty() && self.patch_ops.is_empty()
    }

    /// The messages, in the order upstream lists them: the patch's own problems, duplicates,
    /// then unknown fields. A field both unknown and duplicated counts as unknown (upstream
    /// decodes typed objects that way).
    pub fn messages(&self) -> Vec<String> {
        let mut out = self.patch_ops.clone();
        out.extend(
            self.duplicate
                .iter()
                .filter(|d| !self.unknown.iter().any(|u| d.within(u)))
                .map(|d| format!("duplicate field \"{d}\"")),
        );
        out.extend(
            self.unknown
                .iter()
                .map(|u| format!("unknown field \"{u}\"")),
        );
        out
    }

    /// The `Strict` answer: 400 naming every field.
    pub fn strict_error(&self, kind: &str, version: &str) -> ApiError {
        ApiError::bad_request(format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {}",
            self.messages().join(", ")
        ))
    }
}

/// Keys that appear twice in one object of a JSON document, in document order. A body
/// that is not JSON has none (its decoding fails elsewhere, with its own error).
pub fn duplicate_fields(json: &[u8]) -> Vec<FieldPath> {
    let found = RefCell::new(Vec::new());
    let mut deserializer = serde_json::Deserializer::from_slice(json);
    let walk = Walk {
        path: FieldPath::default(),
        found: &found,
    };
    if walk.deserialize(&mut deserializer).is_err() {
        return Vec::new();
    }
    found.into_inner()
}

/// [`duplicate_fields`] of a YAML document (an apply patch). A document nested too deep
/// has none: it is not parsed here, and the apply refuses it.
pub fn duplicate_fields_yaml(yaml: &[u8]) -> Vec<FieldPath> {
    if fake_dra_ops::yaml::check_depth(yaml).is_err() {
        return Vec::new();
    }
    let found = RefCell::new(Vec::new());
    let walk = Walk {
        path: FieldPath::default(),
        found: &found,
    };
    if walk
        .deserialize(serde_yaml_ng::Deserializer::from_slice(yaml))
        .is_err()
    {
        return Vec::new();
    }
    found.into_inner()
}

/// A serde seed that visits a document and records duplicate keys with their paths.
struct Walk<'a> {
    path: FieldPath,
    found: &'a RefCell<Vec<FieldPath>>,
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = self.path.key(&key);
            if !seen.insert(key) {
                self.found.borrow_mut().push(path.clone());
            }
            map.next_value_seed(Walk {
                path,
                found: self.found,
            })?;
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut index = 0;
        while seq
            .next_element_seed(Walk {
                path: self.path.child(Step::Index(index)),
                found: self.found,
            })?
            .is_some()
        {
            index += 1;
        }
        Ok(())
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
}

/// The problems of a JSON patch's operations: fields other than `op`, `path`, `value`,
/// `from`, and fields given twice (upstream's `json patch … field "[i].x"`).
pub fn json_patch_op_issues(patch: &[u8]) -> Vec<String> {
    let mut issues: Vec<String> = duplicate_fields(patch)
        .iter()
        .map(|d| format!("json patch duplicate field \"{d}\""))
        .collect();
    if let Ok(Value::Array(ops)) = serde_json::from_slice::<Value>(patch) {
        for (i, op) in ops.iter().enumerate() {
            for key in op.as_object().into_iter().flat_map(|m| m.keys()) {
                if !matches!(key.as_str(), "op" | "path" | "value" | "from") {
                    issues.push(format!("json patch unknown field \"[{i}].{key}\""));
                }
            }
        }
    }
    issues
}

/// The fields of `obj` (a whole object of `rt` in `version`) that its kind does not have.
/// Empty when this module knows no shape for the kind (said in the docs), or when the body
/// does not even decode into its type (its other errors are reported elsewhere).
pub fn unknown_fields(
    rt: &ResourceType,
    version: &str,
    server_version: (u32, u32),
    obj: &Value,
) -> Vec<FieldPath> {
    let mut out = Vec::new();
    if rt.custom {
        if let Some(schema) = rt.schemas.get(version) {
            custom_unknown(schema, obj, &mut out);
        } else {
            metadata_unknown(obj, &FieldPath::default(), &mut out);
        }
        return out;
    }
    if rt.group == "resource.k8s.io" && version == "v1alpha2" {
        if let Some(shape) = v1alpha2_shape(&rt.plural) {
            shape_unknown(&shape, obj, &FieldPath::default(), &mut out);
        }
        return out;
    }
    // A PodSpec, of a Pod or of a workload's pod template, lays its claims out by release.
    let pod_spec: &[&str] = match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "pods") => &["spec"],
        ("apps", "deployments" | "replicasets" | "daemonsets") => &["spec", "template", "spec"],
        _ => &[],
    };
    if pod_spec.is_empty() {
        return typed_unknown_for(&rt.group, version, &rt.plural, obj).unwrap_or_default();
    }
    let mut rest = obj.clone();
    let mut spec = Some(&mut rest);
    for key in pod_spec {
        spec = spec.and_then(|v| v.get_mut(*key));
    }
    let claims = spec
        .and_then(Value::as_object_mut)
        .and_then(|spec| spec.remove("resourceClaims"));
    let mut out = Vec::new();
    if rt.plural == "pods"
        && server_version < (1, 28)
        && let Some(statuses) = rest
            .get_mut("status")
            .and_then(Value::as_object_mut)
            .and_then(|status| status.remove("resourceClaimStatuses"))
        && !statuses.is_null()
    {
        out.push(
            FieldPath::default()
                .key("status")
                .key("resourceClaimStatuses"),
        );
    }
    out.extend(typed_unknown_for(&rt.group, version, &rt.plural, &rest).unwrap_or_default());
    let mut base = FieldPath::default();
    for key in pod_spec {
        base = base.key(key);
    }
    pod_claims_unknown(
        claims.as_ref(),
        &base.key("resourceClaims"),
        server_version,
        &mut out,
    );
    out
}

/// Why an object does not decode into its kind's type: where, and the decoder's words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeError {
    /// `metadata.labels.x`, as kube-apiserver names fields.
    pub field: String,
    pub message: String,
}

/// Decodes `obj` into `T`, naming the field that does not fit.
fn decode_typed<T: serde::de::DeserializeOwned>(obj: &Value) -> Result<T, TypeError> {
    serde_path_to_error::deserialize(obj).map_err(|e| TypeError {
        field: e.path().to_string(),
        message: e.inner().to_string(),
    })
}

/// Whether `obj` (a whole object of `rt` in `version`) decodes into its kind's type, as
/// kube-apiserver decodes every body and every patched object into its Go struct before
/// anything is stored: a label that is a map, a count that is a string, a container
/// without a name. Stored, such an object broke every typed list of its kind (kube-rs
/// decodes lists into the same types). Built-in kinds are checked whole (the `k8s-openapi`
/// types); custom resources (whose schema [`super::schema::admit`] checks) and the
/// classic `v1alpha2` kinds (no types here) have their `ObjectMeta` checked.
pub fn type_error(rt: &ResourceType, version: &str, obj: &Value) -> Option<TypeError> {
    let checked = if rt.custom || (rt.group == "resource.k8s.io" && version == "v1alpha2") {
        None
    } else {
        with_type(&rt.group, version, &rt.plural, obj, Decodes)
    };
    match checked {
        Some(result) => result.err(),
        None => {
            let metadata = obj.get("metadata")?;
            decode_typed::<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>(metadata)
                .err()
                .map(|e| TypeError {
                    field: if e.field == "." {
                        "metadata".into()
                    } else {
                        format!("metadata.{}", e.field)
                    },
                    message: e.message,
                })
        }
    }
}

/// Removes the fields at `paths` from `obj`.
pub fn remove_fields(obj: &mut Value, paths: &[FieldPath]) {
    for path in paths {
        let Some((last, parent)) = path.0.split_last() else {
            continue;
        };
        let mut node = Some(&mut *obj);
        for step in parent {
            node = match (node, step) {
                (Some(Value::Object(map)), Step::Key(key)) => map.get_mut(key),
                (Some(Value::Array(items)), Step::Index(i)) => items.get_mut(*i),
                _ => None,
            };
        }
        if let (Some(Value::Object(map)), Step::Key(key)) = (node, last) {
            map.remove(key);
        }
    }
}

/// Decodes into `T` and encodes again: the paths of `obj` that did not survive.
fn typed_unknown<T: serde::de::DeserializeOwned + serde::Serialize>(
    obj: &Value,
) -> Option<Vec<FieldPath>> {
    let typed: T = serde_json::from_value(obj.clone())
        .inspect_err(|e| {
            tracing::debug!("not checking unknown fields: the body does not decode: {e}")
        })
        .ok()?;
    let kept = serde_json::to_value(&typed).ok()?;
    let mut out = Vec::new();
    lost(obj, &kept, &FieldPath::default(), &mut out);
    Some(out)
}

/// Paths of `sent` missing from `kept`; a `null` that was dropped is no field.
fn lost(sent: &Value, kept: &Value, path: &FieldPath, out: &mut Vec<FieldPath>) {
    match (sent, kept) {
        (Value::Object(sent), Value::Object(kept)) => {
            for (key, value) in sent {
                match kept.get(key) {
                    Some(kept_value) => lost(value, kept_value, &path.key(key), out),
                    None if value.is_null() => {}
                    None => out.push(path.key(key)),
                }
            }
        }
        (Value::Array(sent), Value::Array(kept)) => {
            for (i, (value, kept_value)) in sent.iter().zip(kept).enumerate() {
                lost(value, kept_value, &path.child(Step::Index(i)), out);
            }
        }
        _ => {}
    }
}

/// Something done with an object as its `k8s-openapi` type (one `match` of the kinds for
/// every use).
trait WithType {
    type Out;
    fn with<T: serde::de::DeserializeOwned + serde::Serialize + schemars::JsonSchema>(
        self,
        obj: &Value,
    ) -> Self::Out;
}

struct UnknownFields;

impl WithType for UnknownFields {
    type Out = Option<Vec<FieldPath>>;
    fn with<T: serde::de::DeserializeOwned + serde::Serialize + schemars::JsonSchema>(
        self,
        obj: &Value,
    ) -> Self::Out {
        typed_unknown::<T>(obj)
    }
}

struct Decodes;

impl WithType for Decodes {
    type Out = Result<(), TypeError>;
    fn with<T: serde::de::DeserializeOwned + serde::Serialize + schemars::JsonSchema>(
        self,
        obj: &Value,
    ) -> Self::Out {
        decode_typed::<T>(obj).map(|_| ())
    }
}

/// The OpenAPI v3 schema of a kind, as `k8s-openapi` carries it (upstream's descriptions,
/// its 1.34 fields): its name (`io.k8s.api.core.v1.Pod`) and every schema it refers to,
/// by name, with `$ref`s into `#/components/schemas/`.
struct OpenApiSchema;

impl WithType for OpenApiSchema {
    type Out = (String, serde_json::Map<String, Value>);
    fn with<T: serde::de::DeserializeOwned + serde::Serialize + schemars::JsonSchema>(
        self,
        _obj: &Value,
    ) -> Self::Out {
        let mut generator = schemars::generate::SchemaSettings::openapi3().into_generator();
        generator.subschema_for::<T>();
        (
            T::schema_name().into_owned(),
            generator.take_definitions(true),
        )
    }
}

/// [`OpenApiSchema`] of the built-in kind served at `group/version/plural`, if it has a
/// `k8s-openapi` type.
pub fn openapi_schema(
    group: &str,
    version: &str,
    plural: &str,
) -> Option<(String, serde_json::Map<String, Value>)> {
    with_type(group, version, plural, &Value::Null, OpenApiSchema)
}

fn typed_unknown_for(
    group: &str,
    version: &str,
    plural: &str,
    obj: &Value,
) -> Option<Vec<FieldPath>> {
    with_type(group, version, plural, obj, UnknownFields).flatten()
}

/// Runs `action` with the `k8s-openapi` type of the kind; `None` for a kind without one.
fn with_type<A: WithType>(
    group: &str,
    version: &str,
    plural: &str,
    obj: &Value,
    action: A,
) -> Option<A::Out> {
    use k8s_openapi::api;
    macro_rules! check {
        ($t:ty) => {
            Some(action.with::<$t>(obj))
        };
    }
    match (group, version, plural) {
        ("", "v1", "namespaces") => check!(api::core::v1::Namespace),
        ("", "v1", "nodes") => check!(api::core::v1::Node),
        ("", "v1", "pods") => check!(api::core::v1::Pod),
        ("", "v1", "events") => check!(api::core::v1::Event),
        ("", "v1", "configmaps") => check!(api::core::v1::ConfigMap),
        ("", "v1", "serviceaccounts") => check!(api::core::v1::ServiceAccount),
        ("", "v1", "services") => check!(api::core::v1::Service),
        ("batch", "v1", "jobs") => check!(api::batch::v1::Job),
        ("discovery.k8s.io", "v1", "endpointslices") => {
            check!(api::discovery::v1::EndpointSlice)
        }
        ("events.k8s.io", "v1", "events") => check!(api::events::v1::Event),
        ("coordination.k8s.io", "v1", "leases") => check!(api::coordination::v1::Lease),
        ("apps", "v1", "deployments") => check!(api::apps::v1::Deployment),
        ("apps", "v1", "replicasets") => check!(api::apps::v1::ReplicaSet),
        ("apps", "v1", "daemonsets") => check!(api::apps::v1::DaemonSet),
        ("rbac.authorization.k8s.io", "v1", "roles") => check!(api::rbac::v1::Role),
        ("rbac.authorization.k8s.io", "v1", "rolebindings") => check!(api::rbac::v1::RoleBinding),
        ("rbac.authorization.k8s.io", "v1", "clusterroles") => check!(api::rbac::v1::ClusterRole),
        ("rbac.authorization.k8s.io", "v1", "clusterrolebindings") => {
            check!(api::rbac::v1::ClusterRoleBinding)
        }
        ("scheduling.k8s.io", "v1", "priorityclasses") => check!(api::scheduling::v1::PriorityClass),
        ("admissionregistration.k8s.io", "v1", "validatingadmissionpolicies") => {
            check!(api::admissionregistration::v1::ValidatingAdmissionPolicy)
        }
        ("admissionregistration.k8s.io", "v1", "validatingadmissionpolicybindings") => {
            check!(api::admissionregistration::v1::ValidatingAdmissionPolicyBinding)
        }
        ("apiextensions.k8s.io", "v1", "customresourcedefinitions") => check!(
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition
        ),
        ("resource.k8s.io", "v1", "deviceclasses") => check!(api::resource::v1::DeviceClass),
        ("resource.k8s.io", "v1", "resourceclaims") => check!(api::resource::v1::ResourceClaim),
        ("resource.k8s.io", "v1", "resourceclaimtemplates") => {
            check!(api::resource::v1::ResourceClaimTemplate)
        }
        ("resource.k8s.io", "v1", "resourceslices") => check!(api::resource::v1::ResourceSlice),
        ("resource.k8s.io", "v1", "devicetaintrules") => {
            check!(super::device_taint_rule::DeviceTaintRule)
        }
        ("resource.k8s.io", "v1beta1", "deviceclasses") => check!(api::resource::v1beta1::DeviceClass),
        ("resource.k8s.io", "v1beta1", "resourceclaims") => {
            check!(api::resource::v1beta1::ResourceClaim)
        }
        ("resource.k8s.io", "v1beta1", "resourceclaimtemplates") => {
            check!(api::resource::v1beta1::ResourceClaimTemplate)
        }
        ("resource.k8s.io", "v1beta1", "resourceslices") => {
            check!(api::resource::v1beta1::ResourceSlice)
        }
        _ => None,
    }
}

/// A PodSpec's `resourceClaims` as the emulated release has them (the 1.34 types know only
/// the flat layout): 1.27–1.30 `{name, source{…}}`, 1.31+ the names on the entry.
fn pod_claims_unknown(
    claims: Option<&Value>,
    base: &FieldPath,
    server_version: (u32, u32),
    out: &mut Vec<FieldPath>,
) {
    let shape = if server_version >= (1, 31) {
        json!({"properties": {"name": {}, "resourceClaimName": {}, "resourceClaimTemplateName": {}}})
    } else {
        json!({"properties": {"name": {}, "source": {"properties": {"resourceClaimName": {}, "resourceClaimTemplateName": {}}}}})
    };
    for (i, claim) in claims
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        shape_unknown(&shape, claim, &base.child(Step::Index(i)), out);
    }
}

/// `metadata` of an object: an `ObjectMeta`.
fn metadata_unknown(obj: &Value, at: &FieldPath, out: &mut Vec<FieldPath>) {
    if let Some(metadata) = obj.get("metadata").filter(|m| m.is_object()) {
        object_meta_unknown(metadata, &at.key("metadata"), out);
    }
}

fn object_meta_unknown(metadata: &Value, at: &FieldPath, out: &mut Vec<FieldPath>) {
    let found =
        typed_unknown::<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>(metadata)
            .unwrap_or_default();
    out.extend(
        found
            .into_iter()
            .map(|p| FieldPath([at.0.clone(), p.0].concat())),
    );
}

/// A custom resource: its schema's pruning, as [`super::schema::admit`] prunes.
fn custom_unknown(schema: &Value, obj: &Value, out: &mut Vec<FieldPath>) {
    let root = FieldPath::default();
    metadata_unknown(obj, &root, out);
    let Some(map) = obj.as_object() else {
        return;
    };
    let properties = schema.get("properties").and_then(Value::as_object);
    let preserve = preserves_unknown(schema);
    for (key, value) in map {
        if matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
            continue;
        }
        match properties.and_then(|p| p.get(key)) {
            Some(sub) => shape_unknown(sub, value, &root.key(key), out),
            None if preserve || value.is_null() => {}
            None => out.push(root.key(key)),
        }
    }
}

fn preserves_unknown(schema: &Value) -> bool {
    schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// The unknown fields of `value` under an OpenAPI-like `shape` (`properties`, `items`,
/// `additionalProperties`, `x-kubernetes-preserve-unknown-fields`); a shape with none of
/// them is a leaf. `x-fake-dra-object-meta` marks an `ObjectMeta`.
fn shape_unknown(shape: &Value, value: &Value, at: &FieldPath, out: &mut Vec<FieldPath>) {
    if shape.get("x-fake-dra-object-meta").is_some() {
        object_meta_unknown(value, at, out);
        return;
    }
    if preserves_unknown(shape) {
        return;
    }
    match value {
        Value::Object(map) => {
            let properties = shape.get("properties").and_then(Value::as_object);
            let additional = shape.get("additionalProperties");
            if properties.is_none() && additional.is_none() && shape.get("type").is_none() {
                // A leaf shape (a scalar field) holding an object: not ours to judge here.
                return;
            }
            for (key, v) in map {
                let sub = properties
                    .and_then(|p| p.get(key))
                    .or(additional.filter(|a| a.is_object()));
                match sub {
                    Some(sub) => shape_unknown(sub, v, &at.key(key), out),
                    None if v.is_null() || additional == Some(&Value::Bool(true)) => {}
                    None => out.push(at.key(key)),
                }
            }
        }
        Value::Array(items) => {
            if let Some(sub) = shape.get("items") {
                for (i, item) in items.iter().enumerate() {
                    shape_unknown(sub, item, &at.child(Step::Index(i)), out);
                }
            }
        }
        _ => {}
    }
}

/// The classic `resource.k8s.io/v1alpha2` kinds as Kubernetes 1.30 has them.
fn v1alpha2_shape(plural: &str) -> Option<Value> {
    let node_selector_requirement = json!({"type": "object", "properties": {"key": {}, "operator": {}, "values": {"items": {}}}});
    let node_selector = json!({"type": "object", "properties": {"nodeSelectorTerms": {"items": {"type": "object", "properties": {
        "matchExpressions": {"items": node_selector_requirement},
        "matchFields": {"items": node_selector_requirement},
    }}}}});
    let meta = json!({"x-fake-dra-object-meta": true});
    let claim_spec = json!({"type": "object", "properties": {
        "resourceClassName": {},
        "parametersRef": {"type": "object", "properties": {"apiGroup": {}, "kind": {}, "name": {}}},
        "allocationMode": {},
    }});
    let top = |fields: Value| {
        let mut shape = json!({"type": "object", "properties": {"apiVersion": {}, "kind": {}, "metadata": meta}});
        if let (Some(properties), Value::Object(fields)) = (
            shape.get_mut("properties").and_then(Value::as_object_mut),
            fields,
        ) {
            properties.extend(fields);
        }
        shape
    };
    match plural {
        "resourceclasses" => Some(top(json!({
            "driverName": {},
            "parametersRef": {"type": "object", "properties": {"apiGroup": {}, "kind": {}, "name": {}, "namespace": {}}},
            "suitableNodes": node_selector,
            "structuredParameters": {},
        }))),
        "resourceclaims" => Some(top(json!({
            "spec": claim_spec,
            "status": {"type": "object", "properties": {
                "driverName": {},
                "allocation": {"type": "object", "properties": {
                    "resourceHandles": {"items": {"type": "object", "properties": {
                        "driverName": {},
                        "data": {},
                        "structuredData": {"x-kubernetes-preserve-unknown-fields": true},
                    }}},
                    "availableOnNodes": node_selector,
                    "shareable": {},
                }},
                "reservedFor": {"items": {"type": "object", "properties": {"apiGroup": {}, "resource": {}, "name": {}, "uid": {}}}},
                "deallocationRequested": {},
            }},
        }))),
        "resourceclaimtemplates" => Some(top(json!({
            "spec": {"type": "object", "properties": {"metadata": meta, "spec": claim_spec}},
        }))),
        "podschedulingcontexts" => Some(top(json!({
            "spec": {"type": "object", "properties": {"selectedNode": {}, "potentialNodes": {"items": {}}}},
            "status": {"type": "object", "properties": {"resourceClaims": {"items": {"type": "object", "properties": {
                "name": {},
                "unsuitableNodes": {"items": {}},
            }}}}},
        }))),
        _ => None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
