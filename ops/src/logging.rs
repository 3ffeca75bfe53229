//! Logs to stderr, the level from `RUST_LOG` (default `info`), as text or as JSON for a
//! log pipeline.

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Installs the global subscriber and logs the binary's version
/// ([`version::log_start`](crate::version::log_start)); call once, first thing in `main`.
pub fn init(format: LogFormat) {
    init_with(format, "info");
}

/// [`init`] with another filter for when `RUST_LOG` is unset, e.g. `warn,my_crate=info`.
pub fn init_with(format: LogFormat, default_filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    // Colours only on a terminal: a container's stderr is a pipe, and escape codes in
    // `kubectl logs` (or in a test reading `key=value`) are noise.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
    crate::version::log_start();
}
