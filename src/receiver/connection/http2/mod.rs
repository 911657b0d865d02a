//! HTTP/2 connections, served on the h2 crate directly.
//!
//! hyper serves HTTP/1.1; HTTP/2 is driven here for two things hyper does not give:
//!
//! **Refusals on the connection's task.** Each new stream's future is polled once where
//! the connection accepted it. A refusal (throttle, quota, no token) is ready on that
//! first poll, before any body byte is read, and is answered there: no task, no trip
//! through the scheduler, no cross-task wake. A stream still pending after that poll is
//! spawned. An admitted request must not do its work there (streams of one connection
//! would run one after another instead of on all cores), so [`H2Body`] answers a read
//! made during that first poll with `Pending` (after waking the task, so nothing
//! stalls): the stream stays pending, goes to its own task, and reads, decompresses and
//! decodes there. A panic in a stream polled here resets that stream, not the connection.
//!
//! **No body bytes for a refusal.** Whatever a client has sent of a body before it hears
//! the refusal must still be received and thrown away: with a 1 MiB stream window, a
//! refused 240 KB request cost as much CPU as receiving it (a third of what accepting
//! it costs, `scripts/bench-throughput.sh`). So a connection that is refusing closes its
//! window: when a stream ends with its request body unread and no admitted stream on the
//! connection is reading one, weir sends `SETTINGS_INITIAL_WINDOW_SIZE = 0`, and the
//! next refused requests arrive as headers only. The first request admitted after that
//! reopens the window (a second SETTINGS, which by RFC 9113 6.9.2 also grows the windows
//! of streams already open, its own included): it waits one round trip for its body,
//! and every later stream starts with the full window again. h2 allows one SETTINGS
//! change in flight; the next waits for the peer's acknowledgement.

use crate::receiver::connection::stamp::RxStamp;
use axum::Router;
use bytes::Bytes;
use futures_util::task::AtomicWaker;
use h2::server::SendResponse;
use h2::{Reason, RecvStream, SendStream};
use http::header::{HeaderName, HeaderValue, CONNECTION, CONTENT_LENGTH, DATE, TRANSFER_ENCODING, UPGRADE};
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use std::cell::Cell;
use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite};

pub use crate::receiver::connection::stamp::PREFACE;

thread_local! {
    /// Set while a new stream is polled on its connection's task.
    static ON_CONNECTION_TASK: Cell<bool> = const { Cell::new(false) };
}

/// Reset budget of one connection (RFC 9113 10.5, CVE-2023-44487 "Rapid Reset",
/// CVE-2025-8671 "MadeYouReset"): resets the client causes, per connection and per time,
/// not per lifetime. A token bucket of [`RESET_TOKENS`], refilled at
/// [`RESET_TOKENS_PER_SECOND`]; a stream error weir sends because of what the client sent
/// (RST_STREAM with PROTOCOL_ERROR, FLOW_CONTROL_ERROR, REFUSED_STREAM and the like: a bad
/// content-length, trailers without END_STREAM, a window overflow, a stream over the
/// limit) costs [`PROTOCOL_RESET_COST`]; a stream the client cancels before it was
/// answered costs 1. That is 100 protocol errors at once and 10 a second after, or 1000
/// cancels at once and 100 a second after. Spent: GOAWAY ENHANCE_YOUR_CALM.
///
/// weir's own refusals never count: they end the stream with NO_ERROR or CANCEL, and h2
/// remembers up to [`REMEMBERED_RESETS`] such streams (its default is 50) so that DATA
/// still in flight on them is ignored rather than answered with STREAM_CLOSED. A
/// STREAM_CLOSED answer to a stream weir already forgot is not counted either: it costs
/// weir one 13-byte frame, no more than a PING. h2's own budget is per lifetime
/// (`max_local_error_reset_streams`, 1024 by default); a long-lived gRPC connection that
/// is refused now and then would reach any lifetime cap, so it is off and this one rules.
const RESET_TOKENS: u32 = 1000;
const RESET_TOKENS_PER_SECOND: u32 = 100;
const PROTOCOL_RESET_COST: u32 = 10;
/// Reset streams h2 remembers (see [`RESET_TOKENS`]); one `Stream` (a few hundred bytes)
/// each, for one second after the reset.
const REMEMBERED_RESETS: usize = 1024;

