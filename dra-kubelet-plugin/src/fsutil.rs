//! Crash-safe file writes in directories other programs may write too.
//!
//! A reader sees the old content or the new, never a torn file. The CDI directory is
//! shared with every other CDI producer on the node, so nothing here trusts a name in it:
//! temp files have unpredictable names and are created exclusively (`O_CREAT|O_EXCL`
//! never follows a symlink planted in advance), the final rename replaces whatever the
//! name points at rather than writing through it, reads refuse anything but a regular
//! file, and every file and directory gets its mode explicitly, whatever the umask.

use std::fs::{self, File, OpenOptions, Permissions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// CDI specs: runtimes (root) read them.
pub const SPEC_MODE: u32 = 0o644;
/// The checkpoint: the plugin's own state.
pub const CHECKPOINT_MODE: u32 = 0o600;
/// Directories the plugin creates.
pub const DIR_MODE: u32 = 0o750;
/// The plugin's unix sockets: the kubelet (root) connects.
pub const SOCKET_MODE: u32 = 0o660;

/// Files read back for comparison are never bigger than this (the largest claim spec,
/// 128 devices × 64 children, is about 2 MB).
const MAX_READ: u64 = 64 << 20;

/// How much of a write survives a power loss once [`write_atomic`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Nothing is fsync'd: readers see the new content at once (the rename is atomic),
    /// a power loss may lose it. For files the checkpoint can restore (CDI specs).
    Visible,
    /// The file and the directory are fsync'd: the new content survives a power loss.
    Durable,
}

/// Writes `bytes` to `path` atomically with permissions `mode`: a temp file with an
/// unpredictable name in the same directory (a leading dot, which CDI scanners and the
/// kubelet's registry watcher skip), then renamed over `path`; with
/// [`Durability::Durable`] the file is fsync'd before the rename and the directory after.
pub fn write_atomic(
    path: &Path,
    bytes: &[u8],
    mode: u32,
    durability: Durability,
) -> io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no directory"))?;
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    let tmp = dir.join(format!(
        ".{}.{}{TEMP_SUFFIX}",
        name.to_string_lossy(),
        uuid::Uuid::new_v4().simple()
    ));
    let result = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        // `mode` at creation is filtered by the umask; this is not.
        file.set_permissions(Permissions::from_mode(mode))?;
        file.write_all(bytes)?;
        if durability == Durability::Durable {
            file.sync_all()?;
        }
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result?;
    if durability == Durability::Durable {
        sync_dir(dir)?;
    }
    Ok(())
}

/// What every temp file of [`write_atomic`] ends with.
pub const TEMP_SUFFIX: &str = ".tmp";

/// Whether `file_name` is a temp file [`write_atomic`] left for a file named `target`
/// (an interrupted write), in today's form or the old fixed one (`.<target>.tmp`).
pub fn is_temp_file_of(file_name: &str, target: &str) -> bool {
    file_name
        .strip_prefix('.')
        .and_then(|rest| rest.strip_prefix(target))
        .is_some_and(|rest| rest.ends_with(TEMP_SUFFIX))
}

/// The content of `path` if it is a regular file (not a symlink, FIFO or device) of at
/// most 64 MiB; `None` when it is missing or anything else.
pub fn read_regular(path: &Path) -> io::Result<Option<Vec<u8>>> {
    let file = match OpenOptions::new()
        .read(true)
        // Never follow a symlink, never block on a FIFO someone put there.
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        // ELOOP: a symlink.
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Ok(None),
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    if !meta.is_file() || meta.len() > MAX_READ {
        return Ok(None);
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(MAX_READ).read_to_end(&mut bytes)?;
    Ok(Some(bytes))
}

/// Creates `dir` (and its parents) if missing; a directory this call creates gets
/// [`DIR_MODE`], an existing one is left as it is (it may be shared, like `/var/run/cdi`).
pub fn create_dir(dir: &Path) -> io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    fs::create_dir_all(dir)?;
    fs::set_permissions(dir, Permissions::from_mode(DIR_MODE))
}

