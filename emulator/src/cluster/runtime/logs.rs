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

/// containerd's `max_container_log_line_size` (16 KiB): a longer line is written as
/// several records, all but the last tagged `P`, and output without a newline cannot grow
/// a buffer past it (200 MB of `a` without a newline grew the sim by 200 MB).
pub const MAX_LOG_LINE_BYTES: usize = 16 * 1024;

/// The kubelet's `containerLogMaxSize` default (10Mi): past it the log file is rotated.
pub const CONTAINER_LOG_MAX_BYTES: u64 = 10 * 1024 * 1024;

/// The kubelet's `containerLogMaxFiles` default (5): the current file and 4 rotated ones.
pub const CONTAINER_LOG_MAX_FILES: usize = 5;

/// A run's log file in the CRI format containerd writes (`<RFC3339Nano> <stream> <F|P>
/// <text>`, `F` for a full line, `P` for a part without its newline), shared by the
/// stdout and stderr readers, rotated as the kubelet's container log manager rotates it
/// (k8s.io/kubernetes `pkg/kubelet/logs/container_log_manager.go`: renamed to
/// `<file>.<YYYYMMDD-hhmmss>`, the oldest removed past `containerLogMaxFiles`; the
/// emulator does not gzip the older ones).
#[derive(Debug, Clone)]
pub(super) struct CriLog(Arc<Mutex<CriFile>>);

#[derive(Debug)]
struct CriFile {
    file: std::fs::File,
    path: PathBuf,
    size: u64,
}

impl CriLog {
    /// Opens (appending) the file, creating its directories; logs and gives up on failure:
    /// the in-memory sink still has the recent lines.
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
            Ok(file) => {
                let size = file.metadata().map_or(0, |m| m.len());
                Some(Self(Arc::new(Mutex::new(CriFile {
                    file,
                    path: path.to_path_buf(),
                    size,
                }))))
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), "opening the container log file: {e}");
                None
            }
        }
    }

    fn write(&self, stream: Stream, full: bool, text: &str) {
        let mut cri = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let record = cri_record(stream, full, text);
        if let Err(e) = cri.file.write_all(record.as_bytes()) {
            tracing::warn!("writing the container log file: {e}");
            return;
        }
        cri.size += record.len() as u64;
        if cri.size > CONTAINER_LOG_MAX_BYTES
            && let Err(e) = cri.rotate()
        {
            tracing::warn!(path = %cri.path.display(), "rotating the container log file: {e}");
        }
    }
}

impl CriFile {
    /// Renames the file to `<file>.<timestamp>`, removes the oldest rotated ones beyond
    /// [`CONTAINER_LOG_MAX_FILES`], and starts a new file.
    fn rotate(&mut self) -> std::io::Result<()> {
        let stamp = jiff::Timestamp::now().strftime("%Y%m%d-%H%M%S").to_string();
        let mut rotated = PathBuf::from(format!("{}.{stamp}", self.path.display()));
        // Two rotations within a second: keep both.
        let mut n = 1;
        while rotated.exists() {
            rotated = PathBuf::from(format!("{}.{stamp}-{n}", self.path.display()));
            n += 1;
        }
        std::fs::rename(&self.path, &rotated)?;
        self.file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)?;
        self.size = 0;
        let (Some(dir), Some(name)) = (self.path.parent(), self.path.file_name()) else {
            return Ok(());
        };
        let prefix = format!("{}.", name.to_string_lossy());
        let mut old: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(dir)?
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
            .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
            .collect();
        old.sort();
        let keep = CONTAINER_LOG_MAX_FILES - 1;
        for (_, path) in old.iter().take(old.len().saturating_sub(keep)) {
            std::fs::remove_file(path)?;
        }
        Ok(())
    }
}

/// One line of a CRI log file, its newline included: `<RFC3339Nano> <stream> <F|P> <text>`.
pub fn cri_record(stream: Stream, full: bool, text: &str) -> String {
    let stamp = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S.%fZ");
    let tag = if full { 'F' } else { 'P' };
    format!("{stamp} {} {tag} {text}\n", stream.as_str())
}

