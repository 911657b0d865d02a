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

/// A request to the gRPC server that is not gRPC (its content-type does not start with
/// `application/grpc`) gets HTTP 415 with a line of text, as the gRPC protocol asks,
/// instead of a gRPC status its sender cannot read.
pub(super) async fn grpc_only(req: Request<Body>, next: Next) -> Response<Body> {
    let is_grpc = req
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.get(..16).is_some_and(|p| p.eq_ignore_ascii_case("application/grpc")));
    if is_grpc {
        return next.run(req).await;
    }
    // The body is taken in first (a little of it, briefly), as a request answered at its
    // end: the stream's frames are then still checked while it is open (flow control,
    // content-length), as on the HTTP port, rather than meeting a stream already closed.
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(1),
        crate::receiver::connection::hygiene::read_body(req.into_body(), 64 * 1024),
    )
    .await;
    let mut resp = Response::new(Body::from("this is weir's OTLP/gRPC port: requests need content-type application/grpc\n"));
    *resp.status_mut() = axum::http::StatusCode::UNSUPPORTED_MEDIA_TYPE;
    resp.headers_mut().insert(axum::http::header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    resp
}
