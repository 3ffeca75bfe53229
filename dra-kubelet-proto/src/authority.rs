//! Rewrites the HTTP/2 `:authority` of a gRPC client's requests on a unix socket.
//!
//! Kubelets dial plugin sockets with grpc-go and a bare socket path as the target
//! (`pkg/kubelet/pluginmanager/operationexecutor/operation_generator.go`, `dial`; the DRA
//! client up to 1.33), so grpc-go sends the path as `:authority`: raw before grpc-go 1.57
//! (kubelets 1.27/1.28), %-encoded since (`clientconn.go`, `encodeAuthority`). h2, under
//! tonic, refuses both as a malformed authority with `RST_STREAM(PROTOCOL_ERROR)` before
//! any tower layer runs (hyperium/h2#487). A unix socket has no authority worth checking,
//! so the plugin runs each accepted connection through [`RewriteIo::server`], which
//! re-encodes every header block the client sends with `:authority: localhost` and passes
//! every other byte through unchanged. The emulated kubelet runs the same [`Rewriter`] on
//! what it writes ([`RewriteIo::client`]) to send the path as the real kubelet does.
//!
//! The header blocks are decoded with the client's HPACK context (loona-hpack) and
//! re-encoded as literals that never touch the peer's dynamic table, so the rewriter keeps
//! no state the peer must mirror.

use std::borrow::Cow;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

mod stream;

pub use stream::RewriteIo;

/// What every HTTP/2 connection starts with (RFC 9113 §3.4).
pub const CLIENT_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The HPACK dynamic table size the client may use: the HTTP/2 default (RFC 9113
/// §6.5.2), which h2 servers never raise.
pub const HEADER_TABLE_SIZE: usize = 4096;

/// Limit on one compressed header block (HEADERS plus its CONTINUATIONs).
pub const MAX_HEADER_BLOCK: usize = 1 << 20;

/// Limit on one decoded header list, counted as RFC 7541 §4.1 does (name + value + 32 per
/// field); bounds what a small block full of dynamic-table references can expand to.
pub const MAX_HEADER_LIST: usize = 1 << 20;

/// The frame payload every HTTP/2 peer accepts (SETTINGS_MAX_FRAME_SIZE's floor).
const MIN_MAX_FRAME_SIZE: usize = 16_384;
const FRAME_HEADER_LEN: usize = 9;
const TYPE_HEADERS: u8 = 0x1;
const TYPE_CONTINUATION: u8 = 0x9;
const FLAG_END_STREAM: u8 = 0x1;
const FLAG_END_HEADERS: u8 = 0x4;
const FLAG_PADDED: u8 = 0x8;
const FLAG_PRIORITY: u8 = 0x20;
const PRIORITY_LEN: usize = 5;

/// Why a connection cannot be rewritten; the connection is then closed.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum RewriteError {
    /// Not HTTP/2 (or garbage before the preface).
    #[error("the connection does not start with the HTTP/2 client preface")]
    NoPreface,
    /// A header block interrupted by another frame (RFC 9113 §6.10).
    #[error(
        "frame of type {frame_type:#x} on stream {stream} where a CONTINUATION of stream {expected} must follow"
    )]
    ExpectedContinuation {
        /// The frame that came.
        frame_type: u8,
        /// Its stream.
        stream: u32,
        /// The stream whose header block is open.
        expected: u32,
    },
    /// A CONTINUATION with no open header block.
    #[error("CONTINUATION frame on stream {0} without a HEADERS frame before it")]
    UnexpectedContinuation(u32),
    /// Padding or priority fields longer than the frame.
    #[error("HEADERS frame on stream {0}: padding or priority longer than the frame")]
    BadHeadersFrame(u32),
    /// Compressed header block over [`MAX_HEADER_BLOCK`].
    #[error("header block of stream {stream} exceeds {MAX_HEADER_BLOCK} bytes")]
    HeaderBlockTooLarge {
        /// The HTTP/2 stream.
        stream: u32,
    },
    /// Decoded header list over [`MAX_HEADER_LIST`].
    #[error("decoded header list of stream {stream} exceeds {MAX_HEADER_LIST} bytes")]
    HeaderListTooLarge {
        /// The HTTP/2 stream.
        stream: u32,
    },
    /// The block is not valid HPACK.
    #[error("header block of stream {stream}: HPACK: {reason}")]
    Hpack {
        /// The HTTP/2 stream.
        stream: u32,
        /// The decoder's error.
        reason: String,
    },
}

