//! The ONE place where errors become HTTP statuses and gRPC codes.

use crate::receiver::format::Format;
#[cfg(test)]
use crate::rpc;
use axum::body::Body;
use axum::http::{header, HeaderValue, Response, StatusCode};
#[cfg(test)]
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
    /// The tenant is over its request-rate quota (429 / RESOURCE_EXHAUSTED, as a
    /// shed request, but counted apart: a tenant over its quota is not an overloaded
    /// gateway).
    #[error("{message}")]
    Quota {
        /// What happened.
        message: String,
        /// When the next request conforms.
        retry_after: Duration,
    },
    /// Request bodies in flight are at their memory budget.
    #[error("{message}")]
    BodyBudget {
        /// What happened.
        message: String,
        /// When to come back.
        retry_after: Duration,
    },
    /// The body did not arrive within `body_read_timeout`.
    #[error("{0}")]
    BodyTimeout(String),
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
    /// An admission layer refused the request (429 / RESOURCE_EXHAUSTED); `reason` is
    /// `admission_<layer>`.
    #[error("{message}")]
    Admission {
        /// What happened.
        message: String,
        /// When to come back.
        retry_after: Duration,
        /// `admission_inflight_cap`, `admission_slow_start`, ...
        reason: &'static str,
    },
}

/// Every value [`ApiError::reason`] gives.
pub const REASONS: [&str; 19] = [
    "bad_request",
    "unsupported_media_type",
    "too_large",
    "unauthenticated",
    "method_not_allowed",
    "not_found",
    "queue_full",
    "shutting_down",
    "quota",
    "body_budget",
    "body_timeout",
    "throttle_open",
    "throttle_shed",
    "admission_inflight_cap",
    "admission_slow_start",
    "admission_burst_damping",
    "admission_bbr",
    "admission_queue_delay",
    "admission_pid",
];

