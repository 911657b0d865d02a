//! Tower glue shared by HTTP and gRPC: `ThrottleLayer` wraps a service in `Throttle<S>`,
//! which classifies the request path, asks the manager, and either calls the inner
//! service or answers at once, without decompressing or decoding the body (over HTTP/2
//! nothing of it is read; over HTTP/1.1 a modest one is read away unparsed so the
//! connection survives, see `receiver::middleware::drain`). HTTP answers 429 (shed) or 503 (open)
//! with Retry-After; gRPC answers RESOURCE_EXHAUSTED with a `google.rpc.RetryInfo`.

use crate::admission::Layer as AdmissionLayer;
use crate::config::ServerKind;
use crate::receiver::format::Format;
use crate::receiver::middleware::drain::{self, RefusedBody};
use crate::receiver::response::ApiError;
use crate::signal::Signal;
use crate::throttle::classify::RouteRegistry;
use crate::throttle::manager::{Decision, Reason, ThrottleManager};
use crate::throttle::metrics::{QUEUE_DELAY, REQUESTS};
use crate::throttle::{AdmissionClock, DoneGuard};
use axum::body::Body;
use axum::http::{Request, Response};
use std::sync::Arc;
use std::task::{Context, Poll};
use tower::{Layer, Service};

/// An admitted request's slot, and its part in what refusals may read; both end when it
/// is answered.
type Admitted = (DoneGuard, drain::Earning);

const REASONS: [Reason; 8] = [
    Reason::Normal,
    Reason::SheddingPass,
    Reason::IdleCore,
    Reason::InflightLimit,
    Reason::Disabled,
    Reason::Unclassified,
    Reason::Shed,
    Reason::Open,
];
const LAYERS: [AdmissionLayer; 6] = [
    AdmissionLayer::InflightCap,
    AdmissionLayer::SlowStart,
    AdmissionLayer::BurstDamping,
    AdmissionLayer::Bbr,
    AdmissionLayer::QueueDelay,
    AdmissionLayer::Pid,
];
/// Counter columns: the reasons, then the layers.
const COLUMNS: usize = REASONS.len() + LAYERS.len();

/// Counters registered once, so the hot path does no label lookups.
#[derive(Debug, Clone)]
struct Counters {
    /// [signal index or 4 for unknown][reason index, then REASONS.len() + layer index]
    table: Arc<[[metrics::Counter; COLUMNS]; 5]>,
    /// Each request's wait in front of weir.
    queue_delay: metrics::Histogram,
}

impl Counters {
    fn new(protocol: &'static str) -> Self {
        let record_types = ["traces", "metrics", "logs", "profiles", "unknown"];
        let table = record_types.map(|rt| {
            let labels: [(&'static str, &'static str); COLUMNS] = std::array::from_fn(|j| {
                if j < REASONS.len() {
                    let r = REASONS[j];
                    (if matches!(r, Reason::Shed | Reason::Open) { "denied" } else { "allowed" }, r.as_str())
                } else {
                    ("denied", LAYERS[j - REASONS.len()].as_str())
                }
            });
            labels.map(|(decision, reason)| {
                metrics::counter!(REQUESTS, "protocol" => protocol, "record_type" => rt, "decision" => decision, "reason" => reason)
            })
        });
        Counters { table: Arc::new(table), queue_delay: metrics::histogram!(QUEUE_DELAY, "protocol" => protocol) }
    }

    fn count(&self, signal: Option<Signal>, reason: Reason) {
        let i = signal.map_or(4, Signal::index);
        let j = REASONS.iter().position(|r| *r == reason).unwrap_or(0);
        self.table[i][j].increment(1);
    }

    fn count_layer(&self, signal: Option<Signal>, layer: AdmissionLayer) {
        let i = signal.map_or(4, Signal::index);
        let j = REASONS.len() + LAYERS.iter().position(|l| *l == layer).unwrap_or(0);
        self.table[i][j].increment(1);
    }
}

