//! The resource types the emulator serves: built-in kinds and those registered by CRDs.

use std::collections::BTreeMap;

use serde_json::Value;

use super::error::{ApiError, ApiResult, FieldCause};

/// Identifies a resource independently of its version: objects are stored once per
/// `(group, plural)` and served in each version (CRDs with conversion strategy `None`
/// differ only in `apiVersion`, which is exactly what the apiserver does for them).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResourceKey {
    pub group: String,
    pub plural: String,
}

/// What the server knows of one resource type.
#[derive(Debug, Clone)]
pub struct ResourceType {
    pub group: String,
    /// Served versions, the storage (preferred) one first.
    pub versions: Vec<String>,
    pub plural: String,
    pub singular: String,
    pub kind: String,
    pub short_names: Vec<String>,
    pub namespaced: bool,
    /// Whether `/status` is a subresource: then the main endpoint ignores `status` and
    /// `/status` changes nothing else (the rule of every status-subresource strategy).
    pub status_subresource: bool,
    /// `openAPIV3Schema` per version for custom resources; built-ins carry none.
    pub schemas: BTreeMap<String, Value>,
    /// Whether this came from a CustomResourceDefinition (patch and validation rules differ).
    pub custom: bool,
    /// A CRD version's `additionalPrinterColumns`, as given, per version (what `kubectl
    /// get` prints for custom resources; see [`super::table`]).
    pub printer_columns: BTreeMap<String, Vec<Value>>,
    /// The resource whose objects these are, when this type serves another resource's
    /// objects in its own shape: `events.k8s.io/v1` Events are the core Events, stored once
    /// (as kube-apiserver keeps both in `/registry/events`) and converted on every read and
    /// write ([`super::conversion`]).
    pub stored_as: Option<ResourceKey>,
    /// Discovery's `categories`: `kubectl get all` lists the resources of category `all`.
    pub categories: Vec<String>,
    /// A review (`SelfSubjectAccessReview`, `SelfSubjectReview`): create-only, answered
    /// from the request and never stored ([`super::reviews`]).
    pub review: bool,
}

impl ResourceType {
    pub fn key(&self) -> ResourceKey {
        ResourceKey {
            group: self.group.clone(),
            plural: self.plural.clone(),
        }
    }

    /// `plural.group` (or `plural` for the core group), as the apiserver names resources in errors.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// `Kind.group`, as used in `Invalid` error messages.
    pub fn kind_group(&self) -> String {
        if self.group.is_empty() {
            self.kind.clone()
        } else {
            format!("{}.{}", self.kind, self.group)
        }
    }

    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{}", self.group, version)
        }
    }

    pub fn serves(&self, version: &str) -> bool {
        self.versions.iter().any(|v| v == version)
    }
}

fn builtin(
    group: &str,
    version: &str,
    plural: &str,
    kind: &str,
    short_names: &[&str],
    namespaced: bool,
    status_subresource: bool,
) -> ResourceType {
    ResourceType {
        group: group.into(),
        versions: vec![version.into()],
        plural: plural.into(),
        singular: kind.to_ascii_lowercase(),
        kind: kind.into(),
        short_names: short_names.iter().map(|s| s.to_string()).collect(),
        namespaced,
        status_subresource,
        schemas: BTreeMap::new(),
        custom: false,
        printer_columns: BTreeMap::new(),
        stored_as: None,
        categories: Vec::new(),
        review: false,
    }
}

/// The built-ins upstream puts in category `all` (their `CategoriesProvider` in
/// `pkg/registry/*/rest`), among the ones served here.
fn in_category_all(rt: ResourceType) -> ResourceType {
    ResourceType {
        categories: vec!["all".into()],
        ..rt
    }
}

/// A create-only review resource: cluster-scoped, no status, nothing stored.
fn review(group: &str, plural: &str, kind: &str) -> ResourceType {
    ResourceType {
        review: true,
        ..builtin(group, "v1", plural, kind, &[], false, false)
    }
}

