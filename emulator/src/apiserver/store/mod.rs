//! The object store and its Kubernetes semantics. No sockets: the HTTP layer ([`super::http`])
//! turns requests into calls here, under one lock, so each call is one atomic transaction —
//! what etcd plus the registry's `GuaranteedUpdate` give kube-apiserver.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use super::conversion;
use super::device_taint_rule;
use super::error::{ApiError, ApiResult, FieldCause};
use super::fields::{self, FieldIssues, FieldPath, FieldValidation};
use super::gates;
use super::managed::{self, ManagedFields, Shape};
use super::registry::{self, ResourceKey, ResourceType};
use super::schema;
use super::selectors::Selectors;
use super::validation;

mod crds;
mod create;
mod delete;
mod limits;

pub use limits::{MAX_REQUEST_BODY_BYTES, json_size, request_too_large};
mod read;
mod services;
mod update;

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
    /// A list (not a watch): RBAC refusing it, an apiserver failing it.
    List,
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
    /// [`super::ApiServerOptions::feature_gates`].
    pub(crate) feature_gates: gates::FeatureGates,
    /// `Warning` headers for the response to the current write ([`Store::take_warnings`]).
    warnings: Vec<String>,
    /// The uid of every stored object, for the garbage collector's owner checks.
    uids: std::collections::HashSet<String>,
    /// What the garbage collector has to look at ([`Store::collect_garbage`]).
    gc: GcWork,
}

/// The garbage collector's work since it last ran: only a removal or a namespace being
/// deleted can orphan anything already stored, so only those make it walk every object;
/// otherwise it checks just the objects written with owner references. Walking every
/// object after every write made applying N objects O(N²) (2,000 ConfigMaps: 77 s).
#[derive(Debug, Default)]
struct GcWork {
    everything: bool,
    written: Vec<(ResourceKey, ObjectKey)>,
    /// Objects looked at, over the store's life (tests bound the work with it).
    visits: u64,
}

pub fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// An RFC 3339 time as Go's `time.Parse(time.RFC3339, …)` takes it (`metav1.Time` in a
/// query, `UnmarshalQueryParameter`): `YYYY-MM-DDTHH:MM:SS`, an optional fraction, `Z`
/// or `±HH:MM`, a real date. Go's time holds any year from 0 to 9999 and beyond; jiff's
/// `Timestamp` stops a day short of both ends, so a valid time past its range is its last
/// (or first) instant (D28: `9999-12-31T23:59:59Z` was a 400).
pub fn parse_rfc3339(text: &str) -> Result<jiff::Timestamp, String> {
    let refuse = |why: &str| {
        format!(
            "parsing time {:?} as \"2006-01-02T15:04:05Z07:00\": {why}",
            fake_dra_ops::text::elide_middle(text, 64)
        )
    };
    let b = text.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    let shaped = digits(0..4)
        && b.get(4) == Some(&b'-')
        && digits(5..7)
        && b.get(7) == Some(&b'-')
        && digits(8..10)
        && b.get(10) == Some(&b'T')
        && digits(11..13)
        && b.get(13) == Some(&b':')
        && digits(14..16)
        && b.get(16) == Some(&b':')
        && digits(17..19);
    if !shaped {
        return Err(refuse("not YYYY-MM-DDTHH:MM:SS"));
    }
    let mut rest = &text[19..];
    if let Some(fraction) = rest.strip_prefix('.') {
        let n = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return Err(refuse("a fraction of a second without digits"));
        }
        rest = &fraction[n..];
    }
    let zone = rest.as_bytes();
    let zone_ok = rest == "Z"
        || (zone.len() == 6
            && matches!(zone[0], b'+' | b'-')
            && zone[1..3].iter().all(u8::is_ascii_digit)
            && zone[3] == b':'
            && zone[4..6].iter().all(u8::is_ascii_digit));
    if !zone_ok {
        return Err(refuse("the zone is not Z or ±HH:MM"));
    }
    let civil: jiff::civil::DateTime = text[..19]
        .parse()
        .map_err(|e: jiff::Error| refuse(&e.to_string()))?;
    Ok(text
        .parse::<jiff::Timestamp>()
        .unwrap_or(if civil.year() > 0 {
            jiff::Timestamp::MAX
        } else {
            jiff::Timestamp::MIN
        }))
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

/// The namespace label that lets claims in it ask for `adminAccess`
/// (`resource.DRAAdminNamespaceLabelKey`).
const ADMIN_ACCESS_LABEL: &str = "resource.kubernetes.io/admin-access";

