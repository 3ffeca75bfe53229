//! What injecting a CDI device does to a container: environment variables, device
//! nodes, mounts, OCI hooks and additional groups, built with constructors and checked
//! before a spec is written. Fields left empty are not written, so a spec only mentions
//! (and only needs the CDI version of) what it uses.

use serde::{Deserialize, Serialize};

/// One CDI device: a name under the claim and its edits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Device {
    /// Unique within the kind.
    pub name: String,
    /// What injecting the device does; never empty.
    pub container_edits: ContainerEdits,
}

impl Device {
    /// Device `name` with `edits`.
    pub fn new(name: impl Into<String>, edits: ContainerEdits) -> Self {
        Self {
            name: name.into(),
            container_edits: edits,
        }
    }
}

/// The edits of one device (CDI `containerEdits`), built with [`ContainerEdits::new`]
/// and the methods after it.
///
/// ```
/// use dra_kubelet_plugin::cdi::{ContainerEdits, DeviceNode, Mount};
///
/// let edits = ContainerEdits::new()
///     .env("FPGA_DEVICE_0", "fpga0")
///     .device_node(DeviceNode::new("/dev/fpga0").host_path("/dev/null").permissions("rw"))
///     .mount(Mount::bind("/opt/fpga/lib", "/usr/local/lib/fpga").read_only());
/// assert!(edits.check().is_ok());
/// assert_eq!(edits.host_paths()[1], ("mounts[0].hostPath".to_owned(), "/opt/fpga/lib"));
///
/// let err = ContainerEdits::new().device_node(DeviceNode::new("dev/fpga0")).check().unwrap_err();
/// assert_eq!(err.to_string(), "deviceNodes[0].path \"dev/fpga0\" must be an absolute path");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ContainerEdits {
    /// `NAME=value` entries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// Device nodes created in the container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub device_nodes: Vec<DeviceNode>,
    /// Mounts added to the container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<Mount>,
    /// OCI hooks run for the container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<Hook>,
    /// Groups the container's process also belongs to (CDI 0.7.0).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub additional_gids: Vec<u32>,
}

impl ContainerEdits {
    /// No edits.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the variable `name=value`.
    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.env.push(format!("{name}={value}"));
        self
    }

    /// Adds `NAME=value` entries.
    pub fn env_entries(mut self, entries: impl IntoIterator<Item = String>) -> Self {
        self.env.extend(entries);
        self
    }

    /// Adds a device node.
    pub fn device_node(mut self, node: DeviceNode) -> Self {
        self.device_nodes.push(node);
        self
    }

    /// Adds a mount.
    pub fn mount(mut self, mount: Mount) -> Self {
        self.mounts.push(mount);
        self
    }

    /// Adds an OCI hook.
    pub fn hook(mut self, hook: Hook) -> Self {
        self.hooks.push(hook);
        self
    }

    /// Adds a supplementary group.
    pub fn additional_gid(mut self, gid: u32) -> Self {
        self.additional_gids.push(gid);
        self
    }

    /// Whether injecting it would change nothing.
    pub fn is_empty(&self) -> bool {
        self.env.is_empty()
            && self.device_nodes.is_empty()
            && self.mounts.is_empty()
            && self.hooks.is_empty()
            && self.additional_gids.is_empty()
    }

    /// What the CDI specification allows, with the first field that breaks it named
    /// (`deviceNodes[0].path`).
    pub fn check(&self) -> Result<(), EditError> {
        for (i, e) in self.env.iter().enumerate() {
            match e.split_once('=') {
                Some((name, _)) if !name.is_empty() && !name.contains('\0') => {}
                _ => {
                    return Err(EditError::new(
                        format!("env[{i}]"),
                        format!("{e:?} is not NAME=value"),
                    ));
                }
            }
        }
        for (i, d) in self.device_nodes.iter().enumerate() {
            absolute(format!("deviceNodes[{i}].path"), &d.path)?;
            if let Some(host) = &d.host_path {
                absolute(format!("deviceNodes[{i}].hostPath"), host)?;
            }
            if let Some(t) = &d.r#type
                && !matches!(t.as_str(), "c" | "b" | "u" | "p")
            {
                return Err(EditError::new(
                    format!("deviceNodes[{i}].type"),
                    format!("{t:?} must be c, b, u or p"),
                ));
            }
            if let Some(p) = &d.permissions
                && (p.is_empty() || !p.chars().all(|c| matches!(c, 'r' | 'w' | 'm')))
            {
                return Err(EditError::new(
                    format!("deviceNodes[{i}].permissions"),
                    format!("{p:?} must be letters of \"rwm\""),
                ));
            }
        }
        for (i, m) in self.mounts.iter().enumerate() {
            if m.host_path.is_empty() {
                return Err(EditError::new(
                    format!("mounts[{i}].hostPath"),
                    "must not be empty",
                ));
            }
            absolute(format!("mounts[{i}].containerPath"), &m.container_path)?;
        }
        for (i, h) in self.hooks.iter().enumerate() {
            if !HOOK_NAMES.contains(&h.hook_name.as_str()) {
                return Err(EditError::new(
                    format!("hooks[{i}].hookName"),
                    format!("{:?} must be one of {}", h.hook_name, HOOK_NAMES.join(", ")),
                ));
            }
            absolute(format!("hooks[{i}].path"), &h.path)?;
        }
        Ok(())
    }

    /// The host files the edits use, each with its field: every device node's source and
    /// every bind mount's source. A runtime fails the container when one is missing.
    pub fn host_paths(&self) -> Vec<(String, &str)> {
        let nodes = self.device_nodes.iter().enumerate().map(|(i, d)| {
            let field = if d.host_path.is_some() {
                "hostPath"
            } else {
                "path"
            };
            (format!("deviceNodes[{i}].{field}"), d.source())
        });
        let mounts = self
            .mounts
            .iter()
            .enumerate()
            .filter(|(_, m)| m.is_bind() && m.host_path.starts_with('/'))
            .map(|(i, m)| (format!("mounts[{i}].hostPath"), m.host_path.as_str()));
        nodes.chain(mounts).collect()
    }
}

