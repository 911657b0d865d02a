//! `content_decompressor`: reads a compressed body (within the wire limit), decompresses
//! it within the decompressed limit, and hands on the plain bytes. Bodies without a
//! Content-Encoding pass through untouched. On the gRPC server the same is done to each
//! compressed message (`grpc-encoding` gzip or zstd), so both servers inflate under the
//! same bounds:
//!
//! - the body limit (`max_request_body_bytes` / `max_recv_msg_size_bytes`);
//! - `receiver.max_decompression_ratio` times the wire size (past 1 MiB of output);
//! - the room left in the body budget (`receiver.max_body_bytes_in_flight`), which the
//!   inflated bytes are charged to while the request lives.
//!
//! A body of more than [`BLOCKING_FROM`] wire bytes is inflated on the blocking pool:
//! inflating 64 MiB takes a core for a fifth of a second, and on a runtime worker that
//! stalls every connection that worker serves.

use crate::compression::{decompress, stated_size, DecompressError, Encoding};
use crate::config::ServerKind;
use crate::receiver::connection::hygiene::read_body;
use crate::receiver::middleware::budget::Charge;
use crate::receiver::middleware::refuse::reject;
use crate::receiver::response::ApiError;
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderValue, Request, Response};
use axum::middleware::Next;
use bytes::Bytes;
use std::sync::Arc;
use std::time::Instant;

/// Wire bodies from this size on are inflated off the runtime's workers.
pub const BLOCKING_FROM: usize = 64 * 1024;

/// Output never refused for its ratio (a tiny body of zeros compresses a lot, too).
const RATIO_FREE_BYTES: usize = 1 << 20;

/// The decompressor's bounds.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// The largest body (wire and inflated).
    pub limit: usize,
    /// `max_decompression_ratio` (0 = none).
    pub ratio: u32,
}

/// Inflates `wire` within `bounds` and the room `charge` has, charging the result.
async fn inflate(encoding: Encoding, wire: Bytes, bounds: Bounds, charge: Option<&Arc<Charge>>) -> Result<Vec<u8>, ApiError> {
    metrics::counter!(crate::telemetry::names::DECOMPRESSED_BYTES, "encoding" => encoding.as_str()).increment(wire.len() as u64);
    let by_ratio = if bounds.ratio == 0 { usize::MAX } else { wire.len().saturating_mul(bounds.ratio as usize).max(RATIO_FREE_BYTES) };
    let room = charge.map_or(u64::MAX, |c| c.room()).min(usize::MAX as u64) as usize;
    let limit = bounds.limit.min(by_ratio).min(room);
    let wire_len = wire.len();
    // What the body says it inflates to, when it says: past the limit, refused without
    // inflating a byte (a plain zip bomb costs nothing; one that lies still stops at
    // the limit while inflating).
    let stated = stated_size(encoding, &wire);
    let result = if stated.is_some_and(|n| n > limit as u64) {
        Err(DecompressError::TooLarge { limit })
    } else if wire_len >= BLOCKING_FROM {
        tokio::task::spawn_blocking(move || decompress(encoding, &wire, limit)).await.unwrap_or_else(|e| {
            Err(DecompressError::Corrupt { encoding: encoding.as_str(), message: format!("decompression failed: {e}") })
        })
    } else {
        decompress(encoding, &wire, limit)
    };
    match result {
        Ok(plain) => {
            if let Some(c) = charge {
                // It was bounded by the room; another request may have taken some since,
                // but the bytes exist either way and are counted. The wire bytes are done
                // with.
                c.force(plain.len() as u64);
                c.give_back(wire_len as u64);
            }
            Ok(plain)
        }
        Err(DecompressError::TooLarge { .. }) if limit == room && room < bounds.limit.min(by_ratio) => {
            Err(charge.map_or_else(|| ApiError::PayloadTooLarge("over the body budget".into()), |c| c.refusal()))
        }
        Err(DecompressError::TooLarge { .. }) if limit == by_ratio && by_ratio < bounds.limit => Err(ApiError::PayloadTooLarge(format!(
            "{} body of {wire_len} bytes inflates past {} times its size (receiver.max_decompression_ratio)",
            encoding.as_str(),
            bounds.ratio
        ))),
        // A truncated body's trailer is noise, so say what weir read there.
        Err(e @ DecompressError::TooLarge { .. }) => Err(ApiError::PayloadTooLarge(match stated {
            Some(n) if n > limit as u64 => format!("{e} ({} body states {n} bytes)", encoding.as_str()),
            _ => e.to_string(),
        })),
        Err(e @ DecompressError::Corrupt { .. }) => Err(ApiError::BadRequest(e.to_string())),
    }
}

pub(super) async fn content_decompressor(State(bounds): State<Bounds>, req: Request<Body>, next: Next) -> Response<Body> {
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
    let wire = match read_body(body, bounds.limit).await {
        Ok(b) => b,
        Err(err) => return reject(ServerKind::Http, &Request::from_parts(parts, Body::empty()), err, started),
    };
    let charge = parts.extensions.get::<Arc<Charge>>().cloned();
    match inflate(encoding, wire, bounds, charge.as_ref()).await {
        Ok(plain) => {
            parts.headers.remove(header::CONTENT_ENCODING);
            parts.headers.insert(header::CONTENT_LENGTH, HeaderValue::from(plain.len()));
            next.run(Request::from_parts(parts, Body::from(plain))).await
        }
        Err(err) => reject(ServerKind::Http, &Request::from_parts(parts, Body::empty()), err, started),
    }
}

