//! kube-apiserver's printers for the built-in kinds the emulator serves: their columns
//! (name, type, format, priority) and cells, read from `pkg/printers/internalversion/
//! printers.go` of the emulated release (1.29 for classic `resource.k8s.io/v1alpha2`,
//! 1.34/1.37 for structured DRA) and the CRD table of `apiextensions-apiserver` 1.37.
//! Descriptions are short, in our words; kubectl shows none of them.

use serde_json::{Value, json};

/// Cells of one object, at `now`.
pub(super) type PrintFn = fn(&Value, jiff::Timestamp) -> Vec<Value>;
/// `(name, type, format, priority, description)`.
pub(super) type ColumnDef = (&'static str, &'static str, &'static str, i64, &'static str);

pub(super) const NAME_DOC: &str = "The object's name.";
pub(super) const CREATED_DOC: &str = "When the object was created.";
const AGE_DOC: &str = "Time since the object was created.";

const NAME: ColumnDef = ("Name", "string", "name", 0, NAME_DOC);
const AGE: ColumnDef = ("Age", "string", "", 0, AGE_DOC);

/// The columns and printer of a built-in resource in `server_version`, if it has one.
pub(super) fn builtin(
    group: &str,
    plural: &str,
    version: &str,
    server_version: (u32, u32),
) -> Option<(Vec<ColumnDef>, PrintFn)> {
    let wide = |name, type_| (name, type_, "", 1, "");
    let col = |name, type_| (name, type_, "", 0, "");
    let found: (Vec<ColumnDef>, PrintFn) = match (group, plural) {
        ("", "pods") => (
            vec![
                NAME,
                col("Ready", "string"),
                col("Status", "string"),
                col("Restarts", "string"),
                AGE,
                wide("IP", "string"),
                wide("Node", "string"),
                wide("Nominated Node", "string"),
                wide("Readiness Gates", "string"),
            ],
            pod,
        ),
        ("", "nodes") => (
            vec![
                NAME,
                col("Status", "string"),
                col("Roles", "string"),
                AGE,
                col("Version", "string"),
                wide("Internal-IP", "string"),
                wide("External-IP", "string"),
                wide("OS-Image", "string"),
                wide("Kernel-Version", "string"),
                wide("Container-Runtime", "string"),
            ],
            node,
        ),
        ("", "namespaces") => (vec![NAME, col("Status", "string"), AGE], namespace),
        ("", "events") | ("events.k8s.io", "events") => (
            vec![
                col("Last Seen", "string"),
                col("Type", "string"),
                col("Reason", "string"),
                col("Object", "string"),
                wide("Subobject", "string"),
                wide("Source", "string"),
                col("Message", "string"),
                wide("First Seen", "string"),
                wide("Count", "string"),
                ("Name", "string", "name", 1, NAME_DOC),
            ],
            if group.is_empty() { event } else { event_v1 },
        ),
        ("", "configmaps") => (vec![NAME, col("Data", "string"), AGE], config_map),
        // The Secrets column left with 1.35.
        ("", "serviceaccounts") if server_version < (1, 35) => (
            vec![NAME, col("Secrets", "string"), AGE],
            service_account_with_secrets,
        ),
        ("", "serviceaccounts") => (vec![NAME, AGE], name_age),
        ("", "services") => (
            vec![
                NAME,
                col("Type", "string"),
                col("Cluster-IP", "string"),
                col("External-IP", "string"),
                col("Port(s)", "string"),
                AGE,
                wide("Selector", "string"),
            ],
            service,
        ),
        ("discovery.k8s.io", "endpointslices") => (
            vec![
                NAME,
                col("AddressType", "string"),
                col("Ports", "string"),
                col("Endpoints", "string"),
                AGE,
            ],
            endpoint_slice,
        ),
        ("batch", "jobs") => (
            vec![
                NAME,
                col("Status", "string"),
                col("Completions", "string"),
                col("Duration", "string"),
                AGE,
                wide("Containers", "string"),
                wide("Images", "string"),
                wide("Selector", "string"),
            ],
            job,
        ),
        ("coordination.k8s.io", "leases") => (vec![NAME, col("Holder", "string"), AGE], lease),
        ("apps", "deployments") => (
            vec![
                NAME,
                col("Ready", "string"),
                col("Up-to-date", "string"),
                col("Available", "string"),
                AGE,
                wide("Containers", "string"),
                wide("Images", "string"),
                wide("Selector", "string"),
            ],
            deployment,
        ),
        ("apps", "replicasets") => (
            vec![
                NAME,
                col("Desired", "integer"),
                col("Current", "integer"),
                col("Ready", "integer"),
                AGE,
                wide("Containers", "string"),
                wide("Images", "string"),
                wide("Selector", "string"),
            ],
            replica_set,
        ),
        ("apps", "daemonsets") => (
            vec![
                NAME,
                col("Desired", "integer"),
                col("Current", "integer"),
                col("Ready", "integer"),
                col("Up-to-date", "integer"),
                col("Available", "integer"),
                col("Node Selector", "string"),
                AGE,
                wide("Containers", "string"),
                wide("Images", "string"),
                wide("Selector", "string"),
            ],
            daemon_set,
        ),
        ("rbac.authorization.k8s.io", "rolebindings" | "clusterrolebindings") => (
            vec![
                NAME,
                col("Role", "string"),
                AGE,
                wide("Users", "string"),
                wide("Groups", "string"),
                wide("ServiceAccounts", "string"),
            ],
            role_binding,
        ),
        ("scheduling.k8s.io", "priorityclasses") => (
            vec![
                NAME,
                col("Value", "integer"),
                col("Global-Default", "boolean"),
                AGE,
                wide("PreemptionPolicy", "string"),
            ],
            priority_class,
        ),
        ("admissionregistration.k8s.io", "validatingadmissionpolicies") => (
            vec![
                NAME,
                col("Validations", "integer"),
                col("ParamKind", "string"),
                AGE,
            ],
            admission_policy,
        ),
        ("admissionregistration.k8s.io", "validatingadmissionpolicybindings") => (
            vec![
                NAME,
                col("PolicyName", "string"),
                col("ParamRef", "string"),
                AGE,
            ],
            admission_policy_binding,
        ),
        // apiextensions-apiserver prints CRDs itself from 1.37; before, the default table.
        ("apiextensions.k8s.io", "customresourcedefinitions") if server_version >= (1, 37) => (
            vec![
                NAME,
                col("Scope", "string"),
                col("Versions", "string"),
                ("Created At", "date", "", 0, CREATED_DOC),
                wide("Group", "string"),
                wide("Kind", "string"),
                wide("ShortNames", "string"),
                wide("Established", "boolean"),
            ],
            crd,
        ),
        ("resource.k8s.io", "resourceclasses") => {
            (vec![NAME, col("DriverName", "string"), AGE], resource_class)
        }
        ("resource.k8s.io", "resourceclaims") if version == "v1alpha2" => (
            vec![
                NAME,
                col("ResourceClassName", "string"),
                col("AllocationMode", "string"),
                col("State", "string"),
                AGE,
            ],
            classic_claim,
        ),
        ("resource.k8s.io", "resourceclaimtemplates") if version == "v1alpha2" => (
            vec![
                NAME,
                col("ResourceClassName", "string"),
                col("AllocationMode", "string"),
                AGE,
            ],
            classic_claim_template,
        ),
        ("resource.k8s.io", "podschedulingcontexts") => (
            vec![NAME, col("SelectedNode", "string"), AGE],
            scheduling_context,
        ),
        ("resource.k8s.io", "resourceclaims") => (vec![NAME, col("State", "string"), AGE], claim),
        ("resource.k8s.io", "deviceclasses" | "resourceclaimtemplates") => {
            (vec![NAME, AGE], name_age)
        }
        ("resource.k8s.io", "resourceslices") => (
            vec![
                NAME,
                col("Node", "string"),
                col("Driver", "string"),
                col("Pool", "string"),
                AGE,
            ],
            resource_slice,
        ),
        _ => return None,
    };
    Some(found)
}