/// The reason an admission layer's refusal is counted under.
pub fn admission_reason(layer: crate::admission::Layer) -> &'static str {
    use crate::admission::Layer;
    match layer {
        Layer::InflightCap => "admission_inflight_cap",
        Layer::SlowStart => "admission_slow_start",
        Layer::BurstDamping => "admission_burst_damping",
        Layer::Bbr => "admission_bbr",
        Layer::QueueDelay => "admission_queue_delay",
        Layer::Pid => "admission_pid",
    }
}

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
            ApiError::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::BodyBudget { .. } => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Quota { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Throttled { open: true, .. } => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Throttled { open: false, .. } | ApiError::Admission { .. } => StatusCode::TOO_MANY_REQUESTS,
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
            ApiError::Throttled { .. } | ApiError::Admission { .. } => Code::ResourceExhausted,
            ApiError::BodyTimeout(_) => Code::DeadlineExceeded,
            ApiError::BodyBudget { .. } => Code::Unavailable,
            ApiError::Quota { .. } => Code::ResourceExhausted,
        }
    }

    /// The retry delay to announce, if the client should come back.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ApiError::QueueFull { retry_after, .. }
            | ApiError::Throttled { retry_after, .. }
            | ApiError::Admission { retry_after, .. }
            | ApiError::BodyBudget { retry_after, .. }
            | ApiError::Quota { retry_after, .. } => Some(*retry_after),
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
            ApiError::BodyTimeout(_) => "body_timeout",
            ApiError::BodyBudget { .. } => "body_budget",
            ApiError::Quota { .. } => "quota",
            ApiError::Throttled { open: true, .. } => "throttle_open",
            ApiError::Throttled { open: false, .. } => "throttle_shed",
            ApiError::Admission { reason, .. } => reason,
        }
    }

    /// The `google.rpc.Status`, with a `RetryInfo` detail when a delay applies: the
    /// reference [`ApiError::encode_rpc_status`] is tested against.
    #[cfg(test)]
    fn rpc_status(&self) -> rpc::Status {
        let mut details = Vec::new();
        if let Some(d) = self.retry_after() {
            details.push(retry_info_any(d));
        }
        rpc::Status { code: self.grpc_code() as i32, message: self.to_string(), details }
    }

    /// The message, borrowed where the error carries it.
    fn message(&self) -> std::borrow::Cow<'_, str> {
        match self {
            ApiError::BadRequest(m)
            | ApiError::UnsupportedMediaType(m)
            | ApiError::PayloadTooLarge(m)
            | ApiError::Unauthenticated(m)
            | ApiError::BodyTimeout(m) => m.as_str().into(),
            ApiError::QueueFull { message, .. }
            | ApiError::Throttled { message, .. }
            | ApiError::Admission { message, .. }
            | ApiError::BodyBudget { message, .. }
            | ApiError::Quota { message, .. } => message.as_str().into(),
            other => other.to_string().into(),
        }
    }

    /// [`ApiError::rpc_status`], encoded straight into one buffer: refusals are answered
    /// under overload, so this skips the message copy and the four allocations of
    /// building the `Status`, `Any` and `RetryInfo` values first.
    pub fn encode_rpc_status(&self) -> Vec<u8> {
        use prost::encoding::{encode_varint, encoded_len_varint};
        fn field(out: &mut Vec<u8>, tag: u8, len: usize) {
            out.push(tag);
            encode_varint(len as u64, out);
        }
        let message = self.message();
        let code = self.grpc_code() as i32;
        // RetryInfo { retry_delay: Duration { seconds, nanos } }, as an Any.
        let (duration_len, retry_len, any_len) = match self.retry_after() {
            Some(d) => {
                let (secs, nanos) = (d.as_secs(), d.subsec_nanos());
                let duration_len = if secs == 0 { 0 } else { 1 + encoded_len_varint(secs) }
                    + if nanos == 0 { 0 } else { 1 + encoded_len_varint(u64::from(nanos)) };
                let retry_len = 1 + encoded_len_varint(duration_len as u64) + duration_len;
                let any_len = 1
                    + encoded_len_varint(RETRY_INFO_URL.len() as u64)
                    + RETRY_INFO_URL.len()
                    + 1
                    + encoded_len_varint(retry_len as u64)
                    + retry_len;
                (duration_len, retry_len, any_len)
            }
            None => (0, 0, 0),
        };
        let mut out = Vec::with_capacity(16 + message.len() + any_len);
        if code != 0 {
            out.push(0x08);
            encode_varint(code as u64, &mut out);
        }
        if !message.is_empty() {
            field(&mut out, 0x12, message.len());
            out.extend_from_slice(message.as_bytes());
        }
        if let Some(d) = self.retry_after() {
            field(&mut out, 0x1a, any_len);
            field(&mut out, 0x0a, RETRY_INFO_URL.len());
            out.extend_from_slice(RETRY_INFO_URL.as_bytes());
            field(&mut out, 0x12, retry_len);
            field(&mut out, 0x0a, duration_len);
            if d.as_secs() != 0 {
                out.push(0x08);
                encode_varint(d.as_secs(), &mut out);
            }
            if d.subsec_nanos() != 0 {
                out.push(0x10);
                encode_varint(u64::from(d.subsec_nanos()), &mut out);
            }
        }
        out
    }

    /// As an HTTP response, the body a `google.rpc.Status` in `format`.
    pub fn into_http(self, format: Format) -> Response<Body> {
        let body = match format {
            Format::Json => {
                let mut out = String::from("{\"code\":");
                out.push_str(&(self.grpc_code() as i32).to_string());
                out.push_str(",\"message\":");
                crate::otlp::json::write_json_str(&mut out, &self.message());
                out.push('}');
                out.into_bytes()
            }
            Format::Protobuf => self.encode_rpc_status(),
        };
        let mut resp = Response::new(Body::from(body));
        *resp.status_mut() = self.http_status();
        resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(format.content_type()));
        if let Some(d) = self.retry_after() {
            // Retry-After is whole seconds; round up so a client never comes back early.
            // 0 only when there is nothing left to wait (a held refusal whose hold was
            // the whole delay).
            let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
            resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        resp
    }

    /// As a tonic status, with `grpc-status-details-bin` carrying the `google.rpc.Status`.
    pub fn into_grpc_status(self) -> tonic::Status {
        let details = self.encode_rpc_status();
        tonic::Status::with_details(self.grpc_code(), self.message().into_owned(), details.into())
    }

    /// As a complete gRPC HTTP response (for middlewares that answer before tonic runs):
    /// the headers tonic's `Status::into_http` writes, built without its boxed `Status`,
    /// header-map clone and response extension (a refusal is answered under overload).
    pub fn into_grpc_http(self) -> Response<Body> {
        use base64::Engine as _;
        let mut resp = Response::new(Body::empty());
        let headers = resp.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
        headers.insert("grpc-status", HeaderValue::from(self.grpc_code() as i32));
        let message = grpc_percent_encode(&self.message());
        if !message.is_empty() {
            // Only visible ASCII is left after encoding.
            if let Ok(mut v) = HeaderValue::from_maybe_shared(bytes::Bytes::from(message)) {
                v.set_sensitive(true);
                headers.insert("grpc-message", v);
            }
        }
        // Both values name a retry delay and almost never repeat: marked sensitive, HPACK
        // sends them as never-indexed literals instead of adding each to the connection's
        // table (where it would only evict fields that do repeat).
        let details = base64::engine::general_purpose::STANDARD_NO_PAD.encode(self.encode_rpc_status());
        if let Ok(mut v) = HeaderValue::from_maybe_shared(bytes::Bytes::from(details)) {
            v.set_sensitive(true);
            headers.insert("grpc-status-details-bin", v);
        }
        resp
    }
}

