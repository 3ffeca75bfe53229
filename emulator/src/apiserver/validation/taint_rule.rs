//! `ValidateDeviceTaintRule`, `ValidateDeviceTaintRuleUpdate` and
//! `ValidateDeviceTaintRuleStatusUpdate` of Kubernetes 1.37's
//! `pkg/apis/resource/validation`, on the object in `v1`'s layout. Both endpoints check
//! everything: the main one keeps the stored status and `/status` the stored spec, which
//! were valid, so that is what each upstream function checks.

use serde_json::Value;

use super::super::error::FieldCause;
use super::names;
use super::release::unsupported;

/// `DeviceTaintRuleStatusMaxConditions`.
const MAX_CONDITIONS: usize = 8;
/// `ValidateCSIDriverName`'s limit, which driver names share.
const DRIVER_NAME_MAX: usize = 63;
/// `PoolNameMaxLength`.
const POOL_NAME_MAX: usize = 253;
/// `validDeviceTaintEffects`, sorted as `sets.List` gives them.
const EFFECTS: [&str; 3] = ["NoExecute", "NoSchedule", "None"];
/// metav1 `ValidateCondition`'s limits.
const CONDITION_REASON_MAX: usize = 1024;
const CONDITION_MESSAGE_MAX: usize = 32768;

fn text<'a>(v: Option<&'a Value>, field: &str) -> Option<&'a str> {
    v.and_then(|v| v.get(field)).and_then(Value::as_str)
}

fn invalid_each(field: &str, value: &str, problems: Vec<String>, causes: &mut Vec<FieldCause>) {
    for problem in problems {
        causes.push(FieldCause::invalid(
            field,
            &Value::String(value.into()),
            problem,
        ));
    }
}

/// The rule `new` (replacing `old`, if any).
pub fn device_taint_rule(old: Option<&Value>, new: &Value, causes: &mut Vec<FieldCause>) {
    let spec = new.get("spec");
    if let Some(selector) = spec
        .and_then(|s| s.get("deviceSelector"))
        .filter(|s| !s.is_null())
    {
        selector_fields(selector, causes);
    }
    let old_effect = old.map(|o| text(o.pointer("/spec/taint"), "effect").unwrap_or_default());
    taint(spec.and_then(|s| s.get("taint")), old_effect, causes);
    conditions(new.pointer("/status/conditions"), causes);
}

fn selector_fields(selector: &Value, causes: &mut Vec<FieldCause>) {
    const AT: &str = "spec.deviceSelector";
    if let Some(driver) = text(Some(selector), "driver") {
        let field = format!("{AT}.driver");
        if driver.is_empty() {
            causes.push(FieldCause::required(&field, ""));
        }
        if driver.len() > DRIVER_NAME_MAX {
            causes.push(FieldCause::too_long(&field, DRIVER_NAME_MAX));
        }
        invalid_each(
            &field,
            driver,
            names::dns_subdomain(&driver.to_lowercase()),
            causes,
        );
    }
    if let Some(pool) = text(Some(selector), "pool") {
        let field = format!("{AT}.pool");
        if pool.is_empty() {
            causes.push(FieldCause::required(&field, ""));
        } else {
            if pool.len() > POOL_NAME_MAX {
                causes.push(FieldCause::too_long(&field, POOL_NAME_MAX));
            }
            for part in pool.split('/') {
                invalid_each(&field, part, names::dns_subdomain(part), causes);
            }
        }
    }
    if let Some(device) = text(Some(selector), "device") {
        invalid_each(
            &format!("{AT}.device"),
            device,
            names::dns_label(device),
            causes,
        );
    }
}