// ---------------------------------------------------------------------------------------
// Helpers

fn text<'a>(object: &'a Value, pointer: &str) -> &'a str {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn int(object: &Value, pointer: &str) -> i64 {
    object.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

fn items<'a>(object: &'a Value, pointer: &str) -> &'a [Value] {
    object
        .pointer(pointer)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

fn name(object: &Value) -> Value {
    json!(text(object, "/metadata/name"))
}

fn timestamp(object: &Value, pointer: &str) -> Option<jiff::Timestamp> {
    object.pointer(pointer)?.as_str()?.parse().ok()
}

/// `translateTimestampSince`: `<unknown>` for no time.
fn since(at: Option<jiff::Timestamp>, now: jiff::Timestamp) -> String {
    match at {
        Some(at) => human_duration(now.as_second() - at.as_second()),
        None => "<unknown>".into(),
    }
}

fn age(object: &Value, now: jiff::Timestamp) -> Value {
    json!(since(timestamp(object, "/metadata/creationTimestamp"), now))
}

/// `duration.HumanDuration` (k8s.io/apimachinery): about two significant figures.
pub(super) fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        return if dy == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{dy}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

/// `labels.FormatLabels`: `k=v,…` sorted, `<none>` when empty.
fn format_labels(map: Option<&Value>) -> String {
    let mut pairs: Vec<String> = map
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
        .collect();
    pairs.sort();
    if pairs.is_empty() {
        "<none>".into()
    } else {
        pairs.join(",")
    }
}

