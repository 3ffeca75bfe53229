//! A node's NVIDIA GPUs as `--nvidia-gpus` and inventory entries give them: groups of one
//! model, with or without their MIG devices.

use std::fmt;
use std::str::FromStr;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};

use crate::gpu::devices::MAX_GPUS_PER_NODE;

/// Which MIG devices a group's GPUs publish.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Mig {
    /// None: whole GPUs only.
    #[default]
    Off,
    /// Every placement of every MIG profile of the model, as the real driver publishes.
    All,
    /// Every placement of these profiles only (fewer devices per GPU).
    Profiles(Vec<String>),
}

impl Mig {
    /// Whether the GPUs publish MIG devices (and the counter set they consume from).
    pub fn enabled(&self) -> bool {
        *self != Self::Off
    }
}

/// `mig: true | false | [PROFILE, ...]` in an inventory file. A hand-written visitor, so
/// a wrong value is named with what is expected (serde's untagged enums say only "did
/// not match any variant").
impl<'de> Deserialize<'de> for Mig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MigVisitor;
        impl<'de> Visitor<'de> for MigVisitor {
            type Value = Mig;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("true, false or a list of MIG profiles such as [1g.5gb, 3g.20gb]")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Mig, E> {
                Ok(if v { Mig::All } else { Mig::Off })
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Mig, A::Error> {
                let mut profiles = Vec::new();
                while let Some(p) = seq.next_element::<String>()? {
                    profiles.push(p);
                }
                Ok(Mig::Profiles(profiles))
            }
        }
        deserializer.deserialize_any(MigVisitor)
    }
}

impl Serialize for Mig {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Off => serializer.serialize_bool(false),
            Self::All => serializer.serialize_bool(true),
            Self::Profiles(p) => p.serialize(serializer),
        }
    }
}

fn one() -> usize {
    1
}

/// `count` GPUs of one model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NvidiaGroup {
    /// A model name ([`super::models::MODELS`]).
    pub model: String,
    /// How many; 1 when left out.
    #[serde(default = "one")]
    pub count: usize,
    /// Which MIG devices they publish; none when left out.
    #[serde(default)]
    pub mig: Mig,
}

/// The `--nvidia-gpus` spelling: `MODEL:COUNT`, `MODEL:COUNT:mig`,
/// `MODEL:COUNT:mig=PROFILE/PROFILE`.
impl fmt::Display for NvidiaGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.model, self.count)?;
        match &self.mig {
            Mig::Off => Ok(()),
            Mig::All => f.write_str(":mig"),
            Mig::Profiles(p) => write!(f, ":mig={}", p.join("/")),
        }
    }
}

/// A `--nvidia-gpus` entry that does not parse; names the entry and the syntax.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "--nvidia-gpus entry {index} ({entry:?}): {reason}; the syntax is MODEL[:COUNT[:mig[=PROFILE/PROFILE...]]],... e.g. A100-40GB:8:mig,L4:2"
)]
pub struct NvidiaFlagError {
    pub index: usize,
    pub entry: String,
    pub reason: String,
}

