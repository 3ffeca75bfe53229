//! Finds the binaries the emulated cluster runs as child processes: the ones the driver's
//! Deployment and DaemonSet name in their `command`.
//!
//! `cargo build --workspace --bins` and `cargo test --workspace` put every binary of the
//! workspace in one directory (`target/<profile>/`), the one that holds the running
//! executable (or its parent, for test executables under `deps/`).

use std::path::{Path, PathBuf};

/// Overrides where the binaries are looked up (e.g. an installed copy).
pub const BIN_DIR_ENV: &str = "FAKE_DRA_BIN_DIR";

/// The emulator's own binary, for suites that run it as a user would.
pub const SIM: &str = "fake-dra-sim";

#[derive(Debug, thiserror::Error)]
#[error(
    "{name} not found in {searched}: build it with `cargo build --workspace --bins` (or set {BIN_DIR_ENV} to the directory holding it)"
)]
pub struct NotFound {
    pub name: String,
    pub searched: String,
}

/// The path of binary `name`, from `explicit_dir`, `$FAKE_DRA_BIN_DIR`, or next to the
/// running executable.
pub fn locate(name: &str, explicit_dir: Option<&Path>) -> Result<PathBuf, NotFound> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(dir) = explicit_dir {
        dirs.push(dir.to_path_buf());
    } else if let Some(dir) = std::env::var_os(BIN_DIR_ENV) {
        dirs.push(PathBuf::from(dir));
    } else if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf))
    {
        if dir.file_name().is_some_and(|n| n == "deps")
            && let Some(parent) = dir.parent()
        {
            dirs.push(parent.to_path_buf());
        }
        dirs.push(dir);
    }
    dirs.iter()
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| NotFound {
            name: name.to_string(),
            searched: dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        })
}
