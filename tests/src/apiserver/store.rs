//! The object store and its Kubernetes semantics. No sockets: the HTTP layer ([`super::http`])
//! turns requests into calls here, under one lock, so each call is one atomic transaction —
//! what etcd plus the registry's `GuaranteedUpdate` give kube-apiserver.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use super::conversion;
use super::error::{ApiError, ApiResult, FieldCause};
use super::fields::{self, FieldIssues, FieldPath, FieldValidation};
use super::managed::ManagedFields;
use super::registry::{self, ResourceKey, ResourceType};
use super::schema;
use super::selectors::Selectors;
use super::validation;

/// `(namespace, name)`; the namespace is empty for cluster-scoped objects.
pub type ObjectKey = (String, String);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Added,
    Modified,
    Deleted,
}

impl EventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One change, as kept in the watch history. `previous` lets a filtered watch turn a
/// change that leaves its selector into DELETED and one that enters it into ADDED, as the
/// apiserver's watch cache does.
#[derive(Debug, Clone)]
pub struct WatchEvent {
    pub revision: u64,
    pub resource: ResourceKey,
    pub kind: EventKind,
    pub object: Value,
    pub previous: Option<Value>,
}

/// The resource, and optionally object and subresource, a request is about.
#[derive(Debug, Clone)]
pub struct Target {
    pub key: ResourceKey,
    pub version: String,
    /// For namespaced resources: the namespace of the path (None = all namespaces).
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
}

impl Target {
    fn object_key(&self) -> ObjectKey {
        (
            self.namespace.clone().unwrap_or_default(),
            self.name.clone().unwrap_or_default(),
        )
    }
}

/// Who writes and how (`fieldManager`, `force`, `fieldValidation`).
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    pub field_manager: Option<String>,
    /// Used as the manager name when `fieldManager` is absent, as upstream does.
    pub user_agent: String,
    pub force: bool,
    /// What to do with unknown and duplicate fields (Warn when the request says nothing).
    pub field_validation: FieldValidation,
    /// Keys the request body gave twice (found in its bytes, before decoding kept the last).
    pub duplicate_fields: Vec<FieldPath>,
    /// A JSON patch's problems with its own operations.
    pub patch_op_issues: Vec<String>,
}

impl WriteOptions {
    fn manager(&self) -> String {
        self.field_manager.clone().unwrap_or_else(|| {
            let agent = self.user_agent.split('/').next().unwrap_or_default();
            if agent.is_empty() {
                "unknown".into()
            } else {
                agent.into()
            }
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    Merge,
    Json,
    Strategic,
    Apply,
}

/// `DeleteOptions`, from the body or the query.
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    pub grace_period_seconds: Option<i64>,
    pub propagation_policy: Option<String>,
    pub precondition_uid: Option<String>,
    pub precondition_resource_version: Option<String>,
}

/// Which writes a [`Fault`] hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultVerb {
    Create,
    Update,
    Patch,
    Delete,
    /// Update or patch.
    Modify,
}

/// A planned failure: the next `times` matching writes fail with `code` and change nothing.
/// Tests use it to drive a client through the errors a real cluster produces (a 409 from a
/// concurrent writer, a 500 from a flaky etcd).
#[derive(Debug, Clone)]
pub struct Fault {
    pub verb: FaultVerb,
    pub plural: String,
    pub subresource: Option<String>,
    pub code: u16,
    pub times: usize,
}

#[derive(Debug, Clone)]
struct Stored {
    object: Value,
    managed: ManagedFields,
}

/// A consistent list snapshot kept for `continue` tokens.
#[derive(Debug)]
struct ListSnapshot {
    token: String,
    revision: u64,
    rest: Vec<Value>,
}

/// What a watch starts with: events to send first, then the live feed.
#[derive(Debug)]
pub struct WatchStart {
    pub initial: Vec<(EventKind, Value)>,
    pub live: broadcast::Receiver<Arc<WatchEvent>>,
    pub revision: u64,
}

/// How many events the watch history keeps; older resourceVersions answer 410 Gone.
const HISTORY_LIMIT: usize = 50_000;
const SNAPSHOTS_KEPT: usize = 64;

#[derive(Debug)]
pub struct Store {
    types: BTreeMap<ResourceKey, ResourceType>,
    objects: BTreeMap<ResourceKey, BTreeMap<ObjectKey, Stored>>,
    revision: u64,
    history: VecDeque<Arc<WatchEvent>>,
    /// A watch may start from any revision ≥ this; events after it are all in `history`.
    oldest_watchable: u64,
    events: broadcast::Sender<Arc<WatchEvent>>,
    faults: Vec<Fault>,
    snapshots: VecDeque<ListSnapshot>,
    /// The Kubernetes release emulated: it decides the kinds and versions served and the
    /// Pod layout accepted.
    server_version: (u32, u32),
    /// `Warning` headers for the response to the current write ([`Store::take_warnings`]).
    warnings: Vec<String>,
}

pub fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

fn meta(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata").and_then(Value::as_object)
}

fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    meta(obj)
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.get("metadata").is_some_and(Value::is_object)
        && let Some(map) = obj.as_object_mut()
    {
        map.insert("metadata".into(), Value::Object(Map::new()));
    }
    match obj.get_mut("metadata") {
        Some(Value::Object(m)) => m,
        // Unreachable for objects: the caller checked `obj` is a map and we just inserted.
        _ => unreachable_meta(),
    }
}

#[allow(clippy::panic)]
fn unreachable_meta() -> ! {
    panic!("metadata of a non-object")
}

fn finalizers(obj: &Value) -> Vec<String> {
    meta(obj)
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn is_deleting(obj: &Value) -> bool {
    meta_str(obj, "deletionTimestamp").is_some()
}

/// The object without `metadata` and `status`: what `metadata.generation` tracks.
fn spec_part(obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(map) = v.as_object_mut() {
        for key in ["metadata", "status", "apiVersion", "kind"] {
            map.remove(key);
        }
    }
    v
}

/// `generateName` suffix: five characters of the apiserver's alphabet (no vowels, no 0/1/3).
fn name_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    uuid::Uuid::new_v4().as_bytes()[..5]
        .iter()
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect()
}

impl Default for Store {
    fn default() -> Self {
        Self::new()
    }
}

impl Store {
    /// A store of Kubernetes 1.30 (classic DRA).
    pub fn new() -> Self {
        // 1.30 is always emulated; an empty type list cannot happen.
        Self::for_version((1, 30)).unwrap_or_else(|_| Self::with_types((1, 30), Vec::new()))
    }

