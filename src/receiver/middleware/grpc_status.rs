//! Rewrites tonic's OUT_OF_RANGE for an oversized message into RESOURCE_EXHAUSTED, the
//! code the OTLP specification and grpc-go use for it.

use axum::body::Body;
use axum::http::{HeaderValue, Request, Response};
use axum::middleware::Next;

pub(super) async fn oversize_as_resource_exhausted(req: Request<Body>, next: Next) -> Response<Body> {
    let mut resp = next.run(req).await;
    let is_oversize = resp.headers().get("grpc-status").is_some_and(|v| v == "11")
        && resp
            .headers()
            .get("grpc-message")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|m| m.contains("message%20length%20too%20large") || m.contains("message length too large"));
    if is_oversize {
        resp.headers_mut().insert("grpc-status", HeaderValue::from_static("8"));
    }
    resp
}
