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
//! client that reads only after sending its whole body still gets the answer.

use crate::receiver::connection::stamp::RxStamp;
use axum::body::Body;
use axum::http::{header, HeaderValue, Request, Response, Version};
use http_body_util::BodyExt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
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
    /// A declared length up to [`MAX_BYTES`]: read away so the connection survives.
    Readable,
    /// Larger, or of unknown length: not read; the answer closes the connection.
    Unreadable,
}

/// Which [`RefusedBody`] a request has; `declared` is its declared length (read once by
/// the caller).
pub fn refused_body(req: &Request<Body>, declared: Option<u64>) -> RefusedBody {
    if req.version() > Version::HTTP_11 || !has_body(req) {
        RefusedBody::None
    } else if declared.is_some_and(|n| n <= MAX_BYTES) {
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
pub fn finish(req: Request<Body>, mut resp: Response<Body>) -> Result<Response<Body>, Draining> {
    let slot = match refused_body(&req, crate::receiver::middleware::refuse::declared_len(&req)) {
        RefusedBody::None => return Ok(resp),
        RefusedBody::Readable => Slot::take(),
        RefusedBody::Unreadable => None,
    };
    let stamp = req.extensions().get::<RxStamp>().cloned();
    match slot {
        Some(slot) => Err(Box::pin(async move {
            if !read_body_away(req, MAX_TIME).await.1 {
                close(&mut resp, stamp.as_ref());
            }
            drop(slot);
            resp
        })),
        None => {
            close(&mut resp, stamp.as_ref());
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
        close(&mut resp, None);
    }
    resp
}

/// An HTTP/1.x request has a body when it declares a non-zero length or a transfer
/// coding; one with neither ends at its headers, and its connection can carry on.
fn has_body(req: &Request<Body>) -> bool {
    let h = req.headers();
    h.contains_key(header::TRANSFER_ENCODING) || h.get(header::CONTENT_LENGTH).is_some_and(|v| v.as_bytes() != b"0")
}

/// Answers with `Connection: close`; with the connection's stamp, the connection then
/// closes lingering (the client reads its answer before a reset can destroy it).
pub fn close(resp: &mut Response<Body>, stamp: Option<&RxStamp>) {
    resp.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    if let Some(s) = stamp {
        s.linger_on_close();
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