impl Store {
    /// `AuthorizedForAdmin` of pkg/registry/resource/utils.go, for a claim or template
    /// being created in `namespace`: a request with `adminAccess: true` needs the
    /// namespace's `resource.kubernetes.io/admin-access: "true"` label.
    fn authorized_for_admin(
        &self,
        rt: &ResourceType,
        namespace: &str,
        obj: &Value,
    ) -> ApiResult<()> {
        let requests = match (rt.group.as_str(), rt.plural.as_str()) {
            ("resource.k8s.io", "resourceclaims") => obj.pointer("/spec/devices/requests"),
            ("resource.k8s.io", "resourceclaimtemplates") => {
                obj.pointer("/spec/spec/devices/requests")
            }
            _ => return Ok(()),
        };
        let Some(i) = requests
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .position(|r| r.pointer("/exactly/adminAccess") == Some(&Value::Bool(true)))
        else {
            return Ok(());
        };
        let key = ResourceKey {
            group: String::new(),
            plural: "namespaces".into(),
        };
        let labelled = self
            .objects
            .get(&key)
            .and_then(|m| m.get(&(String::new(), namespace.to_string())))
            .and_then(|ns| ns.object.pointer("/metadata/labels"))
            .and_then(|l| l.get(ADMIN_ACCESS_LABEL))
            .and_then(Value::as_str)
            == Some("true");
        if labelled {
            return Ok(());
        }
        let cause = FieldCause::forbidden(
            format!("spec.devices.requests[{i}].adminAccess"),
            format!(
                "admin access to devices requires the `{ADMIN_ACCESS_LABEL}: true` label on the containing namespace"
            ),
        );
        Err(ApiError::invalid(
            &rt.kind_group(),
            meta_str(obj, "name").unwrap_or_default(),
            vec![cause],
        ))
    }

    /// Removes the fields of the DRA features whose gates are off in the emulated release,
    /// as kube-apiserver's strategies do before validating a write (see [`gates`]): the
    /// write succeeds without them, and only the log says so.
    fn drop_disabled_fields(&self, rt: &ResourceType, old: Option<&Value>, new: &mut Value) {
        if rt.group != "resource.k8s.io" {
            return;
        }
        let before = new.clone();
        gates::drop_disabled_fields(
            &rt.group,
            &rt.plural,
            old,
            new,
            self.server_version,
            &self.feature_gates,
        );
        let dropped = gates::dropped(&before, new);
        if !dropped.is_empty() {
            let (major, minor) = self.server_version;
            tracing::debug!(
                kind = %rt.kind,
                name = meta_str(new, "name").unwrap_or_default(),
                ?dropped,
                "dropped fields whose feature gate is off in this Kubernetes {major}.{minor} cluster"
            );
        }
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
            feature_gates: gates::FeatureGates::default(),
            warnings: Vec::new(),
            uids: std::collections::HashSet::new(),
            gc: GcWork::default(),
        };
        for rt in types {
            store.register(rt);
        }
        // The namespaces every cluster starts with, and the apiserver's own Service.
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let target = store.target("", "namespaces", None, None);
            let _ = store.create(
                &target,
                json!({"metadata": {"name": ns}}),
                &WriteOptions::default(),
            );
        }
        let target = store.target("", "services", Some("default"), None);
        let _ = store.create(
            &target,
            services::kubernetes_service(),
            &WriteOptions::default(),
        );
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

    /// Refuses an object that does not decode into its kind's type ([`fields::type_error`]),
    /// as kube-apiserver does before storing: a body (create, update) is a 400
    /// (`<Kind> in version "v1" cannot be handled as a <Kind>: …`, the codec's error), a
    /// patched object a 422 on the field `patch` (k8s.io/apiserver
    /// `pkg/endpoints/handlers/patch.go`, `applyPatchToCurrentObject` and
    /// `applyPatchToObject`: `field.Invalid(field.NewPath("patch"), …)`).
    fn check_type(rt: &ResourceType, version: &str, obj: &Value, patched: bool) -> ApiResult<()> {
        let Some(e) = fields::type_error(rt, version, obj) else {
            return Ok(());
        };
        let kind = &rt.kind;
        if patched {
            let cause = FieldCause {
                reason: "FieldValueInvalid",
                field: "patch".into(),
                message: format!(
                    "Invalid value: the patched {kind}: {}: {}",
                    e.field, e.message
                ),
            };
            return Err(ApiError::invalid(
                &rt.kind_group(),
                meta_str(obj, "name").unwrap_or_default(),
                vec![cause],
            ));
        }
        Err(ApiError::bad_request(format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: {}: {}",
            e.field, e.message
        )))
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
            403 => ApiError::forbidden(format!(
                "injected fault: {qualified} is forbidden: User cannot {} resource \"{}\"",
                format!("{verb:?}").to_lowercase(),
                target.key.plural
            )),
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
        if let Some(uid) = meta_str(&object, "uid") {
            self.uids.insert(uid.to_string());
        }
        if is_deleting(&object) && key.group.is_empty() && key.plural == "namespaces" {
            self.gc.everything = true;
        } else if meta(&object)
            .and_then(|m| m.get("ownerReferences"))
            .and_then(Value::as_array)
            .is_some_and(|refs| !refs.is_empty())
        {
            self.gc.written.push((key.clone(), okey.clone()));
        }
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
        if let Some(uid) = meta_str(&stored.object, "uid") {
            self.uids.remove(uid);
        }
        self.gc.everything = true;
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
}

