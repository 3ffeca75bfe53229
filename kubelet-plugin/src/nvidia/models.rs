//! The NVIDIA GPUs the profile offers, with the values NVML reports for them: product
//! names as `nvmlDeviceGetName` gives them, memory as `nvidia-smi --query-gpu=memory.total`
//! shows it, and the MIG GPU instance profiles as `nvidia-smi mig -lgip` and `-lgipp`
//! list them (the tables of NVIDIA's MIG user guide, "Supported MIG Profiles"; memory
//! in MiB as the R580 driver reports it: it shifts a little between driver releases).
//!
//! Facts, not code, come from the real driver: a MIG profile's engines become its
//! capacities and counters as k8s-dra-driver-gpu publishes them.

/// The brand NVML reports for these data-center GPUs (`NVML_BRAND_NVIDIA`, which go-nvlib
/// spells `Nvidia`).
pub const BRAND: &str = "Nvidia";

/// The kernel driver every fake GPU reports: a real R580 release (580.95.05), as the real
/// driver publishes it, parsed as semver (so `05` is `5`). Fake: nothing is installed.
pub const DRIVER_VERSION: &str = "580.95.5";

/// The CUDA driver API version of that driver (`nvmlSystemGetCudaDriverVersion`, 13000),
/// as semver.
pub const CUDA_DRIVER_VERSION: &str = "13.0.0";

/// Memory slices of a MIG-capable GPU: a placement's `start` and `size` count them.
pub const MEMORY_SLICES: u32 = 8;

/// One MIG GPU instance profile of a model (a row of `nvidia-smi mig -lgip`) and where
/// it may be placed (`-lgipp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigProfile {
    /// The profile as nvidia-smi and go-nvlib spell it: `1g.5gb`, `1g.5gb+me`.
    pub name: &'static str,
    /// The GPU instance profile id (`nvmlGpuInstanceProfileInfo_t.id`): 19 for `1g.5gb`.
    pub id: u32,
    /// `memorySizeMB`, in MiB.
    pub memory_mib: u64,
    pub multiprocessors: u32,
    pub copy_engines: u32,
    pub decoders: u32,
    pub encoders: u32,
    pub jpeg_engines: u32,
    pub ofa_engines: u32,
    /// The memory slices each instance takes.
    pub size: u32,
    /// The first memory slice of each possible placement.
    pub starts: &'static [u32],
}

impl MigProfile {
    /// The profile as part of a device name, as the real driver writes it: without
    /// dots, lowercase, anything else but letters, digits and `-` turned into `-`
    /// (`1g.5gb+me` → `1g5gb-me`).
    pub fn name_part(&self) -> String {
        let mapped: String = self
            .name
            .chars()
            .filter(|c| *c != '.')
            .map(|c| {
                let c = c.to_ascii_lowercase();
                if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        mapped.trim_matches('-').to_owned()
    }

    /// The memory slices of the placement starting at `start`.
    pub fn slices_at(&self, start: u32) -> std::ops::Range<u32> {
        start..start.saturating_add(self.size)
    }
}

/// One GPU model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Model {
    /// What `--nvidia-gpus` and inventory files call it.
    pub name: &'static str,
    /// `productName`: NVML's name of the device.
    pub product_name: &'static str,
    /// `architecture`, as go-nvlib spells NVML's.
    pub architecture: &'static str,
    /// `cudaComputeCapability`, as semver.
    pub compute_capability: &'static str,
    /// The whole GPU's memory, in MiB.
    pub memory_mib: u64,
    /// Its MIG profiles, in NVML's order; none if it has no MIG.
    pub mig: &'static [MigProfile],
}

impl Model {
    /// The MIG profile called `name`.
    pub fn mig_profile(&self, name: &str) -> Option<&'static MigProfile> {
        self.mig.iter().find(|p| p.name == name)
    }

