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
//! the refusal must still be received and thrown away: with an open stream window a
//! refused request costs as much CPU as receiving its body
//! (`docs/benchmarks.md#measurements-behind-the-decoders`). So a connection that is
//! refusing closes its window: when a stream ends with its request body unread and no
//! admitted stream on the connection is reading one, weir sends
//! `SETTINGS_INITIAL_WINDOW_SIZE = 0`, and the next refused requests arrive as headers
//! only. The first request admitted after that reopens the window (a second SETTINGS,
//! which by RFC 9113 6.9.2 also grows the windows of streams already open, its own
//! included): it waits one round trip for its body, and every later stream starts with
//! the full window again. h2 allows one SETTINGS change in flight; the next waits for
//! the peer's acknowledgement.

mod flow;
mod reset;
mod send;

pub use flow::{discard_unread, H2Body, UnreadSlot};
use flow::{ScanWrites, WindowState, ON_CONNECTION_TASK};
use reset::{calm_down, REMEMBERED_RESETS};
use send::{send_body, tidy_headers};

use crate::receiver::connection::stamp::RxStamp;
use axum::Router;
use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Reason, RecvStream};
use http::{Request, Response};
use http_body::Body;
use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite};

pub use crate::receiver::connection::stamp::PREFACE;

/// Streams one connection may have open. A refusal is held (`receiver.throttle.hold`)
/// on its stream, and with a lower limit (hyper's 200) a client that shares one
/// connection among more workers than that (a tonic channel) queues its next requests
/// inside the client behind the held ones, so admitted requests wait there however fast
/// weir serves them (`docs/overload.md#measurements-behind-the-defaults`). Memory does
/// not grow with it: what all streams together may send is bounded by the connection
/// window (1 MiB), and a held stream's body is dropped at once (h2 discards what still
/// arrives).
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

/// Serves one HTTP/2 connection until the peer closes it, it fails, or `stop` resolves
/// (then: GOAWAY, and open streams finish).
pub async fn serve<I, F>(io: I, app: Router, stamp: RxStamp, settings: H2Settings, stop: F) -> Result<(), h2::Error>
where
    I: AsyncRead + AsyncWrite + Unpin,
    F: Future<Output = ()>,
{
    let builder = builder(&settings);
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
    // When weir started closing the connection on its own.
    let mut closing_since: Option<u64> = None;
    let mut keepalive = Keepalive {
        interval: opts.limits.http2_keepalive_interval.as_millis() as u64,
        timeout: opts.limits.http2_keepalive_timeout.as_millis() as u64,
        pong_due: None,
    };
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
        keepalive.poll_pong(cx, &mut ping);
        let evicted = stamp.evicted(cx);
        let due = rearm(check.as_mut(), tick, cx);
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
            } else if keepalive.timed_out(cx, &mut ping, &stamp, now) {
                crate::receiver::connection::hygiene::Closed::KeepaliveTimeout.count(opts.server);
                return Poll::Ready(Ok(()));
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
            if resize_window(&mut conn, &window, settings.stream_window, &mut asked) {
                // Poll again so the SETTINGS frame goes out now.
                continue;
            }
            return Poll::Pending;
        }
    })
    .await
}

/// The h2 settings of a connection: the stream window asked for, and hyper's bounds for
/// what h2 leaves open-ended.
fn builder(settings: &H2Settings) -> h2::server::Builder {
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
    builder
}

/// Closes the stream window while the connection is refusing, reopens it for an admitted
/// stream; true when a SETTINGS change was queued. A change refused while another is
/// still unacknowledged is tried again when the acknowledgement wakes the task.
fn resize_window<T: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut h2::server::Connection<T, Bytes>,
    window: &WindowState,
    open: u32,
    asked: &mut u32,
) -> bool {
    let want = if window.wants_open() { open } else { 0 };
    if want == *asked || conn.set_initial_window_size(want).is_err() {
        return false;
    }
    *asked = want;
    window.closed.store(want == 0, Ordering::Release);
    ::metrics::counter!(crate::telemetry::names::H2_WINDOW_CHANGES, "to" => if want == 0 { "closed" } else { "open" }).increment(1);
    true
}

/// True when the hygiene check is due; it is then set for `tick` later.
fn rearm(mut check: Pin<&mut tokio::time::Sleep>, tick: std::time::Duration, cx: &mut Context<'_>) -> bool {
    let due = check.as_mut().poll(cx).is_ready();
    if due {
        check.as_mut().reset(tokio::time::Instant::now() + tick);
        let _ = check.as_mut().poll(cx);
    }
    due
}

/// Keepalive PINGs on a quiet connection, and the deadline for their answer.
struct Keepalive {
    /// Quiet this long (ms): a PING; 0 is never.
    interval: u64,
    /// How long its answer may take (ms).
    timeout: u64,
    /// A PING in flight: when it is due back.
    pong_due: Option<u64>,
}

impl Keepalive {
    fn poll_pong(&mut self, cx: &mut Context<'_>, ping: &mut Option<h2::PingPong>) {
        if let (Some(p), Some(_)) = (ping.as_mut(), self.pong_due) {
            if p.poll_pong(cx).is_ready() {
                self.pong_due = None;
            }
        }
    }

    /// Sends a PING when the connection has been quiet long enough; true when one sent
    /// earlier was not answered in time.
    fn timed_out(&mut self, cx: &mut Context<'_>, ping: &mut Option<h2::PingPong>, stamp: &RxStamp, now: u64) -> bool {
        match self.pong_due {
            Some(due) => now > due,
            None if self.interval > 0 && stamp.quiet_ms(now) > self.interval => {
                if let Some(p) = ping.as_mut() {
                    if p.send_ping(h2::Ping::opaque()).is_ok() {
                        self.pong_due = Some(now + self.timeout);
                        if p.poll_pong(cx).is_ready() {
                            self.pong_due = None;
                        }
                    }
                }
                false
            }
            None => false,
        }
    }
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
    let unread = unread.take_unread();
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
/// the bounds of `hygiene::read_away`, and thrown away, as HTTP/1.1 reads a small
/// body away before answering. The stream stays open meanwhile, so h2 still checks
/// what arrives on it: a content-length that disagrees with the DATA frames, trailers
/// without END_STREAM, a window pushed past 2^31-1 are answered with RST_STREAM
/// (RFC 9113 8.1.1, 6.9.1) instead of meeting a stream already closed. The stream is
/// handed back, to be dropped with the answer.
async fn linger(mut recv: RecvStream) -> RecvStream {
    crate::receiver::connection::hygiene::read_away(&mut recv).await;
    recv
}

/// An unread request body, received and dropped; its trailers are read at its end, so
/// h2 checks them too.
impl crate::receiver::connection::stamp::Discard for RecvStream {
    fn poll_discard(&mut self, cx: &mut Context<'_>, _max: usize) -> Poll<std::io::Result<usize>> {
        match self.poll_data(cx) {
            Poll::Ready(Some(Ok(data))) => {
                let _ = self.flow_control().release_capacity(data.len());
                Poll::Ready(Ok(data.len()))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Err(std::io::Error::other(e))),
            Poll::Ready(None) => self.poll_trailers(cx).map(|_| Ok(0)),
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::receiver::connection::listener::{serve, Listen, ServerHandle};
    use axum::routing::post;
    use http::header::{HeaderValue, CONNECTION, CONTENT_LENGTH, DATE};
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
        serve(Listen::new("http2-test", "127.0.0.1:0"), app).await.unwrap()
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
