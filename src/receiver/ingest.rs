//! The one hand-off from every receiver into the pipeline, with the tenants' item quotas.

use crate::config::ServerKind;
use crate::pipeline::{Pipeline, SubmitError};
use crate::receiver::middleware::auth::AuthLayerState;
use crate::receiver::response::ApiError;
use crate::receiver::tenant::Tenant;
use crate::signal::Payload;
use crate::telemetry::names;
use std::sync::Arc;

/// Hands decoded payloads to the pipeline and counts the outcome.
#[derive(Debug, Clone)]
pub struct Ingest {
    pipeline: Arc<Pipeline>,
    priorities: Option<Arc<crate::throttle::manager::ThrottleManager>>,
    quotas: Option<AuthLayerState>,
}

impl Ingest {
    /// The pipeline it hands to.
    pub fn pipeline(&self) -> &Arc<Pipeline> {
        &self.pipeline
    }

    /// Wraps the pipeline.
    pub fn new(pipeline: Arc<Pipeline>) -> Self {
        Ingest { pipeline, priorities: None, quotas: None }
    }

    /// Knows request priorities (tenant, record type), so non-critical payloads leave the
    /// pipeline's critical reserve alone.
    pub fn with_priorities(mut self, manager: Arc<crate::throttle::manager::ThrottleManager>) -> Self {
        self.priorities = Some(manager);
        self
    }

    /// Applies the tenants' item quotas (from the auth state, so reloads reach them).
    pub fn with_item_quotas(mut self, auth: Option<AuthLayerState>) -> Self {
        self.quotas = auth;
        self
    }

    /// Submits a decoded payload from `tenant`; items are counted received, then
    /// accepted or rejected. Returns how many items the tenant's item quota refused
    /// (reported to the client as partial success).
    pub async fn accept_from(&self, mut payload: Payload, protocol: ServerKind, tenant: Option<&Tenant>) -> Result<u64, ApiError> {
        let mut over_quota = 0u64;
        if let (Some(q), Some(t)) = (&self.quotas, tenant) {
            let n = payload.item_count();
            let granted = q.take_items(&t.0, payload.signal(), n);
            if granted < n {
                over_quota = payload.truncate_items(granted) as u64;
                metrics::counter!(names::ITEMS_RECEIVED, "protocol" => protocol.as_str(), "signal" => payload.signal().as_str())
                    .increment(over_quota);
                metrics::counter!(names::ITEMS_REJECTED, "signal" => payload.signal().as_str(), "reason" => "quota").increment(over_quota);
                if granted == 0 {
                    return Ok(over_quota);
                }
            }
        }
        let critical = self
            .priorities
            .as_ref()
            .is_some_and(|m| m.priority(payload.signal(), tenant.map(|t| &*t.0)) == crate::config::Priority::Critical);
        let signal = payload.signal().as_str();
        let items = payload.item_count() as u64;
        metrics::counter!(names::ITEMS_RECEIVED, "protocol" => protocol.as_str(), "signal" => signal).increment(items);
        match self.pipeline.submit_as(payload, critical, tenant.map(|t| &t.0)).await {
            // The pipeline counts the items accepted where it takes them, so a client that
            // hangs up after that point cannot leave accepted items uncounted.
            Ok(()) => Ok(over_quota),
            Err(e) => {
                metrics::counter!(names::ITEMS_REJECTED, "signal" => signal, "reason" => e.reason()).increment(items);
                Err(match e {
                    SubmitError::QueueFull { retry_after, .. } | SubmitError::Disk { retry_after, .. } => {
                        ApiError::QueueFull { message: e.to_string(), retry_after }
                    }
                    SubmitError::ShuttingDown => ApiError::ShuttingDown,
                })
            }
        }
    }
}
