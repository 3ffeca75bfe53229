//! What devices a node has: from the flags (`--profile`, `--num-devices`, `--models`,
//! `--gpus`) or from an inventory file that gives different nodes different devices
//! (fleet mode and heterogeneous clusters). Pure but for [`load`], which reads the file.
//!
//! The file (YAML or JSON; docs/profiles.md):
//!
//! ```yaml
//! apiVersion: fake.resource.3-shake.com/v1alpha1
//! kind: Inventory
//! models: [...]            # GPU models beyond the built-in catalog
//! nodes:                   # the first entry whose pattern matches the node name wins
//! - names: ["gpu-a-*"]
//!   profile: gpu
//!   gpus: [{model: A100-80GB, count: 8, sharing: partitioned}]
//! - names: ["*"]
//!   profile: fake
//!   numDevices: 8
//!   models: [ULTRA_10]
//! ```
//!
//! A node no entry matches gets the flags; so does every field an entry leaves out.
//! Everything the file says is checked when it is parsed, so a bad entry is found even if
//! no node of this process matches it.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::fake::devices::MAX_NUM_DEVICES;
use crate::gpu::devices::{MAX_GPUS_PER_NODE, NodeLayout};
pub use crate::gpu::groups::{GpuGroup, Sharing};
use crate::gpu::{Catalog, GpuError, GpuModel};

mod glob;

use glob::check_glob;
pub use glob::glob_matches;

/// The file's `apiVersion`.
pub const API_VERSION: &str = "fake.resource.3-shake.com/v1alpha1";
/// The file's `kind`.
pub const KIND: &str = "Inventory";
/// Largest inventory file read: far more than any fleet's file needs.
pub const MAX_FILE_BYTES: u64 = 1 << 20;
/// Longest node name pattern: a node name (a DNS subdomain) is at most this long.
pub const MAX_PATTERN_LEN: usize = 253;

/// Which device profile a node runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProfileKind {
    /// `fake`: the fake device (`FAKE_DEVICE_<n>`).
    Fake,
    /// `gpu`: GPU-like devices (`FAKE_GPU_<n>`).
    Gpu,
}

impl FromStr for ProfileKind {
    type Err = InventoryError;
    fn from_str(s: &str) -> Result<Self, InventoryError> {
        match s {
            "fake" => Ok(Self::Fake),
            "gpu" => Ok(Self::Gpu),
            _ => Err(InventoryError::UnknownProfile { got: s.to_owned() }),
        }
    }
}

impl fmt::Display for ProfileKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Fake => "fake",
            Self::Gpu => "gpu",
        })
    }
}

/// Why an inventory cannot be used; names the flag or the file, the entry and the limit.
#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    /// A profile name that is not one.
    #[error("unknown profile {got:?}; the profiles are fake and gpu")]
    UnknownProfile { got: String },
    /// A `--gpus` entry that does not parse.
    #[error(
        "--gpus entry {index} ({entry:?}): {reason}; the syntax is MODEL[:COUNT[:SHARING]],... e.g. A100-80GB:8:partitioned,L4-24GB:2"
    )]
    GpuFlag {
        index: usize,
        entry: String,
        reason: String,
    },
    /// The file cannot be read: missing, not a regular file, too large.
    #[error(transparent)]
    Read(#[from] fake_dra_ops::files::FileError),
    /// Not YAML or JSON of the file's shape (unknown fields included).
    #[error("inventory file {file}: {reason}")]
    Parse { file: String, reason: String },
    /// `apiVersion` or `kind` is not ours.
    #[error("inventory file {file}: {field} must be {wanted:?}, got {got:?}")]
    Header {
        file: String,
        field: &'static str,
        wanted: &'static str,
        got: String,
    },
    /// The file's `models`.
    #[error("inventory file {file}: models: {source}")]
    Models { file: String, source: GpuError },
    /// A `nodes` entry.
    #[error("inventory file {file}: nodes[{index}]: {reason}")]
    Entry {
        file: String,
        index: usize,
        reason: String,
    },
    /// What the flags give this node.
    #[error("node {node:?}: {reason}")]
    Flags { node: String, reason: String },
    /// An empty node name.
    #[error("--node-name must not be empty")]
    NoNodeName,
}

