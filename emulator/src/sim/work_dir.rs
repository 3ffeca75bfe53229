//! The sim's work directory: who owns it, and removing those of sims that died.

use super::*;

/// Writes [`OWNER_FILE`] into `work_dir`: this process and when it started.
pub(super) fn record_owner(work_dir: &Path) -> Result<(), SimError> {
    let pid = std::process::id();
    let start_time = lifeline::stat_of(pid).map_or(0, |s| s.start_time);
    let path = work_dir.join(OWNER_FILE);
    std::fs::write(&path, format!("{pid} {start_time}\n")).map_err(|source| SimError::Io {
        what: format!("writing {}", path.display()),
        source,
    })
}

/// Removes the default work directories (`<temp>/fake-dra-sim-*`) of sims that are no
/// longer running — killed before they could clean up — and says so in the log. A
/// directory without an owner file is left alone: it may be a sim's that is just starting,
/// or one from before owner files.
pub fn remove_stale_work_dirs(temp: &Path) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let Ok(entries) = std::fs::read_dir(temp) else {
        return removed;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let ours = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(WORK_DIR_PREFIX));
        if !ours || !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let Ok(owner) = std::fs::read_to_string(path.join(OWNER_FILE)) else {
            continue;
        };
        let mut fields = owner.split_whitespace().map(str::parse::<u64>);
        let (Some(Ok(pid)), Some(Ok(start_time))) = (fields.next(), fields.next()) else {
            tracing::warn!(dir = %path.display(), "unreadable {OWNER_FILE}; leaving the directory alone");
            continue;
        };
        let Ok(pid) = u32::try_from(pid) else {
            continue;
        };
        if lifeline::is_alive(pid, start_time) {
            continue;
        }
        match std::fs::remove_dir_all(&path) {
            Ok(()) => {
                tracing::info!(dir = %path.display(), pid, "removed the work directory of a fake-dra-sim that is no longer running");
                removed.push(path);
            }
            Err(e) => {
                tracing::warn!(dir = %path.display(), pid, "removing the work directory of a fake-dra-sim that is no longer running: {e}")
            }
        }
    }
    removed
}
