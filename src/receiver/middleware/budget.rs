//! One memory budget for request bodies in flight, over both servers.
//!
//! Every request that reads its body holds a [`Charge`] against the [`BodyBudget`]: the
//! length it declares, taken before a byte of the body is read, or (without a declared
//! length) each chunk as it arrives, plus what decompression makes of the body. A
//! request refused before it reads its body (the throttle, a quota, a held refusal)
//! takes nothing. A request that does not fit
//! is refused before its body is read (503 / UNAVAILABLE, with a retry delay), so an
//! HTTP/2 connection that is refused gets its window closed as for any refusal; one
//! that runs out mid-body fails the same way. The charge is given back when the request
//! is answered. One request alone always fits (its own body limits bound it), so a
//! budget smaller than the largest body never locks that body out.

use crate::receiver::response::ApiError;
use axum::body::Body;
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

/// Body bytes in memory, over both servers.
pub const IN_FLIGHT: &str = "weir_receiver_body_bytes_in_flight";

/// The budget.
#[derive(Debug)]
pub struct BodyBudget {
    limit: u64,
    used: AtomicU64,
    /// The retry delay announced when it is full.
    retry_after: Duration,
}

impl BodyBudget {
    /// A budget of `limit` bytes; refusals announce `retry_after`.
    pub fn new(limit: u64, retry_after: Duration) -> Self {
        BodyBudget { limit, used: AtomicU64::new(0), retry_after }
    }

    /// The limit.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Bytes charged now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Takes `n` bytes for a request that already holds `own`: fits under the limit, or
    /// the request is alone.
    fn take(&self, n: u64, own: u64) -> bool {
        let mut cur = self.used.load(Ordering::Relaxed);
        loop {
            if cur.saturating_add(n) > self.limit && cur > own {
                return false;
            }
            match self.used.compare_exchange_weak(cur, cur + n, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => {
                    gauge(cur + n);
                    return true;
                }
                Err(now) => cur = now,
            }
        }
    }

    fn give_back(&self, n: u64) {
        let before = self.used.fetch_sub(n, Ordering::AcqRel);
        gauge(before - n);
    }

    /// The refusal when it is full.
    pub(crate) fn refusal(&self) -> ApiError {
        ApiError::BodyBudget {
            message: format!("request bodies in flight are at weir's memory budget ({} bytes); retry later", self.limit),
            retry_after: self.retry_after,
        }
    }
}

fn gauge(used: u64) {
    if crate::telemetry::installed() {
        ::metrics::gauge!(IN_FLIGHT).set(used as f64);
    }
}

/// One request's share of the budget, in its extensions; given back when the request
/// and its body are gone.
#[derive(Debug)]
pub struct Charge {
    budget: Arc<BodyBudget>,
    held: AtomicU64,
    /// The body is being read only to be thrown away (a refusal's): its chunks are dropped
    /// as they come and take none of the budget.
    discarding: std::sync::atomic::AtomicBool,
}

impl Charge {
    pub(crate) fn new(budget: Arc<BodyBudget>) -> Self {
        Charge { budget, held: AtomicU64::new(0), discarding: std::sync::atomic::AtomicBool::new(false) }
    }

    /// The body will be read only to be dropped chunk by chunk (a refused request's, read
    /// away): what it holds is given back and nothing more is taken. Held refusals read
    /// their bodies while their clients wait out the hold; charged, hundreds of such reads
    /// would fill the budget and every other request would be refused with 503.
    pub fn discard(&self) {
        self.discarding.store(true, Ordering::Release);
        self.give_back(u64::MAX);
    }

    fn is_discarding(&self) -> bool {
        self.discarding.load(Ordering::Acquire)
    }

    /// Takes `n` more bytes; false (nothing taken) when they do not fit.
    pub fn take(&self, n: u64) -> bool {
        let own = self.held.load(Ordering::Relaxed);
        if self.budget.take(n, own) {
            self.held.fetch_add(n, Ordering::Relaxed);
            true
        } else {
            false
        }
    }

    /// Takes `n` more bytes whether or not they fit (they are in memory already).
    pub fn force(&self, n: u64) {
        let before = self.budget.used.fetch_add(n, Ordering::AcqRel);
        gauge(before + n);
        self.held.fetch_add(n, Ordering::Relaxed);
    }

    /// How many more bytes this request may take now (`u64::MAX` while it is alone).
    pub fn room(&self) -> u64 {
        let used = self.budget.used();
        if used <= self.held.load(Ordering::Relaxed) {
            return u64::MAX;
        }
        self.budget.limit.saturating_sub(used)
    }

    /// Gives back `n` bytes taken before (the wire bytes once decompressed).
    pub fn give_back(&self, n: u64) {
        let n = n.min(self.held.load(Ordering::Relaxed));
        self.held.fetch_sub(n, Ordering::Relaxed);
        self.budget.give_back(n);
    }

    /// The refusal when it is full.
    pub fn refusal(&self) -> ApiError {
        self.budget.refusal()
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        let n = *self.held.get_mut();
        if n > 0 {
            self.budget.give_back(n);
        }
    }
}

/// A request body, charged when it is first read: the declared length at once, the rest
/// chunk by chunk. A request refused before its body is read (the throttle, a quota, a
/// held refusal) never takes any of the budget.
pub(crate) struct Charged {
    inner: Body,
    charge: Arc<Charge>,
    /// The declared length, still to be charged before the first read.
    declared: Option<u64>,
    /// Bytes the charge covers that have not arrived yet.
    prepaid: u64,
}

impl Charged {
    /// Wraps `inner`, to be charged to `charge` as it is read.
    pub(crate) fn new(inner: Body, charge: Arc<Charge>, declared: Option<u64>) -> Self {
        Charged { inner, charge, declared, prepaid: 0 }
    }

    fn over(&self) -> axum::Error {
        axum::Error::new(crate::receiver::connection::hygiene::BodyFailure::new(self.charge.refusal()))
    }
}

impl http_body::Body for Charged {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        if this.charge.is_discarding() {
            return Pin::new(&mut this.inner).poll_frame(cx);
        }
        if let Some(n) = this.declared.take() {
            if !this.charge.take(n) {
                return Poll::Ready(Some(Err(this.over())));
            }
            this.prepaid = n;
        }
        let frame = std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx));
        if let Some(Ok(f)) = &frame {
            if let Some(data) = f.data_ref() {
                let n = data.len() as u64;
                let covered = n.min(this.prepaid);
                this.prepaid -= covered;
                if n > covered && !this.charge.take(n - covered) {
                    return Poll::Ready(Some(Err(this.over())));
                }
            }
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_fit_or_are_refused_and_one_request_alone_always_fits() {
        let budget = Arc::new(BodyBudget::new(100, Duration::from_secs(1)));
        let a = Charge::new(Arc::clone(&budget));
        assert!(a.take(500), "alone: over the limit, still let through");
        let b = Charge::new(Arc::clone(&budget));
        assert!(!b.take(1), "the budget is spent by a");
        assert!(a.take(10), "a is still alone");
        drop(a);
        assert_eq!(budget.used(), 0, "given back");
        assert!(b.take(60));
        let c = Charge::new(Arc::clone(&budget));
        assert!(c.take(40));
        assert!(!c.take(1));
        assert_eq!(c.room(), 0);
        c.give_back(40);
        assert_eq!(c.room(), 40);
        drop(b);
        assert_eq!(c.room(), u64::MAX, "alone again");
    }
}
