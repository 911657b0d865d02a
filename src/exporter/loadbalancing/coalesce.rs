//! The batch limits per backend: parts for one backend that come while a request to it is
//! in flight wait and go together in its next request, up to the pipeline's `max_items`
//! and `max_bytes`. Under load a backend gets requests as large as the pipeline's
//! batches, not 1/N of them; with nothing in flight a part goes at once, so idle traffic
//! waits for nothing (docs/configuration.md#the-loadbalancing-exporter).

use crate::exporter::{ExportError, Exporter};
use crate::signal::{Encoded, Payload, Signal};
use bytes::Bytes;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use tokio::sync::{oneshot, watch};

/// How a part's request ended.
#[derive(Debug, Clone)]
pub(super) enum Outcome {
    /// The backend took it.
    Delivered,
    /// It failed for `failover_after`, or the backend left: reroute.
    Reroute,
    /// Retrying cannot help.
    Permanent(String),
}

/// One part waiting for its backend.
struct Waiting {
    bytes: Bytes,
    items: u64,
    done: oneshot::Sender<Outcome>,
}

/// The parts of one signal and tenant waiting for a backend, and whether a request to it is
/// in flight.
#[derive(Default)]
struct Slot {
    busy: bool,
    queue: VecDeque<Waiting>,
}

/// What a slot is for: requests never mix signals or tenants.
type Key = (Signal, Option<String>);

/// One backend's waiting parts.
pub(super) struct Coalescer {
    max_items: u64,
    max_bytes: usize,
    slots: Mutex<HashMap<Key, Slot>>,
}

impl Coalescer {
    pub(super) fn new(batch: &crate::config::BatchConfig) -> Self {
        Coalescer { max_items: batch.max_items.max(1) as u64, max_bytes: batch.max_bytes.max(1), slots: Mutex::new(HashMap::new()) }
    }

    /// Sends a part through `exporter` together with the parts waiting beside it, and
    /// waits for the outcome. `gone` fires when the backend leaves the resolver.
    pub(super) async fn send(
        self: &Arc<Self>,
        exporter: Arc<dyn Exporter>,
        gone: watch::Receiver<bool>,
        signal: Signal,
        bytes: Bytes,
        items: u64,
        tenant: Option<&str>,
    ) -> Outcome {
        let (done, outcome) = oneshot::channel();
        let key = (signal, tenant.map(str::to_string));
        let start = {
            let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
            let slot = slots.entry(key.clone()).or_default();
            slot.queue.push_back(Waiting { bytes, items, done });
            !std::mem::replace(&mut slot.busy, true)
        };
        if start {
            tokio::spawn(Arc::clone(self).drain(exporter, gone, key));
        }
        // The sender is dropped only if the drain task panicked: reroute rather than lose.
        outcome.await.unwrap_or(Outcome::Reroute)
    }

    /// The next request's parts: at least one, then as many as fit the limits; none when
    /// the queue is empty (the slot is then idle again).
    fn take(&self, key: &Key) -> Vec<Waiting> {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let Some(slot) = slots.get_mut(key) else { return Vec::new() };
        let (mut items, mut bytes, mut group) = (0, 0, Vec::new());
        while let Some(w) = slot.queue.front() {
            let fits = group.is_empty() || (items + w.items <= self.max_items && bytes + w.bytes.len() <= self.max_bytes);
            if !fits {
                break;
            }
            items += w.items;
            bytes += w.bytes.len();
            group.extend(slot.queue.pop_front());
        }
        if group.is_empty() {
            slots.remove(key);
        }
        group
    }

    /// Sends the slot's parts, request after request, until none wait.
    async fn drain(self: Arc<Self>, exporter: Arc<dyn Exporter>, mut gone: watch::Receiver<bool>, key: Key) {
        loop {
            let group = self.take(&key);
            if group.is_empty() {
                return;
            }
            let outcome = request(exporter.as_ref(), &mut gone, &key, &group).await;
            if matches!(outcome, Outcome::Permanent(_)) && group.len() > 1 {
                // One part may be what the backend refused: each goes again alone, so the
                // parts of other batches are not dropped with it.
                for w in group {
                    let alone = request(exporter.as_ref(), &mut gone, &key, std::slice::from_ref(&w)).await;
                    let _ = w.done.send(alone);
                }
                continue;
            }
            for w in group {
                let _ = w.done.send(outcome.clone());
            }
        }
    }
}

