//! Accept loops that no client can take down.
//!
//! Every pod of a node can reach a component's health port, and every root process its
//! unix sockets. So an accept error (out of file descriptors) backs off instead of ending
//! the loop or spinning on a core; at most [`Limits::max_connections`] connections are
//! open, and admitting one more closes the one that was quiet longest; a connection quiet
//! for [`Limits::idle_timeout`] is closed. A client that connects and sends nothing can
//! therefore delay a kubelet's or a probe's connection, never refuse it.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};
use tracing::{debug, warn};

/// How long a connection may go without a byte in either direction.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// File descriptors left for everything but client connections (sockets, files, the API
/// client's connections).
const RESERVED_FDS: usize = 32;
/// Bounds on the connection limit derived from the fd limit.
const MIN_CONNECTIONS: usize = 4;
const MAX_CONNECTIONS: usize = 4096;
/// The first and the longest wait after a failed accept.
const FIRST_BACKOFF: Duration = Duration::from_millis(10);
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// `EMFILE`, `ENFILE` on Linux: out of file descriptors.
const OUT_OF_FDS: [i32; 2] = [24, 23];

/// Something connections are accepted from.
pub trait Listener: Send + 'static {
    /// An accepted connection.
    type Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    /// `accept`, as a poll.
    fn poll_accept(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Self::Stream>>;
}

impl Listener for tokio::net::TcpListener {
    type Stream = tokio::net::TcpStream;
    fn poll_accept(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Self::Stream>> {
        tokio::net::TcpListener::poll_accept(self, cx).map_ok(|(s, _)| s)
    }
}

impl Listener for tokio::net::UnixListener {
    type Stream = tokio::net::UnixStream;
    fn poll_accept(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Self::Stream>> {
        tokio::net::UnixListener::poll_accept(self, cx).map_ok(|(s, _)| s)
    }
}

/// How many connections a process keeps open, and for how long when they are quiet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Open connections, over all listeners of a [`Pool`].
    pub max_connections: usize,
    /// A connection quiet for this long is closed.
    pub idle_timeout: Duration,
}

impl Limits {
    /// From a `--max-connections` flag (0: [`Limits::from_fd_limit`]) and an idle timeout
    /// in seconds (at least 1).
    pub fn from_flags(max_connections: usize, idle_timeout_seconds: u64) -> Self {
        let limits = Self::from_fd_limit(Duration::from_secs(idle_timeout_seconds.max(1)));
        match max_connections {
            0 => limits,
            n => Self {
                max_connections: n,
                ..limits
            },
        }
    }

    /// As many connections as the soft `RLIMIT_NOFILE` leaves room for.
    pub fn from_fd_limit(idle_timeout: Duration) -> Self {
        let fds = soft_fd_limit().unwrap_or(1024);
        Self {
            max_connections: fds
                .saturating_sub(RESERVED_FDS)
                .clamp(MIN_CONNECTIONS, MAX_CONNECTIONS),
            idle_timeout,
        }
    }
}

/// The soft open-files limit, from `/proc/self/limits` (no libc call: the workspace
/// forbids `unsafe`).
fn soft_fd_limit() -> Option<usize> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let soft = line
        .trim_start_matches("Max open files")
        .split_whitespace()
        .next()?;
    match soft {
        "unlimited" => Some(usize::MAX),
        n => n.parse().ok(),
    }
}

/// The connections of one process, over all its listeners.
#[derive(Debug, Clone)]
pub struct Pool {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    limits: Limits,
    epoch: Instant,
    next_id: AtomicU64,
    slots: Mutex<HashMap<u64, Arc<Slot>>>,
}