/// `metav1.FormatLabelSelector`: matchLabels and matchExpressions, `<none>` for nothing.
fn format_selector(selector: Option<&Value>) -> String {
    let Some(selector) = selector else {
        return "<none>".into();
    };
    let mut terms: Vec<String> = selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
        .collect();
    for e in items(selector, "/matchExpressions") {
        let key = text(e, "/key");
        let values: Vec<&str> = items(e, "/values")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        terms.push(match text(e, "/operator") {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_string(),
            "DoesNotExist" => format!("!{key}"),
            other => format!("{key} {other}"),
        });
    }
    terms.sort();
    if terms.is_empty() {
        "<none>".into()
    } else {
        terms.join(",")
    }
}

/// `layoutContainerCells`: container names and images, comma-separated.
fn containers(template_spec: &Value) -> (String, String) {
    let list = items(template_spec, "/containers");
    let names: Vec<&str> = list.iter().map(|c| text(c, "/name")).collect();
    let images: Vec<&str> = list.iter().map(|c| text(c, "/image")).collect();
    (names.join(","), images.join(","))
}

fn name_age(object: &Value, now: jiff::Timestamp) -> Vec<Value> {
    vec![name(object), age(object, now)]
}

// ---------------------------------------------------------------------------------------
// Printers

/// `printPod`: READY, STATUS (the reason `kubectl get pods` shows), RESTARTS (with the
/// time since the last one), then the wide columns. Init containers are not run by the
/// emulated kubelet (refused), so only app containers count.
fn pod(p: &Value, now: jiff::Timestamp) -> Vec<Value> {
    let phase = text(p, "/status/phase");
    let mut reason = match text(p, "/status/reason") {
        "" => phase.to_string(),
        given => given.to_string(),
    };
    let conditions = items(p, "/status/conditions");
    if conditions
        .iter()
        .any(|c| text(c, "/type") == "PodScheduled" && text(c, "/reason") == "SchedulingGated")
    {
        reason = "SchedulingGated".into();
    }
    let total = items(p, "/spec/containers").len();
    let mut ready = 0;
    let mut restarts = 0;
    let mut last_restart: Option<jiff::Timestamp> = None;
    let mut has_running = false;
    let mut error_reason = String::new();
    for c in items(p, "/status/containerStatuses").iter().rev() {
        restarts += int(c, "/restartCount");
        if let Some(finished) = timestamp(c, "/lastState/terminated/finishedAt")
            && last_restart.is_none_or(|l| l < finished)
        {
            last_restart = Some(finished);
        }
        let waiting = text(c, "/state/waiting/reason");
        if !waiting.is_empty() {
            reason = waiting.to_string();
        } else if let Some(terminated) = c.pointer("/state/terminated") {
            let code = int(terminated, "/exitCode");
            reason = match (text(terminated, "/reason"), int(terminated, "/signal")) {
                ("", 0) => format!("ExitCode:{code}"),
                ("", signal) => format!("Signal:{signal}"),
                (given, _) => given.to_string(),
            };
            if code != 0 {
                error_reason = reason.clone();
            }
        } else if c.get("ready").and_then(Value::as_bool) == Some(true)
            && c.pointer("/state/running").is_some()
        {
            has_running = true;
            ready += 1;
        }
    }
    if reason == "Completed" {
        let pod_ready = conditions
            .iter()
            .any(|c| text(c, "/type") == "Ready" && text(c, "/status") == "True");
        if has_running && pod_ready {
            reason = "Running".into();
        } else if !error_reason.is_empty() {
            reason = error_reason;
        } else if has_running {
            reason = "NotReady".into();
        }
    }
    if p.pointer("/metadata/deletionTimestamp").is_some() {
        if text(p, "/status/reason") == "NodeLost" {
            reason = "Unknown".into();
        } else if !matches!(phase, "Succeeded" | "Failed") {
            reason = "Terminating".into();
        }
    }
    let restarts_text = match last_restart {
        Some(at) if restarts != 0 => format!("{restarts} ({} ago)", since(Some(at), now)),
        _ => restarts.to_string(),
    };
    let ip = items(p, "/status/podIPs")
        .first()
        .map(|i| text(i, "/ip"))
        .filter(|ip| !ip.is_empty())
        .unwrap_or("<none>");
    let or_none = |s: &str| {
        if s.is_empty() {
            "<none>".to_string()
        } else {
            s.to_string()
        }
    };
    let gates = items(p, "/spec/readinessGates");
    let readiness_gates = if gates.is_empty() {
        "<none>".to_string()
    } else {
        let true_ones = gates
            .iter()
            .filter(|g| {
                conditions.iter().any(|c| {
                    text(c, "/type") == text(g, "/conditionType") && text(c, "/status") == "True"
                })
            })
            .count();
        format!("{true_ones}/{}", gates.len())
    };
    vec![
        name(p),
        json!(format!("{ready}/{total}")),
        json!(reason),
        json!(restarts_text),
        age(p, now),
        json!(ip),
        json!(or_none(text(p, "/spec/nodeName"))),
        json!(or_none(text(p, "/status/nominatedNodeName"))),
        json!(readiness_gates),
    ]
}

