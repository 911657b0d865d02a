//! weir's own telemetry: metric names, log rate limits and the Prometheus recorder.

pub mod lograte;
pub mod names;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

static HANDLE: std::sync::OnceLock<PrometheusHandle> = std::sync::OnceLock::new();

/// Whether [`install_recorder`] has run: metric handles taken from now on are live.
pub fn installed() -> bool {
    HANDLE.get().is_some()
}

/// Installs the global Prometheus recorder (once per process) and returns its handle.
pub fn install_recorder() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    metrics_exporter_prometheus::Matcher::Suffix("_seconds".into()),
                    &[0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0],
                )
                .unwrap_or_else(|_| PrometheusBuilder::new());
            match builder.install_recorder() {
                Ok(h) => h,
                // Another recorder is installed (only possible in odd test setups): keep a
                // private one so /metrics still answers.
                Err(_) => PrometheusBuilder::new().build_recorder().handle(),
            }
        })
        .clone()
}