#[allow(clippy::panic)]
fn unreachable_patch() -> ! {
    panic!("apply patches are handled before decoding")
}

fn crd_names(rt: &ResourceType) -> Value {
    let mut names = json!({"plural": rt.plural, "singular": rt.singular, "kind": rt.kind, "listKind": format!("{}List", rt.kind), "shortNames": rt.short_names});
    if !rt.categories.is_empty() {
        names["categories"] = json!(rt.categories);
    }
    names
}

/// Defaults the apiserver fills in on create for the built-in kinds we serve: core/v1's
/// `SetDefaults_PodSpec` and `SetDefaults_Container`, the Priority and
/// DefaultTolerationSeconds admission plugins a default kube-apiserver runs, and
/// resource.k8s.io/v1alpha2's `SetDefaults_ResourceClaimSpec`.
fn apply_create_defaults(rt: &ResourceType, obj: &mut Value) {
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "pods") => {
            default_pod_spec(&mut obj["spec"]);
            obj["status"] = json!({"phase": "Pending"});
        }
        ("", "namespaces") => obj["status"] = json!({"phase": "Active"}),
        ("", "services") => {
            services::default_service(&mut obj["spec"]);
            obj["status"] = json!({"loadBalancer": {}});
        }
        ("batch", "jobs") => default_job(obj),
        ("resource.k8s.io", "resourceclaims" | "resourceclaimtemplates")
            if obj["apiVersion"] == "resource.k8s.io/v1alpha2" =>
        {
            let spec = if rt.plural == "resourceclaims" {
                &mut obj["spec"]
            } else {
                &mut obj["spec"]["spec"]
            };
            if spec.is_object() && spec.get("allocationMode").is_none() {
                spec["allocationMode"] = json!("WaitForFirstConsumer");
            }
        }
        _ => {}
    }
}

/// `SetDefaults_Job`, and the selector and pod labels the Job strategy generates
/// (`generateSelector`) unless `spec.manualSelector` is true.
fn default_job(job: &mut Value) {
    let uid = meta_str(job, "uid").unwrap_or_default().to_string();
    let name = meta_str(job, "name").unwrap_or_default().to_string();
    let spec = &mut job["spec"];
    if !spec.is_object() {
        return;
    }
    if spec.get("completions").is_none() && spec.get("parallelism").is_none() {
        spec["completions"] = json!(1);
    }
    let backoff = if spec.get("backoffLimitPerIndex").is_some() {
        json!(i32::MAX)
    } else {
        json!(6)
    };
    let replacement = if spec.get("podFailurePolicy").is_some() {
        "Failed"
    } else {
        "TerminatingOrFailed"
    };
    for (field, value) in [
        ("parallelism", json!(1)),
        ("backoffLimit", backoff),
        ("completionMode", json!("NonIndexed")),
        ("suspend", json!(false)),
        ("podReplacementPolicy", json!(replacement)),
        ("manualSelector", json!(false)),
    ] {
        default_field(spec, field, value);
    }
    if spec["manualSelector"] != true {
        let generated = [
            ("batch.kubernetes.io/controller-uid", uid.as_str()),
            ("batch.kubernetes.io/job-name", name.as_str()),
            ("controller-uid", uid.as_str()),
            ("job-name", name.as_str()),
        ];
        let template = &mut spec["template"];
        if template.is_object() {
            default_field(template, "metadata", json!({}));
            default_field(&mut template["metadata"], "labels", json!({}));
            for (key, value) in generated {
                template["metadata"]["labels"][key] = json!(value);
            }
        }
        default_field(
            spec,
            "selector",
            json!({"matchLabels": {generated[0].0: uid}}),
        );
    }
    let template_labels = spec.pointer("/template/metadata/labels").cloned();
    let own_labels = job.pointer("/metadata/labels").and_then(Value::as_object);
    if own_labels.is_none_or(Map::is_empty)
        && let Some(labels) = template_labels
    {
        meta_mut(job).insert("labels".into(), labels);
    }
}

