//! Field ownership for server-side apply (`managedFields`), kept inside the emulator.
//!
//! Upstream (sigs.k8s.io/structured-merge-diff) tracks, per manager and operation, the set
//! of fields it owns. Here too: maps merge field by field; lists merge as their schema
//! says ([`shape`]): `map` lists item by item on their key fields, `set` lists value by
//! value, other lists (and scalars) are atomic leaves. So two managers that each apply
//! their own entry of a map list both keep it, as on kube-apiserver. Ownership is not
//! rendered into `metadata.managedFields`; it only decides apply conflicts and removals.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

mod shape;

pub use shape::{ListType, Shape};

/// One step of a field path, as SMD's `PathElement`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Step {
    Field(String),
    /// An item of a `map` list: each key field and its value as JSON (`None`: absent).
    Key(Vec<(String, Option<String>)>),
    /// An item of a `set` list, as JSON.
    Value(String),
}

pub type FieldPath = Vec<Step>;

/// A path the way SMD prints it in conflicts: `.status.nodes[node="a"].phase`.
pub fn render(path: &[Step]) -> String {
    path.iter()
        .map(|step| match step {
            Step::Field(name) => format!(".{name}"),
            Step::Key(keys) => {
                let keys: Vec<String> = keys
                    .iter()
                    .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={v}")))
                    .collect();
                format!("[{}]", keys.join(","))
            }
            Step::Value(v) => format!("[={v}]"),
        })
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Operation {
    Apply,
    Update,
}

#[derive(Debug, Clone, Default)]
pub struct ManagedFields(BTreeMap<(String, Operation), BTreeSet<FieldPath>>);

fn key_step(keys: &[String], item: &Value) -> Step {
    Step::Key(
        keys.iter()
            .map(|k| (k.clone(), item.get(k).map(Value::to_string)))
            .collect(),
    )
}

fn matches(step: &Step, item: &Value) -> bool {
    match step {
        Step::Field(_) => false,
        Step::Key(keys) => keys
            .iter()
            .all(|(k, v)| item.get(k).map(Value::to_string).as_ref() == v.as_ref()),
        Step::Value(v) => serde_json::from_str::<Value>(v).is_ok_and(|value| value == *item),
    }
}

/// The leaves of an object that ownership is tracked for: everything but the identity and
/// system-maintained metadata. An item of a `map` or `set` list is a leaf of its own
/// (standing for its key fields), and the fields of a `map` item are leaves below it.
pub fn leaves(obj: &Value, shape: &Shape) -> BTreeSet<FieldPath> {
    let mut out = BTreeSet::new();
    if let Some(map) = obj.as_object() {
        for (key, value) in map {
            match key.as_str() {
                "apiVersion" | "kind" => {}
                "metadata" => {
                    let meta = shape.field("metadata");
                    for field in ["labels", "annotations", "finalizers", "ownerReferences"] {
                        if let Some(v) = value.get(field) {
                            let path =
                                vec![Step::Field("metadata".into()), Step::Field(field.into())];
                            collect(v, path, &meta.field(field), &mut out);
                        }
                    }
                }
                _ => collect(
                    value,
                    vec![Step::Field(key.clone())],
                    &shape.field(key),
                    &mut out,
                ),
            }
        }
    }
    out
}

fn collect(value: &Value, path: FieldPath, shape: &Shape, out: &mut BTreeSet<FieldPath>) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (k, v) in map {
                let mut p = path.clone();
                p.push(Step::Field(k.clone()));
                collect(v, p, &shape.field(k), out);
            }
        }
        // An empty `map` or `set` list owns nothing (SMD's field set has no items for it),
        // so an applier that drops its last item does not take the whole list.
        Value::Array(items) => match shape.list_type() {
            ListType::Atomic => {
                out.insert(path);
            }
            ListType::Set => {
                for item in items {
                    let mut p = path.clone();
                    p.push(Step::Value(item.to_string()));
                    out.insert(p);
                }
            }
            ListType::Map(keys) => {
                let item_shape = shape.items();
                for item in items {
                    let mut p = path.clone();
                    p.push(key_step(&keys, item));
                    for (k, v) in item.as_object().into_iter().flatten() {
                        if !keys.contains(k) {
                            let mut field = p.clone();
                            field.push(Step::Field(k.clone()));
                            collect(v, field, &item_shape.field(k), out);
                        }
                    }
                    out.insert(p);
                }
            }
        },
        _ => {
            out.insert(path);
        }
    }
}

fn step_into<'a>(value: &'a Value, step: &Step) -> Option<&'a Value> {
    match step {
        Step::Field(name) => value.get(name),
        item => value.as_array()?.iter().find(|v| matches(item, v)),
    }
}

fn step_into_mut<'a>(value: &'a mut Value, step: &Step) -> Option<&'a mut Value> {
    match step {
        Step::Field(name) => value.get_mut(name),
        item => value.as_array_mut()?.iter_mut().find(|v| matches(item, v)),
    }
}

pub fn get<'a>(obj: &'a Value, path: &[Step]) -> Option<&'a Value> {
    path.iter().try_fold(obj, step_into)
}

