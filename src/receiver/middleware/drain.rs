//! What happens to the body of a request refused before it was read.
//!
//! HTTP/2 resets the rest of the stream and the connection carries on. HTTP/1.1 cannot:
//! unread body bytes sit in front of the next request, so hyper closes the connection,
//! and the kernel answers bytes still arriving with a reset, which often reaches the
//! client before it has read the 429/503 (the client then sees a broken connection, no
//! status, no Retry-After, and pays for a new connection). So a refused HTTP/1.x request
//! with a declared, modest length is read to its end and discarded, never decompressed
//! or decoded, before the answer goes out on a connection that stays open. Anything
//! larger, of unknown length, slower than [`MAX_TIME`] or beyond [`MAX_CONCURRENT`]
//! bodies being read already is answered with `Connection: close` instead, and that
//! connection closes lingering (`server::linger`): the answer goes out, the write side
//! is shut, and what the client still sends is read away for a bounded time, so a
//! client that reads only after sending its whole body still gets the answer. Both reads
//! of a body over [`FREE_BYTES`] come out of [`READS`], which admitted bodies fill: under
//! a flood of refusals, the rest close without reading.

use crate::receiver::connection::stamp::{mono_ms, RxStamp};
use axum::body::Body;
use axum::http::{header, HeaderValue, Request, Response, Version};
use http_body_util::BodyExt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// The largest refused body read to keep its connection.
pub const MAX_BYTES: u64 = 1 << 20;
/// How long reading a refused body may take.
pub const MAX_TIME: Duration = Duration::from_millis(200);
/// Refused bodies read at the same time, process-wide. Under a flood of refusals (the
/// very moment weir is short of CPU and memory) reading every body would cost both, so
/// past this many the rest are answered with `Connection: close` at once.
pub const MAX_CONCURRENT: usize = 8;

static DRAINING: AtomicUsize = AtomicUsize::new(0);

/// A refused body up to this size is read without asking [`READS`]: reading it costs
/// less than the new connection a reset would bring.
pub const FREE_BYTES: u64 = 64 << 10;
/// Bytes of refused bodies that may be read per second beyond what admitted bodies earn.
const READ_FLOOR_PER_SECOND: i64 = 4 << 20;
/// The most credit kept: what a burst of refusals after a calm spell may read at once.
const READ_BURST: i64 = 8 << 20;

/// What refusals may read while admitted requests are in flight: every admitted body
/// byte earns one byte of it, plus [`READ_FLOOR_PER_SECOND`]. A refusal never reads much
/// more than the admitted requests do, so however many refusals come, reading them away
/// takes at most about as much of the core as the goodput's own reads; past it a refused
/// body is left unread and its connection closes. With nothing admitted in flight the
/// reads take the core from nobody, and refusals read freely
/// (`docs/overload.md#measurements-behind-the-defaults`).
static READS: ReadBudget = ReadBudget::new();

struct ReadBudget {
    tokens: AtomicI64,
    /// When the floor last refilled ([`mono_ms`]).
    refilled_ms: AtomicU64,
    /// Admitted requests not yet answered (see [`Earning`]).
    in_flight: AtomicI64,
}

impl ReadBudget {
    const fn new() -> Self {
        ReadBudget { tokens: AtomicI64::new(READ_BURST), refilled_ms: AtomicU64::new(0), in_flight: AtomicI64::new(0) }
    }

    /// Whether a refusal may read `n` bytes at `now`: freely while no admitted request is
    /// in flight, else within the credit.
    fn may_read_at(&self, now: u64, n: u64) -> bool {
        self.in_flight.load(Ordering::Relaxed) <= 0 || self.take_at(now, n)
    }

    fn add(&self, n: i64) {
        // Full already (the calm case): a read, not two read-modify-writes.
        if self.tokens.load(Ordering::Relaxed) >= READ_BURST {
            return;
        }
        let before = self.tokens.fetch_add(n, Ordering::Relaxed);
        if before + n > READ_BURST {
            self.tokens.fetch_min(READ_BURST, Ordering::Relaxed);
        }
    }

    /// Takes `n` bytes of credit at `now`, or none and false.
    fn take_at(&self, now: u64, n: u64) -> bool {
        let last = self.refilled_ms.fetch_max(now, Ordering::Relaxed);
        if now > last {
            self.add(READ_FLOOR_PER_SECOND * (now - last).min(1000) as i64 / 1000);
        }
        let n = n.min(READ_BURST as u64) as i64;
        self.tokens.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| (t >= n).then_some(t - n)).is_ok()
    }
}

/// An admitted request in flight, for [`READS`]; dropped when it is answered.
#[must_use]
pub struct Earning(());

