//! Field ownership for server-side apply (`managedFields`), kept inside the emulator.
//!
//! Upstream (sigs.k8s.io/structured-merge-diff) tracks, per manager and operation, the set
//! of fields it owns. Here maps merge field by field and lists and scalars are atomic
//! leaves (the default for custom resources without `x-kubernetes-list-type`), which covers
//! the applies this project and its dependencies make. Ownership is not rendered into
//! `metadata.managedFields`; it only decides apply conflicts and removals.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

pub type FieldPath = Vec<String>;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Operation {
    Apply,
    Update,
}

#[derive(Debug, Clone, Default)]
pub struct ManagedFields(BTreeMap<(String, Operation), BTreeSet<FieldPath>>);

/// The leaves of an object that ownership is tracked for: everything but the identity and
/// system-maintained metadata.
pub fn leaves(obj: &Value) -> BTreeSet<FieldPath> {
    let mut out = BTreeSet::new();
    if let Some(map) = obj.as_object() {
        for (key, value) in map {
            match key.as_str() {
                "apiVersion" | "kind" => {}
                "metadata" => {
                    for field in ["labels", "annotations", "finalizers", "ownerReferences"] {
                        if let Some(v) = value.get(field) {
                            collect(v, vec!["metadata".into(), field.into()], &mut out);
                        }
                    }
                }
                _ => collect(value, vec![key.clone()], &mut out),
            }
        }
    }
    out
}

fn collect(value: &Value, path: FieldPath, out: &mut BTreeSet<FieldPath>) {
    match value {
        Value::Object(map) if !map.is_empty() && path.as_slice() != ["metadata", "finalizers"] => {
            for (k, v) in map {
                let mut p = path.clone();
                p.push(k.clone());
                collect(v, p, out);
            }
        }
        _ => {
            out.insert(path);
        }
    }
}

pub fn get<'a>(obj: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(obj, |v, k| v.get(k))
}

/// Removes the field at `path`, and parents it leaves empty.
pub fn remove(obj: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    if let Some(parent) = parents
        .iter()
        .try_fold(&mut *obj, |v, k| v.get_mut(k))
        .and_then(Value::as_object_mut)
    {
        parent.remove(last);
        if parent.is_empty() && !parents.is_empty() {
            remove(obj, parents);
        }
    }
}

/// Deep-merges `applied` into `target`: maps field by field, everything else replaced.
pub fn merge_applied(target: &mut Value, applied: &Value) {
    match (target, applied) {
        (Value::Object(t), Value::Object(a)) => {
            for (k, v) in a {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge_applied(
                        t.entry(k.clone())
                            .or_insert_with(|| Value::Object(Map::new())),
                        v,
                    );
                }
            }
        }
        (t, a) => *t = a.clone(),
    }
}

/// One field another manager owns with a different value than the apply wants.
#[derive(Debug, Clone, PartialEq)]
pub struct Conflict {
    pub manager: String,
    pub path: FieldPath,
}

impl ManagedFields {
    /// Records an Update-style write (create, PUT, non-apply patch) by `manager`: it takes
    /// the fields it changed; removed fields are owned by nobody.
    pub fn record_update(&mut self, manager: &str, old: Option<&Value>, new: &Value) {
        let new_leaves = leaves(new);
        let changed: BTreeSet<FieldPath> = new_leaves
            .iter()
            .filter(|p| old.and_then(|o| get(o, p)) != get(new, p))
            .cloned()
            .collect();
        for set in self.0.values_mut() {
            set.retain(|p| new_leaves.contains(p) && !changed.contains(p));
        }
        if !changed.is_empty() {
            self.0
                .entry((manager.to_string(), Operation::Update))
                .or_default()
                .extend(changed);
        }
        self.0.retain(|_, set| !set.is_empty());
    }

    /// Fields of `applied` whose value differs from `current` and that another manager owns.
    pub fn conflicts(&self, manager: &str, current: &Value, applied: &Value) -> Vec<Conflict> {
        let mut out = Vec::new();
        for path in leaves(applied) {
            if get(current, &path) == get(applied, &path) {
                continue;
            }
            for ((owner, op), set) in &self.0 {
                if (owner.as_str(), *op) != (manager, Operation::Apply) && set.contains(&path) {
                    out.push(Conflict {
                        manager: owner.clone(),
                        path: path.clone(),
                    });
                }
            }
        }
        out
    }

    /// Applies `applied` for `manager` onto `current` (after conflicts were resolved or
    /// forced): merges it, drops fields the manager applied before but no longer does and
    /// nobody else owns, and makes the manager the sole owner of what it applied.
    pub fn apply(&mut self, manager: &str, current: &Value, applied: &Value) -> Value {
        let applied_leaves = leaves(applied);
        let key = (manager.to_string(), Operation::Apply);
        let previously = self.0.remove(&key).unwrap_or_default();
        for set in self.0.values_mut() {
            set.retain(|p| !applied_leaves.contains(p));
        }
        let mut result = current.clone();
        for path in previously.difference(&applied_leaves) {
            if !self.0.values().any(|s| s.contains(path)) {
                remove(&mut result, path);
            }
        }
        merge_applied(&mut result, applied);
        self.0.insert(key, applied_leaves);
        self.0.retain(|_, set| !set.is_empty());
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn apply_conflicts_with_an_updater_and_force_takes_over() {
        let mut fields = ManagedFields::default();
        let obj = json!({"spec": {"holder": "a", "renew": 1}});
        fields.record_update("a", None, &obj);
        let applied = json!({"spec": {"holder": "b"}});
        let conflicts = fields.conflicts("b", &obj, &applied);
        assert_eq!(
            conflicts,
            vec![Conflict {
                manager: "a".into(),
                path: vec!["spec".into(), "holder".into()]
            }]
        );
        // Same value: shared ownership, no conflict.
        assert!(
            fields
                .conflicts("b", &obj, &json!({"spec": {"holder": "a"}}))
                .is_empty()
        );
        let merged = fields.apply("b", &obj, &applied);
        assert_eq!(merged, json!({"spec": {"holder": "b", "renew": 1}}));
        assert!(
            fields
                .conflicts("a", &merged, &json!({"spec": {"holder": "c"}}))
                .len()
                == 1
        );
    }

    #[test]
    fn apply_removes_fields_the_manager_dropped() {
        let mut fields = ManagedFields::default();
        let first = fields.apply("m", &json!({}), &json!({"spec": {"x": 1, "y": 2}}));
        let second = fields.apply("m", &first, &json!({"spec": {"x": 1}}));
        assert_eq!(second, json!({"spec": {"x": 1}}));
    }
}
