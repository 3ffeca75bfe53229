//! The GPU models a node may have: the built-in ones, shaped like real vendors' devices
//! (named without vendor prefixes), and those an inventory file adds. Every model is
//! checked once, here, so the profile can trust its amounts: a partition never takes
//! more of a GPU than the GPU has, and every quantity parses.

use dra_kubelet_plugin::Quantity;
use serde::{Deserialize, Serialize};

use super::GpuError;

/// Longest model name, product name or architecture: what a ResourceSlice string
/// attribute holds (`DeviceAttributeMaxValueLength`).
pub const MAX_NAME_LEN: usize = 64;

/// Longest partition profile: keeps `gpu-<i>-<profile>-<k>` a DNS label (≤ 63) for any
/// GPU and partition index a node can have.
pub const MAX_PROFILE_LEN: usize = 32;

/// Most partition devices of one GPU. Kubernetes 1.34 puts a counter set and every
/// device consuming from it into one ResourceSlice of at most 128 devices, and the whole
/// GPU is one of them.
pub const MAX_PARTITIONS_PER_GPU: u32 = 127;

/// One GPU model: what its devices publish and how it may be partitioned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GpuModel {
    /// The catalog name (`A100-80GB`): what `--gpus` and inventory files name, and the
    /// `model` attribute.
    pub name: String,
    /// The `productName` attribute.
    pub product_name: String,
    /// The `architecture` attribute.
    pub architecture: String,
    /// The memory of the whole GPU, a quantity (`80Gi`).
    pub memory: String,
    /// The partition profiles, if the GPU can be partitioned.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partitions: Vec<Partition>,
    /// Compute slices of the whole GPU: the `slices` counter partitions draw from.
    /// Required with partitions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slices: Option<u32>,
}

/// A partition profile of a model: `count` partitions of `slices` compute slices and
/// `memory` each.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Partition {
    /// The profile name (`1g.10gb`): the `profile` attribute; with `.` turned into `-` it
    /// is part of the device names.
    pub profile: String,
    /// Compute slices it takes.
    pub slices: u32,
    /// Memory it takes, a quantity.
    pub memory: String,
    /// How many partition devices of this profile a GPU publishes.
    pub count: u32,
}

impl Partition {
    /// The profile as part of a device name: `1g.10gb` → `1g-10gb`.
    pub fn name_part(&self) -> String {
        self.profile.replace('.', "-")
    }
}

/// The models a node's GPUs are drawn from: the built-in ones, then an inventory file's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Catalog {
    models: Vec<GpuModel>,
}

impl Default for Catalog {
    fn default() -> Self {
        Self::builtin()
    }
}

/// The built-in partition shape of the 80 GB models: 7 slices, 10Gi per slice.
fn seven_slice_partitions() -> Vec<Partition> {
    [
        ("1g.10gb", 1, "10Gi", 7),
        ("2g.20gb", 2, "20Gi", 3),
        ("3g.40gb", 3, "40Gi", 2),
    ]
    .into_iter()
    .map(|(profile, slices, memory, count)| Partition {
        profile: profile.to_owned(),
        slices,
        memory: memory.to_owned(),
        count,
    })
    .collect()
}

fn model(name: &str, product: &str, architecture: &str, memory: &str) -> GpuModel {
    GpuModel {
        name: name.to_owned(),
        product_name: product.to_owned(),
        architecture: architecture.to_owned(),
        memory: memory.to_owned(),
        partitions: Vec::new(),
        slices: None,
    }
}

/// The built-in models.
pub fn builtin_models() -> Vec<GpuModel> {
    vec![
        GpuModel {
            partitions: seven_slice_partitions(),
            slices: Some(7),
            ..model("A100-80GB", "A100-SXM4-80GB", "Ampere", "80Gi")
        },
        GpuModel {
            partitions: seven_slice_partitions(),
            slices: Some(7),
            ..model("H100-80GB", "H100-SXM5-80GB", "Hopper", "80Gi")
        },
        model("L4-24GB", "L4", "Ada Lovelace", "24Gi"),
    ]
}

