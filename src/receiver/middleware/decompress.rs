//! `content_decompressor`: reads a compressed body (within the wire limit), decompresses
//! it within the decompressed limit, and hands on the plain bytes. Bodies without a
//! Content-Encoding pass through untouched.

use super::{reject, ServerKind};
use crate::receiver::compression::{decompress, DecompressError, Encoding};
use crate::receiver::http::read_body;
use crate::receiver::response::ApiError;
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderValue, Request, Response};
use axum::middleware::Next;
use std::time::Instant;

pub(super) async fn content_decompressor(State(limit): State<usize>, req: Request<Body>, next: Next) -> Response<Body> {
    let started = Instant::now();
    let Some(value) = req.headers().get(header::CONTENT_ENCODING) else {
        return next.run(req).await;
    };
    let value = value.to_str().unwrap_or("<non-ascii>").to_string();
    let encoding = match Encoding::parse(&value) {
        Some(Encoding::Identity) => return next.run(req).await,
        Some(e) => e,
        None => {
            let err = ApiError::BadRequest(format!(
                "unsupported Content-Encoding `{value}` (accepted: gzip, deflate, zstd, snappy, x-snappy-framed, identity)"
            ));
            return reject(ServerKind::Http, &req, err, started);
        }
    };
    let (mut parts, body) = req.into_parts();
    let wire = match read_body(body, limit).await {
        Ok(b) => b,
        Err(err) => return reject(ServerKind::Http, &Request::from_parts(parts, Body::empty()), err, started),
    };
    metrics::counter!(crate::telemetry::names::DECOMPRESSED_BYTES, "encoding" => encoding.as_str()).increment(wire.len() as u64);
    match decompress(encoding, &wire, limit) {
        Ok(plain) => {
            parts.headers.remove(header::CONTENT_ENCODING);
            parts.headers.insert(header::CONTENT_LENGTH, HeaderValue::from(plain.len()));
            next.run(Request::from_parts(parts, Body::from(plain))).await
        }
        Err(e) => {
            let err = match e {
                DecompressError::TooLarge { .. } => ApiError::PayloadTooLarge(e.to_string()),
                DecompressError::Corrupt { .. } => ApiError::BadRequest(e.to_string()),
            };
            reject(ServerKind::Http, &Request::from_parts(parts, Body::empty()), err, started)
        }
    }
}
