//! CDI, for the process runner: the spec files read, the edits applied to a host process.

use super::*;

/// One CDI spec file, reduced to what the process runner applies or refuses.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CdiSpec {
    pub(super) path: PathBuf,
    /// `vendor/class`
    pub(super) kind: String,
    /// The spec's top-level containerEdits, applied once before its first requested device.
    pub(super) edits: Edits,
    pub(super) devices: Vec<CdiDevice>,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) struct CdiDevice {
    pub(super) name: String,
    pub(super) edits: Edits,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub(super) struct Edits {
    pub(super) env: Vec<(String, String)>,
    /// `deviceNodes`: (`path` in the container, `hostPath` when given).
    pub(super) device_nodes: Vec<(String, Option<String>)>,
    /// Names of the other non-env edits present (mounts, hooks, ...).
    pub(super) other: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct RawSpec {
    #[allow(dead_code)]
    pub(super) cdi_version: String,
    pub(super) kind: String,
    #[serde(default)]
    pub(super) devices: Vec<RawDevice>,
    #[serde(default)]
    pub(super) container_edits: RawEdits,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct RawDevice {
    pub(super) name: String,
    #[serde(default)]
    pub(super) container_edits: RawEdits,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(super) struct RawEdits {
    #[serde(default)]
    pub(super) env: Option<Vec<String>>,
    #[serde(default)]
    pub(super) device_nodes: Option<Vec<RawDeviceNode>>,
    #[serde(flatten)]
    pub(super) other: serde_json::Map<String, serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct RawDeviceNode {
    pub(super) path: String,
    #[serde(default)]
    pub(super) host_path: Option<String>,
}

impl RawEdits {
    pub(super) fn into_edits(self, path: &Path, what: &str) -> Result<Edits, RuntimeError> {
        let mut env = Vec::new();
        for entry in self.env.unwrap_or_default() {
            match entry.split_once('=') {
                Some((key, value)) if !key.is_empty() => {
                    env.push((key.to_string(), value.to_string()))
                }
                _ => {
                    return Err(RuntimeError::InvalidCdiSpec {
                        path: path.to_path_buf(),
                        reason: format!("{what}: env entry {entry:?} is not KEY=VALUE"),
                    });
                }
            }
        }
        let other = self
            .other
            .into_iter()
            .filter(|(_, value)| !is_empty_value(value))
            .map(|(key, _)| key)
            .collect();
        let device_nodes = self
            .device_nodes
            .unwrap_or_default()
            .into_iter()
            .map(|n| (n.path, n.host_path.filter(|h| !h.is_empty())))
            .collect();
        Ok(Edits {
            env,
            device_nodes,
            other,
        })
    }
}

pub(super) fn is_empty_value(value: &serde_json::Value) -> bool {
    match value {
        serde_json::Value::Null => true,
        serde_json::Value::Array(a) => a.is_empty(),
        serde_json::Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

/// Parses one spec file's text; `.json` as JSON, anything else as YAML.
pub(crate) fn parse_cdi_spec(path: &Path, text: &str) -> Result<CdiSpec, RuntimeError> {
    let invalid = |reason: String| RuntimeError::InvalidCdiSpec {
        path: path.to_path_buf(),
        reason,
    };
    let raw: RawSpec = if path.extension().is_some_and(|e| e == "json") {
        serde_json::from_str(text).map_err(|e| invalid(e.to_string()))?
    } else {
        fake_dra_ops::yaml::check_depth(text.as_bytes()).map_err(|e| invalid(e.to_string()))?;
        serde_yaml_ng::from_str(text).map_err(|e| invalid(e.to_string()))?
    };
    match raw.kind.split_once('/') {
        Some((vendor, class))
            if !vendor.is_empty() && !class.is_empty() && !class.contains('/') => {}
        _ => return Err(invalid(format!("kind {:?} is not vendor/class", raw.kind))),
    }
    let edits = raw.container_edits.into_edits(path, "containerEdits")?;
    let mut devices = Vec::new();
    for device in raw.devices {
        let edits = device
            .container_edits
            .into_edits(path, &format!("device {:?}", device.name))?;
        devices.push(CdiDevice {
            name: device.name,
            edits,
        });
    }
    Ok(CdiSpec {
        path: path.to_path_buf(),
        kind: raw.kind,
        edits,
        devices,
    })
}

/// Every `*.json` / `*.yaml` spec in `dir`, sorted by file name, plus a note per file that
/// did not parse. Like the CDI registry, a broken file doesn't hide the others; the notes
/// show up in the error when a device then can't be found. A missing dir has no specs.
pub(crate) fn load_cdi_specs(dir: &Path) -> Result<(Vec<CdiSpec>, Vec<String>), RuntimeError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), Vec::new())),
        Err(source) => {
            return Err(RuntimeError::ReadCdi {
                path: dir.to_path_buf(),
                source,
            });
        }
    };
    let mut paths = Vec::new();
    for entry in entries {
        let path = entry
            .map_err(|source| RuntimeError::ReadCdi {
                path: dir.to_path_buf(),
                source,
            })?
            .path();
        if path.extension().is_some_and(|e| e == "json" || e == "yaml") && path.is_file() {
            paths.push(path);
        }
    }
    paths.sort();
    let (mut specs, mut skipped) = (Vec::new(), Vec::new());
    for path in paths {
        let parsed = match std::fs::read_to_string(&path) {
            Ok(text) => parse_cdi_spec(&path, &text),
            // Removed between listing and reading (a claim being unprepared).
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => Err(RuntimeError::ReadCdi {
                path: path.clone(),
                source,
            }),
        };
        match parsed {
            Ok(spec) => specs.push(spec),
            Err(e) => {
                tracing::warn!("skipping CDI spec: {e}");
                skipped.push(e.to_string());
            }
        }
    }
    Ok((specs, skipped))
}

/// Splits `vendor/class=name`.
pub(crate) fn parse_qualified_id(id: &str) -> Result<(&str, &str), RuntimeError> {
    let invalid = || RuntimeError::InvalidCdiId { id: id.to_string() };
    let (kind, name) = id.split_once('=').ok_or_else(invalid)?;
    let (vendor, class) = kind.split_once('/').ok_or_else(invalid)?;
    if vendor.is_empty() || class.is_empty() || name.is_empty() || class.contains('/') {
        return Err(invalid());
    }
    Ok((kind, name))
}

/// The env edits the requested devices make, in the order CDI applies them: each spec's
/// top-level edits before its first requested device, then the device's own. Any other
/// edit is refused: the process runner can't apply it and must not pretend to.
pub(crate) fn resolve_cdi_env(
    specs: &[CdiSpec],
    ids: &[String],
    dir: &Path,
    skipped: &[String],
) -> Result<Vec<(String, String)>, RuntimeError> {
    let mut env = Vec::new();
    let mut seen_specs = BTreeSet::new();
    for id in ids {
        let (kind, name) = parse_qualified_id(id)?;
        let matches: Vec<(usize, &CdiDevice)> = specs
            .iter()
            .enumerate()
            .filter(|(_, s)| s.kind == kind)
            .flat_map(|(i, s)| {
                s.devices
                    .iter()
                    .filter(|d| d.name == name)
                    .map(move |d| (i, d))
            })
            .collect();
        let (index, device) = match matches.as_slice() {
            [one] => *one,
            [] => {
                let notes = if skipped.is_empty() {
                    String::new()
                } else {
                    format!(" (unparsable specs skipped: {})", skipped.join("; "))
                };
                return Err(RuntimeError::CdiDeviceNotFound {
                    id: id.clone(),
                    dir: dir.to_path_buf(),
                    notes,
                });
            }
            many => {
                return Err(RuntimeError::CdiDeviceAmbiguous {
                    id: id.clone(),
                    files: many.iter().map(|(i, _)| specs[*i].path.clone()).collect(),
                });
            }
        };
        let spec = &specs[index];
        if seen_specs.insert(index) {
            if let Some(edit) = spec.edits.other.first() {
                return Err(RuntimeError::UnsupportedEdit {
                    device: id.clone(),
                    edit: format!(
                        "{edit} (top-level containerEdits of {})",
                        spec.path.display()
                    ),
                });
            }
            check_device_nodes(id, &spec.edits.device_nodes)?;
            env.extend(spec.edits.env.iter().cloned());
        }
        if let Some(edit) = device.edits.other.first() {
            return Err(RuntimeError::UnsupportedEdit {
                device: id.clone(),
                edit: edit.clone(),
            });
        }
        check_device_nodes(id, &device.edits.device_nodes)?;
        env.extend(device.edits.env.iter().cloned());
    }
    Ok(env)
}

/// What a host process can do with CDI device nodes: see a node that already is at its
/// container path on the host (`hostPath` absent or the same). It cannot put a node at
/// another path: it sees the host's files, and has no mount namespace of its own. Any
/// other case is refused, naming the node and why, as runc would refuse a missing one.
fn check_device_nodes(
    device: &str,
    nodes: &[(String, Option<String>)],
) -> Result<(), RuntimeError> {
    for (i, (path, host_path)) in nodes.iter().enumerate() {
        let host = host_path.as_deref().unwrap_or(path);
        let refuse = |reason: String| RuntimeError::DeviceNode {
            device: device.to_owned(),
            index: i,
            reason,
        };
        if let Err(e) = std::fs::metadata(host) {
            return Err(refuse(format!("host node {host} cannot be used: {e}")));
        }
        if host != path {
            return Err(refuse(format!(
                "would appear at {path}, made from the host's {host}; a process runner's process sees the host's files, where {path} is not that node (the podman runtime places it: apt-get install podman runc busybox-static)"
            )));
        }
    }
    Ok(())
}

/// The process runner's environment, built as podman/OCI builds a container's: the
/// runtime's defaults, the container's env, then the CDI edits. A later value of a name
/// replaces the earlier one in place (what the OCI spec generator does).
pub(crate) fn process_env(
    pod: &str,
    container_env: &[(String, String)],
    cdi_env: &[(String, String)],
) -> Vec<(String, String)> {
    let defaults = [
        ("PATH", DEFAULT_PATH),
        ("TERM", "xterm"),
        ("HOSTNAME", &hostname_for(pod)),
        ("HOME", "/"),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()));
    let mut env: Vec<(String, String)> = Vec::new();
    for (key, value) in defaults.iter().chain(container_env).chain(cdi_env) {
        match env.iter_mut().find(|(k, _)| k == key) {
            Some(existing) => existing.1 = value.clone(),
            None => env.push((key.clone(), value.clone())),
        }
    }
    env
}
