//! The ONE place where errors become HTTP statuses and gRPC codes.

use super::decode::Format;
use crate::rpc;
use axum::body::Body;
use axum::http::{header, HeaderValue, Response, StatusCode};
use prost::Message;
use std::time::Duration;
use tonic::Code;

/// Why a request was not accepted.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ApiError {
    /// The body could not be decoded, or the encoding is unknown.
    #[error("{0}")]
    BadRequest(String),
    /// The content type (or a known content encoding that is not enabled) is not supported.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// The body, on the wire or decompressed, is over the limit.
    #[error("{0}")]
    PayloadTooLarge(String),
    /// No or a wrong token.
    #[error("{0}")]
    Unauthenticated(String),
    /// Not a POST.
    #[error("method {0} not allowed; OTLP/HTTP accepts POST")]
    MethodNotAllowed(String),
    /// No such route.
    #[error("no such path: {0}")]
    NotFound(String),
    /// The pipeline's byte budget is exhausted.
    #[error("{message}")]
    QueueFull {
        /// What happened.
        message: String,
        /// When to come back.
        retry_after: Duration,
    },
    /// Shutting down.
    #[error("weir is shutting down")]
    ShuttingDown,
    /// The throttle refused the request: `open` means the breaker is open (503/UNAVAILABLE
    /// semantics on HTTP), otherwise the request was shed (429).
    #[error("{message}")]
    Throttled {
        /// What happened.
        message: String,
        /// When to come back.
        retry_after: Duration,
        /// Breaker open (503) rather than shedding (429).
        open: bool,
    },
}

/// Every value [`ApiError::reason`] gives.
pub const REASONS: [&str; 10] = [
    "bad_request",
    "unsupported_media_type",
    "too_large",
    "unauthenticated",
    "method_not_allowed",
    "not_found",
    "queue_full",
    "shutting_down",
    "throttle_open",
    "throttle_shed",
];

impl ApiError {
    /// The HTTP status.
    pub fn http_status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            ApiError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::QueueFull { .. } | ApiError::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Throttled { open: true, .. } => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Throttled { open: false, .. } => StatusCode::TOO_MANY_REQUESTS,
        }
    }

    /// The gRPC code.
    pub fn grpc_code(&self) -> Code {
        match self {
            ApiError::BadRequest(_) | ApiError::UnsupportedMediaType(_) => Code::InvalidArgument,
            ApiError::PayloadTooLarge(_) => Code::ResourceExhausted,
            ApiError::Unauthenticated(_) => Code::Unauthenticated,
            ApiError::MethodNotAllowed(_) | ApiError::NotFound(_) => Code::Unimplemented,
            ApiError::QueueFull { .. } | ApiError::ShuttingDown => Code::Unavailable,
            ApiError::Throttled { .. } => Code::ResourceExhausted,
        }
    }

    /// The retry delay to announce, if the client should come back.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ApiError::QueueFull { retry_after, .. } | ApiError::Throttled { retry_after, .. } => Some(*retry_after),
            ApiError::ShuttingDown => Some(Duration::from_secs(5)),
            _ => None,
        }
    }

    /// The metric reason label (one of [`REASONS`]).
    pub fn reason(&self) -> &'static str {
        match self {
            ApiError::BadRequest(_) => "bad_request",
            ApiError::UnsupportedMediaType(_) => "unsupported_media_type",
            ApiError::PayloadTooLarge(_) => "too_large",
            ApiError::Unauthenticated(_) => "unauthenticated",
            ApiError::MethodNotAllowed(_) => "method_not_allowed",
            ApiError::NotFound(_) => "not_found",
            ApiError::QueueFull { .. } => "queue_full",
            ApiError::ShuttingDown => "shutting_down",
            ApiError::Throttled { open: true, .. } => "throttle_open",
            ApiError::Throttled { open: false, .. } => "throttle_shed",
        }
    }

    /// The `google.rpc.Status`, with a `RetryInfo` detail when a delay applies.
    pub fn rpc_status(&self) -> rpc::Status {
        let mut details = Vec::new();
        if let Some(d) = self.retry_after() {
            details.push(retry_info_any(d));
        }
        rpc::Status { code: self.grpc_code() as i32, message: self.to_string(), details }
    }

    /// As an HTTP response, the body a `google.rpc.Status` in `format`.
    pub fn into_http(self, format: Format) -> Response<Body> {
        let status = self.rpc_status();
        let body = match format {
            Format::Json => {
                let mut out = String::from("{\"code\":");
                out.push_str(&status.code.to_string());
                out.push_str(",\"message\":");
                crate::otlp::json::write_json_str(&mut out, &status.message);
                out.push('}');
                out.into_bytes()
            }
            Format::Protobuf => status.encode_to_vec(),
        };
        let mut resp = Response::new(Body::from(body));
        *resp.status_mut() = self.http_status();
        resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(format.content_type()));
        if let Some(d) = self.retry_after() {
            // Retry-After is whole seconds; round up so a client never comes back early.
            let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
            resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
        }
        resp
    }

    /// As a tonic status, with `grpc-status-details-bin` carrying the `google.rpc.Status`.
    pub fn into_grpc_status(self) -> tonic::Status {
        let details = self.rpc_status().encode_to_vec();
        tonic::Status::with_details(self.grpc_code(), self.to_string(), details.into())
    }

    /// As a complete gRPC HTTP response (for middlewares that answer before tonic runs).
    pub fn into_grpc_http(self) -> Response<Body> {
        self.into_grpc_status().into_http()
    }
}

/// A `google.protobuf.Any` holding a `google.rpc.RetryInfo`.
pub fn retry_info_any(delay: Duration) -> prost_types::Any {
    let info =
        rpc::RetryInfo { retry_delay: Some(prost_types::Duration { seconds: delay.as_secs() as i64, nanos: delay.subsec_nanos() as i32 }) };
    prost_types::Any { type_url: "type.googleapis.com/google.rpc.RetryInfo".into(), value: info.encode_to_vec() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_lists_every_reason_once() {
        let s = String::new;
        let d = Duration::from_secs(1);
        let all = [
            ApiError::BadRequest(s()),
            ApiError::UnsupportedMediaType(s()),
            ApiError::PayloadTooLarge(s()),
            ApiError::Unauthenticated(s()),
            ApiError::MethodNotAllowed(s()),
            ApiError::NotFound(s()),
            ApiError::QueueFull { message: s(), retry_after: d },
            ApiError::ShuttingDown,
            ApiError::Throttled { message: s(), retry_after: d, open: true },
            ApiError::Throttled { message: s(), retry_after: d, open: false },
        ];
        let reasons: Vec<_> = all.iter().map(ApiError::reason).collect();
        assert_eq!(reasons, REASONS, "REASONS must follow reason(), one entry per value");
    }

    #[test]
    fn throttled_carries_retry_info_on_both_protocols() {
        let e = ApiError::Throttled { message: "shed".into(), retry_after: Duration::from_millis(1500), open: false };
        let resp = e.clone().into_http(Format::Protobuf);
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(resp.headers()[header::RETRY_AFTER], "2");
        let status = e.into_grpc_status();
        assert_eq!(status.code(), Code::ResourceExhausted);
        let delay = crate::exporter::retry_delay_of(&status);
        assert_eq!(delay, Some(Duration::from_millis(1500)));
    }

    #[test]
    fn oversize_is_413_and_resource_exhausted_without_retry() {
        let e = ApiError::PayloadTooLarge("big".into());
        assert_eq!(e.http_status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(e.grpc_code(), Code::ResourceExhausted);
        assert!(e.retry_after().is_none());
    }
}