/// `printNode`: Ready or NotReady (Unknown without the condition), SchedulingDisabled,
/// roles from `node-role.kubernetes.io/<role>` and `kubernetes.io/role`.
fn node(n: &Value, now: jiff::Timestamp) -> Vec<Value> {
    let mut status: Vec<String> = items(n, "/status/conditions")
        .iter()
        .filter(|c| text(c, "/type") == "Ready")
        .map(|c| {
            if text(c, "/status") == "True" {
                "Ready".to_string()
            } else {
                "NotReady".to_string()
            }
        })
        .take(1)
        .collect();
    if status.is_empty() {
        status.push("Unknown".into());
    }
    if n.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
        status.push("SchedulingDisabled".into());
    }
    let mut roles: Vec<String> = n
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| match k.strip_prefix("node-role.kubernetes.io/") {
            Some(role) if !role.is_empty() => Some(role.to_string()),
            _ if k == "kubernetes.io/role" => {
                v.as_str().filter(|v| !v.is_empty()).map(str::to_string)
            }
            _ => None,
        })
        .collect();
    roles.sort();
    roles.dedup();
    let address = |type_: &str| {
        items(n, "/status/addresses")
            .iter()
            .find(|a| text(a, "/type") == type_)
            .map(|a| text(a, "/address").to_string())
            .unwrap_or_else(|| "<none>".into())
    };
    let info = |field: &str| match text(n, &format!("/status/nodeInfo/{field}")) {
        "" => "<unknown>".to_string(),
        v => v.to_string(),
    };
    let mut kernel = info("kernelVersion");
    let arch = text(n, "/status/nodeInfo/architecture");
    if !arch.is_empty() {
        kernel = format!("{kernel} ({arch})");
    }
    vec![
        name(n),
        json!(status.join(",")),
        json!(if roles.is_empty() {
            "<none>".to_string()
        } else {
            roles.join(",")
        }),
        age(n, now),
        json!(text(n, "/status/nodeInfo/kubeletVersion")),
        json!(address("InternalIP")),
        json!(address("ExternalIP")),
        json!(info("osImage")),
        json!(kernel),
        json!(info("containerRuntimeVersion")),
    ]
}

fn namespace(ns: &Value, now: jiff::Timestamp) -> Vec<Value> {
    vec![name(ns), json!(text(ns, "/status/phase")), age(ns, now)]
}

/// `printEvent` on the core/v1 layout.
fn event(e: &Value, now: jiff::Timestamp) -> Vec<Value> {
    event_cells(
        e,
        now,
        EventFields {
            first: "/firstTimestamp",
            last: "/lastTimestamp",
            count: "/count",
            involved: "/involvedObject",
            message: "/message",
            component: "/source/component",
            host: "/source/host",
        },
    )
}