/// `--nvidia-gpus`: comma-separated `MODEL[:COUNT[:mig[=PROFILE/...]]]` (count 1 and no
/// MIG when left out). An empty string is no GPUs. Models and profiles are checked when
/// a node is built, with the rest of the node.
pub fn parse_nvidia_gpus(s: &str) -> Result<Vec<NvidiaGroup>, NvidiaFlagError> {
    if s.trim().is_empty() {
        return Ok(Vec::new());
    }
    s.split(',')
        .enumerate()
        .map(|(index, entry)| {
            let fail = |reason: String| NvidiaFlagError {
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
            let mig = match parts.next() {
                None => Mig::Off,
                Some("mig") => Mig::All,
                Some(m) => match m.strip_prefix("mig=") {
                    Some(list) if !list.is_empty() => {
                        Mig::Profiles(list.split('/').map(str::to_owned).collect())
                    }
                    _ => {
                        return Err(fail(format!("{m:?} is not mig or mig=PROFILE/PROFILE...")));
                    }
                },
            };
            if let Some(extra) = parts.next() {
                return Err(fail(format!("unexpected {extra:?} after the mig field")));
            }
            Ok(NvidiaGroup {
                model: model.to_owned(),
                count,
                mig,
            })
        })
        .collect()
}

/// `--nvidia-gpus` as one clap value (`Vec` would make clap expect several).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NvidiaFlag(pub Vec<NvidiaGroup>);

impl FromStr for NvidiaFlag {
    type Err = NvidiaFlagError;
    fn from_str(s: &str) -> Result<Self, NvidiaFlagError> {
        parse_nvidia_gpus(s).map(Self)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn group(model: &str, count: usize, mig: Mig) -> NvidiaGroup {
        NvidiaGroup {
            model: model.into(),
            count,
            mig,
        }
    }

    #[test]
    fn the_flag_reads_models_counts_and_mig() {
        assert_eq!(
            parse_nvidia_gpus("A100-40GB:8:mig, L4:2,H100-80GB,A100-80GB:1:mig=1g.10gb/3g.40gb")
                .unwrap(),
            [
                group("A100-40GB", 8, Mig::All),
                group("L4", 2, Mig::Off),
                group("H100-80GB", 1, Mig::Off),
                group(
                    "A100-80GB",
                    1,
                    Mig::Profiles(vec!["1g.10gb".into(), "3g.40gb".into()])
                ),
            ]
        );
        assert!(parse_nvidia_gpus(" ").unwrap().is_empty());
        let shown: Vec<String> = parse_nvidia_gpus("A100-40GB:2:mig=1g.5gb+me,L4")
            .unwrap()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(shown, ["A100-40GB:2:mig=1g.5gb+me", "L4:1"]);
    }

    #[test]
    fn a_bad_flag_entry_is_named_with_the_syntax() {
        let err = |s: &str| parse_nvidia_gpus(s).unwrap_err().to_string();
        assert_eq!(
            err("L4,A100-40GB:0"),
            "--nvidia-gpus entry 1 (\"A100-40GB:0\"): count must be between 1 and 128, got 0; the syntax is MODEL[:COUNT[:mig[=PROFILE/PROFILE...]]],... e.g. A100-40GB:8:mig,L4:2"
        );
        assert!(err("L4:129").contains("count must be between 1 and 128, got 129"));
        assert!(err("L4:x").contains("count \"x\" is not a whole number"));
        assert!(err(":2").contains("the model is missing"));
        assert!(err("A100-40GB:1:partitioned").contains("\"partitioned\" is not mig"));
        assert!(err("A100-40GB:1:mig=").contains("\"mig=\" is not mig"));
        assert!(err("A100-40GB:1:mig:x").contains("unexpected \"x\""));
    }

    #[test]
    fn the_file_takes_mig_as_a_bool_or_a_list() {
        let read = |v: serde_json::Value| serde_json::from_value::<NvidiaGroup>(v);
        assert_eq!(
            read(serde_json::json!({"model": "L4"})).unwrap(),
            group("L4", 1, Mig::Off)
        );
        assert_eq!(
            read(serde_json::json!({"model": "A100-40GB", "count": 2, "mig": true})).unwrap(),
            group("A100-40GB", 2, Mig::All)
        );
        assert_eq!(
            read(serde_json::json!({"model": "A100-40GB", "mig": ["1g.5gb"]})).unwrap(),
            group("A100-40GB", 1, Mig::Profiles(vec!["1g.5gb".into()]))
        );
        let err = read(serde_json::json!({"model": "A100-40GB", "mig": "yes"})).unwrap_err();
        assert!(
            err.to_string()
                .contains("expected true, false or a list of MIG profiles"),
            "{err}"
        );
        assert!(
            read(serde_json::json!({"model": "L4", "sharing": "shared"}))
                .unwrap_err()
                .to_string()
                .contains("unknown field `sharing`")
        );
        let back = serde_json::to_value(group("A100-40GB", 1, Mig::All)).unwrap();
        assert_eq!(
            back,
            serde_json::json!({"model": "A100-40GB", "count": 1, "mig": true})
        );
    }
}
