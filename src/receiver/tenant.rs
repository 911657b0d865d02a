//! Who sent a request: the tenant its token names, with the counters kept per tenant.

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
/// for that (the tenant-less tables are in `receiver::requests`).
#[derive(Debug, Default)]
pub struct TenantCounters {
    /// `weir_quota_rejected_total` for this tenant.
    pub quota_rejected: std::sync::OnceLock<metrics::Counter>,
    /// [protocol][signal][outcome].
    pub(crate) requests: [[[std::sync::OnceLock<metrics::Counter>; OUTCOMES.len()]; SIGNAL_LABELS.len()]; 2],
}

impl Tenant {
    /// The metric label value: the tenant's name, or `none` without auth. Shares the
    /// name's allocation (no copy per request).
    pub fn label(tenant: Option<&Tenant>) -> metrics::SharedString {
        tenant.map_or(metrics::SharedString::const_str("none"), |t| metrics::SharedString::from(Arc::clone(&t.0)))
    }
}

/// Label values of `signal` the request metrics are registered for up front.
pub(crate) const SIGNAL_LABELS: [&str; 5] = ["traces", "metrics", "logs", "profiles", "unknown"];
/// Label values of `outcome`.
pub(crate) const OUTCOMES: [&str; 2] = ["accepted", "rejected"];
