//! The byte budget that bounds the whole pipeline.
//!
//! A receiver reserves the decoded size of a request before handing it on; the
//! reservation ([`BytesPermit`]) travels with the data and is released when the last
//! exporter is done with it. So "queued" here means everything accepted and not yet
//! exported: the queue, the open batches and the batches in export. When a reservation
//! does not fit, the receiver answers 503 / UNAVAILABLE instead of waiting or growing.

use crate::signal::Signal;
use crate::telemetry::names;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Shared counters of reserved bytes and in-flight items.
#[derive(Debug)]
pub struct ByteBudget {
    max: usize,
    used: AtomicUsize,
    items: [AtomicUsize; 4],
}

impl ByteBudget {
    /// A budget of `max` bytes.
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(ByteBudget { max, used: AtomicUsize::new(0), items: Default::default() })
    }

    /// Reserves `bytes` for `items` items of `signal`, or `None` when it does not fit.
    /// A single request larger than the whole budget is admitted only into an empty
    /// queue, so a maximal request can never be refused forever.
    pub fn try_reserve(self: &Arc<Self>, signal: Signal, bytes: usize, items: usize) -> Option<BytesPermit> {
        self.try_reserve_within(signal, bytes, items, self.max)
    }

    /// As [`ByteBudget::try_reserve`], but only up to `limit` bytes in use (non-critical
    /// traffic stops short of the critical reserve).
    pub fn try_reserve_within(self: &Arc<Self>, signal: Signal, bytes: usize, items: usize, limit: usize) -> Option<BytesPermit> {
        let limit = limit.min(self.max);
        let mut current = self.used.load(Ordering::Relaxed);
        loop {
            let next = current.saturating_add(bytes);
            if next > limit && current != 0 {
                return None;
            }
            match self.used.compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => break,
                Err(seen) => current = seen,
            }
        }
        self.items[signal.index()].fetch_add(items, Ordering::Relaxed);
        metrics::gauge!(names::QUEUE_BYTES).set(self.used() as f64);
        Some(BytesPermit { budget: Arc::clone(self), signal, bytes, items })
    }

    /// Bytes reserved now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// The configured bound.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Items of `signal` accepted and not yet finished.
    pub fn items_in_flight(&self, signal: Signal) -> usize {
        self.items[signal.index()].load(Ordering::Relaxed)
    }
}

/// A reservation; released on drop.
#[derive(Debug)]
pub struct BytesPermit {
    budget: Arc<ByteBudget>,
    signal: Signal,
    bytes: usize,
    items: usize,
}

impl BytesPermit {
    /// The bytes it reserves.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for BytesPermit {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::AcqRel);
        self.budget.items[self.signal.index()].fetch_sub(self.items, Ordering::Relaxed);
        metrics::gauge!(names::QUEUE_BYTES).set(self.budget.used() as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_are_bounded_and_released() {
        let b = ByteBudget::new(100);
        let p1 = b.try_reserve(Signal::Traces, 60, 3).unwrap();
        assert!(b.try_reserve(Signal::Traces, 50, 1).is_none());
        let p2 = b.try_reserve(Signal::Logs, 40, 2).unwrap();
        assert_eq!(b.used(), 100);
        assert_eq!(b.items_in_flight(Signal::Traces), 3);
        drop(p1);
        assert_eq!(b.used(), 40);
        assert_eq!(b.items_in_flight(Signal::Traces), 0);
        drop(p2);
        assert_eq!(b.used(), 0);
    }

    #[test]
    fn non_critical_stops_at_its_limit() {
        let b = ByteBudget::new(100);
        let p = b.try_reserve_within(Signal::Traces, 70, 1, 80).unwrap();
        assert!(b.try_reserve_within(Signal::Traces, 20, 1, 80).is_none(), "non-critical: 90 > 80");
        let c = b.try_reserve(Signal::Traces, 20, 1).expect("critical may use the reserve");
        drop((p, c));
    }

    #[test]
    fn oversized_request_fits_only_an_empty_queue() {
        let b = ByteBudget::new(10);
        let p = b.try_reserve(Signal::Traces, 50, 1).expect("empty queue admits one oversized request");
        assert!(b.try_reserve(Signal::Traces, 1, 1).is_none());
        drop(p);
        assert_eq!(b.used(), 0);
    }
}