/// `validateDeviceTaint`: an effect that did not change is not checked again
/// (ratcheting: effects added later stay valid in stored rules).
fn taint(taint: Option<&Value>, old_effect: Option<&str>, causes: &mut Vec<FieldCause>) {
    const AT: &str = "spec.taint";
    let key = text(taint, "key").unwrap_or_default();
    invalid_each(&format!("{AT}.key"), key, names::label_key(key), causes);
    let value = text(taint, "value").unwrap_or_default();
    if !value.is_empty() {
        invalid_each(
            &format!("{AT}.value"),
            value,
            names::label_value(value),
            causes,
        );
    }
    let effect = text(taint, "effect").unwrap_or_default();
    if old_effect == Some(effect) {
        return;
    }
    if effect.is_empty() {
        causes.push(FieldCause::required(format!("{AT}.effect"), ""));
    } else if !EFFECTS.contains(&effect) {
        causes.push(unsupported(format!("{AT}.effect"), effect, &EFFECTS));
    }
}

/// metav1 `ValidateConditions`, then the rule's own limit.
fn conditions(conditions: Option<&Value>, causes: &mut Vec<FieldCause>) {
    const AT: &str = "status.conditions";
    let list = conditions
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut seen: Vec<&str> = Vec::new();
    for (i, condition) in list.iter().enumerate() {
        let at = format!("{AT}[{i}]");
        let kind = text(Some(condition), "type").unwrap_or_default();
        if seen.contains(&kind) {
            causes.push(FieldCause {
                reason: "FieldValueDuplicate",
                field: at.clone(),
                message: format!("Duplicate value: {kind:?}"),
            });
        }
        seen.push(kind);
        if kind.is_empty() {
            causes.push(FieldCause::required(format!("{at}.type"), "is required"));
        } else {
            invalid_each(&format!("{at}.type"), kind, names::label_key(kind), causes);
        }
        let status = text(Some(condition), "status").unwrap_or_default();
        if status.is_empty() {
            causes.push(FieldCause::required(format!("{at}.status"), ""));
        } else if !["False", "True", "Unknown"].contains(&status) {
            causes.push(unsupported(
                format!("{at}.status"),
                status,
                &["False", "True", "Unknown"],
            ));
        }
        if condition
            .get("observedGeneration")
            .and_then(Value::as_i64)
            .is_some_and(|g| g < 0)
        {
            causes.push(FieldCause::invalid(
                format!("{at}.observedGeneration"),
                &condition["observedGeneration"],
                "must be greater than or equal to zero",
            ));
        }
        if text(Some(condition), "lastTransitionTime").is_none_or(str::is_empty) {
            causes.push(FieldCause::required(format!("{at}.lastTransitionTime"), ""));
        }
        let reason = text(Some(condition), "reason").unwrap_or_default();
        if reason.is_empty() {
            causes.push(FieldCause::required(format!("{at}.reason"), ""));
        } else {
            if !is_condition_reason(reason) {
                causes.push(FieldCause::invalid(
                    format!("{at}.reason"),
                    &Value::String(reason.into()),
                    "a condition reason must start with alphabetic character, optionally followed by a string of alphanumeric characters or '_,:', and must end with an alphanumeric character or '_' (e.g. 'my_name',  or 'MY_NAME',  or 'MyName',  or 'ReasonA,ReasonB',  or 'ReasonA:ReasonB', regex used for validation is '[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?')",
                ));
            }
            if reason.len() > CONDITION_REASON_MAX {
                causes.push(FieldCause::too_long(
                    format!("{at}.reason"),
                    CONDITION_REASON_MAX,
                ));
            }
        }
        if text(Some(condition), "message").is_some_and(|m| m.len() > CONDITION_MESSAGE_MAX) {
            causes.push(FieldCause::too_long(
                format!("{at}.message"),
                CONDITION_MESSAGE_MAX,
            ));
        }
    }
    if list.len() > MAX_CONDITIONS {
        causes.push(FieldCause::too_many(AT, list.len(), MAX_CONDITIONS));
    }
}