#[derive(Debug, Clone, Copy)]
struct FrameHeader {
    length: usize,
    kind: u8,
    flags: u8,
    stream: u32,
}

impl FrameHeader {
    fn parse(b: &[u8; FRAME_HEADER_LEN]) -> Self {
        Self {
            length: usize::from(b[0]) << 16 | usize::from(b[1]) << 8 | usize::from(b[2]),
            kind: b[3],
            flags: b[4],
            stream: u32::from_be_bytes([b[5] & 0x7f, b[6], b[7], b[8]]),
        }
    }

    fn write(&self, out: &mut Vec<u8>) {
        let len = self.length.to_be_bytes();
        out.extend_from_slice(&len[len.len() - 3..]);
        out.push(self.kind);
        out.push(self.flags);
        out.extend_from_slice(&self.stream.to_be_bytes());
    }
}

#[derive(Debug)]
enum State {
    Preface {
        seen: usize,
    },
    FrameHeader {
        buf: [u8; FRAME_HEADER_LEN],
        have: usize,
    },
    /// Payload of a frame that is passed through as it comes.
    Passthrough {
        remaining: usize,
    },
    /// Payload of a HEADERS or CONTINUATION frame, collected whole.
    HeaderPayload {
        header: FrameHeader,
        buf: Vec<u8>,
    },
}

/// A header block waiting for its CONTINUATION frames.
#[derive(Debug)]
struct OpenBlock {
    stream: u32,
    end_stream: bool,
    priority: Option<[u8; PRIORITY_LEN]>,
    fragment: Vec<u8>,
}

/// The client→server half of one HTTP/2 connection, with every `:authority` replaced.
/// Pure: bytes in, bytes out.
pub struct Rewriter {
    authority: Vec<u8>,
    state: State,
    decoder: loona_hpack::Decoder<'static>,
    open: Option<OpenBlock>,
}