/// Which `resource.k8s.io` versions a Kubernetes release serves with DRA enabled, the
/// storage version first.
///
/// - ≤ 1.30: `v1alpha2` (classic DRA, gate `DynamicResourceAllocation` + runtime-config);
/// - 1.31: `v1alpha3`, whose kubelet API is incompatible with everything else here: refused;
/// - 1.32, 1.33: `v1beta1` (1.33 also has `v1beta2`, off by default; not served here);
/// - ≥ 1.34: `v1` (storage) and `v1beta1` (`v1beta2` is not served here: requests for it
///   answer 404 instead of being half-converted).
pub fn resource_api_versions(server_version: (u32, u32)) -> Result<Vec<&'static str>, String> {
    match server_version {
        (1, minor) if minor <= 30 => Ok(vec!["v1alpha2"]),
        (1, 31) => Err(
            "Kubernetes 1.31 (resource.k8s.io/v1alpha3) is not emulated: its kubelet DRA API reuses v1alpha3 with an incompatible layout".into(),
        ),
        (1, 32 | 33) => Ok(vec!["v1beta1"]),
        (1, _) => Ok(vec!["v1", "v1beta1"]),
        (major, minor) => Err(format!("Kubernetes {major}.{minor} is not emulated")),
    }
}

/// Whether the release serves `resource.k8s.io/v1` DeviceTaintRules: from 1.37, where
/// `DRADeviceTaintRules` is GA and on by default (pkg/features/kube_features.go).
pub fn serves_device_taint_rules(server_version: (u32, u32)) -> bool {
    server_version >= (1, 37)
}

/// Whether `resource.k8s.io` is structured DRA (no `v1alpha2`) for this release.
pub fn is_structured(server_version: (u32, u32)) -> bool {
    resource_api_versions(server_version).is_ok_and(|v| !v.contains(&"v1alpha2"))
}

/// The built-in kinds a DRA cluster of `server_version` gives a driver: classic DRA's
/// `v1alpha2` kinds up to 1.30, structured DRA's kinds from 1.32.
pub fn builtin_types(server_version: (u32, u32)) -> Result<Vec<ResourceType>, String> {
    let resource_versions = resource_api_versions(server_version)?;
    let mut types = vec![
        builtin("", "v1", "namespaces", "Namespace", &["ns"], false, true),
        builtin("", "v1", "nodes", "Node", &["no"], false, true),
        in_category_all(builtin("", "v1", "pods", "Pod", &["po"], true, true)),
        in_category_all(builtin(
            "",
            "v1",
            "services",
            "Service",
            &["svc"],
            true,
            true,
        )),
        builtin(
            "discovery.k8s.io",
            "v1",
            "endpointslices",
            "EndpointSlice",
            &[],
            true,
            false,
        ),
        in_category_all(builtin("batch", "v1", "jobs", "Job", &[], true, true)),
        review(
            "authorization.k8s.io",
            "selfsubjectaccessreviews",
            "SelfSubjectAccessReview",
        ),
        review(
            "authorization.k8s.io",
            "selfsubjectrulesreviews",
            "SelfSubjectRulesReview",
        ),
        review(
            "authentication.k8s.io",
            "selfsubjectreviews",
            "SelfSubjectReview",
        ),
        builtin("", "v1", "events", "Event", &["ev"], true, false),
        builtin("", "v1", "configmaps", "ConfigMap", &["cm"], true, false),
        builtin(
            "",
            "v1",
            "serviceaccounts",
            "ServiceAccount",
            &["sa"],
            true,
            false,
        ),
        ResourceType {
            stored_as: Some(ResourceKey {
                group: String::new(),
                plural: "events".into(),
            }),
            ..builtin(
                "events.k8s.io",
                "v1",
                "events",
                "Event",
                &["ev"],
                true,
                false,
            )
        },
        builtin(
            "coordination.k8s.io",
            "v1",
            "leases",
            "Lease",
            &[],
            true,
            false,
        ),
        in_category_all(builtin(
            "apps",
            "v1",
            "deployments",
            "Deployment",
            &["deploy"],
            true,
            true,
        )),
        in_category_all(builtin(
            "apps",
            "v1",
            "replicasets",
            "ReplicaSet",
            &["rs"],
            true,
            true,
        )),
        in_category_all(builtin(
            "apps",
            "v1",
            "daemonsets",
            "DaemonSet",
            &["ds"],
            true,
            true,
        )),
        // What the driver's manifests install besides workloads (deploy/base): stored and
        // served; the emulator does not authorize requests, so RBAC is not enforced.
        builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "roles",
            "Role",
            &[],
            true,
            false,
        ),
        builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "rolebindings",
            "RoleBinding",
            &[],
            true,
            false,
        ),
        builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "clusterroles",
            "ClusterRole",
            &[],
            false,
            false,
        ),
        builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "clusterrolebindings",
            "ClusterRoleBinding",
            &[],
            false,
            false,
        ),
        builtin(
            "scheduling.k8s.io",
            "v1",
            "priorityclasses",
            "PriorityClass",
            &["pc"],
            false,
            false,
        ),
        // deploy/structured binds the plugin to its node's slices with a policy: stored;
        // the emulator evaluates no admission policies (it authenticates nobody).
        builtin(
            "admissionregistration.k8s.io",
            "v1",
            "validatingadmissionpolicies",
            "ValidatingAdmissionPolicy",
            &[],
            false,
            true,
        ),
        builtin(
            "admissionregistration.k8s.io",
            "v1",
            "validatingadmissionpolicybindings",
            "ValidatingAdmissionPolicyBinding",
            &[],
            false,
            false,
        ),
        builtin(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            &["crd", "crds"],
            false,
            true,
        ),
    ];
    let resource = |plural: &str, kind: &str, namespaced: bool, status: bool| ResourceType {
        versions: resource_versions.iter().map(|v| v.to_string()).collect(),
        ..builtin("resource.k8s.io", "", plural, kind, &[], namespaced, status)
    };
    if resource_versions.contains(&"v1alpha2") {
        types.extend([
            resource("resourceclasses", "ResourceClass", false, false),
            resource("resourceclaims", "ResourceClaim", true, true),
            resource(
                "resourceclaimtemplates",
                "ResourceClaimTemplate",
                true,
                false,
            ),
            resource("podschedulingcontexts", "PodSchedulingContext", true, true),
        ]);
    } else {
        types.extend([
            resource("deviceclasses", "DeviceClass", false, false),
            resource("resourceclaims", "ResourceClaim", true, true),
            resource(
                "resourceclaimtemplates",
                "ResourceClaimTemplate",
                true,
                false,
            ),
            resource("resourceslices", "ResourceSlice", false, false),
        ]);
    }
    if serves_device_taint_rules(server_version) {
        // `v1` only: 1.37 adds the kind to `v1` (and `v1beta2`, not served here); `v1beta1`
        // never had it. Earlier releases serve it in `v1alpha3` (1.33-1.35) or `v1beta2`
        // (1.36), off by default, which the emulator does not serve (404).
        types.push(ResourceType {
            versions: vec!["v1".into()],
            ..builtin(
                "resource.k8s.io",
                "v1",
                "devicetaintrules",
                "DeviceTaintRule",
                &[],
                false,
                true,
            )
        });
    }
    Ok(types)
}

