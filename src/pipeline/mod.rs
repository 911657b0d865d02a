//! The bounded pipeline: receivers submit decoded payloads; a batch stage per signal
//! groups them; every exporter gets every batch. See [`queue`] for the bound.

pub mod batch;
pub mod queue;

use crate::exporter::Exporter;
use crate::signal::{Payload, Signal};
use crate::telemetry::names;
use batch::{Batch, Batcher};
use queue::{ByteBudget, BytesPermit};
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
}

impl SubmitError {
    /// The metric reason label.
    pub fn reason(&self) -> &'static str {
        match self {
            SubmitError::QueueFull { .. } => "queue_full",
            SubmitError::ShuttingDown => "shutting_down",
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
}

/// The running stages, for shutdown.
pub struct PipelineTasks {
    batchers: Vec<JoinHandle<()>>,
    workers: Vec<JoinHandle<()>>,
}

impl Pipeline {
    /// Starts one batcher per signal and one worker per exporter.
    pub fn start(config: &crate::config::PipelineConfig, exporters: Vec<Arc<dyn Exporter>>) -> (Arc<Pipeline>, PipelineTasks) {
        let budget = ByteBudget::new(config.queue.max_bytes);
        // Two batches may wait per exporter: enough to overlap, small enough that a slow
        // exporter pushes back into the byte budget quickly.
        let mut exporter_txs = Vec::new();
        let mut workers = Vec::new();
        let n = config.export_workers.max(1);
        for exporter in exporters {
            let (tx, rx) = mpsc::channel::<Arc<Batch>>(n * 2);
            exporter_txs.push(tx);
            // `export_workers` exports in flight per exporter, sharing one channel, so a
            // round trip to the upstream does not serialise the whole pipeline.
            let rx = Arc::new(tokio::sync::Mutex::new(rx));
            let remaining = Arc::new(std::sync::atomic::AtomicUsize::new(n));
            for _ in 0..n {
                workers.push(tokio::spawn(batch::export_worker(Arc::clone(&exporter), Arc::clone(&rx), Arc::clone(&remaining))));
            }
        }
        let mut batchers = Vec::new();
        let senders = Signal::ALL.map(|signal| {
            let (tx, rx) = mpsc::unbounded_channel();
            let batcher = Batcher::new(signal, config.batch.max_items, config.batch.timeout, exporter_txs.clone());
            batchers.push(tokio::spawn(batcher.run(rx)));
            tx
        });
        let non_critical_limit = (config.queue.max_bytes as f64 * (1.0 - config.queue.critical_reserve)) as usize;
        let pipeline =
            Arc::new(Pipeline { budget, senders: RwLock::new(Some(senders)), retry_after: config.queue.retry_after, non_critical_limit });
        (pipeline, PipelineTasks { batchers, workers })
    }

    /// Whether a payload of about `bytes` would find no room now (the check a receiver
    /// makes before reading a body, so a request the queue would refuse is not decoded
    /// first): `critical` payloads may use the whole budget, others all but its reserve.
    pub fn would_refuse(&self, bytes: usize, critical: bool) -> bool {
        let limit = if critical { self.budget.max() } else { self.non_critical_limit };
        self.budget.used().saturating_add(bytes) > limit
    }

    /// The delay announced when the queue is full.
    pub fn retry_after(&self) -> Duration {
        self.retry_after
    }

    /// Accepts a payload or says why not. Never waits.
    pub fn submit(&self, payload: Payload) -> Result<(), SubmitError> {
        self.submit_as(payload, true)
    }

    /// Accepts a payload; non-`critical` payloads may not use the last
    /// `critical_reserve` share of the budget, so critical traffic still finds room when
    /// the queue is nearly full.
    pub fn submit_as(&self, payload: Payload, critical: bool) -> Result<(), SubmitError> {
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
        senders[signal.index()].send(Queued { payload, items, permit }).map_err(|_| SubmitError::ShuttingDown)
    }

    /// Bytes held by the pipeline now.
    pub fn queued_bytes(&self) -> usize {
        self.budget.used()
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
