//! Validation rules of built-in kinds that a DRA driver can trip over.
//!
//! The emulator does not carry kube-apiserver's whole validation; it carries the rules a
//! classic DRA driver or scheduler is constrained by, so a driver that breaks them fails here
//! as it would on a cluster. Source: pkg/apis/resource/validation/validation.go (v1alpha2,
//! Kubernetes 1.28–1.30; resource/v1 and v1beta1, 1.32–1.37, for structured DRA; the rules
//! that changed between releases in [`release`]), pkg/apis/core/validation (Pod claims) and
//! apimachinery's ObjectMeta validation.

mod capacity;
mod names;
mod release;
mod taint_rule;

use serde_json::{Value, json};

use super::error::{ApiError, ApiResult, FieldCause};
use super::registry::ResourceType;

/// `ResourceClaimReservedForMaxSize` of v1alpha2.
pub const RESERVED_FOR_MAX: usize = 32;
/// `ResourceClaimReservedForMaxSize` from 1.32 (structured DRA).
pub const RESERVED_FOR_MAX_STRUCTURED: usize = 256;
/// `ResourceSliceMaxDevices`.
pub const SLICE_DEVICES_MAX: usize = 128;
/// `ResourceSliceMaxAttributesAndCapacitiesPerDevice`.
pub const DEVICE_ATTRIBUTES_MAX: usize = 32;
/// `DeviceRequestsMaxSize` (and `DeviceConfigMaxSize`, `DeviceSelectorsMaxSize`).
pub const DEVICE_REQUESTS_MAX: usize = 32;
/// `AllocationResultsMaxSize`.
pub const ALLOCATION_RESULTS_MAX: usize = 32;
/// `AllocationResultResourceHandlesMaxSize`.
pub const RESOURCE_HANDLES_MAX: usize = 32;
/// `ResourceHandleDataMaxSize`.
pub const RESOURCE_HANDLE_DATA_MAX: usize = 16 * 1024;
/// `PodSchedulingNodeListMaxSize`, for potentialNodes and unsuitableNodes.
pub const SCHEDULING_NODE_LIST_MAX: usize = 128;

/// An RFC 1123 subdomain (most object names) or, when `label`, an RFC 1123 label
/// (namespaces): the first of upstream's messages.
fn name_problem(name: &str, label: bool) -> Option<String> {
    let problems = if label {
        names::dns_label(name)
    } else {
        names::dns_subdomain(name)
    };
    problems.into_iter().next()
}

pub fn validate_name(rt: &ResourceType, name: &str) -> ApiResult<()> {
    if let Some(problem) = name_problem(name, rt.plural == "namespaces" && rt.group.is_empty()) {
        let cause = FieldCause::invalid("metadata.name", &Value::String(name.into()), problem);
        return Err(ApiError::invalid(&rt.kind_group(), name, vec![cause]));
    }
    Ok(())
}

/// `core.MaxSecretSize`: what a ConfigMap's `data` and `binaryData`, or a Secret's data,
/// may hold in all (1 MiB; `ValidateConfigMap`, `ValidateSecret`).
const MAX_SECRET_SIZE: usize = 1024 * 1024;

/// The bytes of a map's string values.
fn string_bytes(map: Option<&Value>) -> usize {
    map.and_then(Value::as_object)
        .into_iter()
        .flat_map(|m| m.values())
        .filter_map(Value::as_str)
        .map(str::len)
        .sum()
}

/// The decoded bytes of a map's base64 values (`[]byte` upstream).
fn base64_bytes(map: Option<&Value>) -> usize {
    map.and_then(Value::as_object)
        .into_iter()
        .flat_map(|m| m.values())
        .filter_map(Value::as_str)
        .map(|b| {
            let padding = b.bytes().rev().take_while(|c| *c == b'=').count();
            (b.len() / 4 * 3).saturating_sub(padding)
        })
        .sum()
}

fn len_at(obj: &Value, pointer: &str) -> usize {
    obj.pointer(pointer)
        .and_then(Value::as_array)
        .map_or(0, Vec::len)
}