impl std::fmt::Debug for Rewriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rewriter")
            .field("authority", &String::from_utf8_lossy(&self.authority))
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl Rewriter {
    /// A rewriter that sets `:authority` to `authority` wherever the client sends one.
    pub fn new(authority: impl Into<Vec<u8>>) -> Self {
        let mut decoder = loona_hpack::Decoder::new();
        decoder.set_max_allowed_table_size(HEADER_TABLE_SIZE);
        Self {
            authority: authority.into(),
            state: State::Preface { seen: 0 },
            decoder,
            open: None,
        }
    }

    /// Consumes `input`, appending what the server is to receive to `out`. After an error
    /// the connection is beyond repair.
    pub fn feed(&mut self, mut input: &[u8], out: &mut Vec<u8>) -> Result<(), RewriteError> {
        while !input.is_empty() {
            match &mut self.state {
                State::Preface { seen } => {
                    let n = (CLIENT_PREFACE.len() - *seen).min(input.len());
                    if input[..n] != CLIENT_PREFACE[*seen..*seen + n] {
                        return Err(RewriteError::NoPreface);
                    }
                    out.extend_from_slice(&input[..n]);
                    *seen += n;
                    input = &input[n..];
                    if *seen == CLIENT_PREFACE.len() {
                        self.state = State::next_frame();
                    }
                }
                State::FrameHeader { buf, have } => {
                    let n = (FRAME_HEADER_LEN - *have).min(input.len());
                    buf[*have..*have + n].copy_from_slice(&input[..n]);
                    *have += n;
                    input = &input[n..];
                    if *have == FRAME_HEADER_LEN {
                        let header = FrameHeader::parse(buf);
                        self.start_frame(header, out)?;
                    }
                }
                State::Passthrough { remaining } => {
                    let n = (*remaining).min(input.len());
                    out.extend_from_slice(&input[..n]);
                    *remaining -= n;
                    input = &input[n..];
                    if *remaining == 0 {
                        self.state = State::next_frame();
                    }
                }
                State::HeaderPayload { header, buf } => {
                    let n = (header.length - buf.len()).min(input.len());
                    buf.extend_from_slice(&input[..n]);
                    input = &input[n..];
                    if buf.len() == header.length {
                        let header = *header;
                        let payload = std::mem::take(buf);
                        self.state = State::next_frame();
                        self.end_header_frame(header, &payload, out)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// How many bytes from here on pass through unchanged (the rest of a frame payload
    /// that is not a header block); a reader may hand them on without [`Rewriter::feed`]
    /// and then report them with [`Rewriter::passed`].
    pub fn passthrough_len(&self) -> usize {
        match self.state {
            State::Passthrough { remaining } => remaining,
            _ => 0,
        }
    }

    /// Records that `n` (at most [`Rewriter::passthrough_len`]) bytes were passed through.
    pub fn passed(&mut self, n: usize) {
        if let State::Passthrough { remaining } = &mut self.state {
            *remaining -= n.min(*remaining);
            if *remaining == 0 {
                self.state = State::next_frame();
            }
        }
    }

    fn start_frame(&mut self, header: FrameHeader, out: &mut Vec<u8>) -> Result<(), RewriteError> {
        if let Some(open) = &self.open
            && (header.kind != TYPE_CONTINUATION || header.stream != open.stream)
        {
            return Err(RewriteError::ExpectedContinuation {
                frame_type: header.kind,
                stream: header.stream,
                expected: open.stream,
            });
        }
        match header.kind {
            TYPE_HEADERS | TYPE_CONTINUATION => {
                if header.kind == TYPE_CONTINUATION && self.open.is_none() {
                    return Err(RewriteError::UnexpectedContinuation(header.stream));
                }
                let so_far = self.open.as_ref().map_or(0, |o| o.fragment.len());
                // Padding and priority count too, but never more than 256 + 5 bytes.
                if so_far + header.length > MAX_HEADER_BLOCK + 256 + PRIORITY_LEN {
                    return Err(RewriteError::HeaderBlockTooLarge {
                        stream: header.stream,
                    });
                }
                if header.length == 0 {
                    self.state = State::next_frame();
                    return self.end_header_frame(header, &[], out);
                }
                self.state = State::HeaderPayload {
                    header,
                    buf: Vec::with_capacity(header.length),
                };
            }
            _ => {
                header.write(out);
                self.state = if header.length == 0 {
                    State::next_frame()
                } else {
                    State::Passthrough {
                        remaining: header.length,
                    }
                };
            }
        }
        Ok(())
    }

    fn end_header_frame(
        &mut self,
        header: FrameHeader,
        payload: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), RewriteError> {
        if header.kind == TYPE_HEADERS {
            let bad = || RewriteError::BadHeadersFrame(header.stream);
            let mut body = payload;
            let mut padding = 0;
            if header.flags & FLAG_PADDED != 0 {
                let (&len, rest) = body.split_first().ok_or_else(bad)?;
                padding = usize::from(len);
                body = rest;
            }
            let priority = if header.flags & FLAG_PRIORITY != 0 {
                let (fields, rest) = body.split_first_chunk::<PRIORITY_LEN>().ok_or_else(bad)?;
                body = rest;
                Some(*fields)
            } else {
                None
            };
            let fragment = body.get(..body.len().checked_sub(padding).ok_or_else(bad)?);
            self.open = Some(OpenBlock {
                stream: header.stream,
                end_stream: header.flags & FLAG_END_STREAM != 0,
                priority,
                fragment: fragment.ok_or_else(bad)?.to_vec(),
            });
        } else if let Some(open) = &mut self.open {
            open.fragment.extend_from_slice(payload);
        }
        if self
            .open
            .as_ref()
            .is_some_and(|o| o.fragment.len() > MAX_HEADER_BLOCK)
        {
            return Err(RewriteError::HeaderBlockTooLarge {
                stream: header.stream,
            });
        }
        if header.flags & FLAG_END_HEADERS == 0 {
            return Ok(());
        }
        match self.open.take() {
            Some(block) => self.emit(block, out),
            None => Ok(()),
        }
    }

    /// Decodes a whole header block with the client's context and writes it back as
    /// HEADERS (+ CONTINUATION) frames with the new authority.
    fn emit(&mut self, block: OpenBlock, out: &mut Vec<u8>) -> Result<(), RewriteError> {
        let stream = block.stream;
        let mut encoded = Vec::with_capacity(block.fragment.len() + self.authority.len());
        let mut list_size = 0usize;
        let authority = &self.authority;
        self.decoder
            .decode_with_cb(&block.fragment, |name: Cow<[u8]>, value: Cow<[u8]>| {
                list_size = list_size.saturating_add(name.len() + value.len() + 32);
                if list_size > MAX_HEADER_LIST {
                    return;
                }
                let value: &[u8] = if name.as_ref() == b":authority" {
                    authority
                } else {
                    &value
                };
                encode_literal(&name, value, &mut encoded);
            })
            .map_err(|e| RewriteError::Hpack {
                stream,
                reason: e.to_string(),
            })?;
        if list_size > MAX_HEADER_LIST {
            return Err(RewriteError::HeaderListTooLarge { stream });
        }
        let first_room = MIN_MAX_FRAME_SIZE - block.priority.map_or(0, |_| PRIORITY_LEN);
        let (first, mut rest) = encoded.split_at(first_room.min(encoded.len()));
        let mut flags = 0;
        if block.end_stream {
            flags |= FLAG_END_STREAM;
        }
        if block.priority.is_some() {
            flags |= FLAG_PRIORITY;
        }
        if rest.is_empty() {
            flags |= FLAG_END_HEADERS;
        }
        FrameHeader {
            length: first.len() + block.priority.map_or(0, |_| PRIORITY_LEN),
            kind: TYPE_HEADERS,
            flags,
            stream,
        }
        .write(out);
        if let Some(priority) = block.priority {
            out.extend_from_slice(&priority);
        }
        out.extend_from_slice(first);
        while !rest.is_empty() {
            let (chunk, more) = rest.split_at(MIN_MAX_FRAME_SIZE.min(rest.len()));
            FrameHeader {
                length: chunk.len(),
                kind: TYPE_CONTINUATION,
                flags: if more.is_empty() { FLAG_END_HEADERS } else { 0 },
                stream,
            }
            .write(out);
            out.extend_from_slice(chunk);
            rest = more;
        }
        Ok(())
    }
}

impl State {
    fn next_frame() -> Self {
        State::FrameHeader {
            buf: [0; FRAME_HEADER_LEN],
            have: 0,
        }
    }
}

/// "Literal Header Field Never Indexed — New Name" (RFC 7541 §6.2.3), no Huffman: it
/// leaves the peer's dynamic table alone and keeps intermediaries from indexing secrets.
fn encode_literal(name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    out.push(0x10);
    for s in [name, value] {
        encode_length(s.len(), out);
        out.extend_from_slice(s);
    }
}

/// A string length with the 7-bit prefix and the Huffman bit clear (RFC 7541 §5.1, §5.2).
fn encode_length(mut n: usize, out: &mut Vec<u8>) {
    const PREFIX_MAX: usize = 0x7f;
    if n < PREFIX_MAX {
        out.push(n as u8);
        return;
    }
    out.push(PREFIX_MAX as u8);
    n -= PREFIX_MAX;
    while n >= 0x80 {
        out.push((n & 0x7f) as u8 | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// The authority grpc-go ≥ 1.57 sends for a target without a scheme
/// (`clientconn.go`, `encodeAuthority`): every byte outside RFC 3986's unreserved and
/// sub-delims characters and `:[]@` becomes `%XX`, upper-case hex.
pub fn grpc_go_encoded_authority(target: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    const KEPT: &[u8] = b"-_.~!$&'()*+,;=:[]@";
    let keep = |c: u8| c.is_ascii_alphanumeric() || KEPT.contains(&c);
    let mut encoded = String::with_capacity(target.len());
    for &c in target.as_bytes() {
        if keep(c) {
            encoded.push(char::from(c));
        } else {
            encoded.push('%');
            encoded.push(char::from(HEX[usize::from(c >> 4)]));
            encoded.push(char::from(HEX[usize::from(c & 15)]));
        }
    }
    encoded
}

#[cfg(test)]
mod tests;
