//! The bounded pipeline: receivers submit decoded payloads; a batch stage per signal
//! groups them; every exporter gets every batch. See [`queue`] for the bound.

pub mod batch;
pub mod disk;
pub mod queue;

use crate::exporter::Exporter;
use crate::signal::{Payload, Signal};
use crate::telemetry::names;
use batch::{Batch, Batcher};
use queue::{ByteBudget, BytesPermit};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Why a payload was not accepted.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SubmitError {
    /// The byte budget is exhausted; try again after `retry_after`.
    #[error("pipeline queue is full ({used} of {max} bytes); retry later")]
    QueueFull {
        /// Bytes in use.
        used: usize,
        /// The bound.
        max: usize,
        /// Suggested delay.
        retry_after: Duration,
    },
    /// The gateway is shutting down.
    #[error("weir is shutting down")]
    ShuttingDown,
    /// The disk queue is full or could not write; nothing of the request was stored.
    #[error("{message}")]
    Disk {
        /// What happened.
        message: String,
        /// Suggested delay.
        retry_after: Duration,
        /// `disk_full` or `disk_error`.
        reason: &'static str,
    },
}

impl SubmitError {
    /// The metric reason label.
    pub fn reason(&self) -> &'static str {
        match self {
            SubmitError::QueueFull { .. } => "queue_full",
            SubmitError::ShuttingDown => "shutting_down",
            SubmitError::Disk { reason, .. } => reason,
        }
    }
}

/// One accepted request on its way to the batch stage.
#[derive(Debug)]
pub struct Queued {
    /// The data.
    pub payload: Payload,
    /// Its item count.
    pub items: usize,
    /// Its byte reservation.
    pub permit: BytesPermit,
    /// Its tenant's name, if any.
    pub tenant: Option<Arc<str>>,
}

/// The handle receivers submit to.
#[derive(Debug)]
pub struct Pipeline {
    budget: Arc<ByteBudget>,
    /// `None` once closed; the write lock in [`Pipeline::close`] waits for submits in
    /// progress, so nothing can slip into a channel after the batchers drained it.
    senders: RwLock<Option<[mpsc::UnboundedSender<Queued>; 4]>>,
    retry_after: Duration,
    non_critical_limit: usize,
    /// The durable queue, when configured: requests are appended to it, and each
    /// exporter reads it.
    disk: Option<Arc<disk::DiskQueue>>,
    /// An exporter's header names the tenant: batches hold one tenant's data each.
    split_tenants: bool,
    /// Bytes that admitted requests still being read and decoded are expected to take
    /// (see [`Pipeline::reserve`]).
    pending: AtomicUsize,
    /// Queued bytes per byte of a JSON body, learnt from the bodies decoded (f64 bits).
    json_ratio: AtomicU64,
}

/// Bytes a request expects to add to the queue, counted by [`Pipeline::would_refuse`]
/// until it is dropped (when the request has been answered).
#[derive(Debug)]
pub struct Reserved {
    pipeline: Arc<Pipeline>,
    bytes: usize,
}

