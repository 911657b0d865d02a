//! Logs what passes through.

use super::{BoxFuture, ExportError, Exporter};
use crate::signal::Payload;

/// The `debug` exporter.
pub struct DebugExporter {
    name: String,
    detailed: bool,
}

impl DebugExporter {
    /// `detailed` also logs every item.
    pub fn new(name: String, detailed: bool) -> Self {
        DebugExporter { name, detailed }
    }
}

impl Exporter for DebugExporter {
    fn name(&self) -> &str {
        &self.name
    }
    fn export<'a>(&'a self, payload: &'a Payload, _tenant: Option<&'a str>) -> BoxFuture<'a, Result<(), ExportError>> {
        Box::pin(async move {
            tracing::info!(exporter = %self.name, signal = payload.signal().as_str(), items = payload.item_count(), "debug export");
            if self.detailed {
                tracing::info!(exporter = %self.name, "{}", crate::otlp::json::encode(&*payload.decoded()?));
            }
            Ok(())
        })
    }
}