/// Builds [`Throttle`] services.
#[derive(Clone)]
pub struct ThrottleLayer {
    manager: Arc<ThrottleManager>,
    admission: Arc<AdmissionClock>,
    routes: Arc<RouteRegistry>,
    kind: ServerKind,
    counters: Counters,
    queue: Option<Arc<crate::pipeline::Pipeline>>,
}

impl ThrottleLayer {
    /// A layer for one server.
    pub fn new(manager: Arc<ThrottleManager>, admission: Arc<AdmissionClock>, routes: Arc<RouteRegistry>, kind: ServerKind) -> Self {
        let protocol = match kind {
            ServerKind::Http => "http",
            ServerKind::Grpc => "grpc",
        };
        ThrottleLayer { manager, admission, routes, kind, counters: Counters::new(protocol), queue: None }
    }

    /// Also refuses, before the body is read, a request the pipeline's byte budget has no
    /// room for (see [`ThrottleLayer::queue_refusal`]).
    pub fn with_queue(mut self, queue: Option<Arc<crate::pipeline::Pipeline>>) -> Self {
        self.queue = queue;
        self
    }

    /// A full pipeline refuses only after the body was read and decoded (it learns the
    /// payload's size then), and a client that retries at once would make weir decode the
    /// same refused request again and again while a slow exporter is the bottleneck. So
    /// the throttle refuses up front what cannot fit: no room left, or less room than what
    /// an uncompressed body will take in the queue. For protobuf that is its declared
    /// length. OTLP/JSON encodes to protobuf at between about a third (small attributes:
    /// hex IDs and field names) and nine tenths (long attribute values) of its size, so
    /// the share the bodies decoded so far showed counts (half before the first).
    /// What passes is reserved from its admission until it is answered: requests admitted
    /// together do not all count on the same free room
    /// (`docs/overload.md#measurements-behind-the-defaults`). Not while it waits in the
    /// line for a slot: hundreds of waiting requests would hold the room of a queue that
    /// is nearly empty, and the rest would be refused as if it were full.
    /// Compressed bodies state no decoded size in their headers: only a full budget
    /// refuses them. The answer is the queue's own 503 with its retry delay, held like
    /// any refusal.
    fn queue_refusal(&self, req: &Request<Body>, declared: Option<u64>, critical: bool) -> Result<usize, std::time::Duration> {
        let Some(queue) = self.queue.as_ref() else {
            return Ok(0);
        };
        let h = req.headers();
        let identity = h.get(axum::http::header::CONTENT_ENCODING).is_none_or(|v| v.as_bytes().eq_ignore_ascii_case(b"identity"));
        let content_type = h.get(axum::http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
        // What the queue will hold, from the declared length.
        let declared = declared.unwrap_or(0) as usize;
        let expected = match content_type.and_then(Format::from_content_type) {
            Some(Format::Protobuf) if identity => declared,
            Some(Format::Json) if identity => queue.json_estimate(declared),
            _ => 0,
        };
        match self.queue_full_now(expected, critical) {
            Some(retry_after) => Err(retry_after),
            None => Ok(expected),
        }
    }

    /// The retry delay if the queue has no room for `expected` bytes now (at least one
    /// byte: a full budget refuses whatever the size).
    fn queue_full_now(&self, expected: usize, critical: bool) -> Option<std::time::Duration> {
        let queue = self.queue.as_ref()?;
        queue.would_refuse(expected.max(1), critical).then(|| queue.retry_after())
    }

    /// Reserves the queue room of an admitted request until it is answered.
    fn reserve(&self, expected: usize) -> Option<crate::pipeline::Reserved> {
        self.queue.as_ref().filter(|_| expected > 0).map(|q| q.reserve(expected))
    }

    /// Counts an admission and guards its slot until the response is ready; the ticket
    /// carries the declared body length (`declared`), for the hold's completed bytes.
    fn admitted(&self, declared: Option<u64>, signal: Option<Signal>, reason: Reason, mut ticket: crate::admission::Ticket) -> Admitted {
        self.counters.count(signal, reason);
        ticket.bytes = declared.unwrap_or(0);
        (DoneGuard::new(Arc::clone(&self.admission), ticket, Arc::clone(&self.manager)), drain::credit(declared))
    }

    /// Counts and answers a refusal by an admission layer.
    fn refused_by(
        &self,
        req: Request<Body>,
        declared: Option<u64>,
        signal: Option<Signal>,
        layer: AdmissionLayer,
    ) -> Result<Response<Body>, drain::Draining> {
        self.counters.count_layer(signal, layer);
        let retry_after = self.manager.config().retry_after.min;
        self.answer(req, declared, retry_after, move |retry_after| ApiError::Admission {
            message: retry_message(format_args!("overloaded: refused by {}", layer.as_str()), signal, retry_after),
            retry_after,
            reason: crate::receiver::response::admission_reason(layer),
        })
    }

    /// Answers a request the pipeline has no room for (see [`ThrottleLayer::queue_refusal`]).
    fn queue_full(
        &self,
        req: Request<Body>,
        declared: Option<u64>,
        retry_after: std::time::Duration,
    ) -> Result<Response<Body>, drain::Draining> {
        self.answer(req, declared, retry_after, move |retry_after| ApiError::QueueFull {
            message: "pipeline queue is full; retry later".into(),
            retry_after,
        })
    }

    /// The refusal answer, ready or (HTTP/1.1 body to read away first) pending.
    fn refusal(
        &self,
        req: Request<Body>,
        declared: Option<u64>,
        signal: Option<Signal>,
        what: &'static str,
        retry_after: std::time::Duration,
        open: bool,
    ) -> Result<Response<Body>, drain::Draining> {
        self.answer(req, declared, retry_after, move |retry_after| ApiError::Throttled {
            message: retry_message(format_args!("{what}"), signal, retry_after),
            retry_after,
            open,
        })
    }

    /// Answers a refusal whose client should wait `retry_after`: held (see [`held`]), or
    /// at once. `err` makes the answer from the delay to announce: a held client has
    /// already waited out its hold, so it is told the rest (a client that honours it
    /// waits about as long in all as without the hold; told the whole delay, it would
    /// wait for both). The rest is
    /// reckoned from the time actually held, which is shorter than planned when a free
    /// core answers it early.
    /// `declared` is the body's stated length, read once in `Throttle::call`; it sizes
    /// the hold's byte budget.
    fn answer(
        &self,
        req: Request<Body>,
        declared: Option<u64>,
        retry_after: std::time::Duration,
        err: impl FnOnce(std::time::Duration) -> ApiError + Send + 'static,
    ) -> Result<Response<Body>, drain::Draining> {
        // A held refusal keeps its connection and buffers: with memory above its enter
        // line, refusals are answered at once, or a flood of held refusals could run the
        // container out of memory. Not the exit line: held clients alone can lift a small
        // container past it, and answering them at once brings the spinning back
        // (docs/overload.md#measurements-behind-the-defaults).
        crate::receiver::connection::http2::discard_unread(req.extensions());
        // Over HTTP/1.1 a body a refusal may read (a declared length up to 1 MiB) is read
        // away while its client waits out the hold; a larger one, or one without a length,
        // waits unread in weir's socket and counts against `hold.max_held_bytes`. HTTP/2
        // leaves a refused body with its client.
        let body = drain::refused_body(&req, declared);
        let hold = if self.manager.memory_above_enter() {
            self.admission.skipped(crate::throttle::HoldSkip::Memory);
            None
        } else {
            let unread = if body == RefusedBody::Unreadable { unread_bound(declared) } else { 0 };
            self.admission.hold(declared, crate::receiver::middleware::refuse::stated_deadline(&req), unread, self.manager.hold_room())
        };
        if let Some(hold) = hold {
            // Paused now, before hyper's next read could take more of a body left unread.
            let pause = (body == RefusedBody::Unreadable)
                .then(|| req.extensions().get::<crate::receiver::connection::stamp::RxStamp>().map(|s| s.pause_reads()))
                .flatten();
            let kind = self.kind;
            let answer = move |req: &Request<Body>, held: std::time::Duration| {
                crate::receiver::middleware::refuse::reject_counted(kind, req, err(retry_after.saturating_sub(held)))
            };
            return Err(Box::pin(held(req, answer, hold, body == RefusedBody::Readable, pause)));
        }
        let resp = crate::receiver::middleware::refuse::reject_counted(self.kind, &req, err(retry_after));
        // Nothing of the body is decompressed or decoded; over HTTP/1.1 a modest one is
        // read away so the connection survives (see `middleware::drain`).
        drain::finish_as(req, resp, declared, body)
    }
}

impl<S> Layer<S> for ThrottleLayer {
    type Service = Throttle<S>;
    fn layer(&self, inner: S) -> Throttle<S> {
        Throttle { inner, layer: self.clone() }
    }
}

/// The throttle middleware.
#[derive(Clone)]
pub struct Throttle<S> {
    inner: S,
    layer: ThrottleLayer,
}

impl<S> Service<Request<Body>> for Throttle<S>
where
    S: Service<Request<Body>, Response = Response<Body>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let signal = self.layer.routes.classify(req.uri().path());
        let tenant = req.extensions().get::<crate::receiver::Tenant>().map(|t| &*t.0);
        let priority = signal.map(|s| self.layer.manager.priority(s, tenant));
        // The wait in front of weir, when the kernel stamped the data (unknown: no wait).
        let waited = req.extensions().get::<crate::receiver::connection::stamp::RxStamp>().and_then(|s| s.waited_nanos());
        if let Some(w) = waited {
            self.layer.counters.queue_delay.record(w as f64 * 1e-9);
        }
        let waited = waited.unwrap_or(0);
        // Read once: the queue's check and the admission ticket both need it.
        let declared = crate::receiver::middleware::refuse::declared_len(&req);
        let mut expected = 0;
        if self.layer.admission.enabled && signal.is_some() {
            match self.layer.queue_refusal(&req, declared, priority == Some(crate::config::Priority::Critical)) {
                Ok(e) => expected = e,
                Err(retry_after) => return ResponseFuture::refused(self.layer.queue_full(req, declared, retry_after)),
            }
        }
        let mut decision = self.layer.manager.decide_as(signal, priority);
        if self.layer.admission.enabled {
            decision = self.layer.manager.spare_shed(decision, &self.layer.admission.inner, priority);
        }
        match decision {
            // Critical traffic skips the adaptive layers: it is refused only when Open.
            Decision::Admit(reason @ (Reason::Normal | Reason::SheddingPass | Reason::IdleCore | Reason::InflightLimit))
                if self.layer.admission.enabled && priority != Some(crate::config::Priority::Critical) =>
            {
                // The admission layers, after the throttle and before the body is read.
                let adm = &self.layer.admission;
                let pressure = self.layer.manager.pressure();
                if let Err(layer) = adm.inner.check_queue_delay(waited, pressure) {
                    return ResponseFuture::refused(self.layer.refused_by(req, declared, signal, layer));
                }
                match adm.inner.admit(adm.now(), pressure) {
                    Ok(ticket) => {
                        let guard = self.layer.admitted(declared, signal, reason, ticket);
                        let reserved = self.layer.reserve(expected);
                        ResponseFuture::Inner { fut: self.inner.call(req), guard: Some(guard), reserved }
                    }
                    Err(AdmissionLayer::InflightCap) if adm.inner.join_line(declared) || adm.inner.join_line_calm(adm.now(), pressure) => {
                        // Left when the wait ends, or when the future is dropped unpolled.
                        let in_line = InLine(Arc::clone(adm));
                        ResponseFuture::Queued {
                            fut: Box::pin(queued(
                                self.inner.clone(),
                                self.layer.clone(),
                                req,
                                declared,
                                signal,
                                reason,
                                (in_line, expected),
                            )),
                        }
                    }
                    Err(layer) => ResponseFuture::refused(self.layer.refused_by(req, declared, signal, layer)),
                }
            }
            Decision::Admit(reason) => {
                self.layer.counters.count(signal, reason);
                let reserved = self.layer.reserve(expected);
                ResponseFuture::Inner { fut: self.inner.call(req), guard: None, reserved }
            }
            Decision::Reject { reason, retry_after } => {
                self.layer.counters.count(signal, reason);
                let open = reason == Reason::Open;
                let what = if open { "overloaded: admission is closed" } else { "overloaded: request shed" };
                ResponseFuture::refused(self.layer.refusal(req, declared, signal, what, retry_after, open))
            }
        }
    }
}