/// Streams one connection may have open. A refusal is held (`receiver.throttle.hold`)
/// on its stream, and with hyper's 200 a client that shares one connection among more
/// workers than that (a tonic channel, loadgen's 512) queued its next requests inside
/// the client behind the held ones: measured over gRPC, the admitted requests' P50 went
/// to 560 ms though weir served each in milliseconds. Memory does not grow with it: what
/// all streams together may send is bounded by the connection window (1 MiB), and a held
/// stream's body is dropped at once (h2 discards what still arrives).
const MAX_CONCURRENT_STREAMS: u32 = 1024;

/// hyper's defaults for what h2 leaves open-ended.
const MAX_HEADER_LIST_BYTES: u32 = 16 * 1024;
const MAX_SEND_BUFFER_BYTES: usize = 400 * 1024;

/// The HTTP/2 settings of one connection.
#[derive(Debug, Clone, Copy)]
pub struct H2Settings {
    /// The initial stream window (`http2_stream_window_bytes`) while not refusing.
    pub stream_window: u32,
    /// Timeouts and keepalive.
    pub opts: crate::receiver::connection::hygiene::ConnOpts,
}

/// What the connection and its streams share to decide the window.
#[derive(Default)]
struct WindowState {
    /// Admitted streams reading their body right now.
    readers: AtomicUsize,
    /// The latest decision on this connection was a refusal with the body unread.
    refusing: AtomicBool,
    /// The window the connection last asked for is 0.
    closed: AtomicBool,
    /// The connection's task, woken when the window should change.
    conn: AtomicWaker,
    /// The connection's reset budget.
    resets: ResetBudget,
}

/// The token bucket of [`RESET_TOKENS`].
struct ResetBudget {
    /// Tokens left and when they were last counted.
    bucket: std::sync::Mutex<(f64, std::time::Instant)>,
    spent: AtomicBool,
}

impl Default for ResetBudget {
    fn default() -> Self {
        ResetBudget { bucket: std::sync::Mutex::new((f64::from(RESET_TOKENS), std::time::Instant::now())), spent: AtomicBool::new(false) }
    }
}

impl ResetBudget {
    /// Takes `cost` tokens; true when this spends the budget.
    fn charge(&self, cost: u32) -> bool {
        let now = std::time::Instant::now();
        let mut b = self.bucket.lock().unwrap_or_else(|e| e.into_inner());
        let refill = now.duration_since(b.1).as_secs_f64() * f64::from(RESET_TOKENS_PER_SECOND);
        b.0 = (b.0 + refill).min(f64::from(RESET_TOKENS)) - f64::from(cost);
        b.1 = now;
        b.0 < 0.0 && !self.spent.swap(true, Ordering::AcqRel)
    }

    fn is_spent(&self) -> bool {
        self.spent.load(Ordering::Acquire)
    }
}

/// A connection spent its reset budget: counted, and logged (a few a second).
fn calm_down() {
    static LINES: crate::telemetry::lograte::LineBudget = crate::telemetry::lograte::LineBudget::new("reset_budget", 5);
    if crate::telemetry::installed() {
        ::metrics::counter!(crate::telemetry::names::H2_GOAWAYS, "reason" => "reset_budget").increment(1);
    }
    if let Some(suppressed) = LINES.admit() {
        tracing::warn!(suppressed, "HTTP/2 connection spent its reset budget: GOAWAY ENHANCE_YOUR_CALM");
    }
}

