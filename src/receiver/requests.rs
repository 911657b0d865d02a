//! The request metrics every receiver and middleware counts into, and the rate-limited
//! refusal log.

use crate::config::ServerKind;
use crate::receiver::response;
use crate::receiver::tenant::{Tenant, OUTCOMES, SIGNAL_LABELS};
use crate::telemetry::names;

/// The request metrics of the common case (no tenant), registered once after the
/// recorder is installed, so counting a request does no label lookup in the registry
/// (four labels hashed and compared, per request). Requests of named tenants, and any
/// label outside these tables, go through the registry.
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
