//! The batch stage (one per signal) and the export workers (one per exporter).

use super::queue::BytesPermit;
use super::Queued;
use crate::exporter::{ExportError, Exporter};
use crate::signal::{Payload, Signal};
use crate::telemetry::names;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::{sleep_until, Instant};

/// A group of accepted requests of one signal, merged, with their byte reservations.
/// Shared by all exporters; the reservations are released when the last one is done.
#[derive(Debug)]
pub struct Batch {
    /// Merged data.
    pub payload: Payload,
    /// Item count.
    pub items: usize,
    /// Encoded bytes (what the permits reserve).
    bytes: usize,
    _permits: Vec<BytesPermit>,
    /// With the disk queue: what to acknowledge when the export has ended.
    ack: Option<Ack>,
    /// The one tenant whose data this is, when batches are split by tenant.
    pub tenant: Option<Arc<str>>,
}

impl Batch {
    /// A batch read from the disk queue, acknowledged with `ack` once its export ends.
    pub fn durable(payload: Payload, items: usize, permits: Vec<BytesPermit>, ack: Ack, tenant: Option<Arc<str>>) -> Self {
        let bytes = permits.iter().map(BytesPermit::bytes).sum();
        Batch { payload, items, bytes, _permits: permits, ack: Some(ack), tenant }
    }

    /// Acknowledges the batch as an export that ended would (tests of the readers).
    #[cfg(test)]
    pub(crate) fn finish(&self) {
        if let Some(ack) = &self.ack {
            ack.finish();
        }
    }
}

/// A batch's place in its exporter's acknowledgement window (disk queue). Finished
/// explicitly, never on drop: a batch dropped unexported (shutdown) stays unacknowledged
/// and is sent again after the next start.
#[derive(Debug)]
pub struct Ack {
    window: Arc<super::disk::ack::AckWindow>,
    seq: u64,
}

impl Ack {
    /// The batch `seq` of `window`.
    pub fn new(window: Arc<super::disk::ack::AckWindow>, seq: u64) -> Self {
        Ack { window, seq }
    }

    fn finish(&self) {
        self.window.finish(self.seq);
    }
}

/// Groups payloads of one signal until `max_items`, `max_bytes` or `timeout`.
pub struct Batcher {
    signal: Signal,
    max_items: usize,
    max_bytes: usize,
    timeout: Duration,
    exporters: Vec<mpsc::Sender<Arc<Batch>>>,
    open: Option<(Batch, Instant)>,
    /// Batches hold one tenant's data each (an exporter's header names the tenant).
    split_tenants: bool,
}

impl Batcher {
    /// A batcher feeding `exporters`.
    pub fn new(signal: Signal, config: &crate::config::BatchConfig, exporters: Vec<mpsc::Sender<Arc<Batch>>>) -> Self {
        Batcher {
            signal,
            max_items: config.max_items,
            max_bytes: config.max_bytes,
            timeout: config.timeout,
            exporters,
            open: None,
            split_tenants: false,
        }
    }

    /// Keeps tenants apart: a payload of another tenant than the open batch's starts a
    /// new batch.
    pub fn split_tenants(mut self, split: bool) -> Self {
        self.split_tenants = split;
        self
    }

    /// Runs until the input channel closes, then flushes.
    pub async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Queued>) {
        loop {
            let deadline = self.open.as_ref().map(|(_, d)| *d);
            tokio::select! {
                next = rx.recv() => match next {
                    Some(q) => self.add(q).await,
                    None => break,
                },
                _ = sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => self.flush().await,
            }
        }
        self.flush().await;
        tracing::debug!(signal = self.signal.as_str(), "batcher stopped");
    }

    async fn add(&mut self, q: Queued) {
        let Queued { payload, items, permit, tenant } = q;
        let bytes = permit.bytes();
        let other_tenant = self.split_tenants && self.open.as_ref().is_some_and(|(b, _)| b.tenant != tenant);
        let too_big = self.open.as_ref().is_some_and(|(b, _)| b.bytes.saturating_add(bytes) > self.max_bytes);
        if other_tenant || too_big {
            self.flush().await;
        }
        let payload = match self.open.as_mut() {
            Some((batch, _)) => match batch.payload.merge(payload) {
                None => {
                    batch.items += items;
                    batch.bytes += bytes;
                    batch._permits.push(permit);
                    None
                }
                // Not mergeable (profiles): send the open batch, start a new one.
                Some(payload) => Some((payload, permit)),
            },
            None => Some((payload, permit)),
        };
        if let Some((payload, permit)) = payload {
            self.flush().await;
            let tenant = if self.split_tenants { tenant } else { None };
            self.open = Some((Batch { payload, items, bytes, _permits: vec![permit], ack: None, tenant }, Instant::now() + self.timeout));
        }
        let full = self
            .open
            .as_ref()
            .is_some_and(|(b, _)| b.items >= self.max_items || b.bytes >= self.max_bytes || b.payload.signal() == Signal::Profiles);
        if full {
            self.flush().await;
        }
    }

    async fn flush(&mut self) {
        let Some((batch, _)) = self.open.take() else { return };
        let batch = Arc::new(batch);
        for tx in &self.exporters {
            // Waits when the exporter is behind: the byte budget then fills and
            // receivers answer 503 rather than anything growing without bound.
            if tx.send(Arc::clone(&batch)).await.is_err() {
                tracing::error!(signal = self.signal.as_str(), "export worker gone");
            }
        }
    }
}