impl Drop for Earning {
    fn drop(&mut self) {
        READS.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// An admitted request: its declared body earns refusals as many bytes of reading, and
/// until the returned [`Earning`] drops, refusals read within the credit.
pub fn credit(declared: Option<u64>) -> Earning {
    READS.in_flight.fetch_add(1, Ordering::Relaxed);
    if let Some(n) = declared.filter(|n| *n > 0) {
        READS.add(n.min(READ_BURST as u64) as i64);
    }
    Earning(())
}

/// Admitted requests in flight now, across every listener (those whose [`Earning`]
/// lives: from admission to the end of the answer).
pub fn admitted_in_flight() -> usize {
    READS.in_flight.load(Ordering::Relaxed).max(0) as usize
}

/// Whether a refusal may read `n` bytes of a body (taken from [`READS`] if so).
fn may_read(n: u64) -> bool {
    n <= FREE_BYTES || READS.may_read_at(mono_ms(), n)
}

/// One of the [`MAX_CONCURRENT`] drain slots, released on drop.
struct Slot;

impl Slot {
    fn take() -> Option<Slot> {
        DRAINING.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < MAX_CONCURRENT).then_some(n + 1)).ok().map(|_| Slot)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        DRAINING.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A refusal answer that must first read the request body away.
pub type Draining = Pin<Box<dyn Future<Output = Response<Body>> + Send>>;

/// What a refusal does with an HTTP/1.x request's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusedBody {
    /// HTTP/2 (the stream is reset, the connection carries on) or no body at all.
    None,
    /// A declared length up to [`MAX_BYTES`], within [`READS`]: read away so the
    /// connection survives.
    Readable,
    /// Larger, of unknown length, or past [`READS`]: not read; the answer closes the
    /// connection.
    Unreadable,
}

/// Which [`RefusedBody`] a request has; `declared` is its declared length (read once by
/// the caller). A `Readable` answer has taken its bytes from [`READS`]: ask once per
/// refusal.
pub fn refused_body(req: &Request<Body>, declared: Option<u64>) -> RefusedBody {
    if req.version() > Version::HTTP_11 || !has_body(req) {
        RefusedBody::None
    } else if declared.is_some_and(|n| n <= MAX_BYTES && may_read(n)) {
        RefusedBody::Readable
    } else {
        RefusedBody::Unreadable
    }
}

/// The refusal as it should go out: at once (HTTP/2, or HTTP/1.x that cannot be kept), or
/// after the body has been read away.
///
/// A held refusal whose body is left unread for its hold (too large to read, or of
/// unknown length) ends here too. Closing a held connection instead reads nothing itself,
/// but the lingering close throws most of the body away in the kernel all the same, and a
/// client that retries at once comes back on a new connection each time
/// (`docs/overload.md#measurements-behind-the-defaults`). A new connection costs more
/// where there is TLS, a load balancer or a NAT table in between.
pub fn finish(req: Request<Body>, resp: Response<Body>) -> Result<Response<Body>, Draining> {
    let declared = crate::receiver::middleware::refuse::declared_len(&req);
    let body = refused_body(&req, declared);
    finish_as(req, resp, declared, body)
}

/// [`finish`] for a request whose [`RefusedBody`] was already asked for.
pub fn finish_as(
    req: Request<Body>,
    mut resp: Response<Body>,
    declared: Option<u64>,
    body: RefusedBody,
) -> Result<Response<Body>, Draining> {
    let slot = match body {
        RefusedBody::None => return Ok(resp),
        RefusedBody::Readable => Slot::take(),
        RefusedBody::Unreadable => None,
    };
    let stamp = req.extensions().get::<RxStamp>().cloned();
    match slot {
        Some(slot) => Err(Box::pin(async move {
            if !read_body_away(req, MAX_TIME).await.1 {
                // Its bytes were granted already: what is left lingers at no charge.
                close(&mut resp, stamp.as_ref(), PAID);
            }
            drop(slot);
            resp
        })),
        None => {
            close(&mut resp, stamp.as_ref(), if body == RefusedBody::Readable { PAID } else { declared });
            Ok(resp)
        }
    }
}

/// A refusal that must not spend a read on the body (an unauthenticated request: an
/// unknown client should not be able to make weir read a megabyte per request): over
/// HTTP/1.x with a body, the connection is closed after the answer.
pub fn without_reading(req: &Request<Body>, mut resp: Response<Body>) -> Response<Body> {
    if req.version() <= Version::HTTP_11 && has_body(req) {
        // No lingering either: an unknown client gets no read at all.
        close(&mut resp, None, None);
    }
    resp
}

/// An HTTP/1.x request has a body when it declares a non-zero length or a transfer
/// coding; one with neither ends at its headers, and its connection can carry on.
fn has_body(req: &Request<Body>) -> bool {
    let h = req.headers();
    h.contains_key(header::TRANSFER_ENCODING) || h.get(header::CONTENT_LENGTH).is_some_and(|v| v.as_bytes() != b"0")
}

/// `unread` for [`close`] when the body's reading was granted already (a refusal whose
/// body was read, or found readable): its lingering close costs the budget nothing.
pub const PAID: Option<u64> = Some(0);

/// Answers with `Connection: close`; with the connection's stamp, the connection then
/// closes lingering (the client reads its answer before a reset can destroy it), if
/// [`READS`] has room for what is left of the body (`unread`, its declared length; unknown
/// counts as a whole lingering close; [`PAID`]: nothing). Without it, the socket closes at once: a client
/// that reads while it sends still gets the answer, one that sends its whole body first
/// gets a reset and retries as from a broken connection.
pub fn close(resp: &mut Response<Body>, stamp: Option<&RxStamp>, unread: Option<u64>) {
    resp.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    let linger = crate::receiver::connection::hygiene::LINGER_BYTES as u64;
    if let Some(s) = stamp {
        if may_read(unread.unwrap_or(linger).min(linger)) {
            s.linger_on_close();
        } else {
            ::metrics::counter!(crate::telemetry::names::REFUSED_UNREAD).increment(1);
        }
    }
}

/// Reads a refused request's body within `limit` and drops it chunk by chunk, taking none
/// of the body budget (`receiver::budget`): the request's head, now with an empty body,
/// and whether the whole body came (`false` when it was longer than [`MAX_BYTES`], slower
/// or broken; the answer must then close the connection). A held refusal reads its body
/// while its client waits out the hold anyway, so it may take as long as the hold.
pub async fn read_body_away(req: Request<Body>, limit: Duration) -> (Request<Body>, bool) {
    if let Some(charge) = req.extensions().get::<std::sync::Arc<crate::receiver::middleware::budget::Charge>>() {
        charge.discard();
    }
    let (parts, mut body) = req.into_parts();
    let read = async {
        let mut seen = 0u64;
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else { return false };
            if let Some(data) = frame.data_ref() {
                seen += data.len() as u64;
                if seen > MAX_BYTES {
                    return false;
                }
            }
        }
        true
    };
    let whole = tokio::time::timeout(limit, read).await.unwrap_or(false);
    (Request::from_parts(parts, Body::empty()), whole)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget() -> ReadBudget {
        ReadBudget::new()
    }