/// `[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?`
fn is_condition_reason(reason: &str) -> bool {
    let bytes = reason.as_bytes();
    let inner = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b',' | b':');
    let last_ok = |b: &u8| b.is_ascii_alphanumeric() || *b == b'_';
    bytes.first().is_some_and(u8::is_ascii_alphabetic)
        && bytes.iter().all(inner)
        && bytes.last().is_some_and(last_ok)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn messages(old: Option<Value>, new: Value) -> Vec<String> {
        let mut causes = Vec::new();
        device_taint_rule(old.as_ref(), &new, &mut causes);
        causes
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    fn rule(selector: Value, taint: Value) -> Value {
        json!({"metadata": {"name": "r"}, "spec": {"deviceSelector": selector, "taint": taint}})
    }

    #[test]
    fn a_good_rule_passes_and_no_selector_is_allowed() {
        let taint = json!({"key": "example.com/broken", "value": "yes", "effect": "NoSchedule"});
        assert!(
            messages(
                None,
                rule(
                    json!({"driver": "gpu.example.com", "pool": "node-a", "device": "gpu-0"}),
                    taint.clone()
                )
            )
            .is_empty()
        );
        assert!(messages(None, json!({"spec": {"taint": taint}})).is_empty());
    }

    #[test]
    fn selector_fields_are_checked_as_slices_name_them() {
        let taint = json!({"key": "k", "effect": "None"});
        let got = messages(
            None,
            rule(
                json!({"driver": "", "pool": "a/-b", "device": "gpu.0"}),
                taint,
            ),
        );
        assert!(
            got.iter()
                .any(|m| m == "spec.deviceSelector.driver: Required value"),
            "{got:?}"
        );
        assert!(
            got.iter().any(|m| m.starts_with(
                "spec.deviceSelector.pool: Invalid value: \"-b\": a lowercase RFC 1123 subdomain"
            )),
            "{got:?}"
        );
        assert!(
            got.contains(
                &"spec.deviceSelector.device: Invalid value: \"gpu.0\": must not contain dots"
                    .to_string()
            ),
            "{got:?}"
        );
    }

    #[test]
    fn the_taint_needs_a_key_and_a_known_effect_unless_the_effect_is_unchanged() {
        let got = messages(None, rule(json!({}), json!({"effect": "PreferNoSchedule"})));
        assert!(
            got.contains(
                &"spec.taint.key: Invalid value: \"\": name part must be non-empty".to_string()
            ),
            "{got:?}"
        );
        assert!(got.contains(&"spec.taint.effect: Unsupported value: \"PreferNoSchedule\": supported values: \"NoExecute\", \"NoSchedule\", \"None\"".to_string()), "{got:?}");
        let stored = rule(json!({}), json!({"key": "k", "effect": "Future"}));
        let renamed = rule(json!({}), json!({"key": "k2", "effect": "Future"}));
        assert!(messages(Some(stored), renamed).is_empty());
        let got = messages(None, rule(json!({}), json!({"key": "k"})));
        assert_eq!(got, vec!["spec.taint.effect: Required value".to_string()]);
    }

    #[test]
    fn nine_conditions_are_too_many() {
        let condition = |i: usize| json!({"type": format!("T{i}"), "status": "True", "reason": "R", "lastTransitionTime": "2026-12-07T00:00:00Z"});
        let mut r = rule(json!({}), json!({"key": "k", "effect": "None"}));
        r["status"] = json!({"conditions": (0..8).map(condition).collect::<Vec<_>>()});
        assert!(messages(None, r.clone()).is_empty());
        r["status"] = json!({"conditions": (0..9).map(condition).collect::<Vec<_>>()});
        assert_eq!(
            messages(None, r),
            vec!["status.conditions: Too many: 9: must have at most 8 items".to_string()]
        );
    }

    #[test]
    fn a_condition_needs_its_fields() {
        let mut r = rule(json!({}), json!({"key": "k", "effect": "None"}));
        r["status"] = json!({"conditions": [{"type": "EvictionInProgress", "status": "Maybe", "reason": "1bad"}]});
        let got = messages(None, r);
        assert_eq!(got.len(), 3, "{got:?}");
        assert!(got[0].starts_with("status.conditions[0].status: Unsupported value: \"Maybe\""));
        assert_eq!(
            got[1],
            "status.conditions[0].lastTransitionTime: Required value"
        );
        assert!(got[2].starts_with("status.conditions[0].reason: Invalid value: \"1bad\""));
    }
}