/// One request of `parts` (concatenated requests are one valid request: protobuf merges
/// repeated fields).
async fn request(exporter: &dyn Exporter, gone: &mut watch::Receiver<bool>, key: &Key, parts: &[Waiting]) -> Outcome {
    let piece = |w: &Waiting| Payload::Encoded(Encoded::single(key.0, w.bytes.clone(), w.items as usize));
    let Some(first) = parts.first() else { return Outcome::Delivered };
    let mut payload = piece(first);
    for w in &parts[1..] {
        payload.merge(piece(w));
    }
    tokio::select! {
        r = exporter.export(&payload, key.1.as_deref()) => match r {
            Ok(()) => Outcome::Delivered,
            Err(ExportError::RetriesExhausted { .. }) => Outcome::Reroute,
            Err(e) => Outcome::Permanent(e.to_string()),
        },
        _ = gone.wait_for(|g| *g) => Outcome::Reroute,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exporter::BoxFuture;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// Records each request's item count; each takes 20 ms.
    #[derive(Default)]
    struct Slow {
        requests: Mutex<Vec<usize>>,
        in_flight: AtomicUsize,
        most: AtomicUsize,
    }

    impl Exporter for Slow {
        fn name(&self) -> &str {
            "slow"
        }
        fn export<'a>(&'a self, payload: &'a Payload, _: Option<&'a str>) -> BoxFuture<'a, Result<(), ExportError>> {
            Box::pin(async move {
                let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                self.most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(20)).await;
                self.requests.lock().unwrap().push(payload.item_count());
                self.in_flight.fetch_sub(1, Ordering::SeqCst);
                Ok(())
            })
        }
    }

    fn batch(max_items: usize) -> crate::config::BatchConfig {
        crate::config::BatchConfig { max_items, ..Default::default() }
    }

    #[tokio::test]
    async fn parts_that_wait_go_together_up_to_the_batch_limit_one_request_at_a_time() {
        let slow = Arc::new(Slow::default());
        let c = Arc::new(Coalescer::new(&batch(250)));
        let (_gone_tx, gone) = watch::channel(false);
        let sends = (0..20).map(|_| c.send(slow.clone(), gone.clone(), Signal::Traces, Bytes::new(), 50, None));
        let outcomes = futures_util::future::join_all(sends).await;
        assert!(outcomes.iter().all(|o| matches!(o, Outcome::Delivered)));
        let requests = slow.requests.lock().unwrap().clone();
        assert_eq!(requests.iter().sum::<usize>(), 1000, "every item once");
        assert_eq!(requests, vec![250; 4], "20 parts of 50 that came together go as 4 full batches");
        assert_eq!(slow.most.load(Ordering::SeqCst), 1, "one request in flight per backend and signal");
    }

    // Paused time: the clock moves only by the exporter's own 20 ms.
    #[tokio::test(start_paused = true)]
    async fn a_part_alone_goes_at_once() {
        let slow = Arc::new(Slow::default());
        let c = Arc::new(Coalescer::new(&batch(8192)));
        let (_gone_tx, gone) = watch::channel(false);
        let started = tokio::time::Instant::now();
        assert!(matches!(c.send(slow.clone(), gone, Signal::Traces, Bytes::new(), 7, None).await, Outcome::Delivered));
        assert_eq!(started.elapsed(), Duration::from_millis(20), "no waiting for company: just the request's own time");
        assert_eq!(*slow.requests.lock().unwrap(), vec![7]);
        assert!(c.slots.lock().unwrap().is_empty(), "an idle backend keeps no slot");
    }

    /// Refuses for good any request that holds the part whose bytes are `[13]`.
    #[derive(Default)]
    struct Picky {
        requests: AtomicUsize,
    }

    impl Exporter for Picky {
        fn name(&self) -> &str {
            "picky"
        }
        fn export<'a>(&'a self, payload: &'a Payload, _: Option<&'a str>) -> BoxFuture<'a, Result<(), ExportError>> {
            self.requests.fetch_add(1, Ordering::SeqCst);
            let bad = payload.pieces().iter().any(|p| p.as_ref() == [13]);
            Box::pin(async move {
                if bad {
                    Err(ExportError::Permanent("HTTP 400".into()))
                } else {
                    Ok(())
                }
            })
        }
    }

    #[tokio::test]
    async fn a_part_the_backend_refuses_fails_alone_not_the_parts_beside_it() {
        let c = Arc::new(Coalescer::new(&batch(8192)));
        let (_gone_tx, gone) = watch::channel(false);
        let picky = Arc::new(Picky::default());
        let s = |id: u8| c.send(picky.clone(), gone.clone(), Signal::Traces, Bytes::from(vec![id]), 1, None);
        let (a, b, d) = futures_util::join!(s(5), s(13), s(7));
        assert!(matches!(a, Outcome::Delivered), "{a:?}");
        assert!(matches!(b, Outcome::Permanent(_)), "{b:?}");
        assert!(matches!(d, Outcome::Delivered), "{d:?}");
        assert_eq!(picky.requests.load(Ordering::SeqCst), 4, "the three together, refused, then each alone");
    }

    #[tokio::test]
    async fn signals_and_tenants_never_share_a_request() {
        let slow = Arc::new(Slow::default());
        let c = Arc::new(Coalescer::new(&batch(10_000)));
        let (_gone_tx, gone) = watch::channel(false);
        let s = |signal, tenant| c.send(slow.clone(), gone.clone(), signal, Bytes::new(), 1, tenant);
        let outcomes = futures_util::join!(s(Signal::Traces, Some("a")), s(Signal::Traces, Some("b")), s(Signal::Logs, Some("a")));
        assert!(matches!(outcomes, (Outcome::Delivered, Outcome::Delivered, Outcome::Delivered)));
        assert_eq!(slow.requests.lock().unwrap().len(), 3);
    }

    #[tokio::test]
    async fn a_backend_that_leaves_sends_its_waiting_parts_back_to_be_rerouted() {
        let slow = Arc::new(Slow::default());
        let c = Arc::new(Coalescer::new(&batch(1)));
        let (gone_tx, gone) = watch::channel(false);
        let sends =
            futures_util::future::join_all((0..3).map(|_| c.send(slow.clone(), gone.clone(), Signal::Traces, Bytes::new(), 1, None)));
        let leave = async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            gone_tx.send(true).unwrap();
        };
        let (outcomes, ()) = futures_util::join!(sends, leave);
        assert!(outcomes.iter().all(|o| matches!(o, Outcome::Reroute)), "{outcomes:?}");
    }
}
