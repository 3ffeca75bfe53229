//! What every binary says it is: `--version` ([`flags::parse`](crate::flags::parse) sets
//! it) and the first log line ([`logging::init`](crate::logging::init) writes it), so a
//! bug report names the exact build.

/// The release and the git commit: `0.1.0 (commit 2d5297b1c3e4)`.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("FAKE_DRA_GIT_COMMIT"),
    ")"
);

/// The release alone.
pub const RELEASE: &str = env!("CARGO_PKG_VERSION");

/// The git commit (12 hex digits, or `unknown`).
pub const COMMIT: &str = env!("FAKE_DRA_GIT_COMMIT");

/// The running binary's file name (`fake-dra-controller`), for the start log line.
pub fn binary_name() -> String {
    std::env::args_os()
        .next()
        .map(std::path::PathBuf::from)
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "fake-dra".into())
}

/// Logs `<binary> <version>` at info, once logging is up.
pub fn log_start() {
    tracing::info!(
        binary = %binary_name(),
        version = RELEASE,
        commit = COMMIT,
        "starting"
    );
}