/// The strings of a JSON array (none when it is missing or not an array).
pub(super) fn string_list(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect()
}

/// apiextensions' `ValidateCustomResourceColumnDefinition`: a name, a type and format of
/// its sets, and a "simple" JSONPath (`validateSimpleJSONPath`: starting with `.`); `{{{bad`
/// and `$..*` were accepted and then printed nothing. The field names are the internal
/// type's (`JSONPath`), as upstream's errors say them.
fn printer_column(column: &Value, at: &str, causes: &mut Vec<FieldCause>) {
    const TYPES: [&str; 5] = ["boolean", "date", "integer", "number", "string"];
    const FORMATS: [&str; 8] = [
        "byte",
        "date",
        "date-time",
        "double",
        "float",
        "int32",
        "int64",
        "password",
    ];
    let text = |f: &str| column.get(f).and_then(Value::as_str).unwrap_or_default();
    if text("name").is_empty() {
        causes.push(FieldCause::required(format!("{at}.name"), ""));
    }
    let kind = text("type");
    let types = TYPES.join(",");
    if kind.is_empty() {
        causes.push(FieldCause::required(
            format!("{at}.type"),
            format!("must be one of {types}"),
        ));
    } else if !TYPES.contains(&kind) {
        causes.push(FieldCause::invalid(
            format!("{at}.type"),
            &Value::String(kind.into()),
            format!("must be one of {types}"),
        ));
    }
    let format = text("format");
    if !format.is_empty() && !FORMATS.contains(&format) {
        causes.push(FieldCause::invalid(
            format!("{at}.format"),
            &Value::String(format.into()),
            format!("must be one of {}", FORMATS.join(",")),
        ));
    }
    let path = text("jsonPath");
    if path.is_empty() {
        causes.push(FieldCause::required(format!("{at}.JSONPath"), ""));
    } else if !path.starts_with('.') {
        causes.push(FieldCause::invalid(
            format!("{at}.JSONPath"),
            &Value::String(path.into()),
            "must be a simple json path starting with .",
        ));
    }
}