/// Checks a write of `new` (replacing `old`, if any) against the kind's rules.
pub fn validate_write(
    rt: &ResourceType,
    old: Option<&Value>,
    new: &Value,
    server_version: (u32, u32),
    gates: &super::gates::FeatureGates,
) -> ApiResult<()> {
    let mut causes = Vec::new();
    let structured = !rt.serves("v1alpha2");
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "pods") if old.is_none() => pod_claims(new, server_version, &mut causes),
        ("batch", "jobs") => job_restart_policy(new, &mut causes),
        ("", "configmaps") => {
            let size = string_bytes(new.get("data")) + base64_bytes(new.get("binaryData"));
            // ValidateConfigMap: the whole object, so the field is "".
            if size > MAX_SECRET_SIZE {
                causes.push(FieldCause::too_long("", MAX_SECRET_SIZE));
            }
        }
        ("", "secrets") => {
            let size = base64_bytes(new.get("data")) + string_bytes(new.get("stringData"));
            if size > MAX_SECRET_SIZE {
                causes.push(FieldCause::too_long("data", MAX_SECRET_SIZE));
            }
        }
        ("resource.k8s.io", "resourceclaims") => {
            resource_claim(old, new, structured, &mut causes);
            if structured {
                structured_claim_spec(
                    new.get("spec"),
                    "spec",
                    old.is_none(),
                    server_version,
                    &mut causes,
                );
                let results = len_at(new, "/status/allocation/devices/results");
                if results > ALLOCATION_RESULTS_MAX {
                    causes.push(FieldCause::too_many(
                        "status.allocation.devices.results",
                        results,
                        ALLOCATION_RESULTS_MAX,
                    ));
                }
            }
        }
        ("resource.k8s.io", "resourceclaimtemplates") if structured => {
            structured_claim_spec(
                new.pointer("/spec/spec"),
                "spec.spec",
                old.is_none(),
                server_version,
                &mut causes,
            );
        }
        ("resource.k8s.io", "resourceslices") => {
            resource_slice(new, &mut causes);
            let devices = new.pointer("/spec/devices").and_then(Value::as_array);
            for (i, device) in devices.into_iter().flatten().enumerate() {
                let fractional =
                    gates.enabled(super::gates::Gate::FractionalCapacityRange, server_version);
                capacity::device_capacities(device, i, fractional, &mut causes);
            }
            release::slice(new.get("spec"), server_version, &mut causes);
        }
        ("resource.k8s.io", "devicetaintrules") => {
            taint_rule::device_taint_rule(old, new, &mut causes);
        }
        ("resource.k8s.io", "deviceclasses") => {
            release::opaque_config(
                new.pointer("/spec/config"),
                "spec.config",
                old.is_none(),
                server_version,
                &mut causes,
            );
            selectors(
                new.pointer("/spec/selectors"),
                "spec.selectors",
                &mut causes,
            );
        }
        ("resource.k8s.io", "podschedulingcontexts") => {
            let potential = len_at(new, "/spec/potentialNodes");
            if potential > SCHEDULING_NODE_LIST_MAX {
                causes.push(FieldCause::too_many(
                    "spec.potentialNodes",
                    potential,
                    SCHEDULING_NODE_LIST_MAX,
                ));
            }
            for (i, claim) in new
                .pointer("/status/resourceClaims")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                let unsuitable = len_at(claim, "/unsuitableNodes");
                if unsuitable > SCHEDULING_NODE_LIST_MAX {
                    causes.push(FieldCause::too_many(
                        format!("status.resourceClaims[{i}].unsuitableNodes"),
                        unsuitable,
                        SCHEDULING_NODE_LIST_MAX,
                    ));
                }
            }
        }
        _ => {}
    }
    if causes.is_empty() {
        Ok(())
    } else {
        let name = new
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        Err(ApiError::invalid(&rt.kind_group(), name, causes))
    }
}

