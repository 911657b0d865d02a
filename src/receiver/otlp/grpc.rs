//! OTLP/gRPC: the four Export methods, served with tonic's gRPC framing (compression,
//! message size, status trailers) inside one axum router, so both servers share the
//! listener, TLS and middleware code.
//!
//! Requests are not decoded by tonic: the message bytes go to [`decode::from_protobuf`],
//! which checks and counts traces, metrics and logs on the wire and keeps their bytes
//! (profiles are decoded), exactly as the HTTP receiver does.

use crate::config::ServerKind;
use crate::otlp::codec::BytesCodec;
use crate::receiver::format::Format;
use crate::receiver::middleware::GrpcSettings;
use crate::receiver::otlp::decode::{self, QUOTA_MESSAGE};
use crate::receiver::response::ApiError;
use crate::receiver::{count_request, Ingest, Tenant};
use crate::signal::Signal;
use crate::telemetry::names;
use axum::body::Body;
use bytes::Bytes;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::time::Instant;
use tonic::codec::CompressionEncoding;
use tonic::{Request, Response, Status};

/// One signal's Export method.
#[derive(Clone)]
struct Export {
    ingest: Ingest,
    signal: Signal,
}

impl Export {
    async fn handle(&self, req: Request<Bytes>) -> Result<Response<Bytes>, Status> {
        let started = Instant::now();
        let tenant = req.extensions().get::<Tenant>().cloned();
        let signal = self.signal;
        let body = req.into_inner();
        metrics::counter!(names::REQUEST_BYTES, "protocol" => "grpc", "signal" => signal.as_str()).increment(body.len() as u64);
        let result = match decode::from_protobuf(signal, body) {
            Ok(payload) => self.ingest.accept_from(payload, ServerKind::Grpc, tenant.as_ref()).await,
            Err(e) => Err(e),
        };
        match result {
            Ok(rejected) => {
                count_request(ServerKind::Grpc, signal.as_str(), "accepted", tenant.as_ref(), started.elapsed());
                // A full success is the empty message: zero bytes.
                let body = if rejected > 0 {
                    Bytes::from(decode::encode_partial(signal, Format::Protobuf, rejected, QUOTA_MESSAGE))
                } else {
                    Bytes::new()
                };
                Ok(Response::new(body))
            }
            Err(e) => {
                crate::receiver::count_rejection(ServerKind::Grpc, signal.as_str(), e.reason(), tenant.as_ref(), started.elapsed(), &e);
                Err(e.into_grpc_status())
            }
        }
    }
}

impl tonic::server::UnaryService<Bytes> for Export {
    type Response = Bytes;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Bytes>, Status>> + Send>>;

    fn call(&mut self, req: Request<Bytes>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { this.handle(req).await })
    }
}

/// The four Export methods as an axum router (no middlewares yet).
pub fn router(ingest: Ingest, settings: GrpcSettings) -> axum::Router {
    let mut router = axum::Router::new();
    for signal in Signal::ALL {
        let export = Export { ingest: ingest.clone(), signal };
        let service = tower::service_fn(move |req: axum::http::Request<Body>| {
            let export = export.clone();
            async move {
                let mut grpc = tonic::server::Grpc::new(BytesCodec).max_decoding_message_size(settings.max_message_bytes);
                if settings.accept_compressed {
                    grpc = grpc.accept_compressed(CompressionEncoding::Gzip).accept_compressed(CompressionEncoding::Zstd);
                }
                Ok::<_, Infallible>(grpc.unary(export, req).await)
            }
        });
        router = router.route_service(signal.grpc_path(), service);
    }
    router.fallback(unknown_method)
}

async fn unknown_method(req: axum::http::Request<Body>) -> axum::response::Response {
    ApiError::NotFound(req.uri().path().to_string()).into_grpc_http()
}