/// What is wrong with one field of a device's edits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} {message}")]
#[non_exhaustive]
pub struct EditError {
    /// The field, e.g. `deviceNodes[0].path`.
    pub field: String,
    /// What is wrong, with the rule.
    pub message: String,
}

impl EditError {
    fn new(field: String, message: impl Into<String>) -> Self {
        Self {
            field,
            message: message.into(),
        }
    }
}

/// The OCI hook names CDI accepts.
const HOOK_NAMES: &[&str] = &[
    "prestart",
    "createRuntime",
    "createContainer",
    "startContainer",
    "poststart",
    "poststop",
];

fn absolute(field: String, path: &str) -> Result<(), EditError> {
    if path.starts_with('/') && !path.contains('\0') {
        Ok(())
    } else {
        Err(EditError::new(
            field,
            format!("{path:?} must be an absolute path"),
        ))
    }
}

/// A device node in the container (CDI `deviceNodes[]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct DeviceNode {
    /// Its path in the container.
    pub path: String,
    /// The node on the host it is made from, when not at `path` (CDI 0.5.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_path: Option<String>,
    /// `c`, `b`, `u` or `p`; the runtime reads it from the host node when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r#type: Option<String>,
    /// Major number; from the host node when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub major: Option<i64>,
    /// Minor number; from the host node when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minor: Option<i64>,
    /// Cgroup access, letters of `rwm`; `rwm` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permissions: Option<String>,
    /// Owner in the container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    /// Group in the container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid: Option<u32>,
}

impl DeviceNode {
    /// The host's node at `path`, at the same path in the container.
    pub fn new(path: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            host_path: None,
            r#type: None,
            major: None,
            minor: None,
            permissions: None,
            uid: None,
            gid: None,
        }
    }

    /// Made from the host's node at `host_path`.
    pub fn host_path(mut self, host_path: impl Into<String>) -> Self {
        self.host_path = Some(host_path.into());
        self
    }

    /// Cgroup access, e.g. `rw`.
    pub fn permissions(mut self, permissions: impl Into<String>) -> Self {
        self.permissions = Some(permissions.into());
        self
    }

    /// The node's type, `c` or `b`, and numbers, instead of the host node's.
    pub fn numbers(mut self, r#type: &str, major: i64, minor: i64) -> Self {
        self.r#type = Some(r#type.to_owned());
        self.major = Some(major);
        self.minor = Some(minor);
        self
    }

    /// Owner and group in the container.
    pub fn owner(mut self, uid: u32, gid: u32) -> Self {
        self.uid = Some(uid);
        self.gid = Some(gid);
        self
    }

    /// Where the node is taken from on the host.
    pub fn source(&self) -> &str {
        self.host_path.as_deref().unwrap_or(&self.path)
    }
}

/// A mount in the container (CDI `mounts[]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Mount {
    /// The source on the host (or the file system's name, e.g. `tmpfs`).
    pub host_path: String,
    /// Where it appears in the container.
    pub container_path: String,
    /// Mount options, e.g. `ro`, `bind`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
    /// The file system type (CDI 0.4.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r#type: Option<String>,
}

impl Mount {
    /// A bind mount of the host's `host_path` at `container_path`.
    pub fn bind(host_path: impl Into<String>, container_path: impl Into<String>) -> Self {
        Self {
            host_path: host_path.into(),
            container_path: container_path.into(),
            options: vec!["rbind".to_owned()],
            r#type: None,
        }
    }

    /// Adds a mount option.
    pub fn option(mut self, option: impl Into<String>) -> Self {
        self.options.push(option.into());
        self
    }

    /// Read-only.
    pub fn read_only(self) -> Self {
        self.option("ro")
    }

    /// Of file system type `fs_type`.
    pub fn fs_type(mut self, fs_type: impl Into<String>) -> Self {
        self.r#type = Some(fs_type.into());
        self
    }

    /// Whether it mounts a host file or directory (a bind mount: type `bind` or none, or
    /// a `bind`/`rbind` option) rather than a file system such as `tmpfs`.
    pub fn is_bind(&self) -> bool {
        self.options.iter().any(|o| o == "bind" || o == "rbind")
            || matches!(self.r#type.as_deref(), None | Some("bind"))
    }
}

/// An OCI hook (CDI `hooks[]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Hook {
    /// When it runs: `prestart`, `createRuntime`, `createContainer`, `startContainer`,
    /// `poststart` or `poststop`.
    pub hook_name: String,
    /// The program, an absolute path on the host.
    pub path: String,
    /// Its arguments, `argv[0]` first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Its environment, `NAME=value`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// Seconds it may run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u32>,
}

impl Hook {
    /// Runs `path` at `hook_name` with `args` (`argv[0]` first).
    pub fn new(hook_name: &str, path: impl Into<String>, args: Vec<String>) -> Self {
        Self {
            hook_name: hook_name.to_owned(),
            path: path.into(),
            args,
            env: Vec::new(),
            timeout: None,
        }
    }

    /// Adds `name=value` to its environment.
    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.env.push(format!("{name}={value}"));
        self
    }

    /// Lets it run `seconds` at most.
    pub fn timeout(mut self, seconds: u32) -> Self {
        self.timeout = Some(seconds);
        self
    }
}