/// `grpc-message` encoding, byte for byte as tonic does it: controls, non-ASCII and
/// ` "#%<>`?{}` as `%XX`.
fn grpc_percent_encode(message: &str) -> String {
    let encode = |b: u8| !(0x20..0x7f).contains(&b) || b" \"#%<>`?{}".contains(&b);
    if !message.bytes().any(encode) {
        return message.to_string();
    }
    let mut out = String::with_capacity(message.len() + 16);
    for b in message.bytes() {
        if encode(b) {
            out.push('%');
            out.push(char::from(b"0123456789ABCDEF"[usize::from(b >> 4)]));
            out.push(char::from(b"0123456789ABCDEF"[usize::from(b & 15)]));
        } else {
            out.push(char::from(b));
        }
    }
    out
}

/// The `type_url` of a `google.rpc.RetryInfo` in an `Any`.
const RETRY_INFO_URL: &str = "type.googleapis.com/google.rpc.RetryInfo";

/// A `google.protobuf.Any` holding a `google.rpc.RetryInfo`.
#[cfg(test)]
fn retry_info_any(delay: Duration) -> prost_types::Any {
    let info =
        rpc::RetryInfo { retry_delay: Some(prost_types::Duration { seconds: delay.as_secs() as i64, nanos: delay.subsec_nanos() as i32 }) };
    prost_types::Any { type_url: RETRY_INFO_URL.into(), value: info.encode_to_vec() }
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
            ApiError::Quota { message: s(), retry_after: d },
            ApiError::BodyBudget { message: s(), retry_after: d },
            ApiError::BodyTimeout(s()),
            ApiError::Throttled { message: s(), retry_after: d, open: true },
            ApiError::Throttled { message: s(), retry_after: d, open: false },
        ];
        use crate::admission::Layer;
        let layers = [Layer::InflightCap, Layer::SlowStart, Layer::BurstDamping, Layer::Bbr, Layer::QueueDelay, Layer::Pid]
            .map(|l| ApiError::Admission { message: s(), retry_after: d, reason: admission_reason(l) });
        let all: Vec<ApiError> = all.into_iter().chain(layers).collect();
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

    /// The hand-written encoder gives exactly prost's bytes for every kind of error and
    /// for delays with and without whole seconds or nanoseconds.
    #[test]
    fn encode_rpc_status_matches_prost() {
        let long = "x".repeat(300); // a two-byte length prefix
        let cases = [
            ApiError::BadRequest(String::new()),
            ApiError::BadRequest(long.clone()),
            ApiError::Unauthenticated("unknown token".into()),
            ApiError::MethodNotAllowed("GET".into()),
            ApiError::NotFound("/x".into()),
            ApiError::ShuttingDown,
            ApiError::QueueFull { message: "full".into(), retry_after: Duration::from_secs(3) },
            ApiError::Throttled { message: "shed".into(), retry_after: Duration::from_millis(1500), open: false },
            ApiError::Throttled { message: long, retry_after: Duration::from_millis(250), open: true },
            ApiError::Throttled { message: "q".into(), retry_after: Duration::ZERO, open: false },
            ApiError::Throttled { message: "q".into(), retry_after: Duration::new(1 << 40, 999_999_999), open: false },
        ];
        for e in cases {
            let direct = e.encode_rpc_status();
            assert_eq!(direct, e.rpc_status().encode_to_vec(), "{e:?}");
            assert_eq!(rpc::Status::decode(direct.as_slice()).unwrap(), e.rpc_status(), "{e:?}");
        }
    }

    /// The hand-built gRPC answer carries the same headers as tonic's, including the
    /// percent-encoded message (spaces, `%`, non-ASCII) and the base64 details.
    #[test]
    fn into_grpc_http_matches_tonic() {
        let cases = [
            ApiError::Throttled {
                message: "tenant quota exceeded; next request conforms in 0.250s".into(),
                retry_after: Duration::from_millis(250),
                open: false,
            },
            ApiError::Throttled {
                message: "overloaded: admission is closed for traces; retry after 1.5s".into(),
                retry_after: Duration::from_millis(1500),
                open: true,
            },
            ApiError::Unauthenticated("unknown token".into()),
            ApiError::BadRequest("100% \"odd\" <bytes> `?{}#` é\n\u{7f}".into()),
            ApiError::BadRequest(String::new()),
            ApiError::ShuttingDown,
        ];
        for e in cases {
            let ours = e.clone().into_grpc_http();
            let tonics: Response<Body> = e.clone().into_grpc_status().into_http();
            assert_eq!(ours.status(), tonics.status(), "{e:?}");
            assert_eq!(ours.headers(), tonics.headers(), "{e:?}");
        }
    }

    #[test]
    fn oversize_is_413_and_resource_exhausted_without_retry() {
        let e = ApiError::PayloadTooLarge("big".into());
        assert_eq!(e.http_status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(e.grpc_code(), Code::ResourceExhausted);
        assert!(e.retry_after().is_none());
    }
}
