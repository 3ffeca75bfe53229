//! Reading a file a user names on the command line (an inventory, a manifest): only a
//! regular file, and never more than a limit. A symlink is followed (a ConfigMap mount is
//! one), but `/dev/zero` behind it is refused rather than read without end, and a FIFO is
//! refused rather than waited on.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// Why a user's file cannot be read; names the flag, the path and the limit.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("{flag} '{path}': {source}")]
    Io {
        flag: String,
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("{flag} '{path}' is {kind}, not a regular file")]
    NotRegular {
        flag: String,
        path: String,
        kind: &'static str,
    },
    #[error("{flag} '{path}' is larger than {limit} bytes, the limit")]
    TooLarge {
        flag: String,
        path: String,
        limit: u64,
    },
    #[error("{flag} '{path}' is not UTF-8 text")]
    NotUtf8 { flag: String, path: String },
}

/// The text of the regular file at `path` (symlinks followed), at most `limit` bytes;
/// `flag` is the command-line flag that named it, for errors.
pub fn read_text(flag: &str, path: &Path, limit: u64) -> Result<String, FileError> {
    let bytes = read_bytes(flag, path, limit)?;
    String::from_utf8(bytes).map_err(|_| FileError::NotUtf8 {
        flag: flag.to_owned(),
        path: path.display().to_string(),
    })
}

/// The bytes of the regular file at `path` (symlinks followed), at most `limit`.
pub fn read_bytes(flag: &str, path: &Path, limit: u64) -> Result<Vec<u8>, FileError> {
    let name = || path.display().to_string();
    let io = |source| FileError::Io {
        flag: flag.to_owned(),
        path: name(),
        source,
    };
    let file = OpenOptions::new()
        .read(true)
        // Opening a FIFO without a writer would block; a regular file ignores the flag.
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(io)?;
    let kind = file_kind(&file).map_err(io)?;
    if let Some(kind) = kind {
        return Err(FileError::NotRegular {
            flag: flag.to_owned(),
            path: name(),
            kind,
        });
    }
    // The size may change between the check and the read (a file being written): the
    // read itself stops one byte past the limit.
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > limit {
        return Err(FileError::TooLarge {
            flag: flag.to_owned(),
            path: name(),
            limit,
        });
    }
    Ok(bytes)
}

/// `None` for a regular file, else what it is.
fn file_kind(file: &File) -> io::Result<Option<&'static str>> {
    let t = file.metadata()?.file_type();
    Ok(if t.is_file() {
        None
    } else if t.is_dir() {
        Some("a directory")
    } else if t.is_fifo() {
        Some("a FIFO")
    } else if t.is_char_device() {
        Some("a character device")
    } else if t.is_block_device() {
        Some("a block device")
    } else if t.is_socket() {
        Some("a socket")
    } else {
        Some("not a file")
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_regular_file_and_a_symlink_to_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.yaml");
        std::fs::write(&path, "abc").unwrap();
        let link = dir.path().join("link.yaml");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert_eq!(read_text("--f", &path, 3).unwrap(), "abc");
        assert_eq!(read_text("--f", &link, 3).unwrap(), "abc");
    }

    #[test]
    fn refuses_devices_fifos_directories_and_too_much() {
        let dir = tempfile::tempdir().unwrap();
        let zero = dir.path().join("zero.yaml");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let err = read_text("--inventory", &zero, 1 << 20).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "--inventory '{}' is a character device, not a regular file",
                zero.display()
            )
        );
        let fifo = dir.path().join("fifo.yaml");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        // Without O_NONBLOCK this open would wait for a writer forever.
        let err = read_text("--inventory", &fifo, 1 << 20).unwrap_err();
        assert!(
            err.to_string().ends_with("is a FIFO, not a regular file"),
            "{err}"
        );
        let err = read_text("--inventory", dir.path(), 1 << 20).unwrap_err();
        assert!(
            err.to_string()
                .ends_with("is a directory, not a regular file"),
            "{err}"
        );
        let big = dir.path().join("big.yaml");
        std::fs::write(&big, "abcd").unwrap();
        let err = read_text("--inventory", &big, 3).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "--inventory '{}' is larger than 3 bytes, the limit",
                big.display()
            )
        );
        let err = read_text("--inventory", &dir.path().join("missing"), 3).unwrap_err();
        assert!(err.to_string().starts_with("--inventory '"), "{err}");
        std::fs::write(&big, [0xff, 0xfe]).unwrap();
        let err = read_text("--inventory", &big, 3).unwrap_err();
        assert!(err.to_string().ends_with("is not UTF-8 text"), "{err}");
    }
}