/// Reads the frames a connection writes, to charge the stream errors it sends to the
/// reset budget. h2 does not report them; its writes are the one place they all pass.
/// The server's byte stream starts with a frame (SETTINGS; there is no server preface).
struct ScanWrites<I> {
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
    fn new(io: I, window: Arc<WindowState>) -> Self {
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
    fn wants_open(&self) -> bool {
        self.readers.load(Ordering::Acquire) > 0 || !self.refusing.load(Ordering::Acquire)
    }

    /// A stream's body is being read: the request was admitted.
    fn reader_started(&self) {
        self.readers.fetch_add(1, Ordering::AcqRel);
        self.refusing.store(false, Ordering::Release);
        if self.closed.load(Ordering::Acquire) {
            self.conn.wake();
        }
    }

    fn reader_done(&self) {
        if self.readers.fetch_sub(1, Ordering::AcqRel) == 1 && self.refusing.load(Ordering::Acquire) {
            self.conn.wake();
        }
    }

    /// A stream ended with its request body unread.
    fn refused(&self) {
        if !self.refusing.swap(true, Ordering::AcqRel) && self.readers.load(Ordering::Acquire) == 0 {
            self.conn.wake();
        }
    }
}

/// Where a stream whose body was dropped unread waits for the answer (see [`linger`]),
/// in the request's extensions.
#[derive(Clone, Default)]
pub struct UnreadSlot(Arc<SlotInner>);

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
    fn new(recv: RecvStream, window: Arc<WindowState>, slot: UnreadSlot) -> Self {
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

/// Serves one HTTP/2 connection until the peer closes it, it fails, or `stop` resolves
/// (then: GOAWAY, and open streams finish).
pub async fn serve<I, F>(io: I, app: Router, stamp: RxStamp, settings: H2Settings, stop: F) -> Result<(), h2::Error>
where
    I: AsyncRead + AsyncWrite + Unpin,
    F: Future<Output = ()>,
{
    let mut builder = h2::server::Builder::new();
    builder
        .initial_window_size(settings.stream_window)
        // The connection window never starves the streams: at least hyper's 1 MiB, and
        // no less than one stream's window.
        .initial_connection_window_size(settings.stream_window.max(1 << 20))
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
        .max_header_list_size(MAX_HEADER_LIST_BYTES)
        .max_send_buffer_size(MAX_SEND_BUFFER_BYTES)
        .max_concurrent_reset_streams(REMEMBERED_RESETS)
        .max_local_error_reset_streams(None);
    let mut stop = pin!(stop);
    let window = Arc::new(WindowState::default());
    let io = ScanWrites::new(io, Arc::clone(&window));
    let opts = settings.opts;
    let mut conn = tokio::select! {
        c = tokio::time::timeout(opts.limits.header_read_timeout, builder.handshake::<_, Bytes>(io)) => match c {
            Ok(c) => c?,
            Err(_) => {
                crate::receiver::connection::hygiene::Closed::HeaderTimeout.count(opts.server);
                return Ok(());
            }
        },
        _ = stop.as_mut() => return Ok(()),
    };
    let mut calmed = false;
    let tick = opts.tick();
    let mut check = pin!(tokio::time::sleep(tick));
    let mut ping = conn.ping_pong();
    // A keepalive PING in flight: when it is due back.
    let mut pong_due: Option<u64> = None;
    // When weir started closing the connection on its own.
    let mut closing_since: Option<u64> = None;
    let keepalive = opts.limits.http2_keepalive_interval.as_millis() as u64;
    let keepalive_timeout = opts.limits.http2_keepalive_timeout.as_millis() as u64;
    let mut asked = settings.stream_window;
    let mut stopping = false;
    // Streams are started once everything readable has been taken in: each call to
    // `poll_accept` also flushes what is queued to send, and starting streams between
    // calls would write their answers one by one instead of together.
    let mut batch = Vec::new();
    poll_fn(|cx| {
        if !stopping && stop.as_mut().poll(cx).is_ready() {
            stopping = true;
            conn.graceful_shutdown();
        }
        window.conn.register(cx.waker());
        if let (Some(p), Some(_)) = (ping.as_mut(), pong_due) {
            if p.poll_pong(cx).is_ready() {
                pong_due = None;
            }
        }
        let evicted = stamp.evicted(cx);
        let due = check.as_mut().poll(cx).is_ready();
        if due {
            check.as_mut().reset(tokio::time::Instant::now() + tick);
            let _ = check.as_mut().poll(cx);
        }
        if due || evicted {
            let now = crate::receiver::connection::stamp::mono_ms();
            if let Some(since) = closing_since {
                // The GOAWAY could not be flushed (a peer that does not read): drop it.
                if now.saturating_sub(since) > 1000 {
                    return Poll::Ready(Ok(()));
                }
            } else if let Some(why) = opts.verdict(&stamp, evicted, false) {
                // Nothing in flight: a GOAWAY, and the connection ends.
                why.count(opts.server);
                conn.abrupt_shutdown(Reason::NO_ERROR);
                closing_since = Some(now);
            } else if evicted {
                // Busy: no new streams, and it ends when these are done.
                if !stopping {
                    stopping = true;
                    conn.graceful_shutdown();
                }
            } else {
                match pong_due {
                    Some(due) if now > due => {
                        crate::receiver::connection::hygiene::Closed::KeepaliveTimeout.count(opts.server);
                        return Poll::Ready(Ok(()));
                    }
                    Some(_) => {}
                    None if keepalive > 0 && stamp.quiet_ms(now) > keepalive => {
                        if let Some(p) = ping.as_mut() {
                            if p.send_ping(h2::Ping::opaque()).is_ok() {
                                pong_due = Some(now + keepalive_timeout);
                                if p.poll_pong(cx).is_ready() {
                                    pong_due = None;
                                }
                            }
                        }
                    }
                    None => {}
                }
            }
        }
        loop {
            loop {
                match conn.poll_accept(cx) {
                    Poll::Ready(Some(Ok(stream))) => batch.push(stream),
                    Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(e)),
                    Poll::Ready(None) => return Poll::Ready(Ok(())),
                    Poll::Pending => break,
                }
            }
            if !calmed && window.resets.is_spent() {
                calmed = true;
                calm_down();
                conn.abrupt_shutdown(Reason::ENHANCE_YOUR_CALM);
                continue;
            }
            if !batch.is_empty() {
                for (request, respond) in batch.drain(..) {
                    start_stream(cx, request, respond, &app, &stamp, &window, opts.limits.body_read_timeout);
                }
                // Their answers go out on the next turn.
                continue;
            }
            let want = if window.wants_open() { settings.stream_window } else { 0 };
            // Refused while a change is still unacknowledged: the acknowledgement wakes
            // this task and the change is tried again then.
            if want != asked && conn.set_initial_window_size(want).is_ok() {
                asked = want;
                window.closed.store(want == 0, Ordering::Release);
                ::metrics::counter!(crate::telemetry::names::H2_WINDOW_CHANGES, "to" => if want == 0 { "closed" } else { "open" })
                    .increment(1);
                // Poll again so the SETTINGS frame goes out now.
                continue;
            }
            return Poll::Pending;
        }
    })
    .await
}

/// Polls a new stream once on the connection's task; spawns it if it is not done.
fn start_stream(
    cx: &mut Context<'_>,
    request: Request<RecvStream>,
    respond: SendResponse<Bytes>,
    app: &Router,
    stamp: &RxStamp,
    window: &Arc<WindowState>,
    body_timeout: std::time::Duration,
) {
    let slot = UnreadSlot::default();
    let mut request = request
        .map(|recv| crate::receiver::connection::hygiene::Deadline::new(H2Body::new(recv, Arc::clone(window), slot.clone()), body_timeout));
    request.extensions_mut().insert(stamp.clone());
    request.extensions_mut().insert(slot.clone());
    let busy = stamp.busy();
    let mut task = Box::pin(stream(app.clone(), request, respond, Arc::clone(window), busy, slot));
    ON_CONNECTION_TASK.set(true);
    // A panic in one stream must not end the connection's other streams (as it would not
    // have with a task of its own): the stream is dropped, which resets it.
    let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| task.as_mut().poll(cx)));
    ON_CONNECTION_TASK.set(false);
    match polled {
        Ok(Poll::Ready(())) => {}
        Ok(Poll::Pending) => {
            tokio::spawn(task);
        }
        Err(_) => tracing::error!("an HTTP/2 stream panicked; it was reset"),
    }
}

