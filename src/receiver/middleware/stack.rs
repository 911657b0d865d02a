//! The middleware lists applied in order to each server's router, and what they need.

use crate::config::{ConnLimit, MiddlewareSpec, ServerKind};
use crate::receiver::middleware::auth::AuthLayerState;
use crate::receiver::middleware::throttle::ThrottleLayer;
use crate::receiver::middleware::{auth, cors, decompress, grpc_status, logging, maxbytes};
use crate::throttle::classify::RouteRegistry;
use crate::throttle::manager::ThrottleManager;
use axum::middleware::from_fn_with_state;
use axum::Router;
use std::sync::Arc;

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
    pub bodies: Arc<crate::receiver::middleware::budget::BodyBudget>,
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
    router =
        router.layer(from_fn_with_state((ServerKind::Http, Arc::clone(&ctx.bodies)), crate::receiver::middleware::charge::charge_bodies));
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
    router =
        router.layer(from_fn_with_state((ServerKind::Grpc, Arc::clone(&ctx.bodies)), crate::receiver::middleware::charge::charge_bodies));
    if let Some(auth) = auth {
        router = router.layer(auth::AuthLayer::new(ServerKind::Grpc, auth));
    }
    // Outermost: what is not gRPC is answered before anything else looks at it.
    router = router.layer(axum::middleware::from_fn(grpc_status::grpc_only));
    (router, listener)
}
