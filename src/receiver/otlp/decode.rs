//! Body formats: every request body is decoded, and every success response encoded,
//! through this module, so OTLP/JSON plugs in here.

use crate::otlp::wire;
use crate::receiver::format::Format;
use crate::receiver::response::ApiError;
use crate::signal::{Encoded, Payload, Signal};
use bytes::Bytes;
use opentelemetry_proto::tonic::collector::logs::v1::{ExportLogsServiceRequest, ExportLogsServiceResponse};
use opentelemetry_proto::tonic::collector::metrics::v1::{ExportMetricsServiceRequest, ExportMetricsServiceResponse};
use opentelemetry_proto::tonic::collector::profiles::v1development::{ExportProfilesServiceRequest, ExportProfilesServiceResponse};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use prost::Message;

/// Turns an export request body into a payload.
pub fn decode(signal: Signal, format: Format, body: Bytes) -> Result<Payload, ApiError> {
    match format {
        Format::Protobuf => from_protobuf(signal, body),
        Format::Json => {
            let payload = crate::otlp::json::decode(signal, &body)
                .map_err(|e| ApiError::BadRequest(format!("invalid OTLP/JSON {} request: {e}", signal.as_str())))?;
            Ok(compact(payload))
        }
    }
}

/// A decoded trace, metric or log request re-encoded as protobuf: in the pipeline it then
/// takes the bytes the byte budget counts (decoded structs take about three times that),
/// batches by concatenation and is exported without another encode. Profiles stay
/// decoded (see [`wire::covers`]).
pub fn compact(payload: Payload) -> Payload {
    let signal = payload.signal();
    if !wire::covers(signal) || matches!(payload, Payload::Encoded(_)) {
        return payload;
    }
    let items = payload.item_count();
    Payload::Encoded(Encoded::single(signal, Bytes::from(payload.encode_to_vec()), items))
}

/// A protobuf export request: traces, metrics and logs are checked and counted on the
/// wire and travel as the bytes they came in ([`crate::otlp::wire`]); profiles are decoded.
pub fn from_protobuf(signal: Signal, body: Bytes) -> Result<Payload, ApiError> {
    if wire::covers(signal) {
        return match wire::check(signal, &body) {
            Ok(items) => Ok(Payload::Encoded(Encoded::single(signal, body, items))),
            Err(e) => Err(ApiError::BadRequest(format!("cannot decode {} request as protobuf: {e}", signal.as_str()))),
        };
    }
    decode_protobuf(signal, &body)
}

/// Decodes a protobuf export request with prost.
pub fn decode_protobuf(signal: Signal, body: &[u8]) -> Result<Payload, ApiError> {
    let bad = |e: prost::DecodeError| ApiError::BadRequest(format!("cannot decode {} request as protobuf: {e}", signal.as_str()));
    Ok(match signal {
        Signal::Traces => Payload::Traces(ExportTraceServiceRequest::decode(body).map_err(bad)?),
        Signal::Metrics => Payload::Metrics(ExportMetricsServiceRequest::decode(body).map_err(bad)?),
        Signal::Logs => Payload::Logs(ExportLogsServiceRequest::decode(body).map_err(bad)?),
        Signal::Profiles => Payload::Profiles(ExportProfilesServiceRequest::decode(body).map_err(bad)?),
    })
}

/// The response when `rejected` items were refused (partial success), in `format`.
pub fn encode_partial(signal: Signal, format: Format, rejected: u64, message: &str) -> Vec<u8> {
    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsPartialSuccess;
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsPartialSuccess;
    use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesPartialSuccess;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTracePartialSuccess;
    let n = rejected as i64;
    let m = message.to_string();
    match format {
        Format::Json => crate::otlp::json::encode_partial_success(signal, n, message).into_bytes(),
        Format::Protobuf => match signal {
            Signal::Traces => {
                ExportTraceServiceResponse { partial_success: Some(ExportTracePartialSuccess { rejected_spans: n, error_message: m }) }
                    .encode_to_vec()
            }
            Signal::Metrics => ExportMetricsServiceResponse {
                partial_success: Some(ExportMetricsPartialSuccess { rejected_data_points: n, error_message: m }),
            }
            .encode_to_vec(),
            Signal::Logs => {
                ExportLogsServiceResponse { partial_success: Some(ExportLogsPartialSuccess { rejected_log_records: n, error_message: m }) }
                    .encode_to_vec()
            }
            Signal::Profiles => ExportProfilesServiceResponse {
                partial_success: Some(ExportProfilesPartialSuccess { rejected_profiles: n, error_message: m }),
            }
            .encode_to_vec(),
        },
    }
}

/// The message sent with a quota partial success.
pub const QUOTA_MESSAGE: &str = "tenant item quota exceeded; the rejected items were not accepted";

/// The success response (full success: no partial_success) in `format`.
pub fn encode_success(signal: Signal, format: Format) -> Vec<u8> {
    match format {
        Format::Json => b"{}".to_vec(),
        Format::Protobuf => match signal {
            Signal::Traces => ExportTraceServiceResponse::default().encode_to_vec(),
            Signal::Metrics => ExportMetricsServiceResponse::default().encode_to_vec(),
            Signal::Logs => ExportLogsServiceResponse::default().encode_to_vec(),
            Signal::Profiles => ExportProfilesServiceResponse::default().encode_to_vec(),
        },
    }
}
