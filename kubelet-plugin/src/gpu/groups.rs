//! A node's GPUs as `--gpus` and inventory entries give them: groups of one model, handed
//! out one way.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::devices::MAX_GPUS_PER_NODE;

/// How a group's GPUs are handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Sharing {
    /// One claim has the whole GPU.
    #[default]
    Exclusive,
    /// The GPU or its partitions, drawn from the GPU's counters (DRAPartitionableDevices).
    Partitioned,
    /// Several claims share the GPU, each taking part of its memory (DRAConsumableCapacity).
    Shared,
}

impl Sharing {
    const ALL: &str = "exclusive, partitioned, shared";
}

impl FromStr for Sharing {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "exclusive" => Ok(Self::Exclusive),
            "partitioned" => Ok(Self::Partitioned),
            "shared" => Ok(Self::Shared),
            _ => Err(format!(
                "sharing {s:?} is unknown; use one of {}",
                Self::ALL
            )),
        }
    }
}

impl fmt::Display for Sharing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Exclusive => "exclusive",
            Self::Partitioned => "partitioned",
            Self::Shared => "shared",
        })
    }
}

fn one() -> usize {
    1
}

/// `count` GPUs of one model, handed out one way.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GpuGroup {
    /// A catalog model name.
    pub model: String,
    /// How many; 1 when left out.
    #[serde(default = "one")]
    pub count: usize,
    #[serde(default)]
    pub sharing: Sharing,
}

/// `MODEL:COUNT:SHARING`, the `--gpus` spelling.
impl fmt::Display for GpuGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.model, self.count, self.sharing)
    }
}

/// A `--gpus` entry that does not parse; names the entry and the syntax.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "--gpus entry {index} ({entry:?}): {reason}; the syntax is MODEL[:COUNT[:SHARING]],... e.g. A100-80GB:8:partitioned,L4-24GB:2"
)]
pub struct GpuFlagError {
    pub index: usize,
    pub entry: String,
    pub reason: String,
}

/// `--gpus`: comma-separated `MODEL[:COUNT[:SHARING]]` (count 1 and exclusive when left
/// out). An empty string is no GPUs. Models are checked against the catalog later, when
/// the inventory file's models are known.
pub fn parse_gpus(s: &str) -> Result<Vec<GpuGroup>, GpuFlagError> {
    if s.trim().is_empty() {
        return Ok(Vec::new());
    }
    s.split(',')
        .enumerate()
        .map(|(index, entry)| {
            let fail = |reason: String| GpuFlagError {
                index,
                entry: entry.chars().take(120).collect(),
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
    type Err = GpuFlagError;
    fn from_str(s: &str) -> Result<Self, GpuFlagError> {
        parse_gpus(s).map(Self)
    }
}