    /// A store serving what Kubernetes `server_version` serves (see
    /// [`registry::resource_api_versions`]); an unemulated release is refused.
    pub fn for_version(server_version: (u32, u32)) -> Result<Self, String> {
        Ok(Self::with_types(
            server_version,
            registry::builtin_types(server_version)?,
        ))
    }

    fn with_types(server_version: (u32, u32), types: Vec<ResourceType>) -> Self {
        let (events, _) = broadcast::channel(HISTORY_LIMIT);
        let mut store = Self {
            types: BTreeMap::new(),
            objects: BTreeMap::new(),
            revision: 0,
            history: VecDeque::new(),
            oldest_watchable: 0,
            events,
            faults: Vec::new(),
            snapshots: VecDeque::new(),
            server_version,
            warnings: Vec::new(),
        };
        for rt in types {
            store.register(rt);
        }
        // The namespaces every cluster starts with.
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let target = store.target("", "namespaces", None, None);
            let _ = store.create(
                &target,
                json!({"metadata": {"name": ns}}),
                &WriteOptions::default(),
            );
        }
        store
    }

    fn target(
        &self,
        group: &str,
        plural: &str,
        namespace: Option<&str>,
        name: Option<&str>,
    ) -> Target {
        let key = ResourceKey {
            group: group.into(),
            plural: plural.into(),
        };
        let version = self
            .types
            .get(&key)
            .and_then(|t| t.versions.first().cloned())
            .unwrap_or_default();
        Target {
            key,
            version,
            namespace: namespace.map(str::to_string),
            name: name.map(str::to_string),
            subresource: None,
        }
    }

    pub fn register(&mut self, rt: ResourceType) {
        if rt.stored_as.is_none() {
            self.objects.entry(rt.key()).or_default();
        }
        self.types.insert(rt.key(), rt);
    }

    pub fn server_version(&self) -> (u32, u32) {
        self.server_version
    }

    /// Where the objects of `key` are kept: the resource itself, or the one it serves in
    /// another shape ([`ResourceType::stored_as`]).
    fn storage_key(&self, key: &ResourceKey) -> ResourceKey {
        self.types
            .get(key)
            .and_then(|t| t.stored_as.clone())
            .unwrap_or_else(|| key.clone())
    }

    pub fn types(&self) -> impl Iterator<Item = &ResourceType> {
        self.types.values()
    }

    /// The type serving `group/version` under `plural` (or its short or singular name).
    pub fn resolve(&self, group: &str, version: &str, plural: &str) -> Option<&ResourceType> {
        self.types
            .values()
            .find(|t| t.group == group && t.serves(version) && t.plural == plural)
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<WatchEvent>> {
        self.events.subscribe()
    }

    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The warnings of the writes since the last call: the HTTP layer takes them before and
    /// after a write, under the same lock, and answers them as `Warning` headers.
    pub fn take_warnings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.warnings)
    }

    /// `fieldValidation`: the unknown fields of `obj` (a body in `version`) and the
    /// duplicates the request had; unknown fields are dropped whatever the mode, as the
    /// apiserver's decoder drops them; `Strict` refuses, `Warn` warns.
    fn check_fields(
        &mut self,
        rt: &ResourceType,
        version: &str,
        obj: &mut Value,
        opts: &WriteOptions,
    ) -> ApiResult<()> {
        let issues = FieldIssues {
            duplicate: opts.duplicate_fields.clone(),
            unknown: fields::unknown_fields(rt, version, self.server_version, obj),
            patch_ops: opts.patch_op_issues.clone(),
        };
        if issues.is_empty() {
            return Ok(());
        }
        match opts.field_validation {
            FieldValidation::Strict => return Err(issues.strict_error(&rt.kind, version)),
            FieldValidation::Warn => self.warnings.extend(issues.messages()),
            FieldValidation::Ignore => {}
        }
        fields::remove_fields(obj, &issues.unknown);
        Ok(())
    }

    pub fn add_fault(&mut self, fault: Fault) {
        self.faults.push(fault);
    }

    /// Forgets the watch history: every resourceVersion before now answers 410 Gone, as
    /// after an etcd compaction.
    pub fn compact(&mut self) {
        self.history.clear();
        self.oldest_watchable = self.revision;
        self.snapshots.clear();
    }

    fn rt(&self, key: &ResourceKey) -> ApiResult<&ResourceType> {
        self.types
            .get(key)
            .ok_or_else(|| ApiError::no_route(&format!("{}/{}", key.group, key.plural)))
    }

    fn take_fault(&mut self, verb: FaultVerb, target: &Target) -> ApiResult<()> {
        let hit = self.faults.iter().position(|f| {
            let verb_matches = f.verb == verb
                || (f.verb == FaultVerb::Modify
                    && matches!(verb, FaultVerb::Update | FaultVerb::Patch));
            verb_matches
                && f.plural == target.key.plural
                && f.subresource == target.subresource
                && f.times > 0
        });
        let Some(i) = hit else { return Ok(()) };
        self.faults[i].times -= 1;
        let code = self.faults[i].code;
        self.faults.retain(|f| f.times > 0);
        let qualified = self.rt(&target.key)?.qualified();
        let name = target.name.clone().unwrap_or_default();
        Err(match code {
            409 => ApiError::stale_resource_version(&qualified, &name),
            404 => ApiError::not_found(&qualified, &name),
            code => ApiError {
                code,
                ..ApiError::internal(format!("injected fault: {code} for {qualified} \"{name}\""))
            },
        })
    }

    /// The object as a client sees it in the requested version.
    fn render(rt: &ResourceType, version: &str, obj: &Value) -> Value {
        let mut out = obj.clone();
        conversion::from_storage(&rt.key(), version, &mut out);
        if let Some(map) = out.as_object_mut() {
            map.insert("apiVersion".into(), Value::String(rt.api_version(version)));
            map.insert("kind".into(), Value::String(rt.kind.clone()));
        }
        out
    }

    fn commit(
        &mut self,
        key: &ResourceKey,
        okey: ObjectKey,
        mut stored: Stored,
        kind: EventKind,
        previous: Option<Value>,
    ) -> Value {
        self.revision += 1;
        meta_mut(&mut stored.object).insert(
            "resourceVersion".into(),
            Value::String(self.revision.to_string()),
        );
        let object = stored.object.clone();
        let key = self.storage_key(key);
        self.objects
            .entry(key.clone())
            .or_default()
            .insert(okey, stored);
        self.publish(&key, kind, object.clone(), previous);
        object
    }

    fn publish(
        &mut self,
        key: &ResourceKey,
        kind: EventKind,
        object: Value,
        previous: Option<Value>,
    ) {
        let event = Arc::new(WatchEvent {
            revision: self.revision,
            resource: key.clone(),
            kind,
            object,
            previous,
        });
        self.history.push_back(event.clone());
        while self.history.len() > HISTORY_LIMIT {
            if let Some(old) = self.history.pop_front() {
                self.oldest_watchable = old.revision;
            }
        }
        // No receiver is not an error: nobody is watching.
        let _ = self.events.send(event);
    }

    /// Removes an object for good: the DELETED event carries a new resourceVersion.
    fn remove(&mut self, key: &ResourceKey, okey: &ObjectKey) -> Option<Value> {
        let key = &self.storage_key(key);
        let stored = self.objects.get_mut(key)?.remove(okey)?;
        self.revision += 1;
        let mut object = stored.object;
        meta_mut(&mut object).insert(
            "resourceVersion".into(),
            Value::String(self.revision.to_string()),
        );
        self.publish(key, EventKind::Deleted, object.clone(), None);
        if key.group == "apiextensions.k8s.io" && key.plural == "customresourcedefinitions" {
            self.unregister_crd(&object);
        }
        Some(object)
    }

    fn lookup(&self, target: &Target) -> ApiResult<&Stored> {
        let rt = self.rt(&target.key)?;
        self.objects
            .get(&self.storage_key(&target.key))
            .and_then(|m| m.get(&target.object_key()))
            .ok_or_else(|| {
                ApiError::not_found(&rt.qualified(), target.name.as_deref().unwrap_or_default())
            })
    }

    pub fn get(&self, target: &Target) -> ApiResult<Value> {
        let rt = self.rt(&target.key)?;
        let stored = self.lookup(target)?;
        Ok(Self::render(rt, &target.version, &stored.object))
    }

    /// Every object of the resource in the target's namespace scope, sorted by namespace and name.
    pub fn objects_in(&self, key: &ResourceKey, namespace: Option<&str>) -> Vec<Value> {
        self.objects
            .get(&self.storage_key(key))
            .into_iter()
            .flatten()
            .filter(|((ns, _), _)| namespace.is_none_or(|n| n == ns))
            .map(|(_, s)| s.object.clone())
            .collect()
    }

    pub fn list(
        &mut self,
        target: &Target,
        selectors: &Selectors,
        limit: Option<usize>,
        continue_token: Option<&str>,
    ) -> ApiResult<Value> {
        let rt = self.rt(&target.key)?.clone();
        let (revision, mut items) = match continue_token.filter(|t| !t.is_empty()) {
            Some(token) => {
                let i = self.snapshots.iter().position(|s| s.token == token).ok_or_else(|| {
                    ApiError::gone("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.")
                })?;
                let snapshot = self
                    .snapshots
                    .remove(i)
                    .ok_or_else(|| ApiError::internal("snapshot vanished"))?;
                (snapshot.revision, snapshot.rest)
            }
            None => {
                let items: Vec<Value> = self
                    .objects_in(&target.key, target.namespace.as_deref())
                    .into_iter()
                    .filter(|o| selectors.matches(o))
                    .map(|o| Self::render(&rt, &target.version, &o))
                    .collect();
                (self.revision, items)
            }
        };
        let mut list_meta = json!({"resourceVersion": revision.to_string()});
        if let Some(limit) = limit.filter(|l| *l > 0 && items.len() > *l) {
            let rest = items.split_off(limit);
            let token = format!("{revision}-{}", uuid::Uuid::new_v4().simple());
            list_meta["continue"] = Value::String(token.clone());
            list_meta["remainingItemCount"] = Value::from(rest.len());
            self.snapshots.push_back(ListSnapshot {
                token,
                revision,
                rest,
            });
            while self.snapshots.len() > SNAPSHOTS_KEPT {
                self.snapshots.pop_front();
            }
        }
        Ok(json!({
            "apiVersion": rt.api_version(&target.version),
            "kind": format!("{}List", rt.kind),
            "metadata": list_meta,
            "items": items,
        }))
    }

    /// Starts a watch. `resource_version` follows the apiserver: unset or "0" sends the
    /// current objects as ADDED first; a number replays what happened after it, or fails
    /// with 410 when that is no longer in the history.
    pub fn watch(
        &self,
        target: &Target,
        selectors: &Selectors,
        resource_version: Option<&str>,
    ) -> ApiResult<WatchStart> {
        let rt = self.rt(&target.key)?;
        let live = self.events.subscribe();
        let initial = match resource_version.filter(|rv| !rv.is_empty() && *rv != "0") {
            None => self
                .objects_in(&target.key, target.namespace.as_deref())
                .into_iter()
                .filter(|o| selectors.matches(o))
                .map(|o| (EventKind::Added, Self::render(rt, &target.version, &o)))
                .collect(),
            Some(rv) => {
                let from: u64 = rv.parse().map_err(|_| {
                    ApiError::bad_request(format!("invalid resource version {rv:?}"))
                })?;
                if from < self.oldest_watchable {
                    return Err(ApiError::gone(format!(
                        "too old resource version: {from} ({})",
                        self.oldest_watchable
                    )));
                }
                if from > self.revision {
                    return Err(ApiError {
                        code: 504,
                        ..ApiError::internal(format!(
                            "Too large resource version: {from}, current: {}",
                            self.revision
                        ))
                    });
                }
                let storage = self.storage_key(&target.key);
                self.history
                    .iter()
                    .filter(|e| e.revision > from)
                    .filter_map(|e| {
                        filter_event(e, &storage, target, selectors)
                            .map(|(k, o)| (k, Self::render(rt, &target.version, &o)))
                    })
                    .collect()
            }
        };
        Ok(WatchStart {
            initial,
            live,
            revision: self.revision,
        })
    }

    pub fn render_event(
        &self,
        event: &WatchEvent,
        target: &Target,
        selectors: &Selectors,
    ) -> Option<(EventKind, Value)> {
        let rt = self.types.get(&target.key)?;
        filter_event(event, &self.storage_key(&target.key), target, selectors)
            .map(|(k, o)| (k, Self::render(rt, &target.version, &o)))
    }

    fn check_body_identity(rt: &ResourceType, target: &Target, body: &Value) -> ApiResult<()> {
        if !body.is_object() {
            return Err(ApiError::bad_request(
                "the request body is not a JSON object",
            ));
        }
        if let Some(api_version) = body.get("apiVersion").and_then(Value::as_str)
            && api_version != rt.api_version(&target.version)
        {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({api_version}) does not match the expected API version ({})",
                rt.api_version(&target.version)
            )));
        }
        if let Some(kind) = body.get("kind").and_then(Value::as_str)
            && kind != rt.kind
        {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({kind}) does not match the expected kind ({})",
                rt.kind
            )));
        }
        if rt.namespaced
            && let (Some(body_ns), Some(path_ns)) =
                (meta_str(body, "namespace"), target.namespace.as_deref())
            && body_ns != path_ns
        {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        if let (Some(body_name), Some(path_name)) = (meta_str(body, "name"), target.name.as_deref())
            && body_name != path_name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({path_name})"
            )));
        }
        Ok(())
    }

    /// NamespaceLifecycle admission: content goes only into namespaces that exist and are
    /// not terminating.
    fn check_namespace(&self, namespace: &str) -> ApiResult<()> {
        let key = ResourceKey {
            group: String::new(),
            plural: "namespaces".into(),
        };
        match self
            .objects
            .get(&key)
            .and_then(|m| m.get(&(String::new(), namespace.to_string())))
        {
            None => Err(ApiError::not_found("namespaces", namespace)),
            Some(ns) if is_deleting(&ns.object) => Err(ApiError::forbidden(format!(
                "unable to create new content in namespace {namespace} because it is being terminated"
            ))),
            Some(_) => Ok(()),
        }
    }

    pub fn create(
        &mut self,
        target: &Target,
        mut body: Value,
        opts: &WriteOptions,
    ) -> ApiResult<Value> {
        self.take_fault(FaultVerb::Create, target)?;
        let rt = self.rt(&target.key)?.clone();
        Self::check_body_identity(&rt, target, &body)?;
        self.check_fields(&rt, &target.version, &mut body, opts)?;
        conversion::to_storage(&target.key, &target.version, &mut body)?;
        if target.subresource.is_some() {
            return Err(ApiError::method_not_allowed(format!(
                "create is not supported on {}/{:?}",
                rt.plural, target.subresource
            )));
        }
        if meta_str(&body, "resourceVersion").is_some() {
            return Err(ApiError::internal(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        let namespace = if rt.namespaced {
            let ns = target.namespace.clone().ok_or_else(|| {
                ApiError::method_not_allowed(format!(
                    "{} is namespaced: create it in a namespace",
                    rt.qualified()
                ))
            })?;
            self.check_namespace(&ns)?;
            ns
        } else {
            String::new()
        };
        let name = match meta_str(&body, "name") {
            Some(name) => name.to_string(),
            None => match meta_str(&body, "generateName") {
                Some(prefix) => {
                    let mut name = format!("{prefix}{}", name_suffix());
                    // A collision is unlikely; try a few suffixes before answering AlreadyExists.
                    for _ in 0..8 {
                        if !self
                            .objects
                            .get(&self.storage_key(&target.key))
                            .is_some_and(|m| m.contains_key(&(namespace.clone(), name.clone())))
                        {
                            break;
                        }
                        name = format!("{prefix}{}", name_suffix());
                    }
                    name
                }
                None => {
                    let cause =
                        FieldCause::required("metadata.name", "name or generateName is required");
                    return Err(ApiError::invalid(&rt.kind_group(), "", vec![cause]));
                }
            },
        };
        validation::validate_name(&rt, &name)?;
        if self
            .objects
            .get(&self.storage_key(&target.key))
            .is_some_and(|m| m.contains_key(&(namespace.clone(), name.clone())))
        {
            return Err(ApiError::already_exists(&rt.qualified(), &name));
        }
        {
            let m = meta_mut(&mut body);
            m.insert("name".into(), Value::String(name.clone()));
            if rt.namespaced {
                m.insert("namespace".into(), Value::String(namespace.clone()));
            } else {
                m.remove("namespace");
            }
            m.insert(
                "uid".into(),
                Value::String(uuid::Uuid::new_v4().to_string()),
            );
            m.insert("creationTimestamp".into(), Value::String(now_rfc3339()));
            m.insert("generation".into(), Value::from(1));
            for system in [
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "managedFields",
                "selfLink",
            ] {
                m.remove(system);
            }
        }
        if let Some(map) = body.as_object_mut() {
            map.insert(
                "apiVersion".into(),
                Value::String(rt.api_version(&target.version)),
            );
            map.insert("kind".into(), Value::String(rt.kind.clone()));
            if rt.status_subresource {
                // Every status-subresource strategy resets status on create (PrepareForCreate).
                map.remove("status");
            }
        }
        apply_create_defaults(&rt, &mut body);
        if rt.group.is_empty() && rt.plural == "pods" {
            validation::prune_pod_claims(&mut body, self.server_version);
        }
        if rt.custom
            && let Some(schema) = rt.schemas.get(&target.version)
        {
            schema::admit(schema, &mut body, &rt.kind_group(), &name)?;
        }
        validation::validate_write(&rt, None, &body, self.server_version)?;
        if rt.group == "apiextensions.k8s.io" && rt.plural == "customresourcedefinitions" {
            self.register_crd(&mut body)?;
        }
        let mut managed = ManagedFields::default();
        managed.record_update(&opts.manager(), None, &body);
        let stored = Stored {
            object: body,
            managed,
        };
        let object = self.commit(
            &target.key,
            (namespace, name),
            stored,
            EventKind::Added,
            None,
        );
        Ok(Self::render(&rt, &target.version, &object))
    }

    fn register_crd(&mut self, crd: &mut Value) -> ApiResult<()> {
        let new_type = registry::from_crd(crd)?;
        for (version, schema) in &new_type.schemas {
            schema::check_supported(
                schema,
                &format!("spec.versions[{version}].schema.openAPIV3Schema"),
            )?;
        }
        let name = meta_str(crd, "name").unwrap_or_default();
        let expected = format!("{}.{}", new_type.plural, new_type.group);
        if name != expected {
            let cause = FieldCause::invalid(
                "metadata.name",
                &Value::String(name.into()),
                format!("must be spec.names.plural+\".\"+spec.group ({expected})"),
            );
            return Err(ApiError::invalid(
                "CustomResourceDefinition.apiextensions.k8s.io",
                name,
                vec![cause],
            ));
        }
        if self.types.contains_key(&new_type.key()) {
            return Err(ApiError::already_exists(
                "customresourcedefinitions.apiextensions.k8s.io",
                name,
            ));
        }
        if let Some(map) = crd.as_object_mut() {
            map.insert("status".into(), json!({
                "acceptedNames": crd_names(&new_type),
                "storedVersions": [new_type.versions.first()],
                "conditions": [
                    {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "lastTransitionTime": now_rfc3339()},
                    {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "lastTransitionTime": now_rfc3339()},
                ],
            }));
        }
        self.register(new_type);
        Ok(())
    }

    /// An updated CRD serves what it says from now on: its versions, names and schemas (the
    /// objects stay as stored; new writes are checked against the new schema), as the
    /// apiextensions-apiserver rebuilds its handler for the CRD on every change. Group,
    /// plural and scope cannot change.
    fn reregister_crd(&mut self, old: &Value, crd: &mut Value) -> ApiResult<()> {
        let name = meta_str(crd, "name").unwrap_or_default().to_string();
        let new_type = registry::from_crd(crd)?;
        for (version, schema) in &new_type.schemas {
            schema::check_supported(
                schema,
                &format!("spec.versions[{version}].schema.openAPIV3Schema"),
            )?;
        }
        let old_type = registry::from_crd(old)?;
        let immutable = |field: &str, value: &Value| {
            ApiError::invalid(
                "CustomResourceDefinition.apiextensions.k8s.io",
                &name,
                vec![FieldCause::invalid(field, value, "field is immutable")],
            )
        };
        if new_type.group != old_type.group {
            return Err(immutable("spec.group", &Value::String(new_type.group)));
        }
        if new_type.plural != old_type.plural {
            return Err(immutable(
                "spec.names.plural",
                &Value::String(new_type.plural),
            ));
        }
        if new_type.namespaced != old_type.namespaced {
            return Err(immutable(
                "spec.scope",
                crd.pointer("/spec/scope").unwrap_or(&Value::Null),
            ));
        }
        let mut stored_versions: Vec<Value> = crd
            .pointer("/status/storedVersions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if let Some(storage) = new_type.versions.first()
            && !stored_versions.iter().any(|v| v.as_str() == Some(storage))
        {
            stored_versions.push(Value::String(storage.clone()));
        }
        if let Some(status) = crd.get_mut("status").and_then(Value::as_object_mut) {
            status.insert("acceptedNames".into(), crd_names(&new_type));
            status.insert("storedVersions".into(), Value::Array(stored_versions));
        }
        self.register(new_type);
        Ok(())
    }

    /// Deleting a CRD deletes its custom objects with it (the apiextensions finalizer's job).
    fn unregister_crd(&mut self, crd: &Value) {
        let Ok(rt) = registry::from_crd(crd) else {
            return;
        };
        let key = rt.key();
        let names: Vec<ObjectKey> = self
            .objects
            .get(&key)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        for okey in names {
            self.remove(&key, &okey);
        }
        self.types.remove(&key);
        self.objects.remove(&key);
    }

    pub fn update(
        &mut self,
        target: &Target,
        mut body: Value,
        opts: &WriteOptions,
    ) -> ApiResult<Value> {
        self.take_fault(FaultVerb::Update, target)?;
        let rt = self.rt(&target.key)?.clone();
        Self::check_body_identity(&rt, target, &body)?;
        self.check_fields(&rt, &target.version, &mut body, opts)?;
        conversion::to_storage(&target.key, &target.version, &mut body)?;
        let old = self.lookup(target)?.clone();
        if let Some(rv) = meta_str(&body, "resourceVersion")
            && Some(rv) != meta_str(&old.object, "resourceVersion")
        {
            return Err(ApiError::stale_resource_version(
                &rt.qualified(),
                target.name.as_deref().unwrap_or_default(),
            ));
        }
        let new = Self::merge_into_old(&rt, target, &old.object, body)?;
        let mut managed = old.managed.clone();
        managed.record_update(&opts.manager(), Some(&old.object), &new);
        self.finish_update(&rt, target, old, new, managed)
    }

    /// Builds the stored object of an update: the main endpoint keeps the old status (when
    /// status is a subresource), `/status` keeps everything but status, and system metadata
    /// always comes from the stored object.
    fn merge_into_old(
        rt: &ResourceType,
        target: &Target,
        old: &Value,
        body: Value,
    ) -> ApiResult<Value> {
        let mut new = match target.subresource.as_deref() {
            Some("status") if rt.status_subresource => {
                let mut new = old.clone();
                if let Some(map) = new.as_object_mut() {
                    match body.get("status") {
                        Some(status) => map.insert("status".into(), status.clone()),
                        None => map.remove("status"),
                    };
                }
                new
            }
            None => {
                let mut new = body;
                if rt.status_subresource
                    && let Some(map) = new.as_object_mut()
                {
                    match old.get("status") {
                        Some(status) => map.insert("status".into(), status.clone()),
                        None => map.remove("status"),
                    };
                }
                new
            }
            Some(other) => return Err(ApiError::no_route(&format!("{}/{other}", rt.plural))),
        };
        let old_meta = meta(old).cloned().unwrap_or_default();
        let m = meta_mut(&mut new);
        for system in [
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "resourceVersion",
        ] {
            match old_meta.get(system) {
                Some(v) => m.insert(system.into(), v.clone()),
                None => m.remove(system),
            };
        }
        m.remove("managedFields");
        if let Some(map) = new.as_object_mut() {
            map.insert(
                "apiVersion".into(),
                Value::String(rt.api_version(&target.version)),
            );
            map.insert("kind".into(), Value::String(rt.kind.clone()));
        }
        Ok(new)
    }

    fn finish_update(
        &mut self,
        rt: &ResourceType,
        target: &Target,
        old: Stored,
        mut new: Value,
        managed: ManagedFields,
    ) -> ApiResult<Value> {
        let name = target.name.clone().unwrap_or_default();
        if rt.custom
            && let Some(schema) = rt.schemas.get(&target.version)
        {
            schema::admit(schema, &mut new, &rt.kind_group(), &name)?;
        }
        if is_deleting(&old.object) {
            let before = finalizers(&old.object);
            if finalizers(&new).iter().any(|f| !before.contains(f)) {
                let cause = FieldCause::forbidden(
                    "metadata.finalizers",
                    "no new finalizers can be added if the object is being deleted",
                );
                return Err(ApiError::invalid(&rt.kind_group(), &name, vec![cause]));
            }
        }
        if spec_part(&new) != spec_part(&old.object) {
            let generation = meta(&old.object)
                .and_then(|m| m.get("generation"))
                .and_then(Value::as_i64)
                .unwrap_or(0);
            meta_mut(&mut new).insert("generation".into(), Value::from(generation + 1));
        }
        if rt.group.is_empty() && rt.plural == "pods" {
            validation::prune_pod_claims(&mut new, self.server_version);
        }
        validation::validate_write(rt, Some(&old.object), &new, self.server_version)?;
        // An update that changes nothing is not written and bumps nothing (GuaranteedUpdate
        // short-circuits on identical bytes), so controllers do not feed their own loops.
        if new == old.object {
            return Ok(Self::render(rt, &target.version, &old.object));
        }
        if rt.group == "apiextensions.k8s.io"
            && rt.plural == "customresourcedefinitions"
            && target.subresource.is_none()
        {
            self.reregister_crd(&old.object, &mut new)?;
            if new == old.object {
                return Ok(Self::render(rt, &target.version, &old.object));
            }
        }
        let okey = target.object_key();
        let grace = meta(&new)
            .and_then(|m| m.get("deletionGracePeriodSeconds"))
            .and_then(Value::as_i64)
            .unwrap_or(0);
        if is_deleting(&new) && finalizers(&new).is_empty() && grace == 0 {
            let gone = self.remove(&target.key, &okey).unwrap_or(new);
            return Ok(Self::render(rt, &target.version, &gone));
        }
        let previous = Some(old.object);
        let object = self.commit(
            &target.key,
            okey,
            Stored {
                object: new,
                managed,
            },
            EventKind::Modified,
            previous,
        );
        Ok(Self::render(rt, &target.version, &object))
    }

    pub fn patch(
        &mut self,
        target: &Target,
        patch_type: PatchType,
        body: &[u8],
        opts: &WriteOptions,
    ) -> ApiResult<Value> {
        self.take_fault(FaultVerb::Patch, target)?;
        let rt = self.rt(&target.key)?.clone();
        if patch_type == PatchType::Apply {
            return self.apply(&rt, target, body, opts);
        }
        let patch: Value = serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
        let old = self.lookup(target)?.clone();
        let mut patched = Self::render(&rt, &target.version, &old.object);
        match patch_type {
            PatchType::Merge => json_patch::merge(&mut patched, &patch),
            PatchType::Strategic => {
                if rt.custom {
                    // apiextensions-apiserver: custom resources do not support strategic merge.
                    return Err(ApiError::unsupported_media_type(
                        "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
                    ));
                }
                if uses_strategic_features(&patch) {
                    return Err(ApiError::not_implemented(
                        "strategic merge patch with lists or $-directives (use a merge or JSON patch)",
                    ));
                }
                // Without lists or directives a strategic merge patch means what a merge patch means.
                json_patch::merge(&mut patched, &patch);
            }
            PatchType::Json => {
                let ops: json_patch::Patch = serde_json::from_value(patch).map_err(|e| {
                    ApiError::bad_request(format!("error decoding JSON patch: {e}"))
                })?;
                json_patch::patch(&mut patched, &ops).map_err(|e| {
                    // A failed `test` is the JSON-patch way of a precondition: the apiserver says 422.
                    ApiError::invalid(
                        &rt.kind_group(),
                        target.name.as_deref().unwrap_or_default(),
                        vec![FieldCause::invalid(
                            "",
                            &Value::Null,
                            format!("the JSON patch could not be applied: {e}"),
                        )],
                    )
                })?;
            }
            PatchType::Apply => unreachable_patch(),
        }
        if meta_str(&patched, "resourceVersion") != meta_str(&old.object, "resourceVersion") {
            return Err(ApiError::stale_resource_version(
                &rt.qualified(),
                target.name.as_deref().unwrap_or_default(),
            ));
        }
        Self::check_body_identity(&rt, target, &patched)?;
        self.check_fields(&rt, &target.version, &mut patched, opts)?;
        conversion::to_storage(&target.key, &target.version, &mut patched)?;
        let new = Self::merge_into_old(&rt, target, &old.object, patched)?;
        let mut managed = old.managed.clone();
        managed.record_update(&opts.manager(), Some(&old.object), &new);
        self.finish_update(&rt, target, old, new, managed)
    }

    /// Server-side apply (`application/apply-patch+yaml`).
    fn apply(
        &mut self,
        rt: &ResourceType,
        target: &Target,
        body: &[u8],
        opts: &WriteOptions,
    ) -> ApiResult<Value> {
        let name = target.name.clone().unwrap_or_default();
        let Some(manager) = opts.field_manager.clone().filter(|m| !m.is_empty()) else {
            let cause = FieldCause::required("fieldManager", "is required for apply patch");
            return Err(ApiError::invalid(
                "PatchOptions.meta.k8s.io",
                "",
                vec![cause],
            ));
        };
        let mut config: Value = serde_yaml_ng::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
        if config.get("apiVersion").and_then(Value::as_str).is_none()
            || config.get("kind").and_then(Value::as_str).is_none()
        {
            return Err(ApiError::bad_request(
                "apply patches must name apiVersion and kind",
            ));
        }
        Self::check_body_identity(rt, target, &config)?;
        self.check_fields(rt, &target.version, &mut config, opts)?;
        let Ok(old) = self.lookup(target).cloned() else {
            // Apply creates what does not exist.
            let mut create_target = target.clone();
            create_target.name = None;
            let mut body = config.clone();
            meta_mut(&mut body).insert("name".into(), Value::String(name.clone()));
            let created = self.create(&create_target, body, opts)?;
            conversion::to_storage(&target.key, &target.version, &mut config)?;
            let key = self.storage_key(&target.key);
            if let Some(stored) = self
                .objects
                .get_mut(&key)
                .and_then(|m| m.get_mut(&target.object_key()))
            {
                stored.managed = ManagedFields::default();
                stored
                    .managed
                    .apply(&manager, &Value::Object(Map::new()), &config);
            }
            return Ok(created);
        };
        // Managed fields are tracked on the stored layout, whatever version applied.
        conversion::to_storage(&target.key, &target.version, &mut config)?;
        if let Some(rv) = meta_str(&config, "resourceVersion")
            && Some(rv) != meta_str(&old.object, "resourceVersion")
        {
            return Err(ApiError::stale_resource_version(&rt.qualified(), &name));
        }
        let mut managed = old.managed.clone();
        let conflicts = managed.conflicts(&manager, &old.object, &config);
        if !conflicts.is_empty() && !opts.force {
            let list: Vec<String> = conflicts
                .iter()
                .map(|c| format!("conflict with \"{}\": .{}", c.manager, c.path.join(".")))
                .collect();
            let mut err = ApiError::conflict(&rt.qualified(), &name, "");
            err.message = format!(
                "Apply failed with {} conflict{}: {}",
                list.len(),
                if list.len() == 1 { "" } else { "s" },
                list.join("\n")
            );
            return Err(err);
        }
        let merged = managed.apply(&manager, &old.object, &config);
        let new = Self::merge_into_old(rt, target, &old.object, merged)?;
        self.finish_update(rt, target, old, new, managed)
    }

    /// DELETE of one object. Returns the object while its deletion is pending (finalizers,
    /// graceful pod termination), or a `Status` once it is gone — what the apiserver returns.
    pub fn delete(&mut self, target: &Target, opts: &DeleteOptions) -> ApiResult<Value> {
        self.take_fault(FaultVerb::Delete, target)?;
        let rt = self.rt(&target.key)?.clone();
        let name = target.name.clone().unwrap_or_default();
        let old = self.lookup(target)?.clone();
        if let Some(uid) = &opts.precondition_uid
            && Some(uid.as_str()) != meta_str(&old.object, "uid")
        {
            return Err(ApiError::conflict(
                &rt.qualified(),
                &name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta_str(&old.object, "uid").unwrap_or_default()
                ),
            ));
        }
        if let Some(rv) = &opts.precondition_resource_version
            && Some(rv.as_str()) != meta_str(&old.object, "resourceVersion")
        {
            return Err(ApiError::conflict(
                &rt.qualified(),
                &name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    meta_str(&old.object, "resourceVersion").unwrap_or_default()
                ),
            ));
        }
        match opts.propagation_policy.as_deref() {
            None | Some("Background") => {}
            Some("Orphan") => self.orphan_dependents(&old.object),
            Some(other) => {
                return Err(ApiError::not_implemented(format!(
                    "propagationPolicy {other}"
                )));
            }
        }
        let okey = target.object_key();
        let grace = self.grace_period(&rt, &old.object, opts);
        let is_namespace = rt.group.is_empty() && rt.plural == "namespaces";
        if grace > 0 || !finalizers(&old.object).is_empty() || is_namespace {
            let mut new = old.object.clone();
            let deadline = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(grace);
            let m = meta_mut(&mut new);
            let already = m.get("deletionTimestamp").is_some_and(|t| !t.is_null());
            let old_grace = m.get("deletionGracePeriodSeconds").and_then(Value::as_i64);
            // A second delete may only shorten the grace period.
            if !already || old_grace.is_some_and(|g| grace < g) {
                m.insert(
                    "deletionTimestamp".into(),
                    Value::String(deadline.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()),
                );
                m.insert("deletionGracePeriodSeconds".into(), Value::from(grace));
            }
            if is_namespace {
                new["status"] = json!({"phase": "Terminating"});
            }
            if !(grace == 0 && finalizers(&new).is_empty() && !is_namespace) {
                if new == old.object {
                    return Ok(Self::render(&rt, &target.version, &old.object));
                }
                let object = self.commit(
                    &target.key,
                    okey,
                    Stored {
                        object: new,
                        managed: old.managed,
                    },
                    EventKind::Modified,
                    Some(old.object),
                );
                return Ok(Self::render(&rt, &target.version, &object));
            }
        }
        let gone = self.remove(&target.key, &okey).unwrap_or(old.object);
        let (kind, group) = (rt.plural.clone(), rt.group.clone());
        Ok(json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
            "details": {"name": name, "group": group, "kind": kind, "uid": meta_str(&gone, "uid")},
        }))
    }

    /// Pods on a node terminate gracefully (the kubelet finishes the deletion with grace 0);
    /// unscheduled or finished pods and every other kind go at once (pod strategy CheckGracefulDelete).
    fn grace_period(&self, rt: &ResourceType, obj: &Value, opts: &DeleteOptions) -> i64 {
        if !(rt.group.is_empty() && rt.plural == "pods") {
            return 0;
        }
        let scheduled = obj
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty());
        let finished = matches!(
            obj.pointer("/status/phase").and_then(Value::as_str),
            Some("Succeeded" | "Failed")
        );
        if !scheduled || finished {
            return 0;
        }
        opts.grace_period_seconds
            .or_else(|| {
                obj.pointer("/spec/terminationGracePeriodSeconds")
                    .and_then(Value::as_i64)
            })
            .unwrap_or(30)
            .max(0)
    }

    /// `propagationPolicy: Orphan`: dependents lose their reference to the owner instead of being collected.
    fn orphan_dependents(&mut self, owner: &Value) {
        let Some(uid) = meta_str(owner, "uid").map(str::to_string) else {
            return;
        };
        let mut changes = Vec::new();
        for (key, objects) in &self.objects {
            for (okey, stored) in objects {
                let refs = stored
                    .object
                    .pointer("/metadata/ownerReferences")
                    .and_then(Value::as_array);
                if refs.is_some_and(|r| {
                    r.iter()
                        .any(|o| o.get("uid").and_then(Value::as_str) == Some(&uid))
                }) {
                    changes.push((key.clone(), okey.clone(), stored.clone()));
                }
            }
        }
        for (key, okey, mut stored) in changes {
            let previous = stored.object.clone();
            if let Some(Value::Array(refs)) = stored.object.pointer_mut("/metadata/ownerReferences")
            {
                refs.retain(|o| o.get("uid").and_then(Value::as_str) != Some(&uid));
            }
            self.commit(&key, okey, stored, EventKind::Modified, Some(previous));
        }
    }

    pub fn delete_collection(
        &mut self,
        target: &Target,
        selectors: &Selectors,
        opts: &DeleteOptions,
    ) -> ApiResult<Value> {
        let rt = self.rt(&target.key)?.clone();
        let names: Vec<(String, String)> = self
            .objects_in(&target.key, target.namespace.as_deref())
            .iter()
            .filter(|o| selectors.matches(o))
            .map(|o| {
                (
                    meta_str(o, "namespace").unwrap_or_default().to_string(),
                    meta_str(o, "name").unwrap_or_default().to_string(),
                )
            })
            .collect();
        let mut items = Vec::new();
        for (ns, name) in names {
            let one = Target {
                name: Some(name),
                namespace: (!ns.is_empty()).then_some(ns),
                ..target.clone()
            };
            let before = self.get(&one)?;
            self.delete(&one, opts)?;
            items.push(before);
        }
        Ok(
            json!({"apiVersion": rt.api_version(&target.version), "kind": format!("{}List", rt.kind), "metadata": {"resourceVersion": self.revision.to_string()}, "items": items}),
        )
    }

    /// `POST pods/<name>/binding`: what the scheduler does to place a pod.
    pub fn bind_pod(&mut self, target: &Target, binding: &Value) -> ApiResult<Value> {
        let node = binding
            .pointer("/target/name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| {
                ApiError::invalid(
                    "Binding",
                    target.name.as_deref().unwrap_or_default(),
                    vec![FieldCause::required("target.name", "")],
                )
            })?
            .to_string();
        let pod_target = Target {
            subresource: None,
            ..target.clone()
        };
        let old = self.lookup(&pod_target)?.clone();
        let name = target.name.clone().unwrap_or_default();
        if let Some(current) = old
            .object
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        {
            return Err(ApiError::conflict(
                "pods",
                &name,
                &format!("pod {name} is already assigned to node \"{current}\""),
            ));
        }
        if is_deleting(&old.object) {
            return Err(ApiError::conflict(
                "pods",
                &name,
                "pod is being deleted, cannot be assigned to a host",
            ));
        }
        let mut new = old.object.clone();
        new["spec"]["nodeName"] = Value::String(node);
        let okey = pod_target.object_key();
        self.commit(
            &pod_target.key,
            okey,
            Stored {
                object: new,
                managed: old.managed,
            },
            EventKind::Modified,
            Some(old.object),
        );
        Ok(
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
        )
    }

    /// One pass of the garbage collector and the namespace controller: objects whose owners
    /// are all gone are deleted (background propagation), dangling owner references removed,
    /// and terminating namespaces emptied and then removed.
    pub fn collect_garbage(&mut self) {
        let live: std::collections::HashSet<String> = self
            .objects
            .values()
            .flat_map(|m| m.values())
            .filter_map(|s| meta_str(&s.object, "uid").map(str::to_string))
            .collect();
        let ns_key = ResourceKey {
            group: String::new(),
            plural: "namespaces".into(),
        };
        let terminating: Vec<String> = self
            .objects
            .get(&ns_key)
            .into_iter()
            .flatten()
            .filter(|(_, s)| is_deleting(&s.object))
            .map(|((_, name), _)| name.clone())
            .collect();
        let mut deletions = Vec::new();
        let mut trims = Vec::new();
        for (key, objects) in &self.objects {
            for ((ns, name), stored) in objects {
                if is_deleting(&stored.object) {
                    continue;
                }
                if !ns.is_empty() && terminating.contains(ns) {
                    deletions.push((key.clone(), ns.clone(), name.clone()));
                    continue;
                }
                let refs: Vec<&Value> = stored
                    .object
                    .pointer("/metadata/ownerReferences")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .collect();
                if refs.is_empty() {
                    continue;
                }
                let alive = refs
                    .iter()
                    .filter(|r| {
                        r.get("uid")
                            .and_then(Value::as_str)
                            .is_some_and(|u| live.contains(u))
                    })
                    .count();
                if alive == 0 {
                    deletions.push((key.clone(), ns.clone(), name.clone()));
                } else if alive < refs.len() {
                    trims.push((key.clone(), (ns.clone(), name.clone())));
                }
            }
        }
        for (key, ns, name) in deletions {
            let version = self
                .types
                .get(&key)
                .and_then(|t| t.versions.first().cloned())
                .unwrap_or_default();
            let target = Target {
                key,
                version,
                namespace: (!ns.is_empty()).then_some(ns),
                name: Some(name),
                subresource: None,
            };
            if let Err(e) = self.delete(&target, &DeleteOptions::default()) {
                tracing::warn!(error = %e, "garbage collector could not delete a dependent");
            }
        }
        for (key, okey) in trims {
            let Some(mut stored) = self.objects.get(&key).and_then(|m| m.get(&okey)).cloned()
            else {
                continue;
            };
            let previous = stored.object.clone();
            if let Some(Value::Array(refs)) = stored.object.pointer_mut("/metadata/ownerReferences")
            {
                refs.retain(|r| {
                    r.get("uid")
                        .and_then(Value::as_str)
                        .is_some_and(|u| live.contains(u))
                });
            }
            self.commit(&key, okey, stored, EventKind::Modified, Some(previous));
        }
        for ns in terminating {
            let empty = self
                .objects
                .iter()
                .all(|(key, m)| key == &ns_key || !m.keys().any(|(n, _)| n == &ns));
            if empty {
                self.remove(&ns_key, &(String::new(), ns));
            }
        }
    }
}

