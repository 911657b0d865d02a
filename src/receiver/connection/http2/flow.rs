//! The flow window of one HTTP/2 connection: closed while it is refusing (refused bodies
//! cost nothing), reopened by the first admitted stream; the request body type whose
//! reads drive it, and the write scanner that charges stream errors to the reset budget.

use super::reset::{ResetBudget, PROTOCOL_RESET_COST};
use bytes::Bytes;
use futures_util::task::AtomicWaker;
use h2::RecvStream;
use http_body::{Body, Frame, SizeHint};
use std::cell::Cell;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite};

thread_local! {
    /// Set while a new stream is polled on its connection's task.
    pub(super) static ON_CONNECTION_TASK: Cell<bool> = const { Cell::new(false) };
}

/// What the connection and its streams share to decide the window.
#[derive(Default)]
pub(super) struct WindowState {
    /// Admitted streams reading their body right now.
    pub(super) readers: AtomicUsize,
    /// The latest decision on this connection was a refusal with the body unread.
    pub(super) refusing: AtomicBool,
    /// The window the connection last asked for is 0.
    pub(super) closed: AtomicBool,
    /// The connection's task, woken when the window should change.
    pub(super) conn: AtomicWaker,
    /// The connection's reset budget.
    pub(super) resets: ResetBudget,
}

/// Reads the frames a connection writes, to charge the stream errors it sends to the
/// reset budget. h2 does not report them; its writes are the one place they all pass.
/// The server's byte stream starts with a frame (SETTINGS; there is no server preface).
pub(super) struct ScanWrites<I> {
    io: I,
    window: Arc<WindowState>,
    /// The frame header being read, and how much of it has been.
    head: [u8; 9],
    have: usize,
    /// Payload bytes of the current frame still to pass.
    payload: usize,
    /// The current frame is RST_STREAM: its error code, as read so far.
    code: Option<([u8; 4], usize)>,
}

impl<I> ScanWrites<I> {
    pub(super) fn new(io: I, window: Arc<WindowState>) -> Self {
        ScanWrites { io, window, head: [0; 9], have: 0, payload: 0, code: None }
    }

    /// Passes over `bytes` just written; charges the stream errors among them.
    fn scan(&mut self, mut bytes: &[u8]) {
        let mut errors = 0u32;
        while !bytes.is_empty() {
            if self.payload > 0 {
                let take = self.payload.min(bytes.len());
                if let Some((code, got)) = &mut self.code {
                    let n = take.min(4 - *got);
                    code[*got..*got + n].copy_from_slice(&bytes[..n]);
                    *got += n;
                    if *got == 4 {
                        // NO_ERROR, INTERNAL_ERROR, STREAM_CLOSED and CANCEL are weir's
                        // own answers (see RESET_TOKENS); the rest are the client's doing.
                        errors += u32::from(!matches!(u32::from_be_bytes(*code), 0 | 2 | 5 | 8));
                        self.code = None;
                    }
                }
                self.payload -= take;
                bytes = &bytes[take..];
                continue;
            }
            let n = (9 - self.have).min(bytes.len());
            self.head[self.have..self.have + n].copy_from_slice(&bytes[..n]);
            self.have += n;
            bytes = &bytes[n..];
            if self.have == 9 {
                self.have = 0;
                self.payload = usize::from(self.head[0]) << 16 | usize::from(self.head[1]) << 8 | usize::from(self.head[2]);
                self.code = (self.head[3] == 0x3 && self.payload == 4).then_some(([0; 4], 0));
            }
        }
        if errors > 0 && self.window.resets.charge(errors * PROTOCOL_RESET_COST) {
            self.window.conn.wake();
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for ScanWrites<I> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut tokio::io::ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for ScanWrites<I> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.io).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = written {
            this.scan(&buf[..n]);
        }
        written
    }

