//! Which plugin instance this is, for rolling updates (kubelet 1.33+): two instances of a
//! driver on one node, the new one started before the old one stops, each registered
//! under sockets of its own (named after its pod's UID) and sharing the plugin directory.
//! A file lock in that directory serializes their calls, as the Go helper's
//! `RollingUpdate` does (`serialize.lock`).

use std::fs::File;
use std::io;
use std::path::Path;

use base64::Engine;

/// The longest path of a unix socket (`sun_path`, with its NUL).
const UNIX_PATH_MAX: usize = 108;

/// The lock file in the plugin directory.
pub const LOCK_FILE: &str = "serialize.lock";

fn hash(data: &str, bytes: usize) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, data.as_bytes());
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&digest.as_ref()[..bytes])
}

/// The registration socket's file name in `registry_dir`: `<driver>.sock` for a single
/// instance; with a pod UID, the Go helper's choice for rolling updates — the first of
/// `<driver>-<uid>-reg.sock`, `<driver>-<base64(sha256(uid))[:8 bytes]>-reg.sock`,
/// `dra-<base64(sha256(driver NUL uid))[:16 bytes]>-reg.sock` whose path fits a unix
/// socket.
pub fn registration_socket_file(
    registry_dir: &Path,
    driver: &str,
    pod_uid: Option<&str>,
) -> String {
    let Some(uid) = pod_uid else {
        return format!("{driver}.sock");
    };
    let candidates = [
        format!("{driver}-{uid}-reg.sock"),
        format!("{driver}-{}-reg.sock", hash(uid, 8)),
        format!("dra-{}-reg.sock", hash(&format!("{driver}\0{uid}"), 16)),
    ];
    pick_fitting(registry_dir, candidates)
}

/// The DRA socket's file name in the plugin directory: `plugin.sock` for a single
/// instance, `plugin-<uid>.sock` (or a hash of the uid, where that is too long) for one of
/// a rolling update.
pub fn dra_socket_file(plugin_dir: &Path, pod_uid: Option<&str>) -> String {
    let Some(uid) = pod_uid else {
        return "plugin.sock".to_owned();
    };
    pick_fitting(
        plugin_dir,
        [
            format!("plugin-{uid}.sock"),
            format!("plugin-{}.sock", hash(uid, 8)),
        ],
    )
}

fn pick_fitting<const N: usize>(dir: &Path, candidates: [String; N]) -> String {
    let fits = |name: &String| dir.join(name).as_os_str().len() < UNIX_PATH_MAX;
    let last = candidates.len() - 1;
    candidates
        .iter()
        .position(fits)
        .map_or_else(|| candidates[last].clone(), |i| candidates[i].clone())
}

/// Holds the plugin directory's lock until dropped (its file closed).
#[derive(Debug)]
pub struct DirLock(#[allow(dead_code)] File);

/// Takes the lock of `plugin_dir`, waiting for another instance to release it. Blocking.
pub fn lock_dir(plugin_dir: &Path) -> io::Result<DirLock> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(plugin_dir.join(LOCK_FILE))?;
    file.lock()?;
    Ok(DirLock(file))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const UID: &str = "6e1f3b4a-9c2d-4e8f-a1b2-c3d4e5f6a7b8";

    #[test]
    fn sockets_are_named_per_instance_and_fit_a_unix_path() {
        let registry = Path::new("/var/lib/kubelet/plugins_registry");
        assert_eq!(
            registration_socket_file(registry, "gpu.example.com", None),
            "gpu.example.com.sock"
        );
        assert_eq!(
            registration_socket_file(registry, "gpu.example.com", Some(UID)),
            format!("gpu.example.com-{UID}-reg.sock")
        );
        let long = "a-rather-long-driver-name.accelerators.example.com";
        let name = registration_socket_file(registry, long, Some(UID));
        assert!(
            name.starts_with(&format!("{long}-")) && name.ends_with("-reg.sock"),
            "{name}"
        );
        assert_eq!(
            name.len(),
            long.len() + 1 + 11 + 9,
            "8 bytes of base64: {name}"
        );
        let longest = "d".repeat(63);
        let name = registration_socket_file(registry, &longest, Some(UID));
        assert!(
            name.starts_with("dra-") && name.len() == 4 + 22 + 9,
            "{name}"
        );
        for name in [
            registration_socket_file(registry, long, Some(UID)),
            registration_socket_file(registry, &longest, Some(UID)),
        ] {
            assert!(
                registry.join(&name).as_os_str().len() < UNIX_PATH_MAX,
                "{name}"
            );
        }
        let plugins = Path::new("/var/lib/kubelet/plugins/gpu.example.com");
        assert_eq!(dra_socket_file(plugins, None), "plugin.sock");
        assert_eq!(
            dra_socket_file(plugins, Some(UID)),
            format!("plugin-{UID}.sock")
        );
        let deep = Path::new("/var/lib/kubelet/plugins").join(&longest);
        let name = dra_socket_file(&deep, Some(UID));
        assert_eq!(name.len(), "plugin-.sock".len() + 11, "{name}");
    }

    #[test]
    fn the_lock_is_held_until_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let held = lock_dir(dir.path()).unwrap();
        let file = std::fs::File::open(dir.path().join(LOCK_FILE)).unwrap();
        assert!(file.try_lock().is_err(), "held by the first");
        drop(held);
        assert!(file.try_lock().is_ok(), "released");
    }
}
