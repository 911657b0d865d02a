//! The ordered middleware lists `receiver.http_server.middlewares` and
//! `receiver.grpc_server.middlewares`, items in the `name;key=value;key=value` form.
//!
//! Order rule: the list is applied first to last, each item wrapping what came before,
//! so the LAST item wraps outermost and runs FIRST on a request. `throttle` listed after
//! `content_decompressor` therefore runs before it. Authentication (when
//! `receiver.auth.tokens` is set) always wraps outside the whole list.

mod auth;
mod cors;
mod decompress;
pub mod drain;
mod grpc_status;
mod logging;
mod maxbytes;
pub mod throttle;

pub use auth::AuthLayerState;

use super::decode::Format;
use super::response::ApiError;
use super::Tenant;
use crate::config::{ConnLimit, MiddlewareSpec, ServerKind};
use crate::signal::Signal;
use crate::throttle::classify::RouteRegistry;
use crate::throttle::manager::ThrottleManager;
use axum::body::Body;
use axum::http::{header, Request, Response};
use axum::middleware::from_fn_with_state;
use axum::Router;
use std::sync::Arc;
use throttle::ThrottleLayer;

/// Settings the listener (not the router) applies.
#[derive(Debug, Clone, Copy, Default)]
pub struct ListenerSettings {
    /// Connection cap.
    pub max_conns: Option<ConnLimit>,
}

/// What the middlewares need to know.
#[derive(Clone)]
pub struct HttpContext {
    /// Limit on the body after decompression.
    pub max_request_body_bytes: usize,
    /// The throttle's decision maker.
    pub throttle: Arc<ThrottleManager>,
    /// The admission layers.
    pub admission: Arc<crate::throttle::AdmissionClock>,
    /// Route → record type, filled by the receivers.
    pub routes: Arc<RouteRegistry>,
    /// The pipeline, whose byte budget the throttle checks before a body is read.
    pub queue: Option<Arc<crate::pipeline::Pipeline>>,
    /// The memory budget for request bodies in flight, shared by both servers.
    pub bodies: Arc<crate::receiver::budget::BodyBudget>,
    /// `receiver.max_decompression_ratio`.
    pub decompression_ratio: u32,
    /// The gRPC server's message limit (with `maxbytes` applied).
    pub grpc_max_message_bytes: usize,
}

/// Applies the list to an HTTP router; returns it and the listener settings.
pub fn apply_http(
    mut router: Router,
    specs: &[MiddlewareSpec],
    ctx: &HttpContext,
    auth: Option<AuthLayerState>,
) -> (Router, ListenerSettings) {
    let mut listener = ListenerSettings::default();
    for spec in specs {
        router = match spec {
            MiddlewareSpec::Logging => router.layer(from_fn_with_state(ServerKind::Http, logging::logging)),
            MiddlewareSpec::Cors { allowed_origins } => router.layer(from_fn_with_state(cors::CorsState::new(allowed_origins), cors::cors)),
            MiddlewareSpec::ContentDecompressor => router.layer(from_fn_with_state(
                decompress::Bounds { limit: ctx.max_request_body_bytes, ratio: ctx.decompression_ratio },
                decompress::content_decompressor,
            )),
            MiddlewareSpec::MaxBytes { max_request_bytes } => {
                router.layer(from_fn_with_state((ServerKind::Http, *max_request_bytes), maxbytes::maxbytes))
            }
            MiddlewareSpec::MaxConns(limit) => {
                listener.max_conns = Some(*limit);
                router
            }
            MiddlewareSpec::Throttle => router.layer(
                ThrottleLayer::new(Arc::clone(&ctx.throttle), Arc::clone(&ctx.admission), Arc::clone(&ctx.routes), ServerKind::Http)
                    .with_queue(ctx.queue.clone()),
            ),
        };
    }
    router = router.layer(from_fn_with_state((ServerKind::Http, Arc::clone(&ctx.bodies)), crate::receiver::budget::charge_bodies));
    if let Some(auth) = auth {
        router = router.layer(auth::AuthLayer::new(ServerKind::Http, auth));
    }
    (router, listener)
}

/// gRPC settings that tonic applies per service.
#[derive(Debug, Clone, Copy)]
pub struct GrpcSettings {
    /// Accept gzip / zstd compressed messages.
    pub accept_compressed: bool,
    /// Largest message, compressed or not.
    pub max_message_bytes: usize,
}

/// Reads the service-level settings out of a gRPC list.
pub fn grpc_settings(specs: &[MiddlewareSpec], max_recv_msg_size_bytes: usize) -> GrpcSettings {
    let mut s = GrpcSettings { accept_compressed: false, max_message_bytes: max_recv_msg_size_bytes };
    for spec in specs {
        match spec {
            MiddlewareSpec::ContentDecompressor => s.accept_compressed = true,
            MiddlewareSpec::MaxBytes { max_request_bytes } => s.max_message_bytes = s.max_message_bytes.min(*max_request_bytes),
            _ => {}
        }
    }
    s
}

/// Applies the list to the gRPC router (tonic's routes as axum).
pub fn apply_grpc(
    mut router: Router,
    specs: &[MiddlewareSpec],
    ctx: &HttpContext,
    auth: Option<AuthLayerState>,
) -> (Router, ListenerSettings) {
    let mut listener = ListenerSettings::default();
    // Innermost, always: tonic reports an oversized frame as OUT_OF_RANGE; OTLP clients
    // and the specification expect RESOURCE_EXHAUSTED.
    router = router.layer(axum::middleware::from_fn(grpc_status::oversize_as_resource_exhausted));
    for spec in specs {
        router = match spec {
            MiddlewareSpec::Logging => router.layer(from_fn_with_state(ServerKind::Grpc, logging::logging)),
            MiddlewareSpec::MaxConns(limit) => {
                listener.max_conns = Some(*limit);
                router
            }
            MiddlewareSpec::Throttle => router.layer(
                ThrottleLayer::new(Arc::clone(&ctx.throttle), Arc::clone(&ctx.admission), Arc::clone(&ctx.routes), ServerKind::Grpc)
                    .with_queue(ctx.queue.clone()),
            ),
            // gzip and zstd messages are inflated here, under the same bounds as on the
            // HTTP server (tonic's own inflating knows no ratio and no budget).
            MiddlewareSpec::ContentDecompressor => router.layer(from_fn_with_state(
                decompress::Bounds { limit: ctx.grpc_max_message_bytes, ratio: ctx.decompression_ratio },
                decompress::grpc_inflate,
            )),
            // Applied by tonic per service (see grpc_settings); cors is refused at parse.
            MiddlewareSpec::MaxBytes { .. } | MiddlewareSpec::Cors { .. } => router,
        };
    }
    router = router.layer(from_fn_with_state((ServerKind::Grpc, Arc::clone(&ctx.bodies)), crate::receiver::budget::charge_bodies));
    if let Some(auth) = auth {
        router = router.layer(auth::AuthLayer::new(ServerKind::Grpc, auth));
    }
    // Outermost: what is not gRPC is answered before anything else looks at it.
    router = router.layer(axum::middleware::from_fn(grpc_status::grpc_only));
    (router, listener)
}

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
    crate::receiver::count_rejection(kind, signal, err.reason(), tenant, started.elapsed(), &err);
    let mut resp = match kind {
        ServerKind::Http => {
            let ct = req.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
            err.into_http(Format::for_errors(ct))
        }
        ServerKind::Grpc => err.into_grpc_http(),
    };
    resp.extensions_mut().insert(crate::receiver::RefusalLogged);
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