    fn poll_write_vectored(self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[std::io::IoSlice<'_>]) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(mut n)) = written {
            for b in bufs {
                if n == 0 {
                    break;
                }
                let k = n.min(b.len());
                this.scan(&b[..k]);
                n -= k;
            }
        }
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

impl WindowState {
    pub(super) fn wants_open(&self) -> bool {
        self.readers.load(Ordering::Acquire) > 0 || !self.refusing.load(Ordering::Acquire)
    }

    /// A stream's body is being read: the request was admitted.
    pub(super) fn reader_started(&self) {
        self.readers.fetch_add(1, Ordering::AcqRel);
        self.refusing.store(false, Ordering::Release);
        if self.closed.load(Ordering::Acquire) {
            self.conn.wake();
        }
    }

    pub(super) fn reader_done(&self) {
        if self.readers.fetch_sub(1, Ordering::AcqRel) == 1 && self.refusing.load(Ordering::Acquire) {
            self.conn.wake();
        }
    }

    /// A stream ended with its request body unread.
    pub(super) fn refused(&self) {
        if !self.refusing.swap(true, Ordering::AcqRel) && self.readers.load(Ordering::Acquire) == 0 {
            self.conn.wake();
        }
    }
}

/// Where a stream whose body was dropped unread waits for the answer (see [`linger`]),
/// in the request's extensions.
#[derive(Clone, Default)]
pub struct UnreadSlot(Arc<SlotInner>);

impl UnreadSlot {
    /// The body a stream dropped unread, if one is waiting.
    pub(super) fn take_unread(&self) -> Option<RecvStream> {
        self.0.recv.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

#[derive(Default)]
struct SlotInner {
    recv: std::sync::Mutex<Option<RecvStream>>,
    /// A refusal: the body is dropped at once, never received.
    discard: AtomicBool,
}

/// Marks a request as refused: if it came over HTTP/2, its body is dropped with the
/// stream as soon as it is dropped, never lingered over (a held refusal would otherwise
/// keep its stream's window, and with it the connection's, filled for the hold).
pub fn discard_unread(extensions: &http::Extensions) {
    if let Some(slot) = extensions.get::<UnreadSlot>() {
        slot.0.discard.store(true, Ordering::Release);
    }
}

/// A request body read from an h2 stream: hands flow-control capacity back as it is
/// read, and tells the connection whether the body was wanted.
pub struct H2Body {
    recv: Option<RecvStream>,
    /// Where the stream goes when the body is dropped unread (see [`linger`]).
    slot: UnreadSlot,
    window: Arc<WindowState>,
    /// Counted as a reader.
    reading: bool,
    /// Trailers (or the end) have been read.
    done: bool,
}

impl H2Body {
    pub(super) fn new(recv: RecvStream, window: Arc<WindowState>, slot: UnreadSlot) -> Self {
        let done = recv.is_end_stream();
        H2Body { recv: Some(recv), slot, window, reading: false, done }
    }
}

impl Drop for H2Body {
    fn drop(&mut self) {
        if self.reading {
            self.window.reader_done();
        } else if !self.done {
            self.window.refused();
        }
        if !self.done && !self.slot.0.discard.load(Ordering::Acquire) {
            if let Some(recv) = self.recv.take() {
                *self.slot.0.recv.lock().unwrap_or_else(|e| e.into_inner()) = Some(recv);
            }
        }
    }
}

impl Body for H2Body {
    type Data = Bytes;
    type Error = h2::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, h2::Error>>> {
        let this = &mut *self;
        if this.done {
            return Poll::Ready(None);
        }
        if !this.reading {
            if ON_CONNECTION_TASK.get() {
                // Woken at once: the stream's own task polls it again right after the
                // spawn, and this wake only costs the connection a spare poll.
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            this.reading = true;
            this.window.reader_started();
        }
        let Some(recv) = this.recv.as_mut() else { return Poll::Ready(None) };
        match recv.poll_data(cx) {
            Poll::Ready(Some(Ok(data))) => {
                // The bytes are ours now: the peer may send as many again.
                let _ = recv.flow_control().release_capacity(data.len());
                return Poll::Ready(Some(Ok(Frame::data(data))));
            }
            Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
            Poll::Ready(None) => {}
            Poll::Pending => return Poll::Pending,
        }
        match recv.poll_trailers(cx) {
            Poll::Ready(Ok(trailers)) => {
                this.done = true;
                Poll::Ready(trailers.map(|t| Ok(Frame::trailers(t))))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Some(Err(e))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.recv.as_ref().is_none_or(RecvStream::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        // h2 checks a content-length against the DATA it receives; a hint is all this is.
        SizeHint::default()
    }
}
