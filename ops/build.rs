//! Records the git commit the binaries are built from, for `--version` and the start log
//! line ([`version`](src/version.rs)): `FAKE_DRA_GIT_COMMIT` when set (an image build
//! without `.git`, or a developer who wants commits not to rebuild every crate), else
//! `git rev-parse`, else `unknown`.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

fn main() {
    println!("cargo:rerun-if-env-changed=FAKE_DRA_GIT_COMMIT");
    let commit = match std::env::var("FAKE_DRA_GIT_COMMIT") {
        Ok(given) if !given.is_empty() => given,
        _ => {
            // Rebuilt when HEAD moves: HEAD itself (a branch switch) and the ref it names
            // (a commit); in a worktree both live in its own git dir.
            for path in ["HEAD", "packed-refs"] {
                if let Some(p) = git(&["rev-parse", "--git-path", path]) {
                    println!("cargo:rerun-if-changed={p}");
                }
            }
            if let Some(head_ref) = git(&["symbolic-ref", "-q", "HEAD"])
                && let Some(p) = git(&["rev-parse", "--git-path", &head_ref])
            {
                println!("cargo:rerun-if-changed={p}");
            }
            git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into())
        }
    };
    println!("cargo:rustc-env=FAKE_DRA_GIT_COMMIT={commit}");
}
