//! One exporter's reader: records in id order, batched, within a memory budget.

use super::ack::AckWindow;
use super::record::Record;
use super::segment::{SegmentReader, Step};
use super::{persist, Shared};
use crate::pipeline::batch::{Ack, Batch};
use crate::pipeline::queue::{ByteBudget, BytesPermit};
use crate::signal::{Encoded, Payload, Signal};
use crate::telemetry::names;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// The batch being filled.
struct Open {
    payload: Payload,
    items: usize,
    bytes: usize,
    permits: Vec<BytesPermit>,
    last_id: u64,
    oldest_ts: u64,
    deadline: Instant,
    tenant: Option<Arc<str>>,
}

/// One exporter's reader.
pub struct Reader {
    shared: Arc<Shared>,
    index: usize,
    window: Arc<AckWindow>,
    budget: Arc<ByteBudget>,
    max_items: usize,
    max_bytes: usize,
    timeout: Duration,
    tx: mpsc::Sender<Arc<Batch>>,
    stop: watch::Receiver<bool>,
    open: Option<Open>,
    name: String,
    split_tenants: bool,
    /// `weir_queue_read_records_total` from memory and from disk.
    read: [metrics::Counter; 2],
}

impl Reader {
    /// A reader for exporter `index`.
    pub(super) fn new(
        shared: Arc<Shared>,
        index: usize,
        window: Arc<AckWindow>,
        batch: &crate::config::BatchConfig,
        memory: usize,
        tx: mpsc::Sender<Arc<Batch>>,
        stop: watch::Receiver<bool>,
    ) -> Self {
        let name = shared.cursors[index].name.clone();
        Reader {
            shared,
            index,
            window,
            budget: ByteBudget::new(memory.max(1)),
            max_items: batch.max_items,
            max_bytes: batch.max_bytes,
            timeout: batch.timeout,
            tx,
            stop,
            open: None,
            read: ["memory", "disk"].map(|from| metrics::counter!(names::DISK_READ_RECORDS, "exporter" => name.clone(), "from" => from)),
            name,
            split_tenants: false,
        }
    }

    /// Keeps tenants apart: a record of another tenant than the open batch's starts a
    /// new batch.
    pub(super) fn split_tenants(mut self, split: bool) -> Self {
        self.split_tenants = split;
        self
    }

    fn stopped(&self) -> bool {
        *self.stop.borrow()
    }

