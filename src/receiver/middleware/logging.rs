//! `logging`: one line per request, at debug level; a failed one at info, at most
//! [`FAILED_LINES_PER_SECOND`] a second (see [`crate::telemetry::lograte`]).

use crate::config::ServerKind;
use crate::telemetry::lograte::LineBudget;
use axum::body::Body;
use axum::extract::State;
use axum::http::{Request, Response};
use axum::middleware::Next;
use std::time::Instant;

/// Failed-request lines written at info per second; the rest are counted, and at debug
/// level every request is logged anyway.
pub const FAILED_LINES_PER_SECOND: u32 = 10;

static FAILED: LineBudget = LineBudget::new("failed_request", FAILED_LINES_PER_SECOND);

pub(super) async fn logging(State(kind): State<ServerKind>, req: Request<Body>, next: Next) -> Response<Body> {
    let started = Instant::now();
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let resp = next.run(req).await;
    let status = resp.status().as_u16();
    let grpc_status = resp.headers().get("grpc-status").and_then(|v| v.to_str().ok()).unwrap_or("");
    let failed = status >= 400 || (!grpc_status.is_empty() && grpc_status != "0");
    let elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
    if tracing::enabled!(tracing::Level::DEBUG) {
        tracing::debug!(server = ?kind, %method, %path, status, grpc_status, elapsed_ms, "request");
    } else if failed && resp.extensions().get::<crate::receiver::RefusalLogged>().is_none() {
        if let Some(suppressed) = FAILED.admit() {
            tracing::info!(server = ?kind, %method, %path, status, grpc_status, elapsed_ms, suppressed, "request failed");
        }
    }
    resp
}