/// The same for events.k8s.io/v1, whose fields kube-apiserver converts to core/v1's
/// before printing (`regarding` is `involvedObject`, `note` is `message`, …).
fn event_v1(e: &Value, now: jiff::Timestamp) -> Vec<Value> {
    event_cells(
        e,
        now,
        EventFields {
            first: "/deprecatedFirstTimestamp",
            last: "/deprecatedLastTimestamp",
            count: "/deprecatedCount",
            involved: "/regarding",
            message: "/note",
            component: "/deprecatedSource/component",
            host: "/deprecatedSource/host",
        },
    )
}

struct EventFields {
    first: &'static str,
    last: &'static str,
    count: &'static str,
    involved: &'static str,
    message: &'static str,
    component: &'static str,
    host: &'static str,
}

fn event_cells(e: &Value, now: jiff::Timestamp, f: EventFields) -> Vec<Value> {
    let first = match timestamp(e, f.first) {
        Some(at) => since(Some(at), now),
        None => since(timestamp(e, "/eventTime"), now),
    };
    let mut last = match timestamp(e, f.last) {
        Some(at) => since(Some(at), now),
        None => first.clone(),
    };
    let mut count = int(e, f.count);
    if let Some(series) = e.get("series").filter(|s| !s.is_null()) {
        last = since(timestamp(series, "/lastObservedTime"), now);
        count = int(series, "/count");
    } else if count == 0 {
        count = 1;
    }
    let kind = text(e, &format!("{}/kind", f.involved)).to_ascii_lowercase();
    let object_name = text(e, &format!("{}/name", f.involved));
    let target = if object_name.is_empty() {
        kind
    } else {
        format!("{kind}/{object_name}")
    };
    let component = match text(e, f.component) {
        "" => text(e, "/reportingController"),
        c => c,
    };
    let host = match text(e, f.host) {
        "" => text(e, "/reportingInstance"),
        h => h,
    };
    let source = if host.is_empty() {
        component.to_string()
    } else {
        format!("{component}, {host}")
    };
    vec![
        json!(last),
        json!(text(e, "/type")),
        json!(text(e, "/reason")),
        json!(target),
        json!(text(e, &format!("{}/fieldPath", f.involved))),
        json!(source),
        json!(text(e, f.message).trim()),
        json!(first),
        json!(count),
        name(e),
    ]
}

fn config_map(cm: &Value, now: jiff::Timestamp) -> Vec<Value> {
    let count = |field: &str| {
        cm.get(field)
            .and_then(Value::as_object)
            .map_or(0, serde_json::Map::len)
    };
    vec![
        name(cm),
        json!(count("data") + count("binaryData")),
        age(cm, now),
    ]
}

fn service_account_with_secrets(sa: &Value, now: jiff::Timestamp) -> Vec<Value> {
    vec![name(sa), json!(items(sa, "/secrets").len()), age(sa, now)]
}

fn lease(l: &Value, now: jiff::Timestamp) -> Vec<Value> {
    vec![name(l), json!(text(l, "/spec/holderIdentity")), age(l, now)]
}

/// `printService`: the external column by type (`getServiceExternalIP`; no load
/// balancer is ever provisioned here, so LoadBalancer stays `<pending>` as on kind) and
/// `port[:nodePort]/protocol` per port (`makePortString`).
fn service(svc: &Value, now: jiff::Timestamp) -> Vec<Value> {
    let kind = text(svc, "/spec/type");
    let cluster_ip = items(svc, "/spec/clusterIPs")
        .first()
        .and_then(Value::as_str)
        .unwrap_or("<none>");
    let external_ips: Vec<&str> = items(svc, "/spec/externalIPs")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let external = match kind {
        "ExternalName" => text(svc, "/spec/externalName").to_string(),
        _ if !external_ips.is_empty() => external_ips.join(","),
        "LoadBalancer" => "<pending>".into(),
        _ => "<none>".into(),
    };
    let ports: Vec<String> = items(svc, "/spec/ports")
        .iter()
        .map(|p| {
            let protocol = text(p, "/protocol");
            match int(p, "/nodePort") {
                0 => format!("{}/{protocol}", int(p, "/port")),
                node_port => format!("{}:{node_port}/{protocol}", int(p, "/port")),
            }
        })
        .collect();
    let ports = if ports.is_empty() {
        "<none>".into()
    } else {
        ports.join(",")
    };
    vec![
        name(svc),
        json!(kind),
        json!(cluster_ip),
        json!(external),
        json!(ports),
        age(svc, now),
        json!(format_labels(svc.pointer("/spec/selector"))),
    ]
}