/// Sets `field` of `object` when it is absent.
fn default_field(object: &mut Value, field: &str, value: Value) {
    if object.is_object() && object.get(field).is_none() {
        object[field] = value;
    }
}

fn default_pod_spec(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    for (field, value) in [
        ("restartPolicy", json!("Always")),
        ("schedulerName", json!("default-scheduler")),
        ("terminationGracePeriodSeconds", json!(30)),
        ("dnsPolicy", json!("ClusterFirst")),
        ("enableServiceLinks", json!(true)),
        ("securityContext", json!({})),
    ] {
        default_field(spec, field, value);
    }
    // Priority admission: no class named, no global default class: priority 0.
    if spec.get("priorityClassName").is_none() {
        default_field(spec, "priority", json!(0));
        default_field(spec, "preemptionPolicy", json!("PreemptLowerPriority"));
    }
    for list in ["initContainers", "containers"] {
        if let Some(containers) = spec.get_mut(list).and_then(Value::as_array_mut) {
            for container in containers {
                let image = container["image"].as_str().unwrap_or_default();
                // `SetDefaults_Container`: Always for `:latest` or no tag, else IfNotPresent.
                let tag = image.rsplit('/').next().unwrap_or_default();
                let latest =
                    !image.contains('@') && tag.split_once(':').is_none_or(|(_, t)| t == "latest");
                let pull = if latest { "Always" } else { "IfNotPresent" };
                default_field(container, "imagePullPolicy", json!(pull));
                default_field(
                    container,
                    "terminationMessagePath",
                    json!("/dev/termination-log"),
                );
                default_field(container, "terminationMessagePolicy", json!("File"));
            }
        }
    }
    // DefaultTolerationSeconds: 300 s on a node that is not ready or unreachable, unless
    // the pod already tolerates that NoExecute taint.
    let mut tolerations = spec["tolerations"].as_array().cloned().unwrap_or_default();
    let mut added = false;
    for key in [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ] {
        let tolerated = tolerations.iter().any(|t| {
            let text = |f: &str| t.get(f).and_then(Value::as_str).unwrap_or_default();
            (text("key").is_empty() || text("key") == key)
                && (text("effect").is_empty() || text("effect") == "NoExecute")
        });
        if !tolerated {
            tolerations.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
            added = true;
        }
    }
    if added {
        spec["tolerations"] = Value::Array(tolerations);
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::parse_rfc3339;

    #[test]
    fn rfc3339_as_go_parses_it_with_the_edges_of_time() {
        for ok in [
            "2026-12-06T12:00:00Z",
            "2026-12-06T12:00:00.123456789+14:00",
            "2026-12-06T12:00:00-00:30",
        ] {
            assert!(parse_rfc3339(ok).is_ok(), "{ok}");
        }
        assert_eq!(
            parse_rfc3339("9999-12-31T23:59:59Z"),
            Ok(jiff::Timestamp::MAX)
        );
        assert_eq!(
            parse_rfc3339("0000-01-01T00:00:00Z"),
            Ok("0000-01-01T00:00:00Z".parse().unwrap())
        );
        for bad in [
            "2026-12-06 12:00:00",
            "2026-12-06t12:00:00Z",
            "2026-02-30T00:00:00Z",
            "2026-12-06T24:00:00Z",
            "2026-12-06T12:00:00",
            "2026-12-06T12:00:00.Z",
            "2026-12-06T12:00:00+1400",
            "é026-12-06T12:00:00Z",
            "",
        ] {
            let error = parse_rfc3339(bad).unwrap_err();
            assert!(error.starts_with("parsing time \""), "{bad}: {error}");
        }
        let long = format!("2026-12-06T12:00:00Z{}", "x".repeat(10_000));
        assert!(parse_rfc3339(&long).unwrap_err().len() < 300);
    }
}
