//! [`RewriteIo`]: the [`Rewriter`] on a byte stream, as a tonic server's connection or
//! a client's transport.

use super::*;

/// Which half of the connection the rewriter sits on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Side {
    /// A server: what it reads from the client is rewritten.
    Server,
    /// A client: what it writes to the server is rewritten.
    Client,
}

/// An I/O stream whose client→server bytes go through a [`Rewriter`].
#[derive(Debug)]
pub struct RewriteIo<S> {
    pub(super) inner: S,
    pub(super) side: Side,
    pub(super) rewriter: Rewriter,
    /// Rewritten bytes not yet handed on (to the reader, or to `inner`).
    pub(super) pending: Vec<u8>,
    /// How much of `pending` is handed on.
    pub(super) handed: usize,
    /// Raw bytes read from `inner` (server side).
    pub(super) scratch: Vec<u8>,
    /// Set once the rewriter failed: the stream is dead.
    pub(super) failed: Option<RewriteError>,
}

/// How much a server-side read takes from the socket at once.
pub(super) const READ_CHUNK: usize = 16 * 1024;

impl<S> RewriteIo<S> {
    /// Rewrites what a server reads: every `:authority` becomes `localhost`.
    pub fn server(inner: S) -> Self {
        Self::new(inner, Side::Server, b"localhost".to_vec())
    }

    /// Rewrites what a client writes: every `:authority` becomes `authority`.
    pub fn client(inner: S, authority: impl Into<Vec<u8>>) -> Self {
        Self::new(inner, Side::Client, authority.into())
    }

    fn new(inner: S, side: Side, authority: Vec<u8>) -> Self {
        Self {
            inner,
            side,
            rewriter: Rewriter::new(authority),
            pending: Vec::new(),
            handed: 0,
            scratch: Vec::new(),
            failed: None,
        }
    }

    /// The wrapped stream.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    fn feed(&mut self, input: &[u8]) -> io::Result<()> {
        if self.handed == self.pending.len() {
            self.pending.clear();
            self.handed = 0;
        }
        if let Some(e) = &self.failed {
            return Err(io::Error::new(io::ErrorKind::InvalidData, e.clone()));
        }
        self.rewriter.feed(input, &mut self.pending).map_err(|e| {
            self.failed = Some(e.clone());
            io::Error::new(io::ErrorKind::InvalidData, e)
        })
    }
}

impl<S: AsyncWrite + Unpin> RewriteIo<S> {
    /// Writes out what the rewriter produced (client side).
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.handed < self.pending.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.pending[self.handed..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.handed += n;
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for RewriteIo<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.side == Side::Client {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        loop {
            if this.handed < this.pending.len() {
                let n = (this.pending.len() - this.handed).min(buf.remaining());
                buf.put_slice(&this.pending[this.handed..this.handed + n]);
                this.handed += n;
                return Poll::Ready(Ok(()));
            }
            // The rest of a DATA (or other non-header) frame goes straight to the reader.
            let passthrough = this.rewriter.passthrough_len().min(buf.remaining());
            if passthrough > 0 && this.failed.is_none() {
                let mut direct = ReadBuf::new(buf.initialize_unfilled_to(passthrough));
                ready!(Pin::new(&mut this.inner).poll_read(cx, &mut direct))?;
                let n = direct.filled().len();
                this.rewriter.passed(n);
                buf.advance(n);
                return Poll::Ready(Ok(()));
            }
            this.scratch.resize(READ_CHUNK, 0);
            let mut raw = ReadBuf::new(&mut this.scratch);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut raw))?;
            let filled = raw.filled().len();
            if filled == 0 {
                // End of stream; a client that stopped mid-frame just goes away.
                return Poll::Ready(Ok(()));
            }
            let input = std::mem::take(&mut this.scratch);
            let fed = this.feed(&input[..filled]);
            this.scratch = input;
            fed?;
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for RewriteIo<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.side == Side::Server {
            return Pin::new(&mut this.inner).poll_write(cx, data);
        }
        ready!(this.poll_drain(cx))?;
        this.feed(data)?;
        // Hand on what we can now; the rest goes with the next write or flush.
        if let Poll::Ready(Err(e)) = this.poll_drain(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(data.len()))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.side == Side::Server {
            return Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs);
        }
        let data = bufs
            .iter()
            .find(|b| !b.is_empty())
            .map_or(&[][..], |b| &b[..]);
        self.poll_write(cx, data)
    }

    fn is_write_vectored(&self) -> bool {
        self.side == Side::Server && self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

impl<S: tonic::transport::server::Connected> tonic::transport::server::Connected for RewriteIo<S> {
    type ConnectInfo = S::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}