/// `printEndpointSlice`: at most three ports and addresses, then `+ N more...`
/// (`listWithMoreString`), `<unset>` for none.
fn endpoint_slice(slice: &Value, now: jiff::Timestamp) -> Vec<Value> {
    fn at_most_three(list: Vec<String>) -> String {
        match list.len() {
            0 => "<unset>".into(),
            n if n > 3 => format!("{} + {} more...", list[..3].join(","), n - 3),
            _ => list.join(","),
        }
    }
    let ports = items(slice, "/ports")
        .iter()
        .map(|p| match p.get("port").and_then(Value::as_i64) {
            Some(port) => port.to_string(),
            None => p
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("*")
                .to_string(),
        })
        .collect();
    let addresses = items(slice, "/endpoints")
        .iter()
        .flat_map(|e| items(e, "/addresses"))
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect();
    vec![
        name(slice),
        json!(text(slice, "/addressType")),
        json!(at_most_three(ports)),
        json!(at_most_three(addresses)),
        age(slice, now),
    ]
}

/// `printJob`: the status from the first condition that decides it, completions as
/// `succeeded/completions`, the duration from start to completion (or now).
fn job(j: &Value, now: jiff::Timestamp) -> Vec<Value> {
    let (names, images) = containers(j.pointer("/spec/template/spec").unwrap_or(&Value::Null));
    let succeeded = int(j, "/status/succeeded");
    let completions = match j.pointer("/spec/completions").and_then(Value::as_i64) {
        Some(total) => format!("{succeeded}/{total}"),
        None => match int(j, "/spec/parallelism") {
            p if p > 1 => format!("{succeeded}/1 of {p}"),
            _ => format!("{succeeded}/1"),
        },
    };
    let started = timestamp(j, "/status/startTime");
    let duration = match (started, timestamp(j, "/status/completionTime")) {
        (None, _) => String::new(),
        (Some(start), None) => since(Some(start), now),
        (Some(start), Some(end)) => since(Some(start), end),
    };
    let has = |kind: &str| {
        items(j, "/status/conditions")
            .iter()
            .any(|c| text(c, "/type") == kind && text(c, "/status") == "True")
    };
    let deleting = j.pointer("/metadata/deletionTimestamp").is_some();
    let status = if has("Complete") {
        "Complete"
    } else if has("Failed") {
        "Failed"
    } else if deleting {
        "Terminating"
    } else if has("Suspended") {
        "Suspended"
    } else if has("FailureTarget") {
        "FailureTarget"
    } else if has("SuccessCriteriaMet") {
        "SuccessCriteriaMet"
    } else {
        "Running"
    };
    vec![
        name(j),
        json!(status),
        json!(completions),
        json!(duration),
        age(j, now),
        json!(names),
        json!(images),
        json!(format_selector(j.pointer("/spec/selector"))),
    ]
}

fn deployment(d: &Value, now: jiff::Timestamp) -> Vec<Value> {
    let (names, images) = containers(d.pointer("/spec/template/spec").unwrap_or(&Value::Null));
    let desired = d
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    vec![
        name(d),
        json!(format!("{}/{desired}", int(d, "/status/readyReplicas"))),
        json!(int(d, "/status/updatedReplicas")),
        json!(int(d, "/status/availableReplicas")),
        age(d, now),
        json!(names),
        json!(images),
        json!(format_selector(d.pointer("/spec/selector"))),
    ]
}

fn replica_set(rs: &Value, now: jiff::Timestamp) -> Vec<Value> {
    let (names, images) = containers(rs.pointer("/spec/template/spec").unwrap_or(&Value::Null));
    vec![
        name(rs),
        json!(
            rs.pointer("/spec/replicas")
                .and_then(Value::as_i64)
                .unwrap_or(1)
        ),
        json!(int(rs, "/status/replicas")),
        json!(int(rs, "/status/readyReplicas")),
        age(rs, now),
        json!(names),
        json!(images),
        json!(format_selector(rs.pointer("/spec/selector"))),
    ]
}