/// What a held HTTP/1.1 request can leave unread in weir's socket: its declared length,
/// but no more than one socket buffers (`net.ipv4.tcp_rmem`'s maximum, read once), which
/// is also what a body without a declared length counts.
fn unread_bound(declared: Option<u64>) -> u64 {
    static SOCKET_MAX: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let max = *SOCKET_MAX.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/net/ipv4/tcp_rmem")
            .ok()
            .and_then(|t| t.split_whitespace().nth(2).and_then(|v| v.parse().ok()))
            // The kernel's default maximum.
            .unwrap_or(6 << 20)
    });
    declared.map_or(max, |d| d.min(max))
}

/// A held refusal (`receiver.throttle.hold`): answered after `hold`. Over HTTP/2 the body
/// is dropped at once: h2 discards whatever still arrives for the stream, and the
/// connection closes its stream window while refusing (`connection::http2`). Over HTTP/1.1 a body of
/// a declared length a refusal may read (`read_first`) is read away during the hold and
/// dropped as it comes; a larger one, or one without a length, stays in the socket, where
/// TCP flow control stops the client once the buffers are full, and after the hold it is
/// answered as any refusal (`middleware::drain`). Either way a client that retries at
/// once is parked on a timer instead of spinning weir's core.
/// `pause` keeps an HTTP/1.1 connection's reads paused meanwhile: hyper would read the
/// body ahead into memory; paused, it stays in the kernel.
async fn held(
    req: Request<Body>,
    answer: impl FnOnce(&Request<Body>, std::time::Duration) -> Response<Body>,
    hold: crate::throttle::Hold,
    read_first: bool,
    pause: Option<crate::receiver::connection::stamp::ReadPause>,
) -> Response<Body> {
    let started = tokio::time::Instant::now();
    let crate::throttle::Hold { duration, guard } = hold;
    // HTTP/2: the body goes now; the head stays to shape the answer.
    let req = if req.version() < axum::http::Version::HTTP_2 { req } else { req.map(|_| Body::empty()) };
    // Read away now, dropped as it comes, so that nothing waits in weir's socket; the
    // client still waits out the hold. Left unread for the hold, the bodies of hundreds
    // of clients retrying at once would fill weir's sockets (cgroup v2 charges them to
    // the container) and the requests admitted next would wait behind them
    // (docs/overload.md#measurements-behind-the-defaults). The read is the one a refusal
    // makes after the hold anyway, moved ahead; it may take the whole hold, since a
    // client that shares a busy core with hundreds of others sends slowly. A body that
    // does not arrive within the hold is answered then, closing, as any refusal whose
    // body cannot be read.
    let req = if read_first {
        let (req, whole) = drain::read_body_away(req, duration.max(drain::MAX_TIME)).await;
        if !whole {
            drop(guard);
            let mut resp = answer(&req, started.elapsed());
            drain::close(&mut resp, req.extensions().get::<crate::receiver::connection::stamp::RxStamp>(), drain::PAID);
            return resp;
        }
        req
    } else {
        req
    };
    tokio::select! {
        _ = tokio::time::sleep(duration.saturating_sub(started.elapsed())) => {}
        _ = guard.released_early() => {}
    }
    drop(guard);
    drop(pause);
    let resp = answer(&req, started.elapsed());
    if req.version() >= axum::http::Version::HTTP_2 || read_first {
        return resp;
    }
    match drain::finish(req, resp) {
        Ok(resp) => resp,
        Err(draining) => draining.await,
    }
}

