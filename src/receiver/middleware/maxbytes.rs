//! `maxbytes;maxRequestBytes=N`: a wire-body cap. A declared Content-Length over the cap
//! is refused before reading; a streamed body is cut off at the cap (413 either way).

use crate::config::ServerKind;
use crate::receiver::middleware::refuse::reject;
use crate::receiver::response::ApiError;
use axum::body::Body;
use axum::extract::State;
use axum::http::{Request, Response};
use axum::middleware::Next;
use http_body_util::Limited;
use std::time::Instant;

pub(super) async fn maxbytes(State((kind, limit)): State<(ServerKind, usize)>, req: Request<Body>, next: Next) -> Response<Body> {
    let declared = crate::receiver::middleware::refuse::declared_len(&req);
    if declared.is_some_and(|n| n > limit as u64) {
        let err = ApiError::PayloadTooLarge(format!("request body of {} bytes exceeds maxRequestBytes={limit}", declared.unwrap_or(0)));
        return reject(kind, &req, err, Instant::now());
    }
    next.run(req.map(|b| Body::new(Limited::new(b, limit)))).await
}