/// One stream: the app's answer, then its body, until done or reset by the client.
async fn stream(
    app: Router,
    request: Request<crate::receiver::connection::hygiene::Deadline<H2Body>>,
    mut respond: SendResponse<Bytes>,
    window: Arc<WindowState>,
    _busy: crate::receiver::connection::stamp::Busy,
    unread: UnreadSlot,
) {
    let call = tower::ServiceExt::oneshot(app, request);
    let mut call = pin!(call);
    // A client that resets the stream cancels the call.
    let answered = poll_fn(|cx| match call.as_mut().poll(cx) {
        Poll::Ready(r) => Poll::Ready(Some(r)),
        Poll::Pending => match respond.poll_reset(cx) {
            Poll::Ready(_) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        },
    })
    .await;
    let Some(answered) = answered else {
        // Cancelled by the client before the answer: charged to its reset budget.
        if window.resets.charge(1) {
            window.conn.wake();
        }
        return;
    };
    let Ok(response) = answered;
    let (mut head, body) = response.into_parts();
    tidy_headers(&mut head.headers, &body);
    // Answered without reading the body, and not a refusal: take in the rest of it
    // first (see `linger`).
    let unread = unread.0.recv.lock().unwrap_or_else(|e| e.into_inner()).take();
    let _kept = match unread {
        Some(recv) if !is_refusal(&head) => Some(linger(recv).await),
        _ => None,
    };
    let end = body.is_end_stream();
    let Ok(mut send) = respond.send_response(Response::from_parts(head, ()), end) else { return };
    if !end {
        send_body(body, &mut send).await;
    }
}