/// The gRPC side: compressed messages (`grpc-encoding` gzip or zstd) are inflated here
/// and handed on uncompressed. Other encodings go on to tonic, which answers
/// UNIMPLEMENTED with the encodings it accepts.
pub(super) async fn grpc_inflate(State(bounds): State<Bounds>, req: Request<Body>, next: Next) -> Response<Body> {
    let started = Instant::now();
    let encoding = match req.headers().get("grpc-encoding").and_then(|v| v.to_str().ok()) {
        Some("gzip") => Encoding::Gzip,
        Some("zstd") => Encoding::Zstd,
        _ => return next.run(req).await,
    };
    let (mut parts, body) = req.into_parts();
    // Room for the framing of a few messages beyond the message limit.
    let wire = match read_body(body, bounds.limit.saturating_add(64)).await {
        Ok(b) => b,
        Err(err) => return reject(ServerKind::Grpc, &Request::from_parts(parts, Body::empty()), err, started),
    };
    let charge = parts.extensions.get::<Arc<Charge>>().cloned();
    // The messages travel on as chunks: a new 5-byte header and the inflated bytes
    // where a message was compressed, the original frame where it was not. tonic
    // gathers the chunks into its own buffer anyway, so joining them here would copy
    // every inflated byte once more.
    let mut chunks: Vec<Bytes> = Vec::with_capacity(2);
    let mut at = 0;
    while at < wire.len() {
        let Some(head) = wire.get(at..at + 5) else {
            let err = ApiError::BadRequest("truncated gRPC message header".into());
            return reject(ServerKind::Grpc, &Request::from_parts(parts, Body::empty()), err, started);
        };
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        if wire.len() - (at + 5) < len {
            let err = ApiError::BadRequest(format!("gRPC message of {len} bytes truncated"));
            return reject(ServerKind::Grpc, &Request::from_parts(parts, Body::empty()), err, started);
        }
        if head[0] == 1 {
            match inflate(encoding, wire.slice(at + 5..at + 5 + len), bounds, charge.as_ref()).await {
                Ok(plain) => {
                    let mut header = [0u8; 5];
                    header[1..].copy_from_slice(&(plain.len() as u32).to_be_bytes());
                    chunks.push(Bytes::copy_from_slice(&header));
                    chunks.push(Bytes::from(plain));
                }
                Err(err) => return reject(ServerKind::Grpc, &Request::from_parts(parts, Body::empty()), err, started),
            }
        } else {
            chunks.push(wire.slice(at..at + 5 + len));
        }
        at += 5 + len;
    }
    parts.headers.remove("grpc-encoding");
    let body = Body::from_stream(futures_util::stream::iter(chunks.into_iter().map(Ok::<_, std::convert::Infallible>)));
    next.run(Request::from_parts(parts, body)).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    const BOUNDS: Bounds = Bounds { limit: 64 << 20, ratio: 100 };

    /// A bomb that states its size is refused on the statement; one whose trailer lies
    /// is refused where the ratio stops the inflating. Either way the answer names the
    /// ratio. Honest bodies pass.
    #[tokio::test]
    async fn bombs_stop_at_the_ratio_whatever_they_state() {
        let bomb = gzip(&vec![0u8; 30 << 20]);
        assert_eq!(stated_size(Encoding::Gzip, &bomb), Some(30 << 20));
        let err = inflate(Encoding::Gzip, Bytes::from(bomb.clone()), BOUNDS, None).await.unwrap_err();
        assert!(matches!(&err, ApiError::PayloadTooLarge(m) if m.contains("max_decompression_ratio")), "{err:?}");
        let mut liar = bomb;
        let n = liar.len();
        liar[n - 4..].copy_from_slice(&1000u32.to_le_bytes());
        assert_eq!(stated_size(Encoding::Gzip, &liar), Some(1000));
        let err = inflate(Encoding::Gzip, Bytes::from(liar), BOUNDS, None).await.unwrap_err();
        assert!(matches!(&err, ApiError::PayloadTooLarge(m) if m.contains("max_decompression_ratio")), "{err:?}");
        // One-shot compression states the content size (streaming may not).
        let zbomb = zstd::bulk::compress(&vec![0u8; 30 << 20], 3).unwrap();
        assert_eq!(stated_size(Encoding::Zstd, &zbomb), Some(30 << 20));
        let err = inflate(Encoding::Zstd, Bytes::from(zbomb), BOUNDS, None).await.unwrap_err();
        assert!(matches!(&err, ApiError::PayloadTooLarge(m) if m.contains("max_decompression_ratio")), "{err:?}");
        let honest = b"otlp ".repeat(10_000);
        assert_eq!(inflate(Encoding::Gzip, Bytes::from(gzip(&honest)), BOUNDS, None).await.unwrap(), honest);
    }
}
