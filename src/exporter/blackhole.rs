//! Counts and discards; for benchmarks.

use super::{BoxFuture, ExportError, Exporter};
use crate::signal::Payload;

/// The `blackhole` exporter.
pub struct BlackholeExporter {
    name: String,
}

impl BlackholeExporter {
    /// A blackhole named `name`.
    pub fn new(name: String) -> Self {
        BlackholeExporter { name }
    }
}

impl Exporter for BlackholeExporter {
    fn name(&self) -> &str {
        &self.name
    }
    fn export<'a>(&'a self, _payload: &'a Payload, _tenant: Option<&'a str>) -> BoxFuture<'a, Result<(), ExportError>> {
        Box::pin(async { Ok(()) })
    }
}
