//! OTLP/gRPC: the four Export services (tonic), as one axum router so both servers
//! share the listener, TLS and middleware code.

use super::decode::QUOTA_MESSAGE;
use super::middleware::GrpcSettings;
use super::response::ApiError;
use super::{count_request, Ingest, Protocol, Tenant};
use crate::signal::Payload;
use crate::telemetry::names;
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_server::{LogsService, LogsServiceServer};
use opentelemetry_proto::tonic::collector::logs::v1::{ExportLogsPartialSuccess, ExportLogsServiceRequest, ExportLogsServiceResponse};
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{MetricsService, MetricsServiceServer};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsPartialSuccess, ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::profiles::v1development::profiles_service_server::{ProfilesService, ProfilesServiceServer};
use opentelemetry_proto::tonic::collector::profiles::v1development::{
    ExportProfilesPartialSuccess, ExportProfilesServiceRequest, ExportProfilesServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse};
use std::time::Instant;
use tonic::codec::CompressionEncoding;
use tonic::{Request, Response, Status};

/// Implements all four services over one [`Ingest`].
#[derive(Clone)]
pub struct OtlpGrpc {
    ingest: Ingest,
}

impl OtlpGrpc {
    /// Returns how many items a tenant's item quota refused (0: all accepted).
    fn handle<T>(&self, req: Request<T>, wrap: impl FnOnce(T) -> Payload) -> Result<i64, Status> {
        let started = Instant::now();
        let tenant = req.extensions().get::<Tenant>().cloned();
        let payload = wrap(req.into_inner());
        let signal = payload.signal();
        metrics::counter!(names::REQUEST_BYTES, "protocol" => "grpc", "signal" => signal.as_str()).increment(payload.encoded_len() as u64);
        match self.ingest.accept_from(payload, Protocol::Grpc, tenant.as_ref()) {
            Ok(rejected) => {
                count_request(Protocol::Grpc, signal.as_str(), "accepted", tenant.as_ref(), started.elapsed());
                Ok(rejected as i64)
            }
            Err(e) => {
                metrics::counter!(names::REQUESTS_REJECTED, "protocol" => "grpc", "signal" => signal.as_str(), "reason" => e.reason())
                    .increment(1);
                count_request(Protocol::Grpc, signal.as_str(), "rejected", tenant.as_ref(), started.elapsed());
                Err(e.into_grpc_status())
            }
        }
    }
}

#[tonic::async_trait]
impl TraceService for OtlpGrpc {
    async fn export(&self, req: Request<ExportTraceServiceRequest>) -> Result<Response<ExportTraceServiceResponse>, Status> {
        let n = self.handle(req, Payload::Traces)?;
        let partial_success = (n > 0).then(|| ExportTracePartialSuccess { rejected_spans: n, error_message: QUOTA_MESSAGE.into() });
        Ok(Response::new(ExportTraceServiceResponse { partial_success }))
    }
}

#[tonic::async_trait]
impl MetricsService for OtlpGrpc {
    async fn export(&self, req: Request<ExportMetricsServiceRequest>) -> Result<Response<ExportMetricsServiceResponse>, Status> {
        let n = self.handle(req, Payload::Metrics)?;
        let partial_success = (n > 0).then(|| ExportMetricsPartialSuccess { rejected_data_points: n, error_message: QUOTA_MESSAGE.into() });
        Ok(Response::new(ExportMetricsServiceResponse { partial_success }))
    }
}

#[tonic::async_trait]
impl LogsService for OtlpGrpc {
    async fn export(&self, req: Request<ExportLogsServiceRequest>) -> Result<Response<ExportLogsServiceResponse>, Status> {
        let n = self.handle(req, Payload::Logs)?;
        let partial_success = (n > 0).then(|| ExportLogsPartialSuccess { rejected_log_records: n, error_message: QUOTA_MESSAGE.into() });
        Ok(Response::new(ExportLogsServiceResponse { partial_success }))
    }
}

#[tonic::async_trait]
impl ProfilesService for OtlpGrpc {
    async fn export(&self, req: Request<ExportProfilesServiceRequest>) -> Result<Response<ExportProfilesServiceResponse>, Status> {
        let n = self.handle(req, Payload::Profiles)?;
        let partial_success = (n > 0).then(|| ExportProfilesPartialSuccess { rejected_profiles: n, error_message: QUOTA_MESSAGE.into() });
        Ok(Response::new(ExportProfilesServiceResponse { partial_success }))
    }
}

/// The four services as an axum router (no middlewares yet).
pub fn router(ingest: Ingest, settings: GrpcSettings) -> axum::Router {
    let svc = OtlpGrpc { ingest };
    let max = settings.max_message_bytes;
    macro_rules! configure {
        ($server:expr) => {{
            let s = $server.max_decoding_message_size(max);
            if settings.accept_compressed {
                s.accept_compressed(CompressionEncoding::Gzip).accept_compressed(CompressionEncoding::Zstd)
            } else {
                s
            }
        }};
    }
    let routes = tonic::service::Routes::new(configure!(TraceServiceServer::new(svc.clone())))
        .add_service(configure!(MetricsServiceServer::new(svc.clone())))
        .add_service(configure!(LogsServiceServer::new(svc.clone())))
        .add_service(configure!(ProfilesServiceServer::new(svc)))
        .prepare();
    routes.into_axum_router().fallback(unknown_method)
}

async fn unknown_method(req: axum::http::Request<axum::body::Body>) -> axum::response::Response {
    ApiError::NotFound(req.uri().path().to_string()).into_grpc_http()
}