/// `--gpus`: comma-separated `MODEL[:COUNT[:SHARING]]` (count 1 and exclusive when left
/// out). An empty string is no GPUs. Models are checked against the catalog later, when
/// the inventory file's models are known.
pub fn parse_gpus(s: &str) -> Result<Vec<GpuGroup>, InventoryError> {
    if s.trim().is_empty() {
        return Ok(Vec::new());
    }
    s.split(',')
        .enumerate()
        .map(|(index, entry)| {
            let fail = |reason: String| InventoryError::GpuFlag {
                index,
                entry: entry.to_owned(),
                reason,
            };
            let mut parts = entry.trim().split(':');
            let model = parts.next().unwrap_or_default();
            if model.is_empty() {
                return Err(fail("the model is missing".into()));
            }
            let count = match parts.next() {
                None => 1,
                Some(c) => c
                    .parse::<usize>()
                    .map_err(|_| fail(format!("count {c:?} is not a whole number")))?,
            };
            if !(1..=MAX_GPUS_PER_NODE).contains(&count) {
                return Err(fail(format!(
                    "count must be between 1 and {MAX_GPUS_PER_NODE}, got {count}"
                )));
            }
            let sharing = match parts.next() {
                None => Sharing::Exclusive,
                Some(s) => s.parse().map_err(fail)?,
            };
            if let Some(extra) = parts.next() {
                return Err(fail(format!("unexpected {extra:?} after the sharing mode")));
            }
            Ok(GpuGroup {
                model: model.to_owned(),
                count,
                sharing,
            })
        })
        .collect()
}

/// `--gpus` as one clap value (`Vec` would make clap expect several).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GpuFlag(pub Vec<GpuGroup>);

impl FromStr for GpuFlag {
    type Err = InventoryError;
    fn from_str(s: &str) -> Result<Self, InventoryError> {
        parse_gpus(s).map(Self)
    }
}

/// One `nodes` entry as the file gives it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeEntry {
    /// Node name patterns: `*` any run of characters, `?` one.
    pub names: Vec<String>,
    /// The profile; `--profile` when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<ProfileKind>,
    /// gpu profile: the GPUs; `--gpus` when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<Vec<GpuGroup>>,
    /// fake profile: like `--num-devices`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_devices: Option<usize>,
    /// fake profile: like `--models`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub models: Option<Vec<String>>,
}

impl NodeEntry {
    /// Whether a pattern of the entry matches `node`.
    pub fn matches(&self, node: &str) -> bool {
        self.names.iter().any(|p| glob_matches(p, node))
    }

    fn has_fake_fields(&self) -> bool {
        self.num_devices.is_some() || self.models.is_some()
    }
}

/// The file as written.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawFile {
    api_version: String,
    kind: String,
    #[serde(default)]
    models: Vec<GpuModel>,
    #[serde(default)]
    nodes: Vec<NodeEntry>,
}

/// An inventory file, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InventoryFile {
    /// Where it came from, for errors.
    pub source: String,
    /// The built-in models and the file's.
    pub catalog: Catalog,
    pub nodes: Vec<NodeEntry>,
}

/// What the flags say: the devices of a node no entry matches, and of every field an
/// entry leaves out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Defaults {
    /// `--profile`.
    pub profile: ProfileKind,
    /// `--num-devices`.
    pub num_devices: usize,
    /// `--models`.
    pub models: Vec<String>,
    /// `--gpus`.
    pub gpus: Vec<GpuGroup>,
}

/// The devices one node has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeDevices {
    /// The fake profile: `fake::devices::Inventory::new(node, num_devices, &models)`.
    Fake {
        num_devices: usize,
        models: Vec<String>,
    },
    /// The gpu profile: `gpu::GpuProfile::new(node, driver, &groups, &catalog)`.
    Gpu {
        groups: Vec<GpuGroup>,
        catalog: Catalog,
    },
}