impl Catalog {
    /// The built-in models only.
    pub fn builtin() -> Self {
        Self {
            models: builtin_models(),
        }
    }

    /// The built-in models and `extra`, each checked; a name given twice (or one of the
    /// built-in names) is refused.
    pub fn with(extra: Vec<GpuModel>) -> Result<Self, GpuError> {
        let mut models = builtin_models();
        for m in extra {
            check_model(&m)?;
            if models.iter().any(|known| known.name == m.name) {
                return Err(GpuError::DuplicateModel { name: m.name });
            }
            models.push(m);
        }
        Ok(Self { models })
    }

    /// The model called `name`.
    pub fn get(&self, name: &str) -> Option<&GpuModel> {
        self.models.iter().find(|m| m.name == name)
    }

    /// Every model, built-in first.
    pub fn models(&self) -> &[GpuModel] {
        &self.models
    }

    /// The model names, comma-separated: what an unknown-model error lists.
    pub fn names(&self) -> String {
        self.models
            .iter()
            .map(|m| m.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The value of a positive quantity, or why it is not one.
pub(crate) fn positive(value: &str) -> Result<Quantity, String> {
    let q: Quantity = value.parse().map_err(|e| format!("{e}"))?;
    if q <= Quantity::default() {
        return Err(format!("{value:?} must be more than zero"));
    }
    Ok(q)
}

fn is_model_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

fn is_profile(profile: &str) -> bool {
    !profile.is_empty()
        && profile.len() <= MAX_PROFILE_LEN
        && profile.starts_with(|c: char| c.is_ascii_alphanumeric())
        && profile.ends_with(|c: char| c.is_ascii_alphanumeric())
        && profile
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '-'))
}

/// Checks one model: names the attributes can hold, quantities that parse, and
/// partitions whose counters add up (none takes more than the whole GPU, and a profile's
/// partitions all fit at once).
pub fn check_model(m: &GpuModel) -> Result<(), GpuError> {
    let bad = |field: String, reason: String| GpuError::BadModel {
        model: m.name.clone(),
        field,
        reason,
    };
    if !is_model_name(&m.name) {
        return Err(bad(
            "name".into(),
            format!(
                "must be 1 to {MAX_NAME_LEN} letters, digits, '.', '_' and '-' (the --gpus syntax uses ':' and ',')"
            ),
        ));
    }
    for (field, value) in [
        ("productName", &m.product_name),
        ("architecture", &m.architecture),
    ] {
        if value.is_empty() || value.len() > MAX_NAME_LEN {
            return Err(bad(
                field.into(),
                format!(
                    "must be 1 to {MAX_NAME_LEN} characters (a ResourceSlice string attribute), got {}",
                    value.len()
                ),
            ));
        }
    }
    let memory = positive(&m.memory).map_err(|e| bad("memory".into(), e))?;
    if m.slices == Some(0) {
        return Err(bad("slices".into(), "must be at least 1".into()));
    }
    if m.partitions.is_empty() {
        return Ok(());
    }
    let Some(slices) = m.slices else {
        return Err(bad(
            "slices".into(),
            "is required with partitions: the compute slices of the whole GPU, which partitions draw from".into(),
        ));
    };
    let mut total: u32 = 0;
    let mut seen: Vec<String> = Vec::new();
    for (j, p) in m.partitions.iter().enumerate() {
        let field = |name: &str| format!("partitions[{j}].{name}");
        if !is_profile(&p.profile) {
            return Err(bad(
                field("profile"),
                format!(
                    "{:?} must be 1 to {MAX_PROFILE_LEN} lowercase letters, digits, '.' and '-', starting and ending with a letter or digit",
                    p.profile
                ),
            ));
        }
        if seen.contains(&p.name_part()) {
            return Err(bad(
                field("profile"),
                format!(
                    "{:?} is given twice (device names spell '.' as '-')",
                    p.profile
                ),
            ));
        }
        seen.push(p.name_part());
        if p.count == 0 {
            return Err(bad(field("count"), "must be at least 1".into()));
        }
        if p.slices == 0 || p.slices > slices {
            return Err(bad(
                field("slices"),
                format!(
                    "is {}; it must be between 1 and the model's slices ({slices})",
                    p.slices
                ),
            ));
        }
        let part_memory = positive(&p.memory).map_err(|e| bad(field("memory"), e))?;
        if part_memory > memory {
            return Err(bad(
                field("memory"),
                format!("{} is more than the model's memory {}", p.memory, m.memory),
            ));
        }
        if u64::from(p.count) * u64::from(p.slices) > u64::from(slices) {
            return Err(bad(
                field("count"),
                format!(
                    "{} partitions of {} slices take {} slices; the GPU has {slices}",
                    p.count,
                    p.slices,
                    u64::from(p.count) * u64::from(p.slices)
                ),
            ));
        }
        // Both were parsed (`positive`), so both have a value.
        let all_memory = part_memory
            .nanos()
            .and_then(|n| n.checked_mul(i128::from(p.count)));
        if all_memory.is_none_or(|all| Some(all) > memory.nanos()) {
            return Err(bad(
                field("count"),
                format!(
                    "{} partitions of {} take more memory than the GPU's {}",
                    p.count, p.memory, m.memory
                ),
            ));
        }
        total = total.saturating_add(p.count);
    }
    if total > MAX_PARTITIONS_PER_GPU {
        return Err(bad(
            "partitions".into(),
            format!(
                "give {total} partition devices per GPU; at most {MAX_PARTITIONS_PER_GPU} (Kubernetes 1.34 publishes a GPU's counter set and all its devices in one ResourceSlice of at most 128 devices)"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn x1() -> GpuModel {
        GpuModel {
            partitions: vec![Partition {
                profile: "1g.12gb".into(),
                slices: 1,
                memory: "12Gi".into(),
                count: 4,
            }],
            slices: Some(4),
            ..model("X1-48GB", "X1 48GB", "Blackwell", "48Gi")
        }
    }

    fn error(m: GpuModel) -> String {
        Catalog::with(vec![m]).unwrap_err().to_string()
    }

    #[test]
    fn the_builtin_models_pass_their_own_checks() {
        let c = Catalog::builtin();
        assert_eq!(c.names(), "A100-80GB, H100-80GB, L4-24GB");
        for m in c.models() {
            check_model(m).unwrap();
        }
        let a100 = c.get("A100-80GB").unwrap();
        assert_eq!(a100.product_name, "A100-SXM4-80GB");
        assert_eq!(a100.slices, Some(7));
        let counts: Vec<_> = a100
            .partitions
            .iter()
            .map(|p| (p.profile.as_str(), p.slices, p.memory.as_str(), p.count))
            .collect();
        assert_eq!(
            counts,
            [
                ("1g.10gb", 1, "10Gi", 7),
                ("2g.20gb", 2, "20Gi", 3),
                ("3g.40gb", 3, "40Gi", 2)
            ]
        );
        assert_eq!(c.get("H100-80GB").unwrap().architecture, "Hopper");
        let l4 = c.get("L4-24GB").unwrap();
        assert!(l4.partitions.is_empty());
        assert_eq!(l4.architecture, "Ada Lovelace");
        assert_eq!(c.get("a100-80gb"), None, "names are exact");
    }

    #[test]
    fn extra_models_join_the_catalog() {
        let c = Catalog::with(vec![x1()]).unwrap();
        assert_eq!(c.names(), "A100-80GB, H100-80GB, L4-24GB, X1-48GB");
        assert_eq!(c.get("X1-48GB"), Some(&x1()));
    }

    #[test]
    fn duplicates_are_refused() {
        let err = Catalog::with(vec![x1(), x1()]).unwrap_err();
        assert_eq!(
            err,
            GpuError::DuplicateModel {
                name: "X1-48GB".into()
            }
        );
        let err = error(model("L4-24GB", "L4", "Ada Lovelace", "24Gi"));
        assert!(err.contains("\"L4-24GB\" is defined twice"), "{err}");
    }

    #[test]
    fn counters_that_do_not_add_up_are_refused() {
        let with = |f: &dyn Fn(&mut GpuModel)| {
            let mut m = x1();
            f(&mut m);
            error(m)
        };
        let cases: Vec<(String, &str)> = vec![
            (
                with(&|m| m.partitions[0].slices = 5),
                "partitions[0].slices is 5; it must be between 1 and the model's slices (4)",
            ),
            (
                with(&|m| m.partitions[0].memory = "49Gi".into()),
                "partitions[0].memory 49Gi is more than the model's memory 48Gi",
            ),
            (
                with(&|m| m.partitions[0].count = 5),
                "partitions[0].count 5 partitions of 1 slices take 5 slices; the GPU has 4",
            ),
            (
                with(&|m| m.partitions[0].memory = "13Gi".into()),
                "partitions[0].count 4 partitions of 13Gi take more memory than the GPU's 48Gi",
            ),
            (
                with(&|m| m.partitions[0].count = 0),
                "partitions[0].count must be at least 1",
            ),
            (
                with(&|m| m.partitions[0].slices = 0),
                "partitions[0].slices is 0",
            ),
            (with(&|m| m.slices = Some(0)), "slices must be at least 1"),
            (
                with(&|m| m.slices = None),
                "slices is required with partitions",
            ),
            (
                with(&|m| m.memory = "48GB".into()),
                "memory \"48GB\" is not a quantity (unknown suffix)",
            ),
            (with(&|m| m.memory = "0".into()), "must be more than zero"),
            (
                with(&|m| m.partitions[0].memory = "lots".into()),
                "partitions[0].memory \"lots\" is not a quantity",
            ),
            (
                with(&|m| m.partitions[0].profile = "1G.12GB".into()),
                "partitions[0].profile \"1G.12GB\" must be",
            ),
            (
                with(&|m| m.partitions[0].profile = "x".repeat(33)),
                "must be 1 to 32 lowercase",
            ),
            (
                with(&|m| {
                    let mut twin = m.partitions[0].clone();
                    twin.profile = "1g-12gb".into();
                    twin.count = 1;
                    m.partitions[0].count = 1;
                    m.partitions.push(twin);
                }),
                "partitions[1].profile \"1g-12gb\" is given twice",
            ),
            (
                with(&|m| m.name = "X1:48".into()),
                "GPU model \"X1:48\": name must be 1 to 64",
            ),
            (
                with(&|m| m.product_name = String::new()),
                "productName must be 1 to 64 characters",
            ),
            (
                with(&|m| m.architecture = "a".repeat(65)),
                "architecture must be 1 to 64 characters",
            ),
        ];
        for (err, wanted) in cases {
            assert!(err.contains(wanted), "{err:?} lacks {wanted:?}");
            assert!(err.contains("GPU model"), "{err}");
        }
    }

    #[test]
    fn a_gpu_of_more_partitions_than_one_slice_holds_is_refused() {
        let mut m = model("BIG", "Big", "Test", "1Ti");
        m.slices = Some(200);
        m.partitions = vec![Partition {
            profile: "tiny".into(),
            slices: 1,
            memory: "1Gi".into(),
            count: 128,
        }];
        let err = error(m.clone());
        assert!(
            err.contains("give 128 partition devices per GPU; at most 127"),
            "{err}"
        );
        m.partitions[0].count = 127;
        Catalog::with(vec![m]).unwrap();
    }

    proptest! {
        /// Whatever passes the checks never takes more of a GPU than it has.
        #[test]
        fn accepted_partitions_fit_the_gpu(slices in 1u32..16, parts in proptest::collection::vec((1u32..8, 1u32..64, 1u32..8), 1..4)) {
            let m = GpuModel {
                slices: Some(slices),
                partitions: parts.iter().enumerate().map(|(j, (s, gi, n))| Partition {
                    profile: format!("p{j}"), slices: *s, memory: format!("{gi}Gi"), count: *n,
                }).collect(),
                ..model("M", "M", "A", "64Gi")
            };
            if check_model(&m).is_ok() {
                for (s, gi, n) in &parts {
                    prop_assert!(s * n <= slices);
                    prop_assert!(gi * n <= 64);
                }
            }
        }
    }
}