fn daemon_set(ds: &Value, now: jiff::Timestamp) -> Vec<Value> {
    let spec = ds.pointer("/spec/template/spec").unwrap_or(&Value::Null);
    let (names, images) = containers(spec);
    vec![
        name(ds),
        json!(int(ds, "/status/desiredNumberScheduled")),
        json!(int(ds, "/status/currentNumberScheduled")),
        json!(int(ds, "/status/numberReady")),
        json!(int(ds, "/status/updatedNumberScheduled")),
        json!(int(ds, "/status/numberAvailable")),
        json!(format_labels(spec.get("nodeSelector"))),
        age(ds, now),
        json!(names),
        json!(images),
        json!(format_selector(ds.pointer("/spec/selector"))),
    ]
}

/// `rbac.SubjectsStrings`: users, groups, `namespace/name` of service accounts.
fn role_binding(rb: &Value, now: jiff::Timestamp) -> Vec<Value> {
    let (mut users, mut groups, mut sas) = (Vec::new(), Vec::new(), Vec::new());
    for s in items(rb, "/subjects") {
        match text(s, "/kind") {
            "User" => users.push(text(s, "/name").to_string()),
            "Group" => groups.push(text(s, "/name").to_string()),
            "ServiceAccount" => {
                sas.push(format!("{}/{}", text(s, "/namespace"), text(s, "/name")));
            }
            _ => {}
        }
    }
    vec![
        name(rb),
        json!(format!(
            "{}/{}",
            text(rb, "/roleRef/kind"),
            text(rb, "/roleRef/name")
        )),
        age(rb, now),
        json!(users.join(", ")),
        json!(groups.join(", ")),
        json!(sas.join(", ")),
    ]
}

fn priority_class(pc: &Value, now: jiff::Timestamp) -> Vec<Value> {
    vec![
        name(pc),
        json!(int(pc, "/value")),
        json!(
            pc.get("globalDefault")
                .and_then(Value::as_bool)
                .unwrap_or(false)
        ),
        age(pc, now),
        json!(text(pc, "/preemptionPolicy")),
    ]
}

fn admission_policy(p: &Value, now: jiff::Timestamp) -> Vec<Value> {
    let param_kind = match p.pointer("/spec/paramKind").filter(|v| !v.is_null()) {
        Some(k) => format!("{}/{}", text(k, "/apiVersion"), text(k, "/kind")),
        None => "<unset>".into(),
    };
    vec![
        name(p),
        json!(items(p, "/spec/validations").len()),
        json!(param_kind),
        age(p, now),
    ]
}

fn admission_policy_binding(b: &Value, now: jiff::Timestamp) -> Vec<Value> {
    let param = match b.pointer("/spec/paramRef").filter(|v| !v.is_null()) {
        Some(r) if !text(r, "/name").is_empty() => match text(r, "/namespace") {
            "" => format!("*/{}", text(r, "/name")),
            ns => format!("{ns}/{}", text(r, "/name")),
        },
        Some(r) if r.get("selector").is_some() => format_selector(r.get("selector")),
        _ => "<unset>".into(),
    };
    vec![
        name(b),
        json!(text(b, "/spec/policyName")),
        json!(param),
        age(b, now),
    ]
}

fn crd(c: &Value, _now: jiff::Timestamp) -> Vec<Value> {
    let mut versions: Vec<String> = items(c, "/spec/versions")
        .iter()
        .filter(|v| v.get("served").and_then(Value::as_bool) == Some(true))
        .map(|v| {
            let mut label = text(v, "/name").to_string();
            if v.get("storage").and_then(Value::as_bool) == Some(true) {
                label.push_str("(storage)");
            }
            label
        })
        .collect();
    versions.sort();
    let short: Vec<&str> = items(c, "/spec/names/shortNames")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let established = items(c, "/status/conditions")
        .iter()
        .any(|x| text(x, "/type") == "Established" && text(x, "/status") == "True");
    vec![
        name(c),
        json!(text(c, "/spec/scope")),
        json!(versions.join(",")),
        c.pointer("/metadata/creationTimestamp")
            .cloned()
            .unwrap_or(Value::Null),
        json!(text(c, "/spec/group")),
        json!(text(c, "/spec/names/kind")),
        json!(short.join(",")),
        json!(established),
    ]
}

fn resource_class(rc: &Value, now: jiff::Timestamp) -> Vec<Value> {
    vec![name(rc), json!(text(rc, "/driverName")), age(rc, now)]
}