/// Whether `a` and `b` agree at `path`: the same value, or for a list item, both have it
/// (its fields are leaves of their own).
fn agree(a: &Value, b: &Value, path: &[Step]) -> bool {
    match path.last() {
        Some(Step::Key(_) | Step::Value(_)) => get(a, path).is_some() == get(b, path).is_some(),
        _ => get(a, path) == get(b, path),
    }
}

/// Removes the field or list item at `path`, and parents it leaves empty.
pub fn remove(obj: &mut Value, path: &[Step]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let Some(parent) = parents.iter().try_fold(&mut *obj, step_into_mut) else {
        return;
    };
    let empty = match (last, parent) {
        (Step::Field(name), Value::Object(map)) => {
            map.remove(name);
            map.is_empty()
        }
        (item, Value::Array(items)) => {
            items.retain(|v| !matches(item, v));
            items.is_empty()
        }
        _ => false,
    };
    if empty && !parents.is_empty() {
        remove(obj, parents);
    }
}

/// The items of `set` and `map` lists in `obj` that repeat an earlier item's value or
/// key, as structured-merge-diff words them when it types an applied object:
/// `.status.nodes: duplicate entries for key [node="a"]` (typed/validate.go
/// `visitListItems`: "duplicate entries for key %v", the path element printed as
/// fieldpath's `PathElement.String`, keys sorted by name, values as JSON).
pub fn duplicate_entries(obj: &Value, shape: &Shape) -> Vec<String> {
    let mut out = Vec::new();
    find_duplicates(obj, &mut Vec::new(), shape, &mut out);
    out
}

fn find_duplicates(value: &Value, path: &mut FieldPath, shape: &Shape, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                path.push(Step::Field(k.clone()));
                find_duplicates(v, path, &shape.field(k), out);
                path.pop();
            }
        }
        Value::Array(items) => {
            let list_type = shape.list_type();
            let item_shape = shape.items();
            let mut seen = BTreeSet::new();
            for item in items {
                let step = match &list_type {
                    ListType::Atomic => return,
                    ListType::Set => Step::Value(item.to_string()),
                    ListType::Map(keys) => match key_step(keys, item) {
                        Step::Key(mut fields) => {
                            fields.sort();
                            Step::Key(fields)
                        }
                        other => other,
                    },
                };
                if !seen.insert(step.clone()) {
                    out.push(format!(
                        "{}: duplicate entries for key {}",
                        render(path),
                        render(std::slice::from_ref(&step))
                    ));
                }
                if matches!(list_type, ListType::Map(_)) {
                    path.push(step);
                    find_duplicates(item, path, &item_shape, out);
                    path.pop();
                }
            }
        }
        _ => {}
    }
}

/// Deep-merges `applied` into `target`: maps field by field, `map` lists item by item
/// (live items first, in their order, then new ones in applied order, as SMD's merge),
/// `set` lists by value, everything else replaced.
pub fn merge_applied(target: &mut Value, applied: &Value, shape: &Shape) {
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
                        &shape.field(k),
                    );
                }
            }
        }
        (Value::Array(t), Value::Array(a)) => match shape.list_type() {
            ListType::Atomic => *t = a.clone(),
            ListType::Set => {
                for item in a {
                    if !t.contains(item) {
                        t.push(item.clone());
                    }
                }
            }
            ListType::Map(keys) => {
                let item_shape = shape.items();
                for item in a {
                    let step = key_step(&keys, item);
                    match t.iter_mut().find(|v| matches(&step, v)) {
                        Some(live) => merge_applied(live, item, &item_shape),
                        None => t.push(item.clone()),
                    }
                }
            }
        },
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
    pub fn record_update(
        &mut self,
        manager: &str,
        old: Option<&Value>,
        new: &Value,
        shape: &Shape,
    ) {
        let new_leaves = leaves(new, shape);
        let empty = Value::Object(Map::new());
        let old = old.unwrap_or(&empty);
        let changed: BTreeSet<FieldPath> = new_leaves
            .iter()
            .filter(|p| !agree(old, new, p))
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
    pub fn conflicts(
        &self,
        manager: &str,
        current: &Value,
        applied: &Value,
        shape: &Shape,
    ) -> Vec<Conflict> {
        let mut out = Vec::new();
        for path in leaves(applied, shape) {
            if agree(current, applied, &path) {
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
    /// forced): merges it, drops what the manager applied before but no longer does and
    /// nobody else owns (nor anything below it), takes the fields it changed from their
    /// other owners and shares those it applied with the value they had.
    pub fn apply(
        &mut self,
        manager: &str,
        current: &Value,
        applied: &Value,
        shape: &Shape,
    ) -> Value {
        let applied_leaves = leaves(applied, shape);
        let key = (manager.to_string(), Operation::Apply);
        let previously = self.0.remove(&key).unwrap_or_default();
        for set in self.0.values_mut() {
            set.retain(|p| !applied_leaves.contains(p) || agree(current, applied, p));
        }
        let mut result = current.clone();
        for path in previously.difference(&applied_leaves) {
            let owned_elsewhere = self
                .0
                .values()
                .any(|s| s.iter().any(|p| p.starts_with(path)));
            if !owned_elsewhere {
                remove(&mut result, path);
            }
        }
        merge_applied(&mut result, applied, shape);
        self.0.insert(key, applied_leaves);
        self.0.retain(|_, set| !set.is_empty());
        result
    }
}

#[cfg(test)]
mod tests;
