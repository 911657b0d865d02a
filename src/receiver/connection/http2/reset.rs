//! The reset budget of one HTTP/2 connection: what the client makes weir reset, per time.

use std::sync::atomic::{AtomicBool, Ordering};

/// Reset budget of one connection (RFC 9113 10.5, CVE-2023-44487 "Rapid Reset",
/// CVE-2025-8671 "MadeYouReset"): resets the client causes, per connection and per time,
/// not per lifetime. A token bucket of [`RESET_TOKENS`], refilled at
/// [`RESET_TOKENS_PER_SECOND`]; a stream error weir sends because of what the client sent
/// (RST_STREAM with PROTOCOL_ERROR, FLOW_CONTROL_ERROR, REFUSED_STREAM and the like: a bad
/// content-length, trailers without END_STREAM, a window overflow, a stream over the
/// limit) costs [`PROTOCOL_RESET_COST`]; a stream the client cancels before it was
/// answered costs 1. That is 100 protocol errors at once and 10 a second after, or 1000
/// cancels at once and 100 a second after. Spent: GOAWAY ENHANCE_YOUR_CALM.
///
/// weir's own refusals never count: they end the stream with NO_ERROR or CANCEL, and h2
/// remembers up to [`REMEMBERED_RESETS`] such streams (its default is 50) so that DATA
/// still in flight on them is ignored rather than answered with STREAM_CLOSED. A
/// STREAM_CLOSED answer to a stream weir already forgot is not counted either: it costs
/// weir one 13-byte frame, no more than a PING. h2's own budget is per lifetime
/// (`max_local_error_reset_streams`, 1024 by default); a long-lived gRPC connection that
/// is refused now and then would reach any lifetime cap, so it is off and this one rules.
pub(super) const RESET_TOKENS: u32 = 1000;
pub(super) const RESET_TOKENS_PER_SECOND: u32 = 100;
pub(super) const PROTOCOL_RESET_COST: u32 = 10;
/// Reset streams h2 remembers (see [`RESET_TOKENS`]); one `Stream` (a few hundred bytes)
/// each, for one second after the reset.
pub(super) const REMEMBERED_RESETS: usize = 1024;

/// The token bucket of [`RESET_TOKENS`].
pub(super) struct ResetBudget {
    /// Tokens left and when they were last counted.
    bucket: std::sync::Mutex<(f64, std::time::Instant)>,
    spent: AtomicBool,
}

impl Default for ResetBudget {
    fn default() -> Self {
        ResetBudget { bucket: std::sync::Mutex::new((f64::from(RESET_TOKENS), std::time::Instant::now())), spent: AtomicBool::new(false) }
    }
}

impl ResetBudget {
    /// Takes `cost` tokens; true when this spends the budget.
    pub(super) fn charge(&self, cost: u32) -> bool {
        let now = std::time::Instant::now();
        let mut b = self.bucket.lock().unwrap_or_else(|e| e.into_inner());
        let refill = now.duration_since(b.1).as_secs_f64() * f64::from(RESET_TOKENS_PER_SECOND);
        b.0 = (b.0 + refill).min(f64::from(RESET_TOKENS)) - f64::from(cost);
        b.1 = now;
        b.0 < 0.0 && !self.spent.swap(true, Ordering::AcqRel)
    }

    pub(super) fn is_spent(&self) -> bool {
        self.spent.load(Ordering::Acquire)
    }
}

/// A connection spent its reset budget: counted, and logged (a few a second).
pub(super) fn calm_down() {
    static LINES: crate::telemetry::lograte::LineBudget = crate::telemetry::lograte::LineBudget::new("reset_budget", 5);
    if crate::telemetry::installed() {
        ::metrics::counter!(crate::telemetry::names::H2_GOAWAYS, "reason" => "reset_budget").increment(1);
    }
    if let Some(suppressed) = LINES.admit() {
        tracing::warn!(suppressed, "HTTP/2 connection spent its reset budget: GOAWAY ENHANCE_YOUR_CALM");
    }
}