    /// Runs until shutdown.
    pub async fn run(mut self) {
        let cursor = self.shared.cursors[self.index].persisted.load(Ordering::Acquire);
        let mut published = self.shared.published.subscribe();
        let mut last_persist = Instant::now();
        let Some(mut seg) = self.shared.seg_for(cursor) else { return };
        let mut file = open_segment(&seg.path);
        let mut at = 0u64;
        let mut max_seen = 0u64;
        let max_age_ms = self.shared.config.max_age.as_millis() as u64;
        while !self.stopped() {
            published.borrow_and_update();
            if last_persist.elapsed() >= Duration::from_millis(100) {
                self.persist();
                last_persist = Instant::now();
            }
            let Some((len, sealed)) = self.shared.seg_state(seg.first_id) else {
                // Deleted under us: only possible if every cursor passed it.
                match self.shared.seg_for(self.window.acked()) {
                    Some(s) if s.first_id != seg.first_id => {
                        self.shared.cursors[self.index].reading.store(s.first_id, Ordering::Release);
                        seg = s;
                        file = SegmentReader::open(&seg.path).ok();
                        at = 0;
                        continue;
                    }
                    _ => {
                        self.wait(&mut published).await;
                        continue;
                    }
                }
            };
            // Caught up: the record just written is still in memory.
            let step = match (self.shared.tail.take(seg.first_id, at), file.as_mut()) {
                (Some((rec, next)), _) if next <= len => {
                    self.read[0].increment(1);
                    Ok(Step::Record(rec, next))
                }
                (_, Some(f)) => f.step(at, len).inspect(|s| {
                    if let Step::Record(..) = s {
                        self.read[1].increment(1);
                    }
                }),
                (_, None) => {
                    file = SegmentReader::open(&seg.path).ok();
                    Ok(Step::End)
                }
            };
            match step {
                // A spare file's old records past a sealed segment's end: its cut to length
                // did not reach the disk before a crash. Their ids tell them apart.
                Ok(Step::Record(rec, _)) if rec.meta.id < seg.first_id => at = len,
                Ok(Step::Record(rec, next)) => {
                    at = next;
                    let m = rec.meta;
                    max_seen = max_seen.max(m.id);
                    self.shared.cursors[self.index].taken.store(m.id, Ordering::Release);
                    if m.id > cursor {
                        self.record(rec, max_age_ms).await;
                    }
                }
                Ok(Step::Corrupt { why, resume }) => {
                    tracing::warn!(exporter = %self.name, segment = %seg.path.display(), offset = at, why, "damaged record skipped");
                    metrics::counter!(names::DISK_CORRUPT, "exporter" => self.name.clone()).increment(1);
                    at = resume;
                }
                Ok(Step::End) if sealed => {
                    if at < len {
                        tracing::warn!(exporter = %self.name, segment = %seg.path.display(), offset = at, "damaged segment end skipped");
                        metrics::counter!(names::DISK_CORRUPT, "exporter" => self.name.clone()).increment(1);
                    }
                    let Some(next) = self.shared.seg_after(seg.first_id) else { continue };
                    self.shared.leave(&self.shared.cursors[self.index], seg.first_id, max_seen, next.first_id);
                    max_seen = 0;
                    seg = next;
                    file = open_segment(&seg.path);
                    at = 0;
                }
                Ok(Step::End) => self.wait(&mut published).await,
                Err(e) => {
                    tracing::warn!(exporter = %self.name, segment = %seg.path.display(), error = %e, "cannot read the disk queue; trying again in 1 s");
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                        _ = self.stop.wait_for(|s| *s) => {}
                    }
                }
            }
        }
        // The open batch is not sent: its records stay on disk for the next start.
        self.open = None;
    }

    /// Hands on a record past the cursor: counted and skipped when older than `max_age`,
    /// else added to the open batch.
    async fn record(&mut self, rec: Record, max_age_ms: u64) {
        let m = rec.meta;
        if m.id < self.shared.first_new_id {
            metrics::counter!(names::DISK_REPLAYED, "exporter" => self.name.clone()).increment(m.items as u64);
        }
        if max_age_ms > 0 && super::now_ms().saturating_sub(m.ts_ms) > max_age_ms {
            metrics::counter!(names::ITEMS_DROPPED, "signal" => m.signal.as_str(), "exporter" => self.name.clone(), "reason" => "max_age")
                .increment(m.items as u64);
            self.flush().await;
            self.window.push(m.id, m.ts_ms, true);
            return;
        }
        let tenant = (self.split_tenants && !rec.tenant.is_empty()).then(|| std::str::from_utf8(&rec.tenant).ok().map(Arc::from)).flatten();
        self.add(m.id, m.ts_ms, m.signal, m.items as usize, rec.payload, tenant).await;
    }

    /// Caught up: waits for new records, the open batch's deadline (then flushes it), a
    /// cursor write (every 100 ms) or shutdown.
    async fn wait(&mut self, published: &mut watch::Receiver<u64>) {
        let deadline = self.open.as_ref().map(|o| o.deadline);
        let tick = Instant::now() + Duration::from_millis(100);
        let until = deadline.map_or(tick, |d| d.min(tick));
        tokio::select! {
            _ = published.changed() => {}
            _ = tokio::time::sleep_until(until) => {}
            _ = self.stop.wait_for(|s| *s) => {}
        }
        if self.open.as_ref().is_some_and(|o| o.deadline <= Instant::now()) {
            self.flush().await;
        }
        self.gauges();
    }

    fn gauges(&self) {
        self.shared.cursors[self.index].gauges(self.shared.last_id());
    }

    /// Writes the cursor if it moved, then deletes what every cursor has passed.
    fn persist(&self) {
        if persist(&self.shared.cursors[self.index], self.window.acked()) {
            self.shared.gc();
        }
        self.gauges();
    }

    /// Adds a record to the open batch (flushing first when it does not fit or merge).
    async fn add(&mut self, id: u64, ts_ms: u64, signal: Signal, items: usize, bytes: bytes::Bytes, tenant: Option<Arc<str>>) {
        let permit = loop {
            if let Some(p) = self.budget.try_reserve(signal, bytes.len(), items) {
                break p;
            }
            // Memory is full of batches in export: send the open one, wait for room.
            self.flush().await;
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(2)) => {}
                _ = self.stop.wait_for(|s| *s) => {}
            }
            if self.stopped() {
                return;
            }
        };
        let payload = Payload::Encoded(Encoded::single(signal, bytes, items));
        let bytes = permit.bytes();
        let mergeable = self.open.as_ref().is_some_and(|o| {
            o.payload.signal() == signal
                && signal != Signal::Profiles
                && o.tenant == tenant
                && o.bytes.saturating_add(bytes) <= self.max_bytes
        });
        if !mergeable {
            self.flush().await;
        }
        match self.open.as_mut() {
            Some(o) => {
                let _ = o.payload.merge(payload);
                o.items += items;
                o.bytes += bytes;
                o.permits.push(permit);
                o.last_id = id;
            }
            None => {
                self.open = Some(Open {
                    payload,
                    items,
                    bytes,
                    permits: vec![permit],
                    last_id: id,
                    oldest_ts: ts_ms,
                    deadline: Instant::now() + self.timeout,
                    tenant,
                })
            }
        }
        if self.open.as_ref().is_some_and(|o| o.items >= self.max_items || o.bytes >= self.max_bytes || signal == Signal::Profiles) {
            self.flush().await;
        }
    }

    /// Hands the open batch to the exporter's workers.
    async fn flush(&mut self) {
        let Some(o) = self.open.take() else { return };
        let seq = self.window.push(o.last_id, o.oldest_ts, false);
        let ack = Ack::new(Arc::clone(&self.window), seq);
        let batch = Arc::new(Batch::durable(o.payload, o.items, o.permits, ack, o.tenant));
        tokio::select! {
            r = self.tx.send(batch) => {
                if r.is_err() {
                    tracing::error!(exporter = %self.name, "export workers gone");
                }
            }
            _ = self.stop.wait_for(|s| *s) => {}
        }
    }
}

/// Opens a segment; one that cannot be opened is skipped (logged), not fatal.
fn open_segment(path: &Path) -> Option<SegmentReader> {
    match SegmentReader::open(path) {
        Ok(f) => Some(f),
        Err(e) => {
            tracing::warn!(segment = %path.display(), error = %e, "cannot open a segment; skipped");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cursor_is_the_longest_finished_prefix() {
        let w = AckWindow::starting_at(10);
        let a = w.push(15, 1, false);
        let b = w.push(20, 2, false);
        let c = w.push(25, 3, false);
        w.finish(b);
        assert_eq!(w.acked(), 10, "15 is still out");
        assert_eq!(w.oldest_ts_ms(), Some(1));
        w.finish(a);
        assert_eq!(w.acked(), 20);
        assert_eq!(w.pending(), 1);
        w.push(26, 4, true);
        assert_eq!(w.acked(), 20, "skipped records wait behind the batch before them");
        w.finish(c);
        assert_eq!(w.acked(), 26);
        assert_eq!(w.pending(), 0);
        w.finish(c);
        w.finish(99);
        assert_eq!(w.acked(), 26, "stale or unknown sequence numbers change nothing");
    }
}
