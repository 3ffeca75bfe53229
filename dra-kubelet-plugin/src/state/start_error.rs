//! Why the plugin cannot start with its files.

use std::io;
use std::path::{Path, PathBuf};

use crate::cdi_spec::SpecError;
use crate::checkpoint::CheckpointError;

/// Why the plugin cannot start with its files. Each names the file, or the
/// `DeviceProfile` method that gave what cannot be written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The profile's common edits cannot be written, or use a host file that is missing:
    /// every container using any claim would fail.
    #[error("DeviceProfile::common_edits: {0}")]
    CommonEdits(#[source] SpecError),
    /// The device profile made an unusable spec for a checkpointed claim.
    #[error("checkpointed claim {claim}: {source}")]
    Profile {
        /// The claim uid.
        claim: String,
        /// What the profile did wrong.
        source: SpecError,
    },
    /// The checkpoint is there but unusable; never wiped silently.
    #[error(
        "checkpoint {path}: {source}; fix or remove the file (removing it forgets every prepared claim)"
    )]
    Checkpoint {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        source: CheckpointError,
    },
    /// Claim specs of ours without a checkpoint: most likely the plugin directory is not
    /// the one they were prepared with. Starting would sweep them as orphans, taking the
    /// devices from running pods.
    #[error(
        "checkpoint {checkpoint} is missing, but {cdi_root} holds the CDI specs of {} prepared claim(s) ({}): is the plugin directory the one they were prepared with? Starting now would unprepare them under running pods. Mount the right directory; or, if no pod on this node uses these claims any more, delete those spec files and start again",
        claims.len(),
        claims.join(", ")
    )]
    MissingCheckpoint {
        /// Where the checkpoint should be.
        checkpoint: PathBuf,
        /// The CDI dir.
        cdi_root: PathBuf,
        /// The claim uids whose specs are there.
        claims: Vec<String>,
    },
    /// A file operation failed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
}

pub(super) fn io_err(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> StartError {
    let path = path.to_owned();
    move |source| StartError::Io {
        action,
        path,
        source,
    }
}