    /// Its MIG profile names, comma-separated: what an unknown-profile error lists.
    pub fn mig_names(&self) -> String {
        self.mig
            .iter()
            .map(|p| p.name)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// A MIG profile row: `(name, id, MiB, SMs, CE, DEC, ENC, JPEG, OFA, size, starts)`.
#[allow(clippy::too_many_arguments)]
const fn mig(
    name: &'static str,
    id: u32,
    memory_mib: u64,
    multiprocessors: u32,
    copy_engines: u32,
    decoders: u32,
    encoders: u32,
    jpeg_engines: u32,
    ofa_engines: u32,
    size: u32,
    starts: &'static [u32],
) -> MigProfile {
    MigProfile {
        name,
        id,
        memory_mib,
        multiprocessors,
        copy_engines,
        decoders,
        encoders,
        jpeg_engines,
        ofa_engines,
        size,
        starts,
    }
}

/// Placements of the 1-slice profiles, of those taking two memory slices, and so on: the
/// same on A100 and H100.
const ONE: &[u32] = &[0, 1, 2, 3, 4, 5, 6];
const TWO_OF_FOUR: &[u32] = &[0, 2, 4, 6];
const TWO_OF_THREE: &[u32] = &[0, 2, 4];
const HALVES: &[u32] = &[0, 4];
const FIRST: &[u32] = &[0];

/// A100-SXM4-40GB: 7 GPCs of 14 SMs, 5 NVDECs, 1 NVJPG, 1 OFA, no NVENC.
const A100_40GB_MIG: &[MigProfile] = &[
    mig("1g.5gb", 19, 4864, 14, 1, 0, 0, 0, 0, 1, ONE),
    mig("1g.5gb+me", 20, 4864, 14, 1, 1, 0, 1, 1, 1, ONE),
    mig("1g.10gb", 15, 9856, 14, 1, 1, 0, 0, 0, 2, TWO_OF_FOUR),
    mig("2g.10gb", 14, 9856, 28, 2, 1, 0, 0, 0, 2, TWO_OF_THREE),
    mig("3g.20gb", 9, 19968, 42, 3, 2, 0, 0, 0, 4, HALVES),
    mig("4g.20gb", 5, 19968, 56, 4, 2, 0, 0, 0, 4, FIRST),
    mig("7g.40gb", 0, 40192, 98, 7, 5, 0, 1, 1, 8, FIRST),
];

/// A100-SXM4-80GB: the 40GB's engines with twice the memory.
const A100_80GB_MIG: &[MigProfile] = &[
    mig("1g.10gb", 19, 9728, 14, 1, 0, 0, 0, 0, 1, ONE),
    mig("1g.10gb+me", 20, 9728, 14, 1, 1, 0, 1, 1, 1, ONE),
    mig("1g.20gb", 15, 19968, 14, 1, 1, 0, 0, 0, 2, TWO_OF_FOUR),
    mig("2g.20gb", 14, 19968, 28, 2, 1, 0, 0, 0, 2, TWO_OF_THREE),
    mig("3g.40gb", 9, 40192, 42, 3, 2, 0, 0, 0, 4, HALVES),
    mig("4g.40gb", 5, 40192, 56, 4, 2, 0, 0, 0, 4, FIRST),
    mig("7g.80gb", 0, 80896, 98, 7, 5, 0, 1, 1, 8, FIRST),
];

/// H100 80GB HBM3 (SXM5): 132 SMs, 7 NVDECs, 7 NVJPGs, 1 OFA, no NVENC, 8 copy engines.
const H100_80GB_MIG: &[MigProfile] = &[
    mig("1g.10gb", 19, 9984, 16, 1, 1, 0, 1, 0, 1, ONE),
    mig("1g.10gb+me", 20, 9984, 16, 1, 1, 0, 1, 1, 1, ONE),
    mig("1g.20gb", 15, 20096, 26, 1, 1, 0, 1, 0, 2, TWO_OF_FOUR),
    mig("2g.20gb", 14, 20096, 32, 2, 2, 0, 2, 0, 2, TWO_OF_THREE),
    mig("3g.40gb", 9, 40448, 60, 3, 3, 0, 3, 0, 4, HALVES),
    mig("4g.40gb", 5, 40448, 64, 4, 4, 0, 4, 0, 4, FIRST),
    mig("7g.80gb", 0, 81152, 132, 8, 7, 0, 7, 1, 8, FIRST),
];

/// The models, in the order errors list them.
pub const MODELS: &[Model] = &[
    Model {
        name: "A100-40GB",
        product_name: "NVIDIA A100-SXM4-40GB",
        architecture: "Ampere",
        compute_capability: "8.0.0",
        memory_mib: 40960,
        mig: A100_40GB_MIG,
    },
    Model {
        name: "A100-80GB",
        product_name: "NVIDIA A100-SXM4-80GB",
        architecture: "Ampere",
        compute_capability: "8.0.0",
        memory_mib: 81920,
        mig: A100_80GB_MIG,
    },
    Model {
        name: "H100-80GB",
        product_name: "NVIDIA H100 80GB HBM3",
        architecture: "Hopper",
        compute_capability: "9.0.0",
        memory_mib: 81559,
        mig: H100_80GB_MIG,
    },
    Model {
        name: "L4",
        product_name: "NVIDIA L4",
        architecture: "Ada Lovelace",
        compute_capability: "8.9.0",
        memory_mib: 23034,
        mig: &[],
    },
];

/// The model called `name` (exact).
pub fn model(name: &str) -> Option<&'static Model> {
    MODELS.iter().find(|m| m.name == name)
}

/// The model names, comma-separated.
pub fn model_names() -> String {
    MODELS.iter().map(|m| m.name).collect::<Vec<_>>().join(", ")
}

/// The names of the models with MIG, comma-separated.
pub fn mig_model_names() -> String {
    MODELS
        .iter()
        .filter(|m| !m.mig.is_empty())
        .map(|m| m.name)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn every_placement_fits_the_memory_slices_and_the_biggest_profile_takes_them_all() {
        for m in MODELS.iter().filter(|m| !m.mig.is_empty()) {
            let widest = m.mig.iter().map(|p| p.size).max().unwrap();
            assert_eq!(widest, MEMORY_SLICES, "{}", m.name);
            for p in m.mig {
                for &start in p.starts {
                    assert!(
                        p.slices_at(start).end <= MEMORY_SLICES,
                        "{} {} at {start}",
                        m.name,
                        p.name
                    );
                }
                assert!(p.memory_mib < m.memory_mib, "{} {}", m.name, p.name);
            }
        }
    }

    #[test]
    fn profile_ids_and_names_are_those_of_nvidia_smi() {
        let a100 = model("A100-40GB").unwrap();
        let ids: Vec<(&str, u32)> = a100.mig.iter().map(|p| (p.name, p.id)).collect();
        assert_eq!(
            ids,
            [
                ("1g.5gb", 19),
                ("1g.5gb+me", 20),
                ("1g.10gb", 15),
                ("2g.10gb", 14),
                ("3g.20gb", 9),
                ("4g.20gb", 5),
                ("7g.40gb", 0)
            ]
        );
        assert_eq!(
            a100.mig_profile("1g.5gb+me").unwrap().name_part(),
            "1g5gb-me"
        );
        assert_eq!(a100.mig_profile("3g.20gb").unwrap().name_part(), "3g20gb");
        assert!(model("L4").unwrap().mig.is_empty());
        assert_eq!(model("a100-40gb"), None, "names are exact");
        assert_eq!(mig_model_names(), "A100-40GB, A100-80GB, H100-80GB");
    }
}