fn resource_claim(
    old: Option<&Value>,
    new: &Value,
    structured: bool,
    causes: &mut Vec<FieldCause>,
) {
    let reserved_max = if structured {
        RESERVED_FOR_MAX_STRUCTURED
    } else {
        RESERVED_FOR_MAX
    };
    if let Some(old) = old
        && old.get("spec") != new.get("spec")
    {
        causes.push(FieldCause::invalid(
            "spec",
            new.get("spec").unwrap_or(&Value::Null),
            "field is immutable",
        ));
    }
    let status = new.get("status");
    let allocation = status
        .and_then(|s| s.get("allocation"))
        .filter(|a| !a.is_null());
    let handles = allocation
        .and_then(|a| a.get("resourceHandles"))
        .and_then(Value::as_array);
    if let Some(handles) = handles {
        if handles.len() > RESOURCE_HANDLES_MAX {
            causes.push(FieldCause::too_many(
                "status.allocation.resourceHandles",
                handles.len(),
                RESOURCE_HANDLES_MAX,
            ));
        }
        for (i, handle) in handles.iter().enumerate() {
            let data = handle
                .get("data")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if data.len() > RESOURCE_HANDLE_DATA_MAX {
                causes.push(FieldCause {
                    reason: "FieldValueTooLong",
                    field: format!("status.allocation.resourceHandles[{i}].data"),
                    message: format!(
                        "Too long: must have at most {RESOURCE_HANDLE_DATA_MAX} bytes"
                    ),
                });
            }
        }
    }
    let reserved: Vec<&str> = status
        .and_then(|s| s.get("reservedFor"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|r| r.get("uid").and_then(Value::as_str).unwrap_or_default())
        .collect();
    if reserved.len() > reserved_max {
        causes.push(FieldCause::too_many(
            "status.reservedFor",
            reserved.len(),
            reserved_max,
        ));
    }
    for (i, uid) in reserved.iter().enumerate() {
        if reserved[..i].contains(uid) {
            causes.push(FieldCause {
                reason: "FieldValueDuplicate",
                field: format!("status.reservedFor[{i}].uid"),
                message: format!("Duplicate value: {uid:?}"),
            });
        }
    }
    if !reserved.is_empty() && allocation.is_none() {
        causes.push(FieldCause::forbidden(
            "status.reservedFor",
            "may not be specified when `allocated` is not set",
        ));
    }
    let deallocation_requested = status
        .and_then(|s| s.get("deallocationRequested"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if deallocation_requested && allocation.is_none() {
        causes.push(FieldCause::forbidden(
            "status.deallocationRequested",
            "deallocation can only be requested for an allocated claim",
        ));
    }
    let Some(old) = old else { return };
    let old_status = old.get("status");
    let old_allocation = old_status
        .and_then(|s| s.get("allocation"))
        .filter(|a| !a.is_null());
    if let (Some(before), Some(after)) = (old_allocation, allocation)
        && before != after
    {
        causes.push(FieldCause::invalid(
            "status.allocation",
            after,
            "field is immutable",
        ));
    }
    // "While DeallocationRequested is set, no new consumers may be added to ReservedFor",
    // and neither while the claim is being deleted.
    let old_reserved: Vec<&str> = old_status
        .and_then(|s| s.get("reservedFor"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| r.get("uid").and_then(Value::as_str))
        .collect();
    let adds = reserved.iter().any(|uid| !old_reserved.contains(uid));
    let deleting = old
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null());
    let old_dealloc = old_status
        .and_then(|s| s.get("deallocationRequested"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if adds && (old_dealloc || deleting) {
        causes.push(FieldCause::forbidden("status.reservedFor", "new entries may not be added while `deallocationRequested` or `deletionTimestamp` are set"));
    }
}

/// Pod `spec.resourceClaims` as the release's Pod API has them: 1.27–1.30
/// `{name, source{resourceClaimName | resourceClaimTemplateName}}`, 1.31+ the two names on
/// the entry itself. The other layout's field is unknown to the release, so the decoder
/// drops it (see `prune_pod_claims`) and the entry then lacks its reference — the 422 a
/// real apiserver gives.
fn pod_claims(pod: &Value, server_version: (u32, u32), causes: &mut Vec<FieldCause>) {
    let flat = server_version >= (1, 31);
    for (i, claim) in pod
        .pointer("/spec/resourceClaims")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let (holder, path) = if flat {
            (Some(claim), format!("spec.resourceClaims[{i}]"))
        } else {
            (
                claim.get("source"),
                format!("spec.resourceClaims[{i}].source"),
            )
        };
        let set = |f: &str| {
            holder
                .and_then(|h| h.get(f))
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty())
        };
        match (set("resourceClaimName"), set("resourceClaimTemplateName")) {
            (true, false) | (false, true) => {}
            (true, true) => causes.push(FieldCause::invalid(
                &path,
                holder.unwrap_or(&Value::Null),
                "at most one of `resourceClaimName` or `resourceClaimTemplateName` may be specified",
            )),
            (false, false) => causes.push(FieldCause::required(
                &path,
                "must specify one of: `resourceClaimName`, `resourceClaimTemplateName`",
            )),
        }
    }
}

/// Drops the Pod-claim fields the release does not know (the decoder ignores unknown
/// fields): `source` from 1.31, the flat names before; `status.resourceClaimStatuses`
/// before 1.28 (1.27 named generated claims `<pod>-<pod claim>` and recorded nothing).
pub fn prune_pod_claims(pod: &mut Value, server_version: (u32, u32)) {
    if server_version < (1, 28)
        && let Some(status) = pod.get_mut("status").and_then(Value::as_object_mut)
    {
        status.remove("resourceClaimStatuses");
    }
    let flat = server_version >= (1, 31);
    for claim in pod
        .pointer_mut("/spec/resourceClaims")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        let Some(map) = claim.as_object_mut() else {
            continue;
        };
        if flat {
            map.remove("source");
        } else {
            map.remove("resourceClaimName");
            map.remove("resourceClaimTemplateName");
        }
    }
}

/// CEL selectors must compile (upstream compiles them at admission and answers 422 with
/// the compiler's message), within `CELSelectorExpressionMaxLength` and
/// `CELSelectorExpressionMaxCost` (k8s.io/kubernetes `pkg/apis/resource/validation`,
/// `validateCELExpression`: `field.TooLong`, then "too complex, exceeds cost limit").
fn selectors(list: Option<&Value>, path: &str, causes: &mut Vec<FieldCause>) {
    let Some(list) = list.filter(|v| !v.is_null()) else {
        return;
    };
    let Some(list) = list.as_array() else {
        causes.push(FieldCause::invalid(path, list, "must be a list"));
        return;
    };
    if list.len() > DEVICE_REQUESTS_MAX {
        causes.push(FieldCause::too_many(path, list.len(), DEVICE_REQUESTS_MAX));
    }
    for (i, selector) in list.iter().enumerate() {
        let field = format!("{path}[{i}].cel.expression");
        match selector.pointer("/cel/expression").and_then(Value::as_str) {
            None | Some("") => causes.push(FieldCause::required(&field, "")),
            // Not compiled: a 1.8 MB selector took 104 s and 1.18 GB to compile.
            Some(expression) if expression.len() > crate::cel::MAX_EXPRESSION_BYTES => {
                causes.push(FieldCause::too_long(
                    &field,
                    crate::cel::MAX_EXPRESSION_BYTES,
                ));
            }
            Some(expression) => match crate::cel::compile(expression) {
                Err(e) => causes.push(FieldCause::invalid(
                    &field,
                    &Value::String(expression.into()),
                    format!("compilation failed: {e}"),
                )),
                Ok(program) => {
                    let cost = crate::cel::with_stack(|| crate::cel::estimate(&program));
                    if cost > crate::cel::MAX_COST {
                        causes.push(FieldCause::forbidden(
                            &field,
                            "too complex, exceeds cost limit",
                        ));
                    }
                }
            },
        }
    }
}

/// `validateResourceClaimSpec` of v1, for the parts the emulator's scheduler relies on
/// and the opaque parameters (`created`: the write creates the object).
fn structured_claim_spec(
    spec: Option<&Value>,
    path: &str,
    created: bool,
    server_version: (u32, u32),
    causes: &mut Vec<FieldCause>,
) {
    // 1.32's internal request has the exact fields on the request itself and no
    // `firstAvailable` (`validateDeviceRequest` of 1.32.13: `requests[i].deviceClassName:
    // Required value`); 1.33 moved them into `exactly`.
    let exact_fields_nested = server_version >= (1, 33);
    let Some(spec) = spec else { return };
    if spec.get("resourceClassName").is_some() || spec.get("parametersRef").is_some() {
        causes.push(FieldCause::invalid(
            path,
            spec,
            "classic DRA fields (resourceClassName, parametersRef) are not part of resource.k8s.io/v1beta1 or v1",
        ));
    }
    let requests = spec
        .pointer("/devices/requests")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    if requests.len() > DEVICE_REQUESTS_MAX {
        causes.push(FieldCause::too_many(
            format!("{path}.devices.requests"),
            requests.len(),
            DEVICE_REQUESTS_MAX,
        ));
    }
    let mut names: Vec<&str> = Vec::new();
    for (i, request) in requests.iter().enumerate() {
        let at = format!("{path}.devices.requests[{i}]");
        let name = request
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if let Some(problem) = name_problem(name, true) {
            causes.push(FieldCause::invalid(
                format!("{at}.name"),
                &Value::String(name.into()),
                problem,
            ));
        } else if names.contains(&name) {
            causes.push(FieldCause {
                reason: "FieldValueDuplicate",
                field: format!("{at}.name"),
                message: format!("Duplicate value: {name:?}"),
            });
        }
        names.push(name);
        let exact_at = if exact_fields_nested {
            format!("{at}.exactly")
        } else {
            at.clone()
        };
        let exact = request.get("exactly").filter(|v| !v.is_null());
        let first = request.get("firstAvailable").filter(|v| !v.is_null());
        let exact = match (exact, first) {
            (Some(e), None) => e,
            (None, Some(_)) => continue,
            (None, None) if !exact_fields_nested => {
                causes.push(FieldCause::required(format!("{at}.deviceClassName"), ""));
                continue;
            }
            _ => {
                causes.push(FieldCause::required(
                    &at,
                    "exactly one of `exactly` or `firstAvailable` is required",
                ));
                continue;
            }
        };
        if exact
            .get("deviceClassName")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            causes.push(FieldCause::required(
                format!("{exact_at}.deviceClassName"),
                "",
            ));
        }
        match exact.get("allocationMode").and_then(Value::as_str) {
            Some("ExactCount") => {
                let count = exact.get("count").and_then(Value::as_i64).unwrap_or(0);
                if count <= 0 {
                    causes.push(FieldCause::invalid(
                        format!("{exact_at}.count"),
                        exact.get("count").unwrap_or(&Value::Null),
                        "must be greater than zero",
                    ));
                }
            }
            Some("All") => {
                if exact.get("count").is_some_and(|c| !c.is_null()) {
                    causes.push(FieldCause::invalid(
                        format!("{exact_at}.count"),
                        exact.get("count").unwrap_or(&Value::Null),
                        "must not be specified when allocationMode is All",
                    ));
                }
            }
            other => causes.push(FieldCause {
                reason: "FieldValueNotSupported",
                field: format!("{exact_at}.allocationMode"),
                message: format!(
                    "Unsupported value: {:?}: supported values: \"All\", \"ExactCount\"",
                    other.unwrap_or_default()
                ),
            }),
        }
        selectors(
            exact.get("selectors"),
            &format!("{exact_at}.selectors"),
            causes,
        );
    }
    release::opaque_config(
        spec.pointer("/devices/config"),
        &format!("{path}.devices.config"),
        created,
        server_version,
        causes,
    );
}

/// `ValidateResourceSlice` of v1: what a driver publishing slices can get wrong.
fn resource_slice(slice: &Value, causes: &mut Vec<FieldCause>) {
    let spec = slice.get("spec").unwrap_or(&Value::Null);
    if spec
        .get("driver")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        causes.push(FieldCause::required("spec.driver", ""));
    }
    match spec.pointer("/pool/name").and_then(Value::as_str) {
        None | Some("") => causes.push(FieldCause::required("spec.pool.name", "")),
        // `validatePoolName`: at most `PoolNameMaxLength` (253), DNS subdomains joined by
        // `/`, each checked alone.
        Some(name) => {
            if name.len() > 253 {
                causes.push(FieldCause::too_long("spec.pool.name", 253));
            }
            for part in name.split('/') {
                if let Some(problem) = name_problem(part, false) {
                    causes.push(FieldCause::invalid(
                        "spec.pool.name",
                        &Value::String(part.into()),
                        problem,
                    ));
                }
            }
        }
    }
    if spec
        .pointer("/pool/resourceSliceCount")
        .and_then(Value::as_i64)
        .unwrap_or(0)
        <= 0
    {
        causes.push(FieldCause::invalid(
            "spec.pool.resourceSliceCount",
            spec.pointer("/pool/resourceSliceCount")
                .unwrap_or(&Value::Null),
            "must be greater than zero",
        ));
    }
    let node_fields = [
        spec.get("nodeName")
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty()),
        spec.get("nodeSelector").is_some_and(|v| !v.is_null()),
        spec.get("allNodes").and_then(Value::as_bool) == Some(true),
        spec.get("perDeviceNodeSelection").and_then(Value::as_bool) == Some(true),
    ];
    if node_fields.iter().filter(|set| **set).count() != 1 {
        causes.push(FieldCause::required(
            "spec",
            "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required",
        ));
    }
    let devices = spec
        .get("devices")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    if devices.len() > SLICE_DEVICES_MAX {
        causes.push(FieldCause::too_many(
            "spec.devices",
            devices.len(),
            SLICE_DEVICES_MAX,
        ));
    }
    let mut names: Vec<&str> = Vec::new();
    for (i, device) in devices.iter().enumerate() {
        let name = device
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if let Some(problem) = name_problem(name, true) {
            causes.push(FieldCause::invalid(
                format!("spec.devices[{i}].name"),
                &Value::String(name.into()),
                problem,
            ));
        } else if names.contains(&name) {
            causes.push(FieldCause {
                reason: "FieldValueDuplicate",
                field: format!("spec.devices[{i}].name"),
                message: format!("Duplicate value: {name:?}"),
            });
        }
        names.push(name);
        let count = |f: &str| {
            device
                .get(f)
                .and_then(Value::as_object)
                .map_or(0, |m| m.len())
        };
        let total = count("attributes") + count("capacity");
        if total > DEVICE_ATTRIBUTES_MAX {
            causes.push(FieldCause::too_many(
                format!("spec.devices[{i}]"),
                total,
                DEVICE_ATTRIBUTES_MAX,
            ));
        }
        for (attr, value) in device
            .get("attributes")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            let set = ["int", "bool", "string", "version"]
                .iter()
                .filter(|k| value.get(**k).is_some_and(|v| !v.is_null()))
                .count();
            if set != 1 {
                causes.push(FieldCause::invalid(
                    format!("spec.devices[{i}].attributes[{attr}]"),
                    value,
                    "exactly one value must be specified (int, bool, string or version)",
                ));
            }
        }
    }
}

/// `validateJobSpec`: a Job's pods must not restart forever (the template's pod spec is
/// not defaulted here, so an absent policy is the `Always` upstream would default to).
fn job_restart_policy(job: &Value, causes: &mut Vec<FieldCause>) {
    let field = "spec.template.spec.restartPolicy";
    match job
        .pointer("/spec/template/spec/restartPolicy")
        .and_then(Value::as_str)
    {
        None | Some("" | "Always") => causes.push(FieldCause::required(
            field,
            r#"valid values: "OnFailure", "Never""#,
        )),
        Some("OnFailure" | "Never") => {}
        Some(other) => causes.push(FieldCause::not_supported(
            field,
            &json!(other),
            &[json!("OnFailure"), json!("Never")],
        )),
    }
}
