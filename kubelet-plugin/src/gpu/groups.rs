//! A node's GPUs as the flags and inventory files give them: groups of one model, handed
//! out one way. The gpu profile's own types, so `gpu` needs nothing of `inventory`
//! (which reads them from `--gpus` and files).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

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
