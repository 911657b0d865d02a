//! Receivers: OTLP over HTTP (axum) and gRPC (tonic), sharing one hand-off into the
//! pipeline ([`Ingest`]) and one error mapping ([`response`]).

pub mod budget;
pub mod conntrack;
pub mod decode;
pub mod grpc;
pub mod h2conn;
pub mod http;
pub mod hygiene;
pub mod middleware;
pub mod promrw;
pub mod pyroscope;
pub mod response;
pub mod routes;
pub mod rxstamp;
pub mod server;

use crate::config::ServerKind;
use crate::pipeline::{Pipeline, SubmitError};
use crate::signal::Payload;
use crate::telemetry::names;
use response::ApiError;
use std::sync::Arc;

/// The authenticated tenant of a request (its name from `receiver.auth.tenants`, or
/// `token-<hash>` for a token of no named tenant; never the token), in the request's
/// extensions, with its counters.
#[derive(Debug, Clone)]
pub struct Tenant(pub Arc<str>, pub Arc<TenantCounters>);

impl PartialEq for Tenant {
    fn eq(&self, other: &Tenant) -> bool {
        self.0 == other.0
    }
}

impl Eq for Tenant {}

/// One tenant's counters, each registered the first time it counts and then kept: a
/// registry lookup hashes and compares four labels, and a refused request should not pay
/// for that (the tenant-less tables are in [`RequestMetrics`]).
#[derive(Debug, Default)]
pub struct TenantCounters {
    /// `weir_quota_rejected_total` for this tenant.
    pub quota_rejected: std::sync::OnceLock<metrics::Counter>,
    /// [protocol][signal][outcome].
    requests: [[[std::sync::OnceLock<metrics::Counter>; OUTCOMES.len()]; SIGNAL_LABELS.len()]; 2],
}

impl Tenant {
    /// The metric label value: the tenant's name, or `none` without auth. Shares the
    /// name's allocation (no copy per request).
    pub fn label(tenant: Option<&Tenant>) -> metrics::SharedString {
        tenant.map_or(metrics::SharedString::const_str("none"), |t| metrics::SharedString::from(Arc::clone(&t.0)))
    }
}

/// Hands decoded payloads to the pipeline and counts the outcome.
#[derive(Debug, Clone)]
pub struct Ingest {
    pipeline: Arc<Pipeline>,
    priorities: Option<Arc<crate::throttle::manager::ThrottleManager>>,
    quotas: Option<middleware::AuthLayerState>,
}

