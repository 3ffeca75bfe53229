//! Container logs: lines read from a container's stdout/stderr, fanned out to subscribers
//! and written to the run's CRI log file.

use std::io::Write;

use super::*;

#[derive(Debug, Clone)]
pub(super) struct Origin {
    pub(super) namespace: String,
    pub(super) pod: String,
    pub(super) container: String,
    pub(super) file: Option<CriLog>,
}

/// Which stream a line came from: the CRI log format records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stdout => "stdout",
            Self::Stderr => "stderr",
        }
    }
}

/// A run's log file in the CRI format containerd writes (`<RFC3339Nano> <stream> <F|P>
/// <text>`, `F` for a full line, `P` for a part without its newline), shared by the
/// stdout and stderr readers.
#[derive(Debug, Clone)]
pub(super) struct CriLog(Arc<Mutex<std::fs::File>>);

impl CriLog {
    /// Opens (appending) the file, creating its directories; logs and gives up on failure:
    /// the in-memory sink still has every line.
    pub(super) fn create(path: &Path) -> Option<Self> {
        let open = || -> std::io::Result<std::fs::File> {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
        };
        match open() {
            Ok(file) => Some(Self(Arc::new(Mutex::new(file)))),
            Err(e) => {
                tracing::warn!(path = %path.display(), "opening the container log file: {e}");
                None
            }
        }
    }

    fn write(&self, stream: Stream, full: bool, text: &str) {
        let mut file = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Err(e) = file.write_all(cri_record(stream, full, text).as_bytes()) {
            tracing::warn!("writing the container log file: {e}");
        }
    }
}

/// One line of a CRI log file, its newline included: `<RFC3339Nano> <stream> <F|P> <text>`.
pub fn cri_record(stream: Stream, full: bool, text: &str) -> String {
    let stamp = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S.%fZ");
    let tag = if full { 'F' } else { 'P' };
    format!("{stamp} {} {tag} {text}\n", stream.as_str())
}

/// Copies a stream into the sink line by line (lossy UTF-8, so binary output can't stop it).
pub(super) async fn forward_lines(
    stream: impl AsyncRead + Unpin,
    logs: LogSink,
    origin: Origin,
    which: Stream,
    podman_stderr: bool,
) {
    let mut reader = BufReader::new(stream);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf).await {
            Ok(0) => break,
            Ok(_) => {
                let line = String::from_utf8_lossy(&buf);
                if let Some(file) = &origin.file {
                    let full = line.ends_with('\n');
                    file.write(which, full, line.strip_suffix('\n').unwrap_or(&line));
                }
                let line = line.strip_suffix('\n').unwrap_or(&line);
                let line = line.strip_suffix('\r').unwrap_or(line);
                if podman_stderr && line.starts_with("Error: ") {
                    tracing::warn!(container = %format!("{}/{}/{}", origin.namespace, origin.pod, origin.container), "podman: {line}");
                }
                logs.push(LogLine {
                    namespace: origin.namespace.clone(),
                    pod: origin.pod.clone(),
                    container: origin.container.clone(),
                    line: line.to_string(),
                });
            }
            Err(e) => {
                tracing::warn!("reading container output: {e}");
                break;
            }
        }
    }
}

/// One line a container printed.
#[derive(Debug, Clone)]
pub struct LogLine {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    pub line: String,
}

impl LogLine {
    pub(super) fn is_of(&self, namespace: &str, pod: &str, container: &str) -> bool {
        self.namespace == namespace && self.pod == pod && self.container == container
    }
}

/// Every line every container printed (stdout and stderr), kept in memory and broadcast.
#[derive(Debug, Clone)]
pub struct LogSink {
    pub(super) lines: Arc<Mutex<Vec<LogLine>>>,
    pub(super) tx: broadcast::Sender<LogLine>,
}

impl Default for LogSink {
    fn default() -> Self {
        Self {
            lines: Arc::default(),
            tx: broadcast::channel(LOG_CHANNEL_CAPACITY).0,
        }
    }
}

impl LogSink {
    pub fn subscribe(&self) -> broadcast::Receiver<LogLine> {
        self.tx.subscribe()
    }

    pub fn lines(&self, namespace: &str, pod: &str, container: &str) -> Vec<String> {
        self.locked()
            .iter()
            .filter(|l| l.is_of(namespace, pod, container))
            .map(|l| l.line.clone())
            .collect()
    }

    /// Drops a pod's lines, as the kubelet removes a deleted pod's logs: afterwards its
    /// name's lines are only those of a new pod of that name, as `kubectl logs` shows.
    pub fn forget(&self, namespace: &str, pod: &str) {
        self.locked()
            .retain(|l| !(l.namespace == namespace && l.pod == pod));
    }

    pub fn all(&self) -> Vec<LogLine> {
        self.locked().clone()
    }

    /// Records a line and broadcasts it.
    pub fn push(&self, line: LogLine) {
        let mut lines = self.locked();
        lines.push(line.clone());
        // Sent under the lock so subscribers see lines in the stored order; no subscriber is fine.
        let _ = self.tx.send(line);
    }

    /// Waits until a line of that container satisfies `pred`, up to `timeout`; returns all
    /// that container's lines so far, or `Err(lines so far)` on timeout.
    pub async fn wait_for(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
        timeout: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> Result<Vec<String>, Vec<String>> {
        let deadline = tokio::time::Instant::now() + timeout;
        // Subscribed before looking, so no line slips between the look and the wait.
        let mut rx = self.subscribe();
        let mut recheck = true;
        loop {
            if recheck {
                let lines = self.lines(namespace, pod, container);
                if lines.iter().any(|l| pred(l)) {
                    return Ok(lines);
                }
                recheck = false;
            }
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Err(_) | Ok(Err(broadcast::error::RecvError::Closed)) => {
                    return Err(self.lines(namespace, pod, container));
                }
                Ok(Ok(line)) if line.is_of(namespace, pod, container) && pred(&line.line) => {
                    return Ok(self.lines(namespace, pod, container));
                }
                Ok(Ok(_)) => {}
                Ok(Err(broadcast::error::RecvError::Lagged(_))) => recheck = true,
            }
        }
    }

    pub(super) fn locked(&self) -> MutexGuard<'_, Vec<LogLine>> {
        // A panic while pushing leaves a consistent Vec; keep serving it.
        self.lines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
