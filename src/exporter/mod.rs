//! Exporters: where accepted data goes. Every exporter gets every batch.

mod blackhole;
mod debug;
mod file;
mod kafka;
mod loadbalancing;
mod otlp_grpc;
mod otlp_http;
pub mod retry;
pub mod ring;

pub use blackhole::BlackholeExporter;
pub use debug::DebugExporter;
pub use file::FileExporter;
pub use kafka::{partition as kafka_partition, KafkaExporter};
pub use loadbalancing::LoadBalancingExporter;
pub use otlp_grpc::{retry_delay as retry_delay_of, OtlpGrpcExporter};
pub use otlp_http::OtlpHttpExporter;

use crate::config::ExporterConfig;
use crate::signal::Payload;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// A boxed future, so exporters can live behind `dyn`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Why an export failed for good. The items are then counted as dropped with
/// [`ExportError::reason`].
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The upstream refused the data in a way retrying cannot fix.
    #[error("permanent error: {0}")]
    Permanent(String),
    /// Retryable failures continued until `retry.max_elapsed`.
    #[error("retries exhausted after {elapsed:?}: {last}")]
    RetriesExhausted {
        /// Time spent.
        elapsed: std::time::Duration,
        /// The last failure.
        last: String,
    },
    /// A local I/O failure (file exporter).
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    /// Bytes that passed the wire check on arrival did not decode for an exporter that
    /// needs the decoded form (a disagreement between the check and prost; not expected).
    #[error("cannot decode batch: {0}")]
    Decode(#[from] prost::DecodeError),
    /// The rest of the batch was delivered, but these items could not be, for good: how
    /// many, by reason.
    #[error("{message}")]
    Partial {
        /// Items dropped, by reason.
        dropped: Vec<(&'static str, usize)>,
        /// What happened.
        message: String,
    },
}

impl ExportError {
    /// The `reason` label for dropped items.
    pub fn reason(&self) -> &'static str {
        match self {
            ExportError::Permanent(_) => "permanent_error",
            ExportError::RetriesExhausted { .. } => "retries_exhausted",
            ExportError::Io(_) => "io_error",
            ExportError::Decode(_) => "decode_error",
            ExportError::Partial { .. } => "partial",
        }
    }
}

/// Something that sends batches somewhere.
pub trait Exporter: Send + Sync {
    /// Name for metrics and logs.
    fn name(&self) -> &str;
    /// Sends one batch of `tenant`'s data (`None`: batches mix tenants, or there is no
    /// auth), retrying as configured; an `Err` means the items are dropped.
    fn export<'a>(&'a self, payload: &'a Payload, tenant: Option<&'a str>) -> BoxFuture<'a, Result<(), ExportError>>;
    /// Whether a batch must hold one tenant's data only (a header names the tenant).
    fn splits_tenants(&self) -> bool {
        false
    }
    /// What `/debug/routing` shows of it (the `loadbalancing` exporter's ring), if anything.
    fn routing(&self) -> Option<serde_json::Value> {
        None
    }
    /// Whether it can take batches: `/readyz` answers 503 while any exporter is not.
    fn ready(&self) -> bool {
        true
    }
    /// Flushes buffers at shutdown.
    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

/// A problem building an exporter from config.
#[derive(Debug, thiserror::Error)]
#[error("exporter {name}: {message}")]
pub struct BuildError {
    /// The exporter's name.
    pub name: String,
    /// What went wrong.
    pub message: String,
}

/// Builds the configured exporters; `batch` is the pipeline's, which the `loadbalancing`
/// exporter applies again per backend.
pub fn build(configs: &[ExporterConfig], batch: &crate::config::BatchConfig) -> Result<Vec<Arc<dyn Exporter>>, BuildError> {
    configs
        .iter()
        .map(|c| {
            let name = c.name();
            let err = |message: String| BuildError { name: name.clone(), message };
            let e: Arc<dyn Exporter> = match c {
                ExporterConfig::File(f) => Arc::new(FileExporter::new(name.clone(), f).map_err(|e| err(e.to_string()))?),
                ExporterConfig::Otlp(o) => Arc::new(OtlpGrpcExporter::new(name.clone(), o).map_err(err)?),
                ExporterConfig::Otlphttp(o) => Arc::new(OtlpHttpExporter::new(name.clone(), o).map_err(err)?),
                ExporterConfig::Debug(d) => Arc::new(DebugExporter::new(name.clone(), d.verbosity == "detailed")),
                ExporterConfig::Blackhole(_) => Arc::new(BlackholeExporter::new(name.clone())),
                ExporterConfig::Loadbalancing(l) => Arc::new(LoadBalancingExporter::new(name.clone(), l, batch).map_err(err)?),
                ExporterConfig::Kafka(k) => Arc::new(KafkaExporter::new(name.clone(), k).map_err(err)?),
            };
            Ok(e)
        })
        .collect()
}

/// Header names and values.
pub(crate) type Headers = Vec<(String, String)>;

/// A configured header split in two: fixed ones, and `${tenant}` templates filled per batch.
pub(crate) fn split_headers(headers: &std::collections::BTreeMap<String, String>) -> (Headers, Headers) {
    headers.iter().map(|(k, v)| (k.clone(), v.clone())).partition(|(_, v)| !v.contains("${tenant}"))
}

/// A `${tenant}` template filled in; `None` without a tenant (the header is then left out).
pub(crate) fn fill_tenant(template: &str, tenant: Option<&str>) -> Option<String> {
    tenant.map(|t| template.replace("${tenant}", t))
}
