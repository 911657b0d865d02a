//! `pipeline:`: the bounded queue and the batch stage.

use super::ConfigError;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The pipeline block.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PipelineConfig {
    /// The queue between receivers and the batch stage.
    pub queue: QueueConfig,
    /// The batch stage.
    pub batch: BatchConfig,
    /// How long a shutdown waits for the queue to drain and exporters to flush.
    #[serde(with = "humantime_serde")]
    pub shutdown_timeout: Duration,
    /// On SIGTERM, how long weir keeps serving, with `/readyz` answering 503, before it
    /// stops accepting: the time a load balancer (a Kubernetes Service) takes to stop
    /// sending new connections. A second SIGTERM or a SIGINT ends it at once. 0 = none.
    #[serde(with = "humantime_serde")]
    pub shutdown_delay: Duration,
    /// Exports in flight per exporter.
    pub export_workers: usize,
}

/// The bounded queue.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QueueConfig {
    /// Bytes (decoded protobuf size) that may be queued or in export at once. When full,
    /// receivers answer 503 / UNAVAILABLE with a retry delay. 0: a tenth of the memory
    /// limit, at most 64 MiB (resolved at start, see `app`).
    pub max_bytes: usize,
    /// Retry-After given to clients when the queue is full.
    #[serde(with = "humantime_serde")]
    pub retry_after: Duration,
    /// Share of `max_bytes` only `critical` traffic may use, so a queue that lower
    /// priority classes filled still takes critical payloads.
    pub critical_reserve: f64,
    /// A durable queue on disk; absent, the queue lives in memory (lost on a crash).
    pub disk: Option<DiskConfig>,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig { max_bytes: 0, retry_after: Duration::from_secs(1), critical_reserve: 0.2, disk: None }
    }
}

/// When an appended record is flushed to stable storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SyncMode {
    /// The success answer waits for the fsync that covers the request (group commit).
    OnAck,
    /// Answered once written to the file; fsync every `sync_interval`.
    Interval,
    /// Answered once written to the file; the OS flushes when it likes.
    None,
}

/// `pipeline.queue.disk`: the durable queue.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DiskConfig {
    /// The queue's directory (created if missing; one weir per directory).
    pub path: std::path::PathBuf,
    /// What the queue may hold on disk; past it, requests are refused with 503.
    pub max_bytes: u64,
    /// A segment file is closed and a new one started past this size.
    pub segment_bytes: u64,
    /// `on_ack`, `interval` or `none`.
    pub sync: SyncMode,
    /// The fsync period of `sync: interval`.
    #[serde(with = "humantime_serde")]
    pub sync_interval: Duration,
    /// Records older than this are dropped unsent (counted); 0 keeps them until exported.
    #[serde(with = "humantime_serde")]
    pub max_age: Duration,
    /// With `sync: on_ack`, write segments with `O_DIRECT` where the file system takes
    /// it (less CPU per request: docs/durable-queue.md#direct-writes).
    pub direct_io: bool,
}

impl Default for DiskConfig {
    fn default() -> Self {
        DiskConfig {
            path: std::path::PathBuf::from("/var/lib/weir/queue"),
            max_bytes: 10 << 30,
            segment_bytes: 64 << 20,
            sync: SyncMode::OnAck,
            sync_interval: Duration::from_millis(100),
            max_age: Duration::ZERO,
            direct_io: true,
        }
    }
}

/// Batching per signal.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BatchConfig {
    /// Flush when a batch holds this many items (spans, data points, log records, profiles).
    pub max_items: usize,
    /// Flush before a batch's encoded size would pass this many bytes (one request larger
    /// than this goes alone). Without it a batch of large items can grow to the whole
    /// queue budget: larger than most backends take in one gRPC message (4 MiB by
    /// default), and the queue then sits full until the batch times out, receivers
    /// answering 503 meanwhile.
    pub max_bytes: usize,
    /// Flush a non-empty batch after this long.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
}

impl Default for BatchConfig {
    fn default() -> Self {
        BatchConfig { max_items: 8192, max_bytes: 4 << 20, timeout: Duration::from_millis(200) }
    }
}

impl Default for PipelineConfig {
    fn default() -> Self {
        PipelineConfig {
            queue: QueueConfig::default(),
            batch: BatchConfig::default(),
            shutdown_timeout: Duration::from_secs(10),
            shutdown_delay: Duration::from_secs(5),
            export_workers: 4,
        }
    }
}

impl PipelineConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if !(0.0..1.0).contains(&self.queue.critical_reserve) {
            return Err(ConfigError::invalid("pipeline.queue.critical_reserve", "must be in [0, 1)"));
        }
        if self.batch.max_items == 0 {
            return Err(ConfigError::invalid("pipeline.batch.max_items", "must be > 0"));
        }
        if self.batch.max_bytes == 0 {
            return Err(ConfigError::invalid("pipeline.batch.max_bytes", "must be > 0"));
        }
        if self.batch.timeout.is_zero() {
            return Err(ConfigError::invalid("pipeline.batch.timeout", "must be > 0"));
        }
        if self.export_workers == 0 || self.export_workers > 256 {
            return Err(ConfigError::invalid("pipeline.export_workers", "must be in [1, 256]"));
        }
        if self.shutdown_timeout.is_zero() {
            return Err(ConfigError::invalid("pipeline.shutdown_timeout", "must be > 0"));
        }
        if let Some(d) = &self.queue.disk {
            if d.path.as_os_str().is_empty() {
                return Err(ConfigError::invalid("pipeline.queue.disk.path", "must not be empty"));
            }
            if d.segment_bytes < 1 << 20 || d.segment_bytes > 1 << 30 {
                return Err(ConfigError::invalid("pipeline.queue.disk.segment_bytes", "must be in [1 MiB, 1 GiB]"));
            }
            if d.max_bytes < 2 * d.segment_bytes {
                return Err(ConfigError::invalid("pipeline.queue.disk.max_bytes", "must be at least two segments (2 x segment_bytes)"));
            }
            if d.sync == SyncMode::Interval && d.sync_interval.is_zero() {
                return Err(ConfigError::invalid("pipeline.queue.disk.sync_interval", "must be > 0 with sync: interval"));
            }
        }
        Ok(())
    }
}