/// Reads an `apiextensions.k8s.io/v1` CustomResourceDefinition into the type it registers.
///
/// Only what this server honours is read; a CRD asking for what it does not implement
/// (conversion webhooks, scale subresource) is refused rather than half-served.
pub fn from_crd(crd: &Value) -> ApiResult<ResourceType> {
    let spec = crd
        .get("spec")
        .ok_or_else(|| ApiError::bad_request("CustomResourceDefinition has no spec"))?;
    let text = |v: Option<&Value>, field: &str| -> ApiResult<String> {
        v.and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .ok_or_else(|| {
                ApiError::bad_request(format!("CustomResourceDefinition: {field} is required"))
            })
    };
    let group = text(spec.get("group"), "spec.group")?;
    let names = spec
        .get("names")
        .ok_or_else(|| ApiError::bad_request("CustomResourceDefinition: spec.names is required"))?;
    let plural = text(names.get("plural"), "spec.names.plural")?;
    let kind = text(names.get("kind"), "spec.names.kind")?;
    let singular = names
        .get("singular")
        .and_then(Value::as_str)
        .map_or_else(|| kind.to_ascii_lowercase(), str::to_string);
    let short_names = string_list(names.get("shortNames"));
    let categories = string_list(names.get("categories"));
    let namespaced = match spec.get("scope").and_then(Value::as_str) {
        Some("Namespaced") => true,
        Some("Cluster") => false,
        other => {
            return Err(ApiError::bad_request(format!(
                "CustomResourceDefinition: spec.scope must be Namespaced or Cluster, got {other:?}"
            )));
        }
    };
    if let Some(strategy) = spec.pointer("/conversion/strategy").and_then(Value::as_str)
        && strategy != "None"
    {
        return Err(ApiError::not_implemented(format!(
            "CRD conversion strategy {strategy}"
        )));
    }
    let versions = spec
        .get("versions")
        .and_then(Value::as_array)
        .ok_or_else(|| {
            ApiError::bad_request("CustomResourceDefinition: spec.versions is required")
        })?;
    let mut served = Vec::new();
    let mut schemas = BTreeMap::new();
    let mut status_subresource = false;
    let mut printer_columns = BTreeMap::new();
    let mut causes = Vec::new();
    for (i, v) in versions.iter().enumerate() {
        let columns = v.get("additionalPrinterColumns").and_then(Value::as_array);
        for (j, column) in columns.into_iter().flatten().enumerate() {
            printer_column(
                column,
                &format!("spec.versions[{i}].additionalPrinterColumns[{j}]"),
                &mut causes,
            );
        }
    }
    if !causes.is_empty() {
        let name = crd
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        return Err(ApiError::invalid(
            "CustomResourceDefinition.apiextensions.k8s.io",
            name,
            causes,
        ));
    }
    for v in versions {
        let name = text(v.get("name"), "spec.versions[].name")?;
        if v.pointer("/subresources/scale").is_some() {
            return Err(ApiError::not_implemented(
                "the scale subresource of custom resources",
            ));
        }
        status_subresource |= v.pointer("/subresources/status").is_some();
        if let Some(schema) = v.pointer("/schema/openAPIV3Schema") {
            schemas.insert(name.clone(), schema.clone());
        }
        if let Some(columns) = v.get("additionalPrinterColumns").and_then(Value::as_array) {
            printer_columns.insert(name.clone(), columns.clone());
        }
        if v.get("served").and_then(Value::as_bool).unwrap_or(false) {
            // The storage version is served first so it is what discovery prefers.
            if v.get("storage").and_then(Value::as_bool).unwrap_or(false) {
                served.insert(0, name);
            } else {
                served.push(name);
            }
        }
    }
    if served.is_empty() {
        return Err(ApiError::bad_request(
            "CustomResourceDefinition: no version is served",
        ));
    }
    Ok(ResourceType {
        group,
        versions: served,
        plural,
        singular,
        kind,
        short_names,
        namespaced,
        status_subresource,
        schemas,
        custom: true,
        printer_columns,
        stored_as: None,
        categories,
        review: false,
    })
}
