//! The inventory file: which profile each node runs and with which devices, for clusters
//! whose nodes differ (fleet mode, heterogeneous clusters). This module reads the file's
//! structure; each profile ([`crate::registry`]) owns and checks its own fields, and
//! its flags fill what an entry leaves out. Pure but for [`load`], which reads the file.
//!
//! The file (YAML or JSON; docs/profiles.md):
//!
//! ```yaml
//! apiVersion: fake.resource.3-shake.com/v1alpha1
//! kind: Inventory
//! models: [...]            # the gpu profile's: GPU models beyond the built-in catalog
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

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::registry::{Fields, Registry};

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

/// Why an inventory cannot be used; names the flag or the file, the entry and the limit.
#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    /// A `--profile` that is not registered (clap refuses it first; for callers that
    /// do not go through clap).
    #[error("unknown profile {got:?}; the profiles are {known}")]
    UnknownProfile { got: String, known: String },
    /// The file cannot be read: missing, not a regular file, too large.
    #[error(transparent)]
    Read(#[from] fake_dra_ops::files::FileError),
    /// Not YAML or JSON of the file's shape.
    #[error("inventory file {file}: {}", bounded(.reason))]
    Parse { file: String, reason: String },
    /// `apiVersion` or `kind` is not ours.
    #[error("inventory file {file}: {field} must be {wanted:?}, got {got}")]
    Header {
        file: String,
        field: &'static str,
        wanted: &'static str,
        got: String,
    },
    /// A top-level field a profile reads (the gpu profile's `models`), or one no
    /// profile reads.
    #[error("inventory file {file}: {}", bounded(.reason))]
    Section { file: String, reason: String },
    /// A profile's flags, as no node could use them.
    #[error("{profile} profile: {}", bounded(.reason))]
    Settings {
        profile: &'static str,
        reason: String,
    },
    /// A `nodes` entry.
    #[error("inventory file {file}: nodes[{index}]: {}", bounded(.reason))]
    Entry {
        file: String,
        index: usize,
        reason: String,
    },
    /// A flag of a profile no node runs.
    #[error(
        "{flag} ({env}) is a flag of the {owner} profile, but --profile (FAKE_DRA_PROFILE) is {profile}{inventory}: use --profile {owner}, or drop {flag}"
    )]
    OtherProfilesFlag {
        flag: String,
        env: String,
        owner: &'static str,
        profile: &'static str,
        inventory: String,
    },
    /// What the flags give this node.
    #[error("node {node:?}: {}", bounded(.reason))]
    Flags { node: String, reason: String },
    /// An empty node name.
    #[error("--node-name must not be empty")]
    NoNodeName,
}

/// One `nodes` entry as the file gives it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeEntry {
    /// Node name patterns: `*` any run of characters, `?` one.
    pub names: Vec<String>,
    /// The profile; `--profile` when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// The profile's own fields (`numDevices`, `gpus`, ...), checked by the profile.
    #[serde(flatten)]
    pub fields: Fields,
}

impl NodeEntry {
    /// Whether a pattern of the entry matches `node`.
    pub fn matches(&self, node: &str) -> bool {
        self.names.iter().any(|p| glob_matches(p, node))
    }
}

/// The file as written.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawFile {
    api_version: String,
    kind: String,
    #[serde(default)]
    nodes: Vec<NodeEntry>,
    #[serde(flatten)]
    sections: Fields,
}

/// An inventory file whose structure is checked; its profiles check their fields when
/// [`Registry::profiles`] reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct InventoryFile {
    /// Where it came from, for errors.
    pub source: String,
    /// Top-level fields the profiles read.
    pub sections: Fields,
    pub nodes: Vec<NodeEntry>,
}

/// Reads the inventory file at `path` (`--inventory`): a regular file of at most
/// [`MAX_FILE_BYTES`].
pub fn load(path: &Path, registry: &Registry) -> Result<InventoryFile, InventoryError> {
    let text = fake_dra_ops::files::read_text("--inventory", path, MAX_FILE_BYTES)?;
    parse(&text, &path.display().to_string(), registry)
}

/// Parses an inventory file's text (YAML, or JSON, which is YAML too) and checks its
/// structure against `registry`; `source` names it in errors.
pub fn parse(
    text: &str,
    source: &str,
    registry: &Registry,
) -> Result<InventoryFile, InventoryError> {
    let file = source.to_owned();
    fake_dra_ops::yaml::check_depth(text.as_bytes()).map_err(|e| InventoryError::Parse {
        file: file.clone(),
        reason: e.to_string(),
    })?;
    // serde keeps the last of two equal keys (`numDevices` twice: the first lost).
    fake_dra_ops::yaml::check_unique_keys(text).map_err(|d| InventoryError::Parse {
        file: file.clone(),
        reason: format!("{d}: a key may be given once per mapping; remove one of them"),
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
                got: shown(got),
            });
        }
    }
    for (index, entry) in raw.nodes.iter().enumerate() {
        check_names(entry).map_err(|reason| InventoryError::Entry {
            file: file.clone(),
            index,
            reason,
        })?;
    }
    registry
        .check_file(&raw.sections, &raw.nodes)
        .map_err(|(index, reason)| match index {
            Some(index) => InventoryError::Entry {
                file: file.clone(),
                index,
                reason,
            },
            None => InventoryError::Section {
                file: file.clone(),
                reason,
            },
        })?;
    Ok(InventoryFile {
        source: file,
        sections: raw.sections,
        nodes: raw.nodes,
    })
}

fn check_names(entry: &NodeEntry) -> Result<(), String> {
    if entry.names.is_empty() {
        return Err("names must list at least one node name pattern".into());
    }
    for (k, p) in entry.names.iter().enumerate() {
        check_glob(p).map_err(|reason| format!("names[{k}] {} {reason}", shown(p)))?;
    }
    Ok(())
}

/// Longest value quoted whole in an error; a longer one is shown by its start.
const SHOWN_CHARS: usize = 64;

/// `value` quoted for an error, cut to its first [`SHOWN_CHARS`] characters and `...`
/// when longer: a 10 KB pattern was echoed whole. kube-apiserver's `field.TooLong` leaves
/// the value out altogether (`<value omitted>`, apimachinery `validation/field/errors.go`);
/// the start of it still tells which one is meant.
pub(crate) fn shown(value: &str) -> String {
    match value.char_indices().nth(SHOWN_CHARS) {
        None => format!("{value:?}"),
        Some((cut, _)) => format!("{:?}...", &value[..cut]),
    }
}

/// How many characters of a reason an error shows: serde's messages quote the value they
/// refuse, which may be a 30,000-character string of the file (found by fuzzing).
const REASON_CHARS: usize = 1024;

/// A reason of at most [`REASON_CHARS`] characters, both ends kept.
fn bounded(reason: &str) -> String {
    fake_dra_ops::text::elide_middle(reason, REASON_CHARS)
}

/// [`shown`] without the quotes.
pub(crate) fn cut(value: &str) -> String {
    match value.char_indices().nth(SHOWN_CHARS) {
        None => value.to_owned(),
        Some((cut, _)) => format!("{}...", &value[..cut]),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