impl Ingest {
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
    pub fn with_item_quotas(mut self, auth: Option<middleware::AuthLayerState>) -> Self {
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
            Ok(()) => {
                metrics::counter!(names::ITEMS_ACCEPTED, "signal" => signal).increment(items);
                Ok(over_quota)
            }
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

/// Label values of `signal` the request metrics are registered for up front.
const SIGNAL_LABELS: [&str; 5] = ["traces", "metrics", "logs", "profiles", "unknown"];
/// Label values of `outcome`.
const OUTCOMES: [&str; 2] = ["accepted", "rejected"];

/// The request metrics of the common case (no tenant), registered once after the
/// recorder is installed, so counting a request does no label lookup in the registry
/// (four labels hashed and compared, per request). Requests of named tenants, and any
/// label outside these tables, go through the registry as before.
struct RequestMetrics {
    /// [protocol][signal][outcome], tenant `none`.
    requests: [[[metrics::Counter; OUTCOMES.len()]; SIGNAL_LABELS.len()]; 2],
    /// [protocol][signal].
    duration: [[metrics::Histogram; SIGNAL_LABELS.len()]; 2],
    /// [protocol][signal][reason].
    rejected: [[[metrics::Counter; response::REASONS.len()]; SIGNAL_LABELS.len()]; 2],
}

impl RequestMetrics {
    /// The tables, once a recorder is there to register them with (before that, e.g. in
    /// unit tests, handles would be no-ops for good).
    fn get() -> Option<&'static RequestMetrics> {
        static TABLES: std::sync::OnceLock<RequestMetrics> = std::sync::OnceLock::new();
        if let Some(m) = TABLES.get() {
            return Some(m);
        }
        crate::telemetry::installed().then(|| TABLES.get_or_init(RequestMetrics::new))
    }

    fn new() -> Self {
        let protocols = [ServerKind::Http.as_str(), ServerKind::Grpc.as_str()];
        RequestMetrics {
            requests: protocols.map(|p| {
                SIGNAL_LABELS.map(|s| {
                    OUTCOMES.map(|o| metrics::counter!(names::REQUESTS, "protocol" => p, "signal" => s, "outcome" => o, "tenant" => "none"))
                })
            }),
            duration: protocols
                .map(|p| SIGNAL_LABELS.map(|s| metrics::histogram!(names::REQUEST_DURATION, "protocol" => p, "signal" => s))),
            rejected: protocols.map(|p| {
                SIGNAL_LABELS.map(|s| {
                    response::REASONS.map(|r| metrics::counter!(names::REQUESTS_REJECTED, "protocol" => p, "signal" => s, "reason" => r))
                })
            }),
        }
    }
}

fn index_of(labels: &[&str], v: &str) -> Option<usize> {
    labels.iter().position(|l| *l == v)
}

/// Counts one finished request.
pub fn count_request(
    protocol: ServerKind,
    signal: &'static str,
    outcome: &'static str,
    tenant: Option<&Tenant>,
    elapsed: std::time::Duration,
) {
    let p = protocol as usize;
    let tables = RequestMetrics::get().zip(index_of(&SIGNAL_LABELS, signal));
    let lookup = || metrics::counter!(names::REQUESTS, "protocol" => protocol.as_str(), "signal" => signal, "outcome" => outcome, "tenant" => Tenant::label(tenant));
    match (tables, index_of(&OUTCOMES, outcome), tenant) {
        (Some((m, s)), Some(o), None) => m.requests[p][s][o].increment(1),
        (Some((_, s)), Some(o), Some(t)) => t.1.requests[p][s][o].get_or_init(lookup).increment(1),
        _ => lookup().increment(1),
    }
    match tables {
        Some((m, s)) => m.duration[p][s].record(elapsed.as_secs_f64()),
        None => {
            metrics::histogram!(names::REQUEST_DURATION, "protocol" => protocol.as_str(), "signal" => signal).record(elapsed.as_secs_f64())
        }
    }
}

/// Marks a response whose refusal [`count_rejection`] has logged, so that the `logging`
/// middleware does not log it again.
#[derive(Debug, Clone, Copy)]
pub struct RefusalLogged;

/// Refusal lines written at info per second; past that they are counted and the next line
/// says how many were left out.
pub const REFUSAL_LINES_PER_SECOND: u32 = 10;

static REFUSALS: crate::telemetry::lograte::LineBudget =
    crate::telemetry::lograte::LineBudget::new("refused_request", REFUSAL_LINES_PER_SECOND);

/// Counts one refused request: under `weir_receiver_requests_rejected_total` by reason,
/// and as a finished request with outcome `rejected`; and logs it at info with its reason
/// and message, at most [`REFUSAL_LINES_PER_SECOND`] a second, whatever the middleware
/// order (someone debugging a refusal must find it in the log).
pub fn count_rejection(
    protocol: ServerKind,
    signal: &'static str,
    reason: &'static str,
    tenant: Option<&Tenant>,
    elapsed: std::time::Duration,
    message: &dyn std::fmt::Display,
) {
    if let Some(suppressed) = REFUSALS.admit() {
        let tenant = tenant.map_or("none", |t| &t.0);
        tracing::info!(protocol = protocol.as_str(), signal, reason, tenant, suppressed, "request refused: {message}");
    }
    match (RequestMetrics::get(), index_of(&SIGNAL_LABELS, signal), index_of(&response::REASONS, reason)) {
        (Some(m), Some(s), Some(r)) => m.rejected[protocol as usize][s][r].increment(1),
        _ => metrics::counter!(names::REQUESTS_REJECTED, "protocol" => protocol.as_str(), "signal" => signal, "reason" => reason)
            .increment(1),
    }
    count_request(protocol, signal, "rejected", tenant, elapsed);
}