/// `resourceClaimState` of 1.29 (classic): `deallocating` when allocated, unreserved and
/// deleted or asked to deallocate.
fn classic_claim(c: &Value, now: jiff::Timestamp) -> Vec<Value> {
    let mut states = Vec::new();
    let deleted = c.pointer("/metadata/deletionTimestamp").is_some();
    if deleted {
        states.push("deleted");
    }
    if c.pointer("/status/allocation").is_none_or(Value::is_null) {
        if !deleted {
            states.push("pending");
        }
    } else {
        states.push("allocated");
        if !items(c, "/status/reservedFor").is_empty() {
            states.push("reserved");
        } else if deleted
            || c.pointer("/status/deallocationRequested")
                .and_then(Value::as_bool)
                == Some(true)
        {
            states.push("deallocating");
        }
    }
    vec![
        name(c),
        json!(text(c, "/spec/resourceClassName")),
        json!(text(c, "/spec/allocationMode")),
        json!(states.join(",")),
        age(c, now),
    ]
}

fn classic_claim_template(t: &Value, now: jiff::Timestamp) -> Vec<Value> {
    vec![
        name(t),
        json!(text(t, "/spec/spec/resourceClassName")),
        json!(text(t, "/spec/spec/allocationMode")),
        age(t, now),
    ]
}

fn scheduling_context(s: &Value, now: jiff::Timestamp) -> Vec<Value> {
    vec![name(s), json!(text(s, "/spec/selectedNode")), age(s, now)]
}

/// `resourceClaimState` of structured DRA.
fn claim(c: &Value, now: jiff::Timestamp) -> Vec<Value> {
    let mut states = Vec::new();
    let deleted = c.pointer("/metadata/deletionTimestamp").is_some();
    if deleted {
        states.push("deleted");
    }
    if c.pointer("/status/allocation").is_none_or(Value::is_null) {
        if !deleted {
            states.push("pending");
        }
    } else {
        states.push("allocated");
        if !items(c, "/status/reservedFor").is_empty() {
            states.push("reserved");
        }
    }
    vec![name(c), json!(states.join(",")), age(c, now)]
}

fn resource_slice(s: &Value, now: jiff::Timestamp) -> Vec<Value> {
    vec![
        name(s),
        json!(text(s, "/spec/nodeName")),
        json!(text(s, "/spec/driver")),
        json!(text(s, "/spec/pool/name")),
        age(s, now),
    ]
}

// ---------------------------------------------------------------------------------------
// Custom resources

/// The cells of a CRD's `additionalPrinterColumns` (`(type, JSONPath)` each), as
/// apiextensions-apiserver's table convertor makes them: a missing value is `null`;
/// `string` columns print the value (lists and maps as compact JSON, as client-go's
/// JSONPath prints them); `integer`, `number`, `boolean` keep the JSON value when it has
/// that type; `date` is the time since.
pub(super) fn custom_cells(
    object: &Value,
    columns: &[(String, String)],
    now: jiff::Timestamp,
) -> Vec<Value> {
    let mut cells = vec![name(object)];
    for (type_, path) in columns {
        let value = json_path(object, path);
        let cell = match (type_.as_str(), value) {
            (_, None | Some(Value::Null)) => Value::Null,
            ("string", Some(Value::String(s))) => json!(s),
            ("string", Some(v @ (Value::Array(_) | Value::Object(_)))) => json!(v.to_string()),
            ("string", Some(v)) => json!(v.to_string()),
            ("integer", Some(v)) => v
                .as_i64()
                .or_else(|| v.as_f64().map(|f| f as i64))
                .map_or(Value::Null, |i| json!(i)),
            ("number", Some(v)) => v.as_f64().map_or(Value::Null, |f| json!(f)),
            ("boolean", Some(Value::Bool(b))) => json!(b),
            ("date", Some(Value::String(s))) => match s.parse::<jiff::Timestamp>() {
                Ok(at) => json!(since(Some(at), now)),
                Err(_) => json!("<invalid>"),
            },
            _ => Value::Null,
        };
        cells.push(cell);
    }
    cells
}

/// The simple JSONPaths printer columns use (`.spec.count`, `.status.phase`): fields only.
fn json_path<'a>(object: &'a Value, path: &str) -> Option<&'a Value> {
    let mut at = object;
    for field in path
        .trim_start_matches('.')
        .split('.')
        .filter(|f| !f.is_empty())
    {
        at = at.get(field)?;
    }
    Some(at)
}