/// Copies a stream into the sink line by line (lossy UTF-8, so binary output can't stop it),
/// a line longer than [`MAX_LOG_LINE_BYTES`] in parts of that size.
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
        match read_line_bounded(&mut reader, &mut buf, MAX_LOG_LINE_BYTES).await {
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

/// Reads up to and including the next newline, or `max` bytes, whichever comes first;
/// 0 at the end of the stream.
pub(crate) async fn read_line_bounded(
    reader: &mut (impl AsyncBufReadExt + Unpin),
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<usize> {
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(buf.len());
        }
        let window = &available[..available.len().min(max - buf.len())];
        let (taken, done) = match window.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (window.len(), buf.len() + window.len() >= max),
        };
        buf.extend_from_slice(&window[..taken]);
        reader.consume(taken);
        if done {
            return Ok(buf.len());
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

/// How much of a container's output the sink keeps in memory: its latest lines up to
/// this many bytes (each line counted with [`LINE_OVERHEAD_BYTES`] more). The log files
/// keep what the kubelet keeps ([`CONTAINER_LOG_MAX_BYTES`] × [`CONTAINER_LOG_MAX_FILES`]);
/// before, every line stayed in memory for the sim's life (2 M lines: +440 MB).
pub const SINK_BYTES_PER_CONTAINER: usize = 1024 * 1024;

/// What a kept line costs besides its text (the `String`, its place in the queue).
const LINE_OVERHEAD_BYTES: usize = 48;

/// The latest lines of one container, oldest first, with a sequence number each (the
/// order across containers, for [`LogSink::all`]).
#[derive(Debug, Default)]
pub(super) struct Kept {
    lines: std::collections::VecDeque<(u64, String)>,
    bytes: usize,
}

/// The latest lines of every container (stdout and stderr), kept in memory per container
/// within [`SINK_BYTES_PER_CONTAINER`], and every line broadcast.
#[derive(Debug, Clone)]
pub struct LogSink {
    pub(super) kept: Arc<Mutex<SinkState>>,
    pub(super) tx: broadcast::Sender<LogLine>,
}

#[derive(Debug, Default)]
pub(super) struct SinkState {
    containers: std::collections::HashMap<(String, String, String), Kept>,
    next: u64,
}

impl Default for LogSink {
    fn default() -> Self {
        Self {
            kept: Arc::default(),
            tx: broadcast::channel(LOG_CHANNEL_CAPACITY).0,
        }
    }
}

fn key(namespace: &str, pod: &str, container: &str) -> (String, String, String) {
    (namespace.into(), pod.into(), container.into())
}

impl LogSink {
    pub fn subscribe(&self) -> broadcast::Receiver<LogLine> {
        self.tx.subscribe()
    }

    /// The container's kept lines, oldest first.
    pub fn lines(&self, namespace: &str, pod: &str, container: &str) -> Vec<String> {
        self.locked()
            .containers
            .get(&key(namespace, pod, container))
            .map(|k| k.lines.iter().map(|(_, l)| l.clone()).collect())
            .unwrap_or_default()
    }

    /// Drops a pod's lines, as the kubelet removes a deleted pod's logs: afterwards its
    /// name's lines are only those of a new pod of that name, as `kubectl logs` shows.
    pub fn forget(&self, namespace: &str, pod: &str) {
        self.locked()
            .containers
            .retain(|(ns, p, _), _| !(ns == namespace && p == pod));
    }

    /// Every kept line, in the order they came.
    pub fn all(&self) -> Vec<LogLine> {
        let state = self.locked();
        let mut all: Vec<(u64, LogLine)> = state
            .containers
            .iter()
            .flat_map(|((namespace, pod, container), kept)| {
                kept.lines.iter().map(move |(seq, line)| {
                    (
                        *seq,
                        LogLine {
                            namespace: namespace.clone(),
                            pod: pod.clone(),
                            container: container.clone(),
                            line: line.clone(),
                        },
                    )
                })
            })
            .collect();
        all.sort_by_key(|(seq, _)| *seq);
        all.into_iter().map(|(_, line)| line).collect()
    }

    /// Records a line (dropping the container's oldest beyond its budget) and broadcasts it.
    pub fn push(&self, line: LogLine) {
        let mut state = self.locked();
        let seq = state.next;
        state.next += 1;
        let kept = state
            .containers
            .entry(key(&line.namespace, &line.pod, &line.container))
            .or_default();
        kept.bytes += line.line.len() + LINE_OVERHEAD_BYTES;
        kept.lines.push_back((seq, line.line.clone()));
        while kept.bytes > SINK_BYTES_PER_CONTAINER {
            let Some((_, oldest)) = kept.lines.pop_front() else {
                break;
            };
            kept.bytes -= oldest.len() + LINE_OVERHEAD_BYTES;
        }
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

    pub(super) fn locked(&self) -> MutexGuard<'_, SinkState> {
        // A panic while pushing leaves consistent queues; keep serving them.
        self.kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