/// A place in the line for an in-flight slot, joined with `Admission::join_line`; left
/// when dropped.
struct InLine(Arc<crate::throttle::AdmissionClock>);

impl Drop for InLine {
    fn drop(&mut self) {
        self.0.inner.leave_line();
    }
}

/// A request that found the in-flight cap full: waits (up to `max_inflight_wait`) for a
/// finished request's slot, then goes through the admission layers again like a new
/// arrival.
async fn queued<S>(
    mut inner: S,
    layer: ThrottleLayer,
    req: Request<Body>,
    declared: Option<u64>,
    signal: Option<Signal>,
    reason: Reason,
    (in_line, expected): (InLine, usize),
) -> Result<Response<Body>, S::Error>
where
    S: Service<Request<Body>, Response = Response<Body>>,
{
    let adm = Arc::clone(&layer.admission);
    let deadline = tokio::time::Instant::now() + adm.inner.inflight_wait();
    let mut in_line = Some(in_line);
    let mut waited = false;
    let mut first = true;
    let cpu_since = CpuSince::now();
    loop {
        // Registered before the check, so a slot freed in between is not missed.
        let freed = adm.freed.notified();
        tokio::pin!(freed);
        freed.as_mut().enable();
        // Every pass after the first was woken for a slot (or ran out its wait).
        let woken = !std::mem::replace(&mut first, false);
        // The queue may have filled while it waited (checked on arrival the first time).
        if let Some(retry_after) = woken.then(|| layer.queue_full_now(expected, false)).flatten() {
            in_line.take();
            // Woken for a slot it does not take: the next in line gets it.
            adm.freed.notify_one();
            return Ok(match layer.queue_full(req, declared, retry_after) {
                Ok(resp) => resp,
                Err(draining) => draining.await,
            });
        }
        let now = adm.now();
        let verdict = if waited {
            // The sampler's CPU level is up to one interval old; a crowd that arrived since
            // shows in weir's own CPU over this wait, and makes the limit hold.
            let mut pressure = layer.manager.pressure();
            pressure.cpu = pressure.cpu.max(cpu_since.share(adm.inner.cores()));
            adm.inner.admit_waited(now, pressure)
        } else {
            adm.inner.admit(now, layer.manager.pressure())
        };
        match verdict {
            Ok(ticket) => {
                in_line.take();
                let guard = layer.admitted(declared, signal, reason, ticket);
                let reserved = layer.reserve(expected);
                std::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
                let resp = inner.call(req).await;
                drop((guard, reserved));
                return resp;
            }
            Err(AdmissionLayer::InflightCap) if tokio::time::timeout_at(deadline, freed).await.is_ok() => continue,
            Err(AdmissionLayer::InflightCap) if !waited => {
                // The wait ran out: one last try, in which a calm weir lets it in.
                waited = true;
                continue;
            }
            Err(refused_by) => {
                in_line.take();
                if woken {
                    adm.freed.notify_one();
                }
                return Ok(match layer.refused_by(req, declared, signal, refused_by) {
                    Ok(resp) => resp,
                    Err(draining) => draining.await,
                });
            }
        }
    }
}