    #[test]
    fn with_nothing_admitted_in_flight_refusals_read_freely() {
        let b = budget();
        const BODY: u64 = 1 << 20;
        // Nothing admitted in flight: the reads take the core from nobody.
        assert!((0..100).all(|_| b.may_read_at(0, BODY)));
        assert_eq!(b.tokens.load(Ordering::Relaxed), READ_BURST, "free reads take no credit");
        // One in flight: the credit binds (8 MiB of burst, no time for the floor).
        b.in_flight.fetch_add(1, Ordering::Relaxed);
        assert_eq!((0..100).filter(|_| b.may_read_at(0, BODY)).count(), 8);
        b.in_flight.fetch_sub(1, Ordering::Relaxed);
        assert!((0..100).all(|_| b.may_read_at(0, BODY)));
    }

    #[test]
    fn refusals_read_what_admitted_requests_earn_and_no_more() {
        let b = budget();
        const BODY: u64 = 700_000;
        // A fresh weir may read a burst of refused bodies...
        let fresh = (0..100).take_while(|_| b.take_at(0, BODY)).count();
        assert_eq!(fresh, (READ_BURST as u64 / BODY) as usize);
        // ...and then none, within the same millisecond.
        assert!(!b.take_at(0, BODY));
        // Each admitted body earns one refused body's read.
        b.add(BODY as i64);
        assert!(b.take_at(0, BODY));
        assert!(!b.take_at(0, BODY));
        // Without admissions, the floor: 4 MiB a second, so 5 bodies of 700 KB in 1 s.
        assert!(b.take_at(0, b.tokens.load(Ordering::Relaxed) as u64));
        let floor = (0..100).filter(|i| b.take_at(1 + i * 10, BODY)).count();
        assert_eq!(floor, 5, "{floor}");
    }

    #[test]
    fn credit_is_capped_at_the_burst() {
        let b = budget();
        b.add(100 * READ_BURST);
        assert_eq!(b.tokens.load(Ordering::Relaxed), READ_BURST);
        // A long quiet spell refills at most one second of floor, and never past the burst.
        assert!(b.take_at(0, READ_BURST as u64));
        assert!(b.take_at(3_600_000, READ_FLOOR_PER_SECOND as u64));
        assert!(!b.take_at(3_600_000, 1));
    }
}
