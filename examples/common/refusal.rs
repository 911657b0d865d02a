//! What the floor servers answer with, shared by `h2_floor` and `raw_floor`.

use std::time::Duration;
use weir::receiver::response::ApiError;

/// The body of weir's quota refusal (a protobuf `google.rpc.Status` with a `RetryInfo`),
/// made by weir's own encoder, for a wait of about a second.
pub fn quota_refusal_body() -> Vec<u8> {
    ApiError::Throttled {
        message: "tenant quota exceeded; next request conforms in 0.991s".into(),
        retry_after: Duration::from_nanos(991_937_444),
        open: false,
    }
    .encode_rpc_status()
}