/// Reads and checks the inventory file at `path` (`--inventory`): a regular file of at
/// most [`MAX_FILE_BYTES`].
pub fn load(path: &Path) -> Result<InventoryFile, InventoryError> {
    let text = fake_dra_ops::files::read_text("--inventory", path, MAX_FILE_BYTES)?;
    parse(&text, &path.display().to_string())
}

/// Parses and checks an inventory file's text (YAML, or JSON, which is YAML too);
/// `source` names it in errors.
pub fn parse(text: &str, source: &str) -> Result<InventoryFile, InventoryError> {
    let file = source.to_owned();
    fake_dra_ops::yaml::check_depth(text.as_bytes()).map_err(|e| InventoryError::Parse {
        file: file.clone(),
        reason: e.to_string(),
    })?;
    let raw: RawFile = serde_yaml_ng::from_str(text).map_err(|e| InventoryError::Parse {
        file: file.clone(),
        reason: e.to_string(),
    })?;
    for (field, wanted, got) in [
        ("apiVersion", API_VERSION, &raw.api_version),
        ("kind", KIND, &raw.kind),
    ] {
        if got != wanted {
            return Err(InventoryError::Header {
                file,
                field,
                wanted,
                got: got.clone(),
            });
        }
    }
    let catalog = Catalog::with(raw.models).map_err(|source| InventoryError::Models {
        file: file.clone(),
        source,
    })?;
    for (index, entry) in raw.nodes.iter().enumerate() {
        check_entry(entry, &catalog).map_err(|reason| InventoryError::Entry {
            file: file.clone(),
            index,
            reason,
        })?;
    }
    Ok(InventoryFile {
        source: file,
        catalog,
        nodes: raw.nodes,
    })
}

/// What can be checked of an entry without the flags.
fn check_entry(entry: &NodeEntry, catalog: &Catalog) -> Result<(), String> {
    if entry.names.is_empty() {
        return Err("names must list at least one node name pattern".into());
    }
    for (k, p) in entry.names.iter().enumerate() {
        check_glob(p).map_err(|reason| format!("names[{k}] {p:?} {reason}"))?;
    }
    match entry.profile {
        Some(profile) => check_fields(entry, profile, "its profile")?,
        None if entry.gpus.is_some() && entry.has_fake_fields() => {
            return Err(
                "gives gpus (gpu profile) and numDevices or models (fake profile); a node runs one profile"
                    .into(),
            );
        }
        None => {}
    }
    if let Some(n) = entry.num_devices {
        check_num_devices(n, "numDevices")?;
    }
    if let Some(models) = &entry.models {
        check_models(models, "models")?;
    }
    if let Some(groups) = &entry.gpus {
        check_gpus(groups, catalog, "gpus")?;
    }
    Ok(())
}

/// Refuses the other profile's fields; `why` says where `profile` came from.
fn check_fields(entry: &NodeEntry, profile: ProfileKind, why: &str) -> Result<(), String> {
    match profile {
        ProfileKind::Fake if entry.gpus.is_some() => Err(format!(
            "gives gpus, a field of the gpu profile, but {why} is fake; set profile: gpu or drop gpus"
        )),
        ProfileKind::Gpu if entry.has_fake_fields() => Err(format!(
            "gives numDevices or models, fields of the fake profile, but {why} is gpu; set profile: fake or drop them"
        )),
        _ => Ok(()),
    }
}

fn check_num_devices(n: usize, field: &str) -> Result<(), String> {
    if !(1..=MAX_NUM_DEVICES).contains(&n) {
        return Err(format!(
            "{field} must be between 1 and {MAX_NUM_DEVICES}, got {n}"
        ));
    }
    Ok(())
}

fn check_models(models: &[String], field: &str) -> Result<(), String> {
    if models.is_empty() {
        return Err(format!("{field} must name at least one model"));
    }
    for (k, m) in models.iter().enumerate() {
        fake_dra_api::params::validate_model(m)
            .map_err(|reason| format!("{field}[{k}] {m:?} {reason}"))?;
    }
    Ok(())
}

