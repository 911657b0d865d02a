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
    /// receivers answer 503 / UNAVAILABLE with a retry delay.
    pub max_bytes: usize,
    /// Retry-After given to clients when the queue is full.
    #[serde(with = "humantime_serde")]
    pub retry_after: Duration,
    /// Share of `max_bytes` only `critical` traffic may use (seed 003 priorities).
    pub critical_reserve: f64,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig { max_bytes: 64 * 1024 * 1024, retry_after: Duration::from_secs(1), critical_reserve: 0.2 }
    }
}

/// Batching per signal.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BatchConfig {
    /// Flush when a batch holds this many items (spans, data points, log records, profiles).
    pub max_items: usize,
    /// Flush a non-empty batch after this long.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
}

impl Default for BatchConfig {
    fn default() -> Self {
        BatchConfig { max_items: 8192, timeout: Duration::from_millis(200) }
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
        if self.queue.max_bytes == 0 {
            return Err(ConfigError::invalid("pipeline.queue.max_bytes", "must be > 0"));
        }
        if !(0.0..1.0).contains(&self.queue.critical_reserve) {
            return Err(ConfigError::invalid("pipeline.queue.critical_reserve", "must be in [0, 1)"));
        }
        if self.batch.max_items == 0 {
            return Err(ConfigError::invalid("pipeline.batch.max_items", "must be > 0"));
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
        Ok(())
    }
}