/// A refusal with a retry delay (429, 503, gRPC RESOURCE_EXHAUSTED or UNAVAILABLE): its
/// body is never read, not even after the answer.
fn is_refusal(head: &http::response::Parts) -> bool {
    matches!(head.status.as_u16(), 429 | 503) || head.headers.get("grpc-status").is_some_and(|v| v == "8" || v == "14")
}

/// What is left of a body weir answered without reading (a wrong path, method or
/// content type; not a refusal) is received before the answer goes out, for at most
/// [`LINGER_TIME`] and [`LINGER_BYTES`], and thrown away, as HTTP/1.1 reads a small
/// body away before answering. The stream stays open meanwhile, so h2 still checks
/// what arrives on it: a content-length that disagrees with the DATA frames, trailers
/// without END_STREAM, a window pushed past 2^31-1 are answered with RST_STREAM
/// (RFC 9113 8.1.1, 6.9.1) instead of meeting a stream already closed. The stream is
/// handed back, to be dropped with the answer.
async fn linger(mut recv: RecvStream) -> RecvStream {
    let _ = tokio::time::timeout(LINGER_TIME, async {
        let mut left = LINGER_BYTES;
        while let Some(Ok(data)) = poll_fn(|cx| recv.poll_data(cx)).await {
            let _ = recv.flow_control().release_capacity(data.len());
            left = left.saturating_sub(data.len());
            if left == 0 {
                return;
            }
        }
        let _ = poll_fn(|cx| recv.poll_trailers(cx)).await;
    })
    .await;
    recv
}

/// How long an unread body is checked after the answer (see [`linger`]).
const LINGER_TIME: std::time::Duration = std::time::Duration::from_secs(1);
/// How much of it is received at most.
const LINGER_BYTES: usize = 64 * 1024;

/// What hyper does to a response head on its way out: a `date`, a `content-length` when
/// the body's size is known, and no connection-specific fields (HTTP/2 forbids them, RFC
/// 9113 8.2.2, and h2 would refuse the head).
fn tidy_headers(headers: &mut http::HeaderMap, body: &axum::body::Body) {
    if headers.keys().any(is_connection_field) {
        for name in
            [CONNECTION, TRANSFER_ENCODING, UPGRADE, HeaderName::from_static("keep-alive"), HeaderName::from_static("proxy-connection")]
        {
            headers.remove(name);
        }
    }
    if let http::header::Entry::Vacant(e) = headers.entry(CONTENT_LENGTH) {
        if let Some(n) = body.size_hint().exact() {
            e.insert(HeaderValue::from(n));
        }
    }
    if let http::header::Entry::Vacant(e) = headers.entry(DATE) {
        e.insert(http_date());
    }
}

fn is_connection_field(name: &HeaderName) -> bool {
    name == CONNECTION || name == TRANSFER_ENCODING || name == UPGRADE || name == "keep-alive" || name == "proxy-connection"
}

/// The `date` value, formatted once per second per thread.
fn http_date() -> HeaderValue {
    thread_local! {
        static CACHED: std::cell::RefCell<(u64, HeaderValue)> = const { std::cell::RefCell::new((0, HeaderValue::from_static(""))) };
    }
    let now = std::time::SystemTime::now();
    let second = now.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    CACHED.with(|c| {
        let mut c = c.borrow_mut();
        if c.0 != second {
            let text = httpdate::fmt_http_date(now);
            *c = (second, HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static("")));
        }
        c.1.clone()
    })
}

