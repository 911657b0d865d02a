//! How a middleware answers a request it refuses (counted, logged, in the request's own
//! format), and what it reads from a request to decide: its declared length and deadline.

use crate::config::ServerKind;
use crate::receiver::format::Format;
use crate::receiver::response::ApiError;
use crate::receiver::tenant::Tenant;
use crate::signal::Signal;
use axum::body::Body;
use axum::http::{header, Request, Response};

/// The body length a request declares in `Content-Length`, if it declares one.
pub(crate) fn declared_len<B>(req: &Request<B>) -> Option<u64> {
    req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok())
}

/// How long the client waits for its answer, when the request says so: gRPC's
/// `grpc-timeout` (up to eight digits and a unit: `H`, `M`, `S`, `m`, `u`, `n`), which
/// gRPC clients send from their call deadline (the OpenTelemetry exporters' timeout,
/// 10 s by default; the Collector's, 5 s). `None` when absent or malformed: a malformed
/// value is not this layer's to refuse, and weir then assumes no deadline.
pub(crate) fn stated_deadline<B>(req: &Request<B>) -> Option<std::time::Duration> {
    parse_grpc_timeout(req.headers().get("grpc-timeout")?.as_bytes())
}

/// Parses a `grpc-timeout` value (see [`stated_deadline`]).
fn parse_grpc_timeout(v: &[u8]) -> Option<std::time::Duration> {
    let (&unit, digits) = v.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = digits.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    use std::time::Duration;
    Some(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

/// Answers a request refused before any timing started (the throttle).
pub(crate) fn reject_counted(kind: ServerKind, req: &Request<Body>, err: ApiError) -> Response<Body> {
    reject(kind, req, err, std::time::Instant::now())
}

/// Answers a request from a middleware, counting it as rejected.
pub fn reject(kind: ServerKind, req: &Request<Body>, err: ApiError, started: std::time::Instant) -> Response<Body> {
    let signal = crate::receiver::routes::classify(req.uri().path()).map_or("unknown", Signal::as_str);
    let tenant = req.extensions().get::<Tenant>();
    crate::receiver::requests::count_rejection(kind, signal, err.reason(), tenant, started.elapsed(), &err);
    let mut resp = match kind {
        ServerKind::Http => {
            let ct = req.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
            err.into_http(Format::for_errors(ct))
        }
        ServerKind::Grpc => err.into_grpc_http(),
    };
    resp.extensions_mut().insert(crate::receiver::requests::RefusalLogged);
    resp
}

#[cfg(test)]
mod tests {
    use super::parse_grpc_timeout;
    use std::time::Duration;

    #[test]
    fn grpc_timeout_is_read_in_every_unit_and_anything_else_is_no_deadline() {
        assert_eq!(parse_grpc_timeout(b"9999868u"), Some(Duration::from_micros(9_999_868)), "tonic's 10 s");
        assert_eq!(parse_grpc_timeout(b"2H"), Some(Duration::from_secs(7200)));
        assert_eq!(parse_grpc_timeout(b"3M"), Some(Duration::from_secs(180)));
        assert_eq!(parse_grpc_timeout(b"10S"), Some(Duration::from_secs(10)));
        assert_eq!(parse_grpc_timeout(b"5000m"), Some(Duration::from_secs(5)));
        assert_eq!(parse_grpc_timeout(b"99999999n"), Some(Duration::from_nanos(99_999_999)));
        for bad in [&b""[..], b"S", b"10", b"10s", b"123456789S", b"-1S", b"1.5S", b" 1S"] {
            assert_eq!(parse_grpc_timeout(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
