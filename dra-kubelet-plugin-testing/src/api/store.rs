//! The objects the API server holds, their resource versions and the log of changes that
//! watches replay. In memory, one lock: test-sized.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use serde_json::{Value, json};

/// Where an object lives: group, version (empty for ResourceClaims, whose status reads
/// the same in every version) and resource.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Kind {
    pub group: String,
    pub version: String,
    pub resource: String,
}

impl Kind {
    pub fn new(group: &str, version: &str, resource: &str) -> Self {
        // One copy of a claim, whichever version reads or writes it.
        let version = if resource == "resourceclaims" {
            ""
        } else {
            version
        };
        Self {
            group: group.to_owned(),
            version: version.to_owned(),
            resource: resource.to_owned(),
        }
    }
}

/// One change, as a watch reports it.
#[derive(Debug, Clone)]
pub(crate) struct Event {
    pub resource_version: u64,
    pub kind: Kind,
    pub namespace: String,
    pub kind_of_change: &'static str,
    pub object: Value,
}

/// Why a write was refused, as the API's Status reason and code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refused {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
}

impl Refused {
    fn new(code: u16, reason: &'static str, message: String) -> Self {
        Self {
            code,
            reason,
            message,
        }
    }

    pub fn not_found(kind: &Kind, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{}.{} {name:?} not found", kind.resource, kind.group),
        )
    }
}

#[derive(Debug, Default)]
struct Inner {
    objects: BTreeMap<Kind, BTreeMap<(String, String), Value>>,
    log: Vec<Event>,
    last: u64,
}

/// The objects and their history.
#[derive(Debug)]
pub(crate) struct Store {
    inner: Mutex<Inner>,
    changed: tokio::sync::watch::Sender<u64>,
}

impl Default for Store {
    fn default() -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            changed: tokio::sync::watch::Sender::new(0),
        }
    }
}

