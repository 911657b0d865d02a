//! The admin server: `/metrics`, `/healthz`, `/readyz`, `/debug/queue`, `/debug/routing`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Shared admin state.
#[derive(Clone)]
pub struct AdminState {
    /// The Prometheus recorder.
    pub prometheus: PrometheusHandle,
    /// False until the receivers listen, and again once shutdown starts (an exporter that
    /// is not ready yet, such as `kafka` before a broker answered, also holds `/readyz`).
    pub ready: Arc<AtomicBool>,
    /// The disk queue, for `/debug/queue`.
    pub queue: Option<Arc<crate::pipeline::disk::DiskQueue>>,
    /// The exporters, for `/debug/routing` and `/readyz`.
    pub exporters: Vec<Arc<dyn crate::exporter::Exporter>>,
}

/// The admin routes; other modules may merge their own (e.g. `/debug/throttle`).
pub fn router(state: AdminState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/debug/queue", get(queue))
        .route("/debug/routing", get(routing))
        .with_state(state)
}

async fn metrics(State(s): State<AdminState>) -> ([(axum::http::HeaderName, &'static str); 1], String) {
    s.prometheus.run_upkeep();
    ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], s.prometheus.render())
}

/// The disk queue's state (404 without one).
async fn queue(State(s): State<AdminState>) -> axum::response::Response {
    use axum::response::IntoResponse;
    match &s.queue {
        Some(q) => axum::Json(q.debug()).into_response(),
        None => (StatusCode::NOT_FOUND, "no disk queue (pipeline.queue.disk is not set)\n").into_response(),
    }
}

/// The `loadbalancing` exporters' rings: every backend, healthy or not, and the ring.
async fn routing(State(s): State<AdminState>) -> axum::Json<serde_json::Value> {
    axum::Json(serde_json::Value::Array(s.exporters.iter().filter_map(|e| e.routing()).collect()))
}

async fn readyz(State(s): State<AdminState>) -> (StatusCode, &'static str) {
    if s.ready.load(Ordering::Acquire) && s.exporters.iter().all(|e| e.ready()) {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    }
}
