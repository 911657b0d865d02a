//! Connection hygiene: what a connection may cost in time before weir closes it, and
//! the request body that must arrive in time (see `receiver.*.connections`).

use crate::config::ConnectionConfig;
use crate::receiver::connection::stamp::{mono_ms, RxStamp};
use crate::receiver::response::ApiError;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// Why weir stopped reading a request body partway (it did not arrive within
/// `body_read_timeout`, or it ran past the body budget): the answer to give, and the same
/// as a gRPC status for tonic, which looks for one along the error's source chain.
#[derive(Debug)]
pub struct BodyFailure {
    api: ApiError,
    status: tonic::Status,
}

impl BodyFailure {
    /// The failure that answers with `api`.
    pub fn new(api: ApiError) -> Self {
        let status = tonic::Status::new(api.grpc_code(), api.to_string());
        BodyFailure { api, status }
    }

    /// The answer to give.
    pub fn api_error(&self) -> ApiError {
        self.api.clone()
    }
}

impl std::fmt::Display for BodyFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.status.message())
    }
}

impl std::error::Error for BodyFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.status)
    }
}

/// A request body that must be complete by a deadline. The timer is made only when the
/// body is not there at once (most bodies are, and pay nothing for this).
pub struct Deadline<B> {
    inner: B,
    started: Instant,
    limit: Duration,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Times the body was not ready. The first is free: an HTTP/2 body's first read on
    /// its connection's task is always put off (see `http2::H2Body`).
    waits: u8,
}

impl<B> Deadline<B> {
    /// `inner`, due `limit` from now.
    pub fn new(inner: B, limit: Duration) -> Self {
        Deadline { inner, started: Instant::now(), limit, timer: None, waits: 0 }
    }
}

impl<B> Body for Deadline<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(r) => Poll::Ready(r.map(|r| r.map_err(Into::into))),
            Poll::Pending if this.waits == 0 => {
                this.waits = 1;
                Poll::Pending
            }
            Poll::Pending => {
                let (started, limit) = (this.started, this.limit);
                let timer = this.timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until((started + limit).into())));
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        let message = format!("request body not received within {limit:?} (body_read_timeout)");
                        Poll::Ready(Some(Err(Box::new(BodyFailure::new(ApiError::BodyTimeout(message))))))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Why weir closed a connection on its own, for `weir_receiver_connections_closed_total`.
#[derive(Debug, Clone, Copy)]
pub enum Closed {
    /// A request head (or the HTTP/2 preface, or a TLS handshake) took too long.
    HeaderTimeout,
    /// Nothing in flight and nothing received for `idle_timeout`.
    Idle,
    /// A keepalive PING went unanswered.
    KeepaliveTimeout,
    /// The server was at its connection cap and this was the least useful connection.
    Evicted,
}

impl Closed {
    /// Counts it.
    pub fn count(self, server: &'static str) {
        let reason = match self {
            Closed::HeaderTimeout => "header_timeout",
            Closed::Idle => "idle",
            Closed::KeepaliveTimeout => "keepalive_timeout",
            Closed::Evicted => "evicted",
        };
        if crate::telemetry::installed() {
            ::metrics::counter!(crate::telemetry::names::CONNECTIONS_CLOSED, "server" => server, "reason" => reason).increment(1);
        }
    }
}

/// How often a connection checks its timeouts: a quarter of the shortest, within
/// 50 ms..1 s.
pub fn tick(timeouts: &[Duration]) -> Duration {
    let shortest = timeouts.iter().filter(|d| !d.is_zero()).min().copied().unwrap_or(Duration::from_secs(1));
    (shortest / 4).clamp(Duration::from_millis(50), Duration::from_secs(1))
}

/// Reads a body up to `limit` bytes; more is a 413.
pub async fn read_body(body: axum::body::Body, limit: usize) -> Result<bytes::Bytes, ApiError> {
    let limited = http_body_util::Limited::new(body, limit);
    match http_body_util::BodyExt::collect(limited).await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) => Err(body_error(e, limit)),
    }
}

fn body_error(e: Box<dyn std::error::Error + Send + Sync>, limit: usize) -> ApiError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e.as_ref());
    while let Some(err) = source {
        if err.is::<http_body_util::LengthLimitError>() {
            return ApiError::PayloadTooLarge(format!("request body exceeds the limit of {limit} bytes"));
        }
        if let Some(failure) = err.downcast_ref::<BodyFailure>() {
            return failure.api_error();
        }
        source = err.source();
    }
    ApiError::BadRequest(format!("cannot read request body: {e}"))
}

/// What one connection needs to know about its limits.
#[derive(Debug, Clone, Copy)]
pub struct ConnOpts {
    /// The server's name, for metrics.
    pub server: &'static str,
    /// When it opened ([`mono_ms`]).
    pub opened: u64,
    /// Its timeouts.
    pub limits: ConnectionConfig,
    /// Whether HTTP/1.1 is served beside HTTP/2.
    pub http1: bool,
}

impl ConnOpts {
    /// Why the connection must close now, if it must; `evicted` says the server asked.
    /// `head` checks the HTTP/1.1 request-head timeout.
    pub fn verdict(&self, stamp: &RxStamp, evicted: bool, head: bool) -> Option<Closed> {
        let now = mono_ms();
        let idle = stamp.idle_ms(now, self.opened);
        if evicted && idle.is_some() {
            return Some(Closed::Evicted);
        }
        if head && stamp.head_waiting_ms(now).is_some_and(|ms| ms > self.limits.header_read_timeout.as_millis() as u64) {
            return Some(Closed::HeaderTimeout);
        }
        let idle_limit = self.limits.idle_timeout.as_millis() as u64;
        if idle_limit > 0 && idle.is_some_and(|ms| ms > idle_limit) {
            return Some(Closed::Idle);
        }
        None
    }

    /// How often to check.
    pub fn tick(&self) -> Duration {
        let l = &self.limits;
        tick(&[l.header_read_timeout, l.idle_timeout, l.http2_keepalive_interval, l.http2_keepalive_timeout])
    }
}

/// How long weir reads away what a peer still sends after an answer that did not read
/// it: the rest of a refused HTTP/1.1 body before the socket closes, the rest of an
/// HTTP/2 stream's body before its answer goes out.
pub const LINGER_TIME: Duration = Duration::from_secs(1);
/// How much of it weir reads at most.
pub const LINGER_BYTES: usize = 1 << 20;

/// Reads away and drops what `io` still delivers, until it ends or for at most
/// [`LINGER_TIME`] and [`LINGER_BYTES`]: the one lingering close of both protocols.
pub async fn read_away<D: crate::receiver::connection::stamp::Discard + ?Sized>(io: &mut D) {
    let mut left = LINGER_BYTES;
    let _ = tokio::time::timeout(LINGER_TIME, async {
        while left > 0 {
            match std::future::poll_fn(|cx| io.poll_discard(cx, left)).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    })
    .await;
}