/// Feeds batches to one exporter, counting the outcome of each. Several workers may share
/// `rx`; the last one to finish flushes the exporter.
pub async fn export_worker(
    exporter: Arc<dyn Exporter>,
    rx: Arc<tokio::sync::Mutex<mpsc::Receiver<Arc<Batch>>>>,
    remaining: Arc<std::sync::atomic::AtomicUsize>,
) {
    let name = exporter.name().to_string();
    loop {
        let next = rx.lock().await.recv().await;
        let Some(batch) = next else { break };
        let signal = batch.payload.signal().as_str();
        loop {
            let started = std::time::Instant::now();
            let result = exporter.export(&batch.payload, batch.tenant.as_deref()).await;
            metrics::histogram!(names::EXPORT_DURATION, "exporter" => name.clone()).record(started.elapsed().as_secs_f64());
            match result {
                Ok(()) => {
                    metrics::counter!(names::ITEMS_EXPORTED, "signal" => signal, "exporter" => name.clone()).increment(batch.items as u64);
                }
                // On disk the batch is safe: a backend that stays down is waited for (the
                // backlog builds on disk; `max_age` bounds how old it may get).
                Err(e @ ExportError::RetriesExhausted { .. }) if batch.ack.is_some() => {
                    tracing::warn!(exporter = %name, signal, items = batch.items, error = %e, "export still failing; the batch stays on disk and is tried again");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
                Err(ExportError::Partial { dropped, message }) => {
                    let lost: usize = dropped.iter().map(|(_, n)| n).sum();
                    tracing::warn!(exporter = %name, signal, items = batch.items, dropped = lost, %message, "export done in part; items dropped");
                    metrics::counter!(names::ITEMS_EXPORTED, "signal" => signal, "exporter" => name.clone())
                        .increment(batch.items.saturating_sub(lost) as u64);
                    for (reason, n) in dropped {
                        metrics::counter!(names::ITEMS_DROPPED, "signal" => signal, "exporter" => name.clone(), "reason" => reason)
                            .increment(n as u64);
                    }
                }
                Err(e) => {
                    tracing::warn!(exporter = %name, signal, items = batch.items, error = %e, "export failed; items dropped");
                    metrics::counter!(names::ITEMS_DROPPED, "signal" => signal, "exporter" => name.clone(), "reason" => e.reason())
                        .increment(batch.items as u64);
                }
            }
            break;
        }
        if let Some(ack) = &batch.ack {
            ack.finish();
        }
    }
    if remaining.fetch_sub(1, std::sync::atomic::Ordering::AcqRel) == 1 {
        exporter.shutdown().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::queue::ByteBudget;
    use crate::signal::Encoded;

    fn queued(budget: &Arc<ByteBudget>, bytes: usize, items: usize) -> Queued {
        let permit = budget.try_reserve(Signal::Traces, bytes, items).expect("room in the test budget");
        let payload = Payload::Encoded(Encoded::single(Signal::Traces, bytes::Bytes::from(vec![0u8; bytes]), items));
        Queued { payload, items, permit, tenant: None }
    }

    #[tokio::test]
    async fn a_batch_is_flushed_before_it_would_pass_max_bytes() {
        let budget = ByteBudget::new(1 << 30);
        let (tx, mut rx) = mpsc::channel(64);
        let config = crate::config::BatchConfig { max_items: 1_000_000, max_bytes: 1000, timeout: Duration::from_secs(3600) };
        let (in_tx, in_rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(Batcher::new(Signal::Traces, &config, vec![tx]).run(in_rx));
        // 400 + 400 fit; a third 400 would make 1200: the first two go out together.
        // 1500 alone is over the limit: it goes alone, at once. 100 then waits for the end.
        for bytes in [400, 400, 400, 1500, 100] {
            in_tx.send(queued(&budget, bytes, 1)).expect("batcher running");
        }
        let sizes = [rx.recv().await, rx.recv().await, rx.recv().await].map(|b| b.map(|b| (b.bytes, b.items)));
        assert_eq!(sizes, [Some((800, 2)), Some((400, 1)), Some((1500, 1))]);
        drop(in_tx);
        task.await.expect("batcher ends");
        let last = rx.recv().await.map(|b| (b.bytes, b.items));
        assert_eq!(last, Some((100, 1)));
        drop(rx);
        assert_eq!(budget.used(), 0, "every permit released once its batch is gone");
    }
}
