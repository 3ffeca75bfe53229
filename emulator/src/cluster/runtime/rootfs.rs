//! The busybox root filesystem of the podman runner and the applets both runners provide.

use super::*;

/// The effective uid from /proc (no libc: `unsafe` is forbidden here).
pub(super) fn effective_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

/// A busybox root filesystem laid out like a merged-/usr image (Wolfi, Debian): every applet
/// `busybox --list` gives is a link in `usr/bin`, and `bin`, `sbin` and `usr/sbin` lead
/// there, so a command finds its program under whichever of those paths a manifest names
/// (`/bin/ash`, `/usr/bin/env`, `/sbin/ip`). Built in a staging directory and renamed into
/// place, so concurrent callers with the same `work_dir` never see half of it.
pub(super) fn build_rootfs(work_dir: &Path) -> Result<PathBuf, RuntimeError> {
    let target = work_dir.join("podman-rootfs");
    let io_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| RuntimeError::Rootfs { path, source }
    };
    let complete = |root: &Path| {
        root.join("usr/bin/busybox").is_file()
            && root.join("bin").is_symlink()
            && root.join("usr/bin/printenv").exists()
    };
    if !complete(&target) {
        std::fs::create_dir_all(work_dir).map_err(io_err(work_dir))?;
        if target.exists() {
            // An older layout (a reused --work-dir): rebuilt, since renaming onto a
            // non-empty directory fails.
            let _ = std::fs::remove_dir_all(&target);
        }
        let staging = work_dir.join(format!(".podman-rootfs-{}", uuid::Uuid::new_v4()));
        let built = populate_rootfs(&staging).and_then(|()| std::fs::rename(&staging, &target));
        if let Err(source) = built {
            let _ = std::fs::remove_dir_all(&staging);
            // Another caller may have won the rename.
            if !complete(&target) {
                return Err(RuntimeError::Rootfs {
                    path: target,
                    source,
                });
            }
        }
    }
    target.canonicalize().map_err(io_err(&target))
}

pub(super) fn populate_rootfs(root: &Path) -> std::io::Result<()> {
    for dir in ["usr/bin", "etc", "tmp", "proc", "sys", "dev", "run"] {
        std::fs::create_dir_all(root.join(dir))?;
    }
    for (link, to) in [("bin", "usr/bin"), ("sbin", "usr/bin"), ("usr/sbin", "bin")] {
        std::os::unix::fs::symlink(to, root.join(link))?;
    }
    let bin = root.join("usr/bin");
    std::fs::copy(BUSYBOX, bin.join("busybox"))?;
    let applets = busybox_list(Path::new(BUSYBOX))?;
    for applet in &applets {
        std::os::unix::fs::symlink("busybox", bin.join(applet))?;
    }
    // The few applets busybox installs elsewhere (`linuxrc` at the root).
    for path in busybox_output(Path::new(BUSYBOX), "--list-full")?.lines() {
        let in_bin_dirs = APPLET_DIRS
            .iter()
            .any(|dir| Path::new("/").join(path).parent() == Some(Path::new(dir)));
        if !path.is_empty() && !in_bin_dirs && !path.contains("..") {
            let link = root.join(path);
            if let Some(parent) = link.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::os::unix::fs::symlink("/usr/bin/busybox", link)?;
        }
    }
    if !applets.contains("printenv") {
        let printenv = bin.join("printenv");
        std::fs::write(&printenv, PRINTENV_SCRIPT)?;
        std::fs::set_permissions(&printenv, std::fs::Permissions::from_mode(0o755))?;
    }
    Ok(())
}

/// The applets of a busybox binary (`busybox --list`), without `busybox` itself.
pub(super) fn busybox_list(busybox: &Path) -> std::io::Result<BTreeSet<String>> {
    Ok(busybox_output(busybox, "--list")?
        .lines()
        .map(str::trim)
        .filter(|a| !a.is_empty() && *a != "busybox" && !a.contains('/'))
        .map(str::to_string)
        .collect())
}

/// What `busybox <option>` prints.
pub(super) fn busybox_output(busybox: &Path, option: &str) -> std::io::Result<String> {
    let out = std::process::Command::new(busybox)
        .arg(option)
        .stdin(Stdio::null())
        .output()?;
    if !out.status.success() {
        return Err(std::io::Error::other(format!(
            "{} {option} failed: {}",
            busybox.display(),
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The host's busybox applets, listed once; `None` when busybox is not installed.
pub(super) fn host_applets() -> Option<&'static BTreeSet<String>> {
    static APPLETS: OnceLock<Option<BTreeSet<String>>> = OnceLock::new();
    APPLETS
        .get_or_init(|| {
            let busybox = Path::new(BUSYBOX);
            if !is_executable(busybox) {
                return None;
            }
            busybox_list(busybox)
                .inspect_err(|e| tracing::warn!("listing the busybox applets: {e}"))
                .ok()
        })
        .as_ref()
}

/// How the process runner runs a container's program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Program {
    pub path: PathBuf,
    /// Arguments before the container's own (the applet name for busybox).
    pub prefix: Vec<String>,
}

/// The process runner's rule for a container's program (`command[0]`), so manifests
/// written for real images run as they are:
///
/// 1. A bare name (`ash`) or an absolute path in `/bin`, `/sbin`, `/usr/bin` or `/usr/sbin`
///    (`/bin/ash`, `/usr/bin/env`) names the program of that file name. When it is an
///    applet of `applets` (the host's `/bin/busybox --list`), it runs as
///    `/bin/busybox <applet> <args…>`, as in an image whose shell and tools are busybox.
/// 2. Otherwise the host's program: a bare name looked up in the container's `PATH`; an
///    absolute path as it is when the host has it, else its file name in that `PATH`.
///    Any other path (`./x`, `/opt/tool`) runs as it is.
/// 3. Nothing found: an error naming the program.
pub(crate) fn resolve_program(
    program: &str,
    path_env: &str,
    applets: Option<&BTreeSet<String>>,
    busybox: &Path,
) -> Result<Program, String> {
    let name = if !program.contains('/') {
        Some(program)
    } else {
        let path = Path::new(program);
        let in_applet_dir = path
            .parent()
            .and_then(Path::to_str)
            .is_some_and(|dir| APPLET_DIRS.contains(&dir));
        in_applet_dir
            .then(|| path.file_name().and_then(|n| n.to_str()))
            .flatten()
    };
    let direct = |path: PathBuf| Program {
        path,
        prefix: Vec::new(),
    };
    let Some(name) = name.filter(|n| !n.is_empty()) else {
        // A path outside the image's bin directories: the host's file, as it is.
        return Ok(direct(PathBuf::from(program)));
    };
    if applets.is_some_and(|a| a.contains(name)) {
        return Ok(Program {
            path: busybox.to_path_buf(),
            prefix: vec![name.to_string()],
        });
    }
    if program.starts_with('/') && is_executable(Path::new(program)) {
        return Ok(direct(PathBuf::from(program)));
    }
    let in_path = std::env::split_paths(path_env)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate));
    match in_path {
        Some(found) => Ok(direct(found)),
        None => Err(format!(
            "{} and no {name:?} on the host (PATH {path_env})",
            if applets.is_some() {
                format!("{name:?} is not a busybox applet")
            } else {
                format!("busybox ({}) is not installed", busybox.display())
            }
        )),
    }
}