/// Sets a unix socket's permissions to [`SOCKET_MODE`].
pub fn restrict_socket(path: &Path) -> io::Result<()> {
    fs::set_permissions(path, Permissions::from_mode(SOCKET_MODE))
}

/// Fsyncs a directory, making renames and removals in it durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Removes a file (a symlink itself, not its target); a file that is already gone is not
/// an error.
pub fn remove_if_exists(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::os::unix::fs::{FileTypeExt, MetadataExt, symlink};

    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn replaces_content_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.json");
        write_atomic(&path, b"one", SPEC_MODE, Durability::Durable).unwrap();
        write_atomic(&path, b"two", SPEC_MODE, Durability::Visible).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        assert_eq!(names(dir.path()), ["a.json"]);
        remove_if_exists(&path).unwrap();
        remove_if_exists(&path).unwrap();
        assert!(!path.exists());
    }

    #[test]
    fn a_missing_directory_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = write_atomic(
            &dir.path().join("no/such/a.json"),
            b"x",
            SPEC_MODE,
            Durability::Durable,
        )
        .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn planted_symlinks_are_replaced_never_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        fs::write(&victim, b"precious").unwrap();
        let path = dir.path().join("spec.json");
        // Under the old fixed temp name and under the final name.
        symlink(&victim, dir.path().join(".spec.json.tmp")).unwrap();
        symlink(&victim, &path).unwrap();
        write_atomic(&path, b"ours", SPEC_MODE, Durability::Durable).unwrap();
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
        assert!(
            !fs::symlink_metadata(&path)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(fs::read(&path).unwrap(), b"ours");
    }

    #[test]
    fn modes_are_explicit_whatever_the_umask() {
        let dir = tempfile::tempdir().unwrap();
        for mode in [SPEC_MODE, CHECKPOINT_MODE] {
            let path = dir.path().join(format!("f{mode:o}"));
            write_atomic(&path, b"x", mode, Durability::Visible).unwrap();
            assert_eq!(fs::metadata(&path).unwrap().mode() & 0o777, mode);
        }
        let made = dir.path().join("a/b");
        create_dir(&made).unwrap();
        assert_eq!(fs::metadata(&made).unwrap().mode() & 0o777, DIR_MODE);
        // An existing directory keeps its mode.
        fs::set_permissions(dir.path(), Permissions::from_mode(0o711)).unwrap();
        create_dir(dir.path()).unwrap();
        assert_eq!(fs::metadata(dir.path()).unwrap().mode() & 0o777, 0o711);
    }

    #[test]
    fn reads_refuse_anything_but_a_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        fs::write(&file, b"x").unwrap();
        assert_eq!(read_regular(&file).unwrap(), Some(b"x".to_vec()));
        assert_eq!(read_regular(&dir.path().join("missing")).unwrap(), None);
        let link = dir.path().join("l");
        symlink(&file, &link).unwrap();
        assert_eq!(read_regular(&link).unwrap(), None);
        assert_eq!(read_regular(dir.path()).unwrap(), None);
        let fifo = dir.path().join("fifo");
        let status = std::process::Command::new("mkfifo").arg(&fifo).status();
        if status.is_ok_and(|s| s.success()) {
            assert!(fs::metadata(&fifo).unwrap().file_type().is_fifo());
            assert_eq!(read_regular(&fifo).unwrap(), None, "no blocking on a FIFO");
        }
    }

    #[test]
    fn temp_files_are_recognised_in_both_spellings() {
        assert!(is_temp_file_of(".checkpoint.json.tmp", "checkpoint.json"));
        assert!(is_temp_file_of(
            ".checkpoint.json.0123456789abcdef0123456789abcdef.tmp",
            "checkpoint.json"
        ));
        assert!(!is_temp_file_of("checkpoint.json", "checkpoint.json"));
        assert!(!is_temp_file_of(".other.json.tmp", "checkpoint.json"));
    }
}