/// weir's own CPU time from a moment on, as a share of its effective cores.
struct CpuSince {
    cpu: Option<u64>,
    at: std::time::Instant,
}

impl CpuSince {
    fn now() -> Self {
        CpuSince { cpu: crate::throttle::cgroup::process_cpu_nanos(), at: std::time::Instant::now() }
    }

    /// The share of `cores` used since (0 when the clock cannot be read).
    fn share(&self, cores: f64) -> f64 {
        let wall = self.at.elapsed().as_nanos() as f64;
        match (self.cpu, crate::throttle::cgroup::process_cpu_nanos()) {
            (Some(a), Some(b)) if wall > 0.0 && cores > 0.0 => b.saturating_sub(a) as f64 / (wall * cores),
            _ => 0.0,
        }
    }
}

/// `future::ResponseFuture`: kept in its own module because `pin_project!` cannot carry
/// field docs.
pub mod future {
    #![allow(missing_docs)]
    use axum::body::Body;
    use axum::http::Response;
    use pin_project_lite::pin_project;
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    /// A boxed response future.
    pub type Boxed<E> = Pin<Box<dyn Future<Output = Result<Response<Body>, E>> + Send>>;

    pin_project! {
        /// The inner service's future, or a ready refusal.
        #[project = Proj]
        pub enum ResponseFuture<F, E> {
            /// Admitted.
            /// `reserved`: the queue room the body is expected to take, until answered.
            Inner { #[pin] fut: F, guard: Option<super::Admitted>, reserved: Option<crate::pipeline::Reserved> },
            /// Refused.
            Rejected { resp: Option<Response<Body>> },
            /// Refused, answered once the unread HTTP/1.1 body has been read away.
            Draining { fut: crate::receiver::middleware::drain::Draining },
            /// Waiting for an in-flight slot.
            Queued { fut: Boxed<E> },
        }
    }

    impl<F, E> ResponseFuture<F, E> {
        /// A refusal, ready or still reading an HTTP/1.1 body away.
        pub(crate) fn refused(r: Result<Response<Body>, crate::receiver::middleware::drain::Draining>) -> Self {
            match r {
                Ok(resp) => ResponseFuture::Rejected { resp: Some(resp) },
                Err(fut) => ResponseFuture::Draining { fut },
            }
        }
    }

    impl<F, E> Future for ResponseFuture<F, E>
    where
        F: Future<Output = Result<Response<Body>, E>>,
    {
        type Output = Result<Response<Body>, E>;
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
            match self.project() {
                Proj::Inner { fut, guard, reserved } => {
                    let out = std::task::ready!(fut.poll(cx));
                    // Done as soon as the response is ready (not when the future is dropped).
                    guard.take();
                    reserved.take();
                    Poll::Ready(out)
                }
                Proj::Rejected { resp } => Poll::Ready(Ok(resp.take().unwrap_or_default())),
                Proj::Draining { fut } => fut.as_mut().poll(cx).map(Ok),
                Proj::Queued { fut } => fut.as_mut().poll(cx),
            }
        }
    }
}

pub use future::ResponseFuture;
/// The message of a refusal: what refused, for which signal, and when to retry
/// (integer formatting: a float's costs more than the rest of the message).
fn retry_message(what: std::fmt::Arguments<'_>, signal: Option<Signal>, retry_after: std::time::Duration) -> String {
    format!(
        "{what} for {}; retry after {}.{}s",
        signal.map_or("request", Signal::as_str),
        retry_after.as_secs(),
        retry_after.subsec_millis() / 100
    )
}

#[cfg(test)]
mod tests {
    use super::CpuSince;

    #[test]
    fn cpu_since_sees_a_busy_thread() {
        let since = CpuSince::now();
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < std::time::Duration::from_millis(30) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        // One thread spinning is one core busy (less what the scheduler gave others).
        let busy = since.share(1.0);
        // (Only a floor: other tests' threads in this process add to it.)
        assert!(busy > 0.5, "spinning: {busy}");
        assert!(since.share(2.0) < busy, "the same time on twice the cores is a smaller share");
    }
}
