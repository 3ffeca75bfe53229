//! Validation rules of built-in kinds that a DRA driver can trip over.
//!
//! The emulator does not carry kube-apiserver's whole validation; it carries the rules a
//! classic DRA driver or scheduler is constrained by, so a driver that breaks them fails here
//! as it would on a cluster. Source: pkg/apis/resource/validation/validation.go (v1alpha2,
//! Kubernetes 1.28–1.30) and apimachinery's ObjectMeta validation.

use serde_json::Value;

use super::error::{ApiError, ApiResult, FieldCause};
use super::registry::ResourceType;

/// `ResourceClaimReservedForMaxSize`.
pub const RESERVED_FOR_MAX: usize = 32;
/// `AllocationResultResourceHandlesMaxSize`.
pub const RESOURCE_HANDLES_MAX: usize = 32;
/// `ResourceHandleDataMaxSize`.
pub const RESOURCE_HANDLE_DATA_MAX: usize = 16 * 1024;
/// `PodSchedulingNodeListMaxSize`, for potentialNodes and unsuitableNodes.
pub const SCHEDULING_NODE_LIST_MAX: usize = 128;

/// An RFC 1123 subdomain (most object names) or, when `label`, an RFC 1123 label (namespaces).
fn name_problem(name: &str, label: bool) -> Option<String> {
    let max = if label { 63 } else { 253 };
    let allowed =
        |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || (!label && c == '.');
    let edge_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if name.len() > max {
        return Some(format!("must be no more than {max} characters"));
    }
    if !name.chars().all(allowed) || !edge_ok(name.chars().next()) || !edge_ok(name.chars().last())
    {
        let what = if label {
            "a lowercase RFC 1123 label"
        } else {
            "a lowercase RFC 1123 subdomain"
        };
        return Some(format!(
            "{what} must consist of lower case alphanumeric characters, '-'{}, and must start and end with an alphanumeric character",
            if label { "" } else { " or '.'" }
        ));
    }
    None
}

pub fn validate_name(rt: &ResourceType, name: &str) -> ApiResult<()> {
    if let Some(problem) = name_problem(name, rt.plural == "namespaces" && rt.group.is_empty()) {
        let cause = FieldCause::invalid("metadata.name", &Value::String(name.into()), problem);
        return Err(ApiError::invalid(&rt.kind_group(), name, vec![cause]));
    }
    Ok(())
}

fn len_at(obj: &Value, pointer: &str) -> usize {
    obj.pointer(pointer)
        .and_then(Value::as_array)
        .map_or(0, Vec::len)
}

/// Checks a write of `new` (replacing `old`, if any) against the kind's rules.
pub fn validate_write(rt: &ResourceType, old: Option<&Value>, new: &Value) -> ApiResult<()> {
    let mut causes = Vec::new();
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("resource.k8s.io", "resourceclaims") => resource_claim(old, new, &mut causes),
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

fn resource_claim(old: Option<&Value>, new: &Value, causes: &mut Vec<FieldCause>) {
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
    if reserved.len() > RESERVED_FOR_MAX {
        causes.push(FieldCause::too_many(
            "status.reservedFor",
            reserved.len(),
            RESERVED_FOR_MAX,
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