/// Sends a response body, a frame at a time, each once the peer's window has room for
/// at least a byte of it (so no more than a frame is ever buffered beyond the window).
async fn send_body(body: axum::body::Body, send: &mut SendStream<Bytes>) {
    let mut body = pin!(body);
    loop {
        let frame = poll_fn(|cx| match send.poll_reset(cx) {
            Poll::Ready(_) => Poll::Ready(None),
            Poll::Pending => body.as_mut().poll_frame(cx).map(Some),
        })
        .await;
        let Some(frame) = frame else { return };
        match frame {
            None => {
                let _ = send.send_data(Bytes::new(), true);
                return;
            }
            Some(Err(e)) => {
                tracing::debug!(error = %e, "response body failed; stream reset");
                send.send_reset(Reason::INTERNAL_ERROR);
                return;
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => {
                    let end = body.is_end_stream();
                    // A last frame of at most one DATA frame's size goes out as it is
                    // (h2 holds it until the window allows); a longer body waits for
                    // window room frame by frame.
                    let small_last = end && data.len() <= 16 * 1024;
                    if !data.is_empty() && !small_last {
                        send.reserve_capacity(1);
                        match poll_fn(|cx| send.poll_capacity(cx)).await {
                            Some(Ok(_)) => {}
                            _ => return,
                        }
                    }
                    if send.send_data(data, end).is_err() || end {
                        return;
                    }
                }
                Err(frame) => {
                    if let Ok(trailers) = frame.into_trailers() {
                        let _ = send.send_trailers(trailers);
                    } else {
                        let _ = send.send_data(Bytes::new(), true);
                    }
                    return;
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::receiver::connection::listener::{serve, Listen, ServerHandle};
    use axum::routing::post;
    use http::StatusCode;
    use http_body_util::BodyExt;
    use std::sync::Mutex;
    use std::time::Duration;

    type Seen = Arc<Mutex<Vec<(&'static str, bool)>>>;

    /// `/refuse` answers 429 without reading the body; `/echo` reads the body and answers
    /// its length; `/slow` does the same after half a second; `/panic` panics on the
    /// connection's task. `/refuse` and `/echo` note whether they finished on the
    /// connection's task.
    async fn start(seen: Seen) -> ServerHandle {
        let (s1, s2) = (Arc::clone(&seen), Arc::clone(&seen));
        let app = Router::new()
            .route(
                "/refuse",
                post(move || async move {
                    s1.lock().unwrap().push(("refuse", ON_CONNECTION_TASK.get()));
                    StatusCode::TOO_MANY_REQUESTS
                }),
            )
            .route(
                "/echo",
                post(move |body: axum::body::Body| async move {
                    let n = body.collect().await.map(|b| b.to_bytes().len()).unwrap_or(0);
                    s2.lock().unwrap().push(("echo", ON_CONNECTION_TASK.get()));
                    n.to_string()
                }),
            )
            .route(
                "/slow",
                post(|body: axum::body::Body| async move {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    body.collect().await.map(|b| b.to_bytes().len()).unwrap_or(0).to_string()
                }),
            )
            .route(
                "/panic",
                post(|| async {
                    if ON_CONNECTION_TASK.get() {
                        panic!("handler panicked on purpose");
                    }
                    StatusCode::OK
                }),
            );
        serve(Listen::new("h2conn-test", "127.0.0.1:0"), app).await.unwrap()
    }

    async fn client(server: &ServerHandle) -> h2::client::SendRequest<Bytes> {
        let tcp = tokio::net::TcpStream::connect(server.local_addr).await.unwrap();
        let (send, conn) = h2::client::handshake(tcp).await.unwrap();
        tokio::spawn(async move {
            let _ = conn.await;
        });
        send
    }

    fn post_to(path: &str) -> Request<()> {
        Request::post(format!("http://weir{path}")).body(()).unwrap()
    }

    /// Sends `len` body bytes (or fewer if the answer comes first) and returns the
    /// status and body of the answer, failing rather than hanging.
    async fn exchange(send: &mut h2::client::SendRequest<Bytes>, path: &str, len: usize) -> (StatusCode, String) {
        let (response, mut body) = send.clone().ready().await.unwrap().send_request(post_to(path), false).unwrap();
        body.send_data(Bytes::from(vec![b'x'; len]), true).unwrap();
        let response = tokio::time::timeout(Duration::from_secs(5), response).await.expect("an answer within 5 s").unwrap();
        let status = response.status();
        let mut recv = response.into_body();
        let mut text = Vec::new();
        while let Some(chunk) = recv.data().await {
            let chunk = chunk.unwrap();
            let _ = recv.flow_control().release_capacity(chunk.len());
            text.extend_from_slice(&chunk);
        }
        (status, String::from_utf8(text).unwrap())
    }

    /// A refusal with its body unread closes the window for the streams that follow; the
    /// next admitted request reopens it and is served whole; after that new streams get
    /// the full window again.
    #[tokio::test]
    async fn a_refusing_connection_closes_its_window_until_a_request_is_admitted() {
        let server = start(Seen::default()).await;
        let mut send = client(&server).await;
        let (status, _) = exchange(&mut send, "/refuse", 100_000).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        // The SETTINGS frame and its acknowledgement cross on the loopback.
        tokio::time::sleep(Duration::from_millis(100)).await;
        // A stream whose body is not read yet shows the window it was given.
        let (_response, mut body) = send.clone().ready().await.unwrap().send_request(post_to("/slow"), false).unwrap();
        body.reserve_capacity(10_000);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(body.capacity(), 0, "a stream opened while refusing may send no body byte");
        body.send_reset(Reason::CANCEL);

        let (status, text) = exchange(&mut send, "/echo", 100_000).await;
        assert_eq!((status, text.as_str()), (StatusCode::OK, "100000"));
        let (_response, mut body) = send.clone().ready().await.unwrap().send_request(post_to("/slow"), false).unwrap();
        body.reserve_capacity(10_000);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(body.capacity(), 10_000, "after an admitted request the window is open again");
        body.send_reset(Reason::CANCEL);
        server.shutdown(Duration::from_secs(1)).await;
    }

    /// A refusal is answered on the connection's task; an admitted request reads its body
    /// and finishes on a task of its own.
    #[tokio::test]
    async fn refusals_finish_on_the_connection_task_and_admitted_requests_on_their_own() {
        let seen = Seen::default();
        let server = start(Arc::clone(&seen)).await;
        let mut send = client(&server).await;
        assert_eq!(exchange(&mut send, "/refuse", 10).await.0, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(exchange(&mut send, "/echo", 10).await.1, "10");
        assert_eq!(*seen.lock().unwrap(), vec![("refuse", true), ("echo", false)]);
        server.shutdown(Duration::from_secs(1)).await;
    }

    /// On shutdown a request in flight is finished and answered; the connection is then
    /// closed (GOAWAY) and the server is gone.
    #[tokio::test]
    async fn shutdown_finishes_the_streams_in_flight() {
        let server = start(Seen::default()).await;
        let addr = server.local_addr;
        let mut send = client(&server).await;
        let in_flight = tokio::spawn(async move { exchange(&mut send, "/slow", 1000).await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        server.shutdown(Duration::from_secs(5)).await;
        let (status, text) = in_flight.await.unwrap();
        assert_eq!((status, text.as_str()), (StatusCode::OK, "1000"));
        assert!(tokio::net::TcpStream::connect(addr).await.is_err(), "the listener is closed");
    }

    /// The head goes out with a date and a length, and without fields HTTP/2 forbids.
    #[test]
    fn response_heads_get_date_and_length_and_lose_connection_fields() {
        let mut headers = http::HeaderMap::new();
        headers.insert(CONNECTION, HeaderValue::from_static("close"));
        headers.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        headers.insert("retry-after", HeaderValue::from_static("1"));
        tidy_headers(&mut headers, &axum::body::Body::from("twelve bytes"));
        assert!(!headers.contains_key(CONNECTION) && !headers.contains_key("keep-alive"));
        assert_eq!(headers["retry-after"], "1");
        assert_eq!(headers[CONTENT_LENGTH], "12");
        let date = httpdate::parse_http_date(headers[DATE].to_str().unwrap()).unwrap();
        let skew = date.duration_since(std::time::SystemTime::now()).or_else(|e| Ok::<_, ()>(e.duration())).unwrap();
        assert!(skew < Duration::from_secs(5), "date {:?} is not now", headers[DATE]);

        let mut headers = http::HeaderMap::new();
        headers.insert(CONTENT_LENGTH, HeaderValue::from_static("7"));
        tidy_headers(&mut headers, &axum::body::Body::from("twelve bytes"));
        assert_eq!(headers[CONTENT_LENGTH], "7", "a length the app set stays");
    }

    /// A stream that panics on the connection's task is reset; the connection and its
    /// other streams go on.
    #[tokio::test]
    async fn a_panicking_stream_is_reset_and_the_connection_goes_on() {
        let server = start(Seen::default()).await;
        let mut send = client(&server).await;
        let (response, _body) = send.clone().ready().await.unwrap().send_request(post_to("/panic"), true).unwrap();
        let err = tokio::time::timeout(Duration::from_secs(5), response).await.expect("a reset within 5 s").unwrap_err();
        assert!(err.is_reset(), "{err}");
        assert_eq!(exchange(&mut send, "/echo", 3).await.1, "3");
        server.shutdown(Duration::from_secs(1)).await;
    }
}