impl Drop for Reserved {
    fn drop(&mut self) {
        self.pipeline.pending.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// What the queue holds per byte of a JSON body before any was measured: hex ids and
/// field names shrink in protobuf, long string values do not.
const JSON_RATIO_START: f64 = 0.5;

/// The running stages, for shutdown.
pub struct PipelineTasks {
    batchers: Vec<JoinHandle<()>>,
    workers: Vec<JoinHandle<()>>,
    exporters: Vec<Arc<dyn Exporter>>,
}

impl Pipeline {
    /// Starts one batcher per signal and one worker per exporter; with a disk queue, one
    /// reader per exporter instead of the batchers. Fails only when the disk queue cannot
    /// be opened.
    pub fn start(
        config: &crate::config::PipelineConfig,
        exporters: Vec<Arc<dyn Exporter>>,
    ) -> Result<(Arc<Pipeline>, PipelineTasks), disk::OpenError> {
        let budget = ByteBudget::new(config.queue.max_bytes);
        let all_exporters = exporters.clone();
        let disk = match &config.queue.disk {
            Some(d) => {
                let names: Vec<String> = exporters.iter().map(|e| e.name().to_string()).collect();
                Some(disk::DiskQueue::open(d, &names, config.queue.critical_reserve)?)
            }
            None => None,
        };
        // Two batches may wait per exporter: enough to overlap, small enough that a slow
        // exporter pushes back into the byte budget quickly.
        let mut exporter_txs = Vec::new();
        let mut workers = Vec::new();
        let n = config.export_workers.max(1);
        let n_exporters = exporters.len().max(1);
        // A header that names the tenant means no batch may mix tenants.
        let split_tenants = exporters.iter().any(|e| e.splits_tenants());
        // An eighth of the memory budget keeps the newest records for caught-up readers;
        // the readers share the rest (docs/durable-queue.md#reading-from-memory).
        let tail = config.queue.max_bytes / 8;
        if let Some(q) = &disk {
            q.keep_tail(tail);
        }
        let reader_memory = (config.queue.max_bytes - tail) / n_exporters;
        for (i, exporter) in exporters.into_iter().enumerate() {
            let (tx, rx) = mpsc::channel::<Arc<Batch>>(n * 2);
            match &disk {
                // Each reader reads ahead at most its share of the memory budget.
                Some(q) => q.start_reader(i, &config.batch, reader_memory, split_tenants, tx).map_err(|e| disk::OpenError {
                    path: config.queue.disk.as_ref().map(|d| d.path.display().to_string()).unwrap_or_default(),
                    message: format!("cannot start a reader thread: {e}"),
                })?,
                None => exporter_txs.push(tx),
            }
            // `export_workers` exports in flight per exporter, sharing one channel, so a
            // round trip to the upstream does not serialise the whole pipeline.
            let rx = Arc::new(tokio::sync::Mutex::new(rx));
            let remaining = Arc::new(std::sync::atomic::AtomicUsize::new(n));
            for _ in 0..n {
                workers.push(tokio::spawn(batch::export_worker(Arc::clone(&exporter), Arc::clone(&rx), Arc::clone(&remaining))));
            }
        }
        let mut batchers = Vec::new();
        let senders = disk.is_none().then(|| {
            Signal::ALL.map(|signal| {
                let (tx, rx) = mpsc::unbounded_channel();
                let batcher = Batcher::new(signal, &config.batch, exporter_txs.clone()).split_tenants(split_tenants);
                batchers.push(tokio::spawn(batcher.run(rx)));
                tx
            })
        });
        let non_critical_limit = (config.queue.max_bytes as f64 * (1.0 - config.queue.critical_reserve)) as usize;
        let pipeline = Arc::new(Pipeline {
            budget,
            senders: RwLock::new(senders),
            retry_after: config.queue.retry_after,
            non_critical_limit,
            disk,
            split_tenants,
            pending: AtomicUsize::new(0),
            json_ratio: AtomicU64::new(JSON_RATIO_START.to_bits()),
        });
        Ok((pipeline, PipelineTasks { batchers, workers, exporters: all_exporters }))
    }

    /// Whether a payload of about `bytes` would find no room now (the check a receiver
    /// makes before reading a body, so a request the queue would refuse is not decoded
    /// first): `critical` payloads may use the whole budget, others all but its reserve.
    /// Requests admitted and still being read count with what they reserved, so that
    /// several large bodies admitted at once cannot all pass on the same free room.
    pub fn would_refuse(&self, bytes: usize, critical: bool) -> bool {
        let bytes = bytes.saturating_add(self.pending.load(Ordering::Acquire));
        if let Some(d) = &self.disk {
            return d.would_refuse(bytes as u64, critical);
        }
        let limit = if critical { self.budget.max() } else { self.non_critical_limit };
        self.budget.used().saturating_add(bytes) > limit
    }

    /// Counts `bytes` as on their way into the queue until the guard is dropped.
    pub fn reserve(self: &Arc<Self>, bytes: usize) -> Reserved {
        self.pending.fetch_add(bytes, Ordering::AcqRel);
        Reserved { pipeline: Arc::clone(self), bytes }
    }

    /// About how many queued bytes a JSON body of `wire` bytes becomes.
    pub fn json_estimate(&self, wire: usize) -> usize {
        (wire as f64 * f64::from_bits(self.json_ratio.load(Ordering::Relaxed))) as usize
    }

    /// Learns from one decoded JSON body of `wire` bytes that became `encoded` protobuf
    /// bytes (an average over the last few bodies; concurrent updates may lose one).
    pub fn learn_json(&self, wire: usize, encoded: usize) {
        if wire == 0 {
            return;
        }
        let seen = (encoded as f64 / wire as f64).clamp(0.05, 2.0);
        let old = f64::from_bits(self.json_ratio.load(Ordering::Relaxed));
        self.json_ratio.store((old + (seen - old) / 8.0).to_bits(), Ordering::Relaxed);
    }

    /// The delay announced when the queue is full.
    pub fn retry_after(&self) -> Duration {
        self.retry_after
    }

    /// Accepts a payload or says why not.
    pub async fn submit(&self, payload: Payload) -> Result<(), SubmitError> {
        self.submit_as(payload, true, None).await
    }

    /// The disk queue, if configured.
    pub fn disk(&self) -> Option<&Arc<disk::DiskQueue>> {
        self.disk.as_ref()
    }

    /// Accepts a payload from `tenant`; non-`critical` payloads may not use the last
    /// `critical_reserve` share of the budget, so critical traffic still finds room when
    /// the queue is nearly full. In memory it never waits; with a disk queue it resolves
    /// once the request is stored as `sync` promises.
    pub async fn submit_as(&self, payload: Payload, critical: bool, tenant: Option<&Arc<str>>) -> Result<(), SubmitError> {
        if let Some(d) = &self.disk {
            return d.append(&payload, critical, tenant).await.map_err(|e| match e {
                disk::AppendError::Closed => SubmitError::ShuttingDown,
                disk::AppendError::Full { .. } => {
                    SubmitError::Disk { message: e.to_string(), retry_after: self.retry_after, reason: "disk_full" }
                }
                disk::AppendError::Io(_) => {
                    SubmitError::Disk { message: e.to_string(), retry_after: self.retry_after, reason: "disk_error" }
                }
            });
        }
        self.submit_memory(payload, critical, tenant)
    }

    fn submit_memory(&self, payload: Payload, critical: bool, tenant: Option<&Arc<str>>) -> Result<(), SubmitError> {
        let senders = self.senders.read().unwrap_or_else(|e| e.into_inner());
        let Some(senders) = senders.as_ref() else {
            return Err(SubmitError::ShuttingDown);
        };
        let signal = payload.signal();
        let items = payload.item_count();
        let bytes = payload.encoded_len();
        let limit = if critical { self.budget.max() } else { self.non_critical_limit };
        let permit = self.budget.try_reserve_within(signal, bytes, items, limit).ok_or(SubmitError::QueueFull {
            used: self.budget.used(),
            max: self.budget.max(),
            retry_after: self.retry_after,
        })?;
        // The batcher looks at the tenant only when batches are split by tenant.
        let tenant = if self.split_tenants { tenant.cloned() } else { None };
        senders[signal.index()].send(Queued { payload, items, permit, tenant }).map_err(|_| SubmitError::ShuttingDown)?;
        metrics::counter!(names::ITEMS_ACCEPTED, "signal" => signal.as_str()).increment(items as u64);
        Ok(())
    }

    /// Bytes held by the pipeline now (on disk, with a disk queue).
    pub fn queued_bytes(&self) -> usize {
        match &self.disk {
            Some(d) => d.bytes() as usize,
            None => self.budget.used(),
        }
    }

    /// Stops accepting; the stages drain what they hold.
    fn close(&self) {
        self.senders.write().unwrap_or_else(|e| e.into_inner()).take();
    }
}

impl PipelineTasks {
    /// Closes the pipeline, flushes every batch and waits for the exporters, up to
    /// `deadline`. Items still held when it passes are counted as dropped.
    pub async fn shutdown(self, pipeline: Arc<Pipeline>, deadline: Duration) {
        if let Some(d) = pipeline.disk() {
            // The data is on disk: exports in flight get a moment to end (fewer sent
            // twice), then everything stops; the next start sends the rest.
            d.shutdown(deadline.min(Duration::from_secs(2))).await;
            for w in &self.workers {
                w.abort();
            }
            for e in &self.exporters {
                e.shutdown().await;
            }
            return;
        }
        pipeline.close();
        let budget = Arc::clone(&pipeline.budget);
        let all = async {
            for b in self.batchers {
                let _ = b.await;
            }
            for w in self.workers {
                let _ = w.await;
            }
        };
        if tokio::time::timeout(deadline, all).await.is_err() {
            for signal in Signal::ALL {
                let n = budget.items_in_flight(signal);
                if n > 0 {
                    tracing::error!(signal = signal.as_str(), items = n, "shutdown deadline passed; items dropped");
                    metrics::counter!(names::ITEMS_DROPPED, "signal" => signal.as_str(), "exporter" => "all", "reason" => "shutdown_timeout")
                        .increment(n as u64);
                }
            }
        } else {
            tracing::info!("pipeline drained");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pipeline(max_bytes: usize) -> Arc<Pipeline> {
        let mut config = crate::config::PipelineConfig::default();
        config.queue.max_bytes = max_bytes;
        config.queue.critical_reserve = 0.0;
        Pipeline::start(&config, Vec::new()).expect("a memory pipeline starts").0
    }

    #[tokio::test]
    async fn room_reserved_by_requests_in_flight_counts_until_they_are_answered() {
        let p = pipeline(1000);
        assert!(!p.would_refuse(600, false), "an empty queue has room");
        let first = p.reserve(600);
        assert!(p.would_refuse(600, false), "the same room is not promised twice");
        assert!(!p.would_refuse(400, false), "what is left is still free");
        drop(first);
        assert!(!p.would_refuse(600, false), "an answered request gives its room back");
    }

    #[tokio::test]
    async fn the_json_estimate_follows_what_bodies_became() {
        let p = pipeline(1000);
        assert_eq!(p.json_estimate(1000), 500, "half before any body was decoded");
        for _ in 0..40 {
            p.learn_json(1000, 900);
        }
        let e = p.json_estimate(1000);
        assert!((880..=900).contains(&e), "long string values: about nine tenths, got {e}");
        for _ in 0..40 {
            p.learn_json(1000, 300);
        }
        let e = p.json_estimate(1000);
        assert!((300..=320).contains(&e), "small attributes: about a third, got {e}");
        p.learn_json(0, 10);
        assert_eq!(p.json_estimate(1000), e, "an empty body teaches nothing");
    }
}