/// The groups against the catalog and the node limits, as a node of them would be built.
fn check_gpus(groups: &[GpuGroup], catalog: &Catalog, field: &str) -> Result<(), String> {
    check_gpus_on("inventory-check", groups, catalog, field)
}

fn check_gpus_on(
    node: &str,
    groups: &[GpuGroup],
    catalog: &Catalog,
    field: &str,
) -> Result<(), String> {
    match NodeLayout::new(node, groups, catalog) {
        Ok(_) => Ok(()),
        Err(GpuError::NoGpus) => Err(format!(
            "{field} lists no GPUs; the gpu profile needs at least one"
        )),
        Err(e) => Err(format!("{field}: {e}")),
    }
}

/// The devices of `node`: the first entry of `file` whose pattern matches it, with the
/// flags for what the entry leaves out, or the flags alone. Checked as the node's
/// profile will be built.
pub fn resolve(
    file: Option<&InventoryFile>,
    node: &str,
    defaults: &Defaults,
) -> Result<NodeDevices, InventoryError> {
    if node.is_empty() {
        return Err(InventoryError::NoNodeName);
    }
    let matched = file.and_then(|f| {
        f.nodes
            .iter()
            .enumerate()
            .find(|(_, e)| e.matches(node))
            .map(|(i, e)| (f, i, e))
    });
    let Some((f, index, entry)) = matched else {
        let catalog = file.map_or_else(Catalog::builtin, |f| f.catalog.clone());
        return from_flags(node, defaults, catalog);
    };
    let fail = |reason: String| InventoryError::Entry {
        file: f.source.clone(),
        index,
        reason: format!("(matching node {node:?}) {reason}"),
    };
    let (profile, why) = match entry.profile {
        Some(p) => (p, "its profile"),
        None => (defaults.profile, "its profile (from --profile)"),
    };
    check_fields(entry, profile, why).map_err(fail)?;
    match profile {
        ProfileKind::Fake => {
            let num_devices = entry.num_devices.unwrap_or(defaults.num_devices);
            let models = entry
                .models
                .clone()
                .unwrap_or_else(|| defaults.models.clone());
            let field = |own: bool, name: &'static str, flag: &'static str| {
                if own { name } else { flag }
            };
            check_num_devices(
                num_devices,
                field(entry.num_devices.is_some(), "numDevices", "--num-devices"),
            )
            .map_err(fail)?;
            check_models(&models, field(entry.models.is_some(), "models", "--models"))
                .map_err(fail)?;
            Ok(NodeDevices::Fake {
                num_devices,
                models,
            })
        }
        ProfileKind::Gpu => {
            let (groups, field) = match &entry.gpus {
                Some(g) => (g.clone(), "gpus"),
                None => (defaults.gpus.clone(), "--gpus"),
            };
            check_gpus_on(node, &groups, &f.catalog, field).map_err(fail)?;
            Ok(NodeDevices::Gpu {
                groups,
                catalog: f.catalog.clone(),
            })
        }
    }
}

fn from_flags(
    node: &str,
    defaults: &Defaults,
    catalog: Catalog,
) -> Result<NodeDevices, InventoryError> {
    let fail = |reason: String| InventoryError::Flags {
        node: node.to_owned(),
        reason,
    };
    match defaults.profile {
        ProfileKind::Fake => {
            check_num_devices(defaults.num_devices, "--num-devices").map_err(fail)?;
            check_models(&defaults.models, "--models").map_err(fail)?;
            Ok(NodeDevices::Fake {
                num_devices: defaults.num_devices,
                models: defaults.models.clone(),
            })
        }
        ProfileKind::Gpu => {
            check_gpus_on(node, &defaults.gpus, &catalog, "--gpus").map_err(fail)?;
            Ok(NodeDevices::Gpu {
                groups: defaults.gpus.clone(),
                catalog,
            })
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