#[allow(clippy::panic)]
fn unreachable_patch() -> ! {
    panic!("apply patches are handled before decoding")
}

fn crd_names(rt: &ResourceType) -> Value {
    json!({"plural": rt.plural, "singular": rt.singular, "kind": rt.kind, "listKind": format!("{}List", rt.kind), "shortNames": rt.short_names})
}

/// Defaults the apiserver fills in on create for the built-in kinds we serve.
fn apply_create_defaults(rt: &ResourceType, obj: &mut Value) {
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "pods") => {
            let spec = &mut obj["spec"];
            if spec.is_object() {
                for (field, default) in [
                    ("restartPolicy", json!("Always")),
                    ("schedulerName", json!("default-scheduler")),
                    ("terminationGracePeriodSeconds", json!(30)),
                ] {
                    if spec.get(field).is_none() {
                        spec[field] = default;
                    }
                }
            }
            obj["status"] = json!({"phase": "Pending"});
        }
        ("", "namespaces") => obj["status"] = json!({"phase": "Active"}),
        _ => {}
    }
}

fn uses_strategic_features(patch: &Value) -> bool {
    match patch {
        Value::Array(_) => true,
        Value::Object(map) => map
            .iter()
            .any(|(k, v)| k.starts_with('$') || uses_strategic_features(v)),
        _ => false,
    }
}

/// `storage` is where the target's objects are kept (what `event.resource` names).
fn filter_event(
    event: &WatchEvent,
    storage: &ResourceKey,
    target: &Target,
    selectors: &Selectors,
) -> Option<(EventKind, Value)> {
    if event.resource != *storage {
        return None;
    }
    if let Some(ns) = &target.namespace
        && meta_str(&event.object, "namespace") != Some(ns.as_str())
    {
        return None;
    }
    let now = selectors.matches(&event.object);
    let before = event.previous.as_ref().map(|p| selectors.matches(p));
    let kind = match (event.kind, before, now) {
        (EventKind::Modified, Some(true), true) | (EventKind::Modified, None, true) => {
            EventKind::Modified
        }
        (EventKind::Modified, Some(false), true) => EventKind::Added,
        (EventKind::Modified, Some(true), false) => EventKind::Deleted,
        (EventKind::Modified, _, false) => return None,
        (kind, _, true) => kind,
        (_, _, false) => return None,
    };
    Some((kind, event.object.clone()))
}