fn name_of(obj: &Value) -> String {
    obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Five characters for `generateName`, as the API server adds.
fn suffix() -> String {
    uuid::Uuid::new_v4()
        .simple()
        .to_string()
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(5)
        .collect()
}

impl Store {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every write replaces whole entries, so a panic mid-write leaves nothing torn.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A receiver that sees every later change.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// The current resource version.
    pub fn resource_version(&self) -> u64 {
        self.lock().last
    }

    fn record(
        &self,
        inner: &mut Inner,
        kind: &Kind,
        namespace: &str,
        change: &'static str,
        object: Value,
    ) {
        inner.log.push(Event {
            resource_version: inner.last,
            kind: kind.clone(),
            namespace: namespace.to_owned(),
            kind_of_change: change,
            object,
        });
        self.changed.send_replace(inner.last);
    }

    /// Every object of `kind` in `namespace` (all namespaces when `None`), by name.
    pub fn list(&self, kind: &Kind, namespace: Option<&str>) -> (Vec<Value>, u64) {
        let inner = self.lock();
        let items = inner
            .objects
            .get(kind)
            .map(|m| {
                m.iter()
                    .filter(|((ns, _), _)| namespace.is_none_or(|want| want == ns))
                    .map(|(_, v)| v.clone())
                    .collect()
            })
            .unwrap_or_default();
        (items, inner.last)
    }

    pub fn get(&self, kind: &Kind, namespace: &str, name: &str) -> Option<Value> {
        self.lock()
            .objects
            .get(kind)
            .and_then(|m| m.get(&(namespace.to_owned(), name.to_owned())))
            .cloned()
    }

    /// The changes after `since`.
    pub fn events_after(&self, since: u64) -> Vec<Event> {
        let inner = self.lock();
        let start = inner.log.partition_point(|e| e.resource_version <= since);
        inner.log[start..].to_vec()
    }

    /// Creates `obj`: a name from `generateName` if it has none, a uid, a resource
    /// version, a creation timestamp.
    pub fn create(&self, kind: &Kind, namespace: &str, mut obj: Value) -> Result<Value, Refused> {
        let mut inner = self.lock();
        if obj["metadata"]["name"].as_str().is_none_or(str::is_empty) {
            let Some(prefix) = obj["metadata"]["generateName"].as_str() else {
                return Err(Refused::new(
                    422,
                    "Invalid",
                    "metadata.name or metadata.generateName is required".into(),
                ));
            };
            obj["metadata"]["name"] = json!(format!("{prefix}{}", suffix()));
        }
        let name = name_of(&obj);
        let key = (namespace.to_owned(), name.clone());
        if inner
            .objects
            .get(kind)
            .is_some_and(|m| m.contains_key(&key))
        {
            return Err(Refused::new(
                409,
                "AlreadyExists",
                format!("{}.{} {name:?} already exists", kind.resource, kind.group),
            ));
        }
        inner.last += 1;
        let rv = inner.last;
        let meta = &mut obj["metadata"];
        meta["resourceVersion"] = json!(rv.to_string());
        if meta["uid"].as_str().is_none_or(str::is_empty) {
            meta["uid"] = json!(uuid::Uuid::new_v4().to_string());
        }
        meta["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
        if !namespace.is_empty() {
            meta["namespace"] = json!(namespace);
        }
        inner
            .objects
            .entry(kind.clone())
            .or_default()
            .insert(key, obj.clone());
        self.record(&mut inner, kind, namespace, "ADDED", obj.clone());
        Ok(obj)
    }

    /// Replaces `name` with `obj` (its status only, for the status subresource; all but
    /// its status otherwise). A `resourceVersion` in `obj` must be the current one.
    pub fn replace(
        &self,
        kind: &Kind,
        namespace: &str,
        name: &str,
        mut obj: Value,
        status_only: bool,
    ) -> Result<Value, Refused> {
        let mut inner = self.lock();
        let key = (namespace.to_owned(), name.to_owned());
        let Some(current) = inner.objects.get(kind).and_then(|m| m.get(&key)).cloned() else {
            return Err(Refused::not_found(kind, name));
        };
        if let Some(rv) = obj["metadata"]["resourceVersion"].as_str()
            && Some(rv) != current["metadata"]["resourceVersion"].as_str()
        {
            return Err(Refused::new(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {}.{} {name:?}: the object has been modified; please apply your changes to the latest version and try again",
                    kind.resource, kind.group
                ),
            ));
        }
        if name_of(&obj) != name {
            return Err(Refused::new(
                400,
                "BadRequest",
                format!(
                    "the name of the object ({:?}) does not match the name on the URL ({name:?})",
                    name_of(&obj)
                ),
            ));
        }
        let mut next = if status_only {
            let mut next = current.clone();
            next["status"] = obj["status"].take();
            next
        } else {
            obj["status"] = current["status"].clone();
            obj["metadata"]["uid"] = current["metadata"]["uid"].clone();
            obj["metadata"]["creationTimestamp"] = current["metadata"]["creationTimestamp"].clone();
            obj
        };
        inner.last += 1;
        next["metadata"]["resourceVersion"] = json!(inner.last.to_string());
        if !namespace.is_empty() {
            next["metadata"]["namespace"] = json!(namespace);
        }
        inner
            .objects
            .entry(kind.clone())
            .or_default()
            .insert(key, next.clone());
        self.record(&mut inner, kind, namespace, "MODIFIED", next.clone());
        Ok(next)
    }

    /// Deletes `name`; returns it.
    pub fn delete(&self, kind: &Kind, namespace: &str, name: &str) -> Result<Value, Refused> {
        let mut inner = self.lock();
        let key = (namespace.to_owned(), name.to_owned());
        let Some(mut gone) = inner.objects.get_mut(kind).and_then(|m| m.remove(&key)) else {
            return Err(Refused::not_found(kind, name));
        };
        inner.last += 1;
        gone["metadata"]["resourceVersion"] = json!(inner.last.to_string());
        self.record(&mut inner, kind, namespace, "DELETED", gone.clone());
        Ok(gone)
    }
}