/// One open connection, as the pool sees it.
#[derive(Debug)]
struct Slot {
    id: u64,
    /// Milliseconds after the pool's epoch of the last byte moved.
    last_active: AtomicU64,
    /// Set when the pool closes the connection to admit another.
    evicted: AtomicBool,
    /// Wakes the connection's reader so it sees `evicted`.
    waker: Mutex<Option<Waker>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Pool {
    /// An empty pool.
    pub fn new(limits: Limits) -> Self {
        Self {
            shared: Arc::new(Shared {
                limits,
                epoch: Instant::now(),
                next_id: AtomicU64::new(0),
                slots: Mutex::default(),
            }),
        }
    }

    /// The limits it enforces.
    pub fn limits(&self) -> Limits {
        self.shared.limits
    }

    /// Connections open now.
    pub fn open_connections(&self) -> usize {
        lock(&self.shared.slots).len()
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.shared.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Registers a new connection, closing the quietest ones while the pool is full.
    fn admit(&self) -> Arc<Slot> {
        let slot = Arc::new(Slot {
            id: self.shared.next_id.fetch_add(1, Ordering::Relaxed),
            last_active: AtomicU64::new(self.now_ms()),
            evicted: AtomicBool::new(false),
            waker: Mutex::new(None),
        });
        let mut slots = lock(&self.shared.slots);
        while slots.len() >= self.shared.limits.max_connections {
            if !Self::evict_quietest(&mut slots) {
                break;
            }
        }
        slots.insert(slot.id, slot.clone());
        slot
    }

    /// Closes the connection that was quiet longest; false when there is none.
    fn evict_quietest(slots: &mut HashMap<u64, Arc<Slot>>) -> bool {
        let Some(id) = slots
            .values()
            .min_by_key(|s| (s.last_active.load(Ordering::Relaxed), s.id))
            .map(|s| s.id)
        else {
            return false;
        };
        if let Some(slot) = slots.remove(&id) {
            debug!(
                connection = id,
                "closing the quietest connection to admit a new one"
            );
            slot.evicted.store(true, Ordering::SeqCst);
            if let Some(waker) = lock(&slot.waker).take() {
                waker.wake();
            }
        }
        true
    }

    fn release(&self, id: u64) {
        lock(&self.shared.slots).remove(&id);
    }
}

/// Accepts from `listener` for ever and yields the connections, guarded by `pool`. Accept
/// errors are logged and waited out (out of fds: the quietest connection is closed too);
/// the stream never yields an error and never ends.
pub fn incoming<L: Listener>(
    listener: L,
    pool: Pool,
) -> impl Stream<Item = io::Result<Guarded<L::Stream>>> + Send + 'static {
    futures::stream::unfold(
        (listener, pool, Duration::ZERO),
        |(mut listener, pool, mut backoff)| async move {
            loop {
                match std::future::poll_fn(|cx| listener.poll_accept(cx)).await {
                    Ok(stream) => {
                        let guarded = Guarded::new(stream, pool.clone());
                        return Some((Ok(guarded), (listener, pool, Duration::ZERO)));
                    }
                    Err(error) => {
                        if error
                            .raw_os_error()
                            .is_some_and(|e| OUT_OF_FDS.contains(&e))
                        {
                            Pool::evict_quietest(&mut lock(&pool.shared.slots));
                        }
                        if backoff.is_zero() {
                            warn!(%error, "accepting a connection failed; backing off");
                        } else {
                            debug!(%error, ?backoff, "accepting a connection failed again");
                        }
                        backoff = (backoff * 2).clamp(FIRST_BACKOFF, MAX_BACKOFF);
                        tokio::time::sleep(backoff).await;
                    }
                }
            }
        },
    )
}

/// A connection that the pool can close, and that closes itself when quiet.
#[derive(Debug)]
pub struct Guarded<S> {
    inner: S,
    slot: Arc<Slot>,
    pool: Pool,
    idle: Pin<Box<Sleep>>,
}

impl<S> Guarded<S> {
    fn new(inner: S, pool: Pool) -> Self {
        let slot = pool.admit();
        let idle = Box::pin(tokio::time::sleep(pool.shared.limits.idle_timeout));
        Self {
            inner,
            slot,
            pool,
            idle,
        }
    }

    /// The wrapped stream.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    fn touch(&self) {
        self.slot
            .last_active
            .store(self.pool.now_ms(), Ordering::Relaxed);
    }

    fn check_evicted(&self) -> io::Result<()> {
        if self.slot.evicted.load(Ordering::SeqCst) {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "connection closed to admit a newer one (too many open connections)",
            ));
        }
        Ok(())
    }

    /// Called when a read would block: arranges to be woken by an eviction or when the
    /// connection has been quiet for the idle timeout, and fails if either happened.
    fn park(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        *lock(&self.slot.waker) = Some(cx.waker().clone());
        self.check_evicted()?;
        let timeout = self.pool.shared.limits.idle_timeout;
        while self.idle.as_mut().poll(cx).is_ready() {
            let last = Duration::from_millis(self.slot.last_active.load(Ordering::Relaxed));
            let deadline = self.pool.shared.epoch + last + timeout;
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("connection idle for {timeout:?}"),
                ));
            }
            self.idle.as_mut().reset(deadline);
        }
        Ok(())
    }
}

impl<S> Drop for Guarded<S> {
    fn drop(&mut self) {
        self.pool.release(self.slot.id);
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Guarded<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.check_evicted()?;
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(result) => {
                if buf.filled().len() > before {
                    this.touch();
                }
                Poll::Ready(result)
            }
            Poll::Pending => {
                this.park(cx)?;
                Poll::Pending
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Guarded<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.check_evicted()?;
        let written = Pin::new(&mut this.inner).poll_write(cx, data);
        if matches!(written, Poll::Ready(Ok(n)) if n > 0) {
            this.touch();
        }
        written
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.check_evicted()?;
        let written = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        if matches!(written, Poll::Ready(Ok(n)) if n > 0) {
            this.touch();
        }
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// So tonic can serve guarded streams.
impl<S: tonic::transport::server::Connected> tonic::transport::server::Connected for Guarded<S> {
    type ConnectInfo = S::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}
