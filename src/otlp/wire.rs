//! Checking and counting OTLP protobuf requests without decoding them.
//!
//! weir does not need the decoded form of a protobuf trace, metric or log request to
//! accept it: the pipeline only needs to know the request is well formed (so nothing
//! accepted fails later) and how many items it holds, and the exporters can forward the
//! bytes as they came (export requests merge by concatenation). Decoding with prost
//! allocates every string, byte field and repeated field (about 25 allocations per span);
//! walking the wire format allocates nothing.
//!
//! The walk is as strict as prost's decoding of the same message types: every known
//! field must have its declared wire type (repeated scalars packed or not), strings must
//! be UTF-8, varints at most 10 bytes, lengths inside the buffer, nesting at most 100
//! deep; unknown fields are skipped as prost skips them. `tests/wire_check.rs` checks
//! the walk against prost on random and mutated requests.

use crate::signal::Signal;
use std::fmt;

/// How a known field is encoded.
#[derive(Clone, Copy)]
enum Kind {
    /// int32/int64/uint32/uint64/sint32/bool/enum; `true` when repeated (packed allowed).
    Varint(bool),
    /// fixed64/sfixed64/double; `true` when repeated.
    Fixed64(bool),
    /// fixed32/float; `true` when repeated.
    Fixed32(bool),
    /// bytes.
    Bytes,
    /// string: UTF-8 checked.
    Str,
    /// A nested message.
    Msg(&'static Desc),
}

struct Field {
    tag: u32,
    name: &'static str,
    kind: Kind,
}

/// A message type: its fields, whether each occurrence is one item, and the tags of the
/// oneof whose variant carries the items (metric data).
struct Desc {
    name: &'static str,
    fields: &'static [Field],
    /// Field position + 1 by tag (0: unknown), so a lookup is one load.
    index: [u8; MAX_TAG + 1],
    item: bool,
    item_oneof: &'static [u32],
}

/// The largest field number in the walked schema.
const MAX_TAG: usize = 16;

const fn index(fields: &[Field]) -> [u8; MAX_TAG + 1] {
    let mut idx = [0u8; MAX_TAG + 1];
    let mut i = 0;
    while i < fields.len() {
        assert!((fields[i].tag as usize) <= MAX_TAG, "raise MAX_TAG");
        idx[fields[i].tag as usize] = (i + 1) as u8;
        i += 1;
    }
    idx
}

const fn f(tag: u32, name: &'static str, kind: Kind) -> Field {
    Field { tag, name, kind }
}

const fn msg(name: &'static str, fields: &'static [Field]) -> Desc {
    Desc { name, fields, index: index(fields), item: false, item_oneof: &[] }
}

const fn item(name: &'static str, fields: &'static [Field]) -> Desc {
    Desc { name, fields, index: index(fields), item: true, item_oneof: &[] }
}

use Kind::{Bytes, Fixed32, Fixed64, Msg, Str, Varint};

// common.proto, resource.proto
static ANY_VALUE: Desc = msg(
    "AnyValue",
    &[
        f(1, "string_value", Str),
        f(2, "bool_value", Varint(false)),
        f(3, "int_value", Varint(false)),
        f(4, "double_value", Fixed64(false)),
        f(5, "array_value", Msg(&ARRAY_VALUE)),
        f(6, "kvlist_value", Msg(&KEY_VALUE_LIST)),
        f(7, "bytes_value", Bytes),
        f(8, "string_value_strindex", Varint(false)),
    ],
);
static ARRAY_VALUE: Desc = msg("ArrayValue", &[f(1, "values", Msg(&ANY_VALUE))]);
static KEY_VALUE_LIST: Desc = msg("KeyValueList", &[f(1, "values", Msg(&KEY_VALUE))]);
static KEY_VALUE: Desc = msg("KeyValue", &[f(1, "key", Str), f(2, "value", Msg(&ANY_VALUE)), f(3, "key_strindex", Varint(false))]);
static SCOPE: Desc = msg(
    "InstrumentationScope",
    &[f(1, "name", Str), f(2, "version", Str), f(3, "attributes", Msg(&KEY_VALUE)), f(4, "dropped_attributes_count", Varint(false))],
);
static ENTITY_REF: Desc =
    msg("EntityRef", &[f(1, "schema_url", Str), f(2, "type", Str), f(3, "id_keys", Str), f(4, "description_keys", Str)]);
static RESOURCE: Desc = msg(
    "Resource",
    &[f(1, "attributes", Msg(&KEY_VALUE)), f(2, "dropped_attributes_count", Varint(false)), f(3, "entity_refs", Msg(&ENTITY_REF))],
);

// trace.proto
static SPAN_EVENT: Desc = msg(
    "Span.Event",
    &[
        f(1, "time_unix_nano", Fixed64(false)),
        f(2, "name", Str),
        f(3, "attributes", Msg(&KEY_VALUE)),
        f(4, "dropped_attributes_count", Varint(false)),
    ],
);
static SPAN_LINK: Desc = msg(
    "Span.Link",
    &[
        f(1, "trace_id", Bytes),
        f(2, "span_id", Bytes),
        f(3, "trace_state", Str),
        f(4, "attributes", Msg(&KEY_VALUE)),
        f(5, "dropped_attributes_count", Varint(false)),
        f(6, "flags", Fixed32(false)),
    ],
);
static STATUS: Desc = msg("Status", &[f(2, "message", Str), f(3, "code", Varint(false))]);
static SPAN: Desc = item(
    "Span",
    &[
        f(9, "attributes", Msg(&KEY_VALUE)),
        f(1, "trace_id", Bytes),
        f(2, "span_id", Bytes),
        f(3, "trace_state", Str),
        f(4, "parent_span_id", Bytes),
        f(5, "name", Str),
        f(6, "kind", Varint(false)),
        f(7, "start_time_unix_nano", Fixed64(false)),
        f(8, "end_time_unix_nano", Fixed64(false)),
        f(10, "dropped_attributes_count", Varint(false)),
        f(11, "events", Msg(&SPAN_EVENT)),
        f(12, "dropped_events_count", Varint(false)),
        f(13, "links", Msg(&SPAN_LINK)),
        f(14, "dropped_links_count", Varint(false)),
        f(15, "status", Msg(&STATUS)),
        f(16, "flags", Fixed32(false)),
    ],
);
static SCOPE_SPANS: Desc = msg("ScopeSpans", &[f(2, "spans", Msg(&SPAN)), f(1, "scope", Msg(&SCOPE)), f(3, "schema_url", Str)]);
static RESOURCE_SPANS: Desc =
    msg("ResourceSpans", &[f(2, "scope_spans", Msg(&SCOPE_SPANS)), f(1, "resource", Msg(&RESOURCE)), f(3, "schema_url", Str)]);
static TRACES: Desc = msg("ExportTraceServiceRequest", &[f(1, "resource_spans", Msg(&RESOURCE_SPANS))]);

// logs.proto
static LOG_RECORD: Desc = item(
    "LogRecord",
    &[
        f(6, "attributes", Msg(&KEY_VALUE)),
        f(1, "time_unix_nano", Fixed64(false)),
        f(11, "observed_time_unix_nano", Fixed64(false)),
        f(2, "severity_number", Varint(false)),
        f(3, "severity_text", Str),
        f(5, "body", Msg(&ANY_VALUE)),
        f(7, "dropped_attributes_count", Varint(false)),
        f(8, "flags", Fixed32(false)),
        f(9, "trace_id", Bytes),
        f(10, "span_id", Bytes),
        f(12, "event_name", Str),
    ],
);
static SCOPE_LOGS: Desc = msg("ScopeLogs", &[f(2, "log_records", Msg(&LOG_RECORD)), f(1, "scope", Msg(&SCOPE)), f(3, "schema_url", Str)]);
static RESOURCE_LOGS: Desc =
    msg("ResourceLogs", &[f(2, "scope_logs", Msg(&SCOPE_LOGS)), f(1, "resource", Msg(&RESOURCE)), f(3, "schema_url", Str)]);
static LOGS: Desc = msg("ExportLogsServiceRequest", &[f(1, "resource_logs", Msg(&RESOURCE_LOGS))]);

// metrics.proto
static EXEMPLAR: Desc = msg(
    "Exemplar",
    &[
        f(7, "filtered_attributes", Msg(&KEY_VALUE)),
        f(2, "time_unix_nano", Fixed64(false)),
        f(3, "as_double", Fixed64(false)),
        f(6, "as_int", Fixed64(false)),
        f(4, "span_id", Bytes),
        f(5, "trace_id", Bytes),
    ],
);
static NUMBER_POINT: Desc = item(
    "NumberDataPoint",
    &[
        f(7, "attributes", Msg(&KEY_VALUE)),
        f(2, "start_time_unix_nano", Fixed64(false)),
        f(3, "time_unix_nano", Fixed64(false)),
        f(4, "as_double", Fixed64(false)),
        f(6, "as_int", Fixed64(false)),
        f(5, "exemplars", Msg(&EXEMPLAR)),
        f(8, "flags", Varint(false)),
    ],
);
static HISTOGRAM_POINT: Desc = item(
    "HistogramDataPoint",
    &[
        f(9, "attributes", Msg(&KEY_VALUE)),
        f(2, "start_time_unix_nano", Fixed64(false)),
        f(3, "time_unix_nano", Fixed64(false)),
        f(4, "count", Fixed64(false)),
        f(5, "sum", Fixed64(false)),
        f(6, "bucket_counts", Fixed64(true)),
        f(7, "explicit_bounds", Fixed64(true)),
        f(8, "exemplars", Msg(&EXEMPLAR)),
        f(10, "flags", Varint(false)),
        f(11, "min", Fixed64(false)),
        f(12, "max", Fixed64(false)),
    ],
);
static BUCKETS: Desc = msg("ExponentialHistogramDataPoint.Buckets", &[f(1, "offset", Varint(false)), f(2, "bucket_counts", Varint(true))]);
static EXP_HISTOGRAM_POINT: Desc = item(
    "ExponentialHistogramDataPoint",
    &[
        f(1, "attributes", Msg(&KEY_VALUE)),
        f(2, "start_time_unix_nano", Fixed64(false)),
        f(3, "time_unix_nano", Fixed64(false)),
        f(4, "count", Fixed64(false)),
        f(5, "sum", Fixed64(false)),
        f(6, "scale", Varint(false)),
        f(7, "zero_count", Fixed64(false)),
        f(8, "positive", Msg(&BUCKETS)),
        f(9, "negative", Msg(&BUCKETS)),
        f(10, "flags", Varint(false)),
        f(11, "exemplars", Msg(&EXEMPLAR)),
        f(12, "min", Fixed64(false)),
        f(13, "max", Fixed64(false)),
        f(14, "zero_threshold", Fixed64(false)),
    ],
);
static QUANTILE: Desc = msg("SummaryDataPoint.ValueAtQuantile", &[f(1, "quantile", Fixed64(false)), f(2, "value", Fixed64(false))]);
static SUMMARY_POINT: Desc = item(
    "SummaryDataPoint",
    &[
        f(7, "attributes", Msg(&KEY_VALUE)),
        f(2, "start_time_unix_nano", Fixed64(false)),
        f(3, "time_unix_nano", Fixed64(false)),
        f(4, "count", Fixed64(false)),
        f(5, "sum", Fixed64(false)),
        f(6, "quantile_values", Msg(&QUANTILE)),
        f(8, "flags", Varint(false)),
    ],
);
static GAUGE: Desc = msg("Gauge", &[f(1, "data_points", Msg(&NUMBER_POINT))]);
static SUM: Desc = msg(
    "Sum",
    &[f(1, "data_points", Msg(&NUMBER_POINT)), f(2, "aggregation_temporality", Varint(false)), f(3, "is_monotonic", Varint(false))],
);
static HISTOGRAM: Desc = msg("Histogram", &[f(1, "data_points", Msg(&HISTOGRAM_POINT)), f(2, "aggregation_temporality", Varint(false))]);
static EXP_HISTOGRAM: Desc =
    msg("ExponentialHistogram", &[f(1, "data_points", Msg(&EXP_HISTOGRAM_POINT)), f(2, "aggregation_temporality", Varint(false))]);
static SUMMARY: Desc = msg("Summary", &[f(1, "data_points", Msg(&SUMMARY_POINT))]);
const METRIC_FIELDS: &[Field] = &[
    f(1, "name", Str),
    f(2, "description", Str),
    f(3, "unit", Str),
    f(5, "gauge", Msg(&GAUGE)),
    f(7, "sum", Msg(&SUM)),
    f(9, "histogram", Msg(&HISTOGRAM)),
    f(10, "exponential_histogram", Msg(&EXP_HISTOGRAM)),
    f(11, "summary", Msg(&SUMMARY)),
    f(12, "metadata", Msg(&KEY_VALUE)),
];
static METRIC: Desc =
    Desc { name: "Metric", fields: METRIC_FIELDS, index: index(METRIC_FIELDS), item: false, item_oneof: &[5, 7, 9, 10, 11] };
static SCOPE_METRICS: Desc = msg("ScopeMetrics", &[f(2, "metrics", Msg(&METRIC)), f(1, "scope", Msg(&SCOPE)), f(3, "schema_url", Str)]);
static RESOURCE_METRICS: Desc =
    msg("ResourceMetrics", &[f(2, "scope_metrics", Msg(&SCOPE_METRICS)), f(1, "resource", Msg(&RESOURCE)), f(3, "schema_url", Str)]);
static METRICS: Desc = msg("ExportMetricsServiceRequest", &[f(1, "resource_metrics", Msg(&RESOURCE_METRICS))]);

/// prost's default recursion limit.
const RECURSION_LIMIT: u32 = 100;

/// Why a body is not a valid request, and where. Boxed: the walk's results stay two
/// words wide on the hot path.
#[derive(Debug, Clone, PartialEq)]
pub struct WireError(Box<ErrorInner>);

#[derive(Debug, Clone, PartialEq)]
struct ErrorInner {
    what: String,
    /// (field, message type) pairs, innermost first.
    path: Vec<&'static str>,
}

impl WireError {
    #[cold]
    #[inline(never)]
    fn new(what: impl Into<String>) -> Self {
        WireError(Box::new(ErrorInner { what: what.into(), path: Vec::new() }))
    }
    #[cold]
    #[inline(never)]
    fn within(mut self, desc: &'static Desc, field: &'static str) -> Self {
        self.0.path.push(field);
        self.0.path.push(desc.name);
        self
    }
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `path` was built innermost first: Type, field pairs from the failing field out.
        let mut parts = self.0.path.chunks(2).rev();
        if let Some(first) = parts.next() {
            write!(f, "{}.{}", first[1], first[0])?;
            for p in parts {
                write!(f, ".{}", p[0])?;
            }
            write!(f, ": ")?;
        }
        f.write_str(&self.0.what)
    }
}

impl std::error::Error for WireError {}

/// Whether [`check`] covers this signal. Profiles are decoded: their requests carry a
/// dictionary the items index into, so they are not merged or forwarded as bytes.
pub fn covers(signal: Signal) -> bool {
    signal != Signal::Profiles
}

/// Checks that `body` is a valid export request of `signal` (as strictly as prost's
/// decoding) and returns its item count: spans, metric data points or log records.
///
/// # Panics
/// Not for profiles ([`covers`] says which signals are walked).
pub fn check(signal: Signal, body: &[u8]) -> Result<usize, WireError> {
    let desc = match signal {
        Signal::Traces => &TRACES,
        Signal::Metrics => &METRICS,
        Signal::Logs => &LOGS,
        Signal::Profiles => panic!("profiles are decoded, not walked"),
    };
    walk(desc, body, RECURSION_LIMIT).map(|n| n as usize)
}

/// One varint; one-byte values (most keys and lengths) take the short path.
#[inline(always)]
fn varint(buf: &[u8], pos: &mut usize) -> Result<u64, WireError> {
    if let Some(&b) = buf.get(*pos) {
        if b < 0x80 {
            *pos += 1;
            return Ok(u64::from(b));
        }
    }
    varint_long(buf, pos)
}

#[inline(never)]
fn varint_long(buf: &[u8], pos: &mut usize) -> Result<u64, WireError> {
    let mut value = 0u64;
    for i in 0..10 {
        let Some(&b) = buf.get(*pos) else {
            return Err(WireError::new("buffer underflow in varint"));
        };
        *pos += 1;
        if i == 9 && b > 1 {
            return Err(WireError::new("invalid varint"));
        }
        value |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return Ok(value);
        }
    }
    Err(WireError::new("invalid varint"))
}

#[inline(always)]
fn take<'a>(buf: &'a [u8], pos: &mut usize, n: u64) -> Result<&'a [u8], WireError> {
    let rest = buf.len() - *pos;
    if n > rest as u64 {
        return Err(WireError::new("buffer underflow"));
    }
    let s = &buf[*pos..*pos + n as usize];
    *pos += n as usize;
    Ok(s)
}

const VARINT: u8 = 0;
const I64: u8 = 1;
const LEN: u8 = 2;
const SGROUP: u8 = 3;
const EGROUP: u8 = 4;
const I32: u8 = 5;

fn wire_name(w: u8) -> &'static str {
    match w {
        VARINT => "varint",
        I64 => "64-bit",
        LEN => "length-delimited",
        SGROUP => "start group",
        EGROUP => "end group",
        _ => "32-bit",
    }
}

/// Reads a key: (field number, wire type).
#[inline(always)]
fn key(buf: &[u8], pos: &mut usize) -> Result<(u32, u8), WireError> {
    let k = varint(buf, pos)?;
    if k > u64::from(u32::MAX) {
        return Err(WireError::new(format!("invalid key value: {k}")));
    }
    let wire = (k & 7) as u8;
    let tag = (k >> 3) as u32;
    if wire > 5 || tag == 0 {
        return Err(bad_key(tag, wire));
    }
    Ok((tag, wire))
}

#[cold]
fn bad_key(tag: u32, wire: u8) -> WireError {
    if wire > 5 {
        WireError::new(format!("invalid wire type value: {wire}"))
    } else {
        WireError::new(format!("invalid tag value: {tag}"))
    }
}

/// UTF-8 check with an ASCII fast path (attribute keys and most values are ASCII).
#[inline(always)]
fn utf8_ok(v: &[u8]) -> bool {
    v.is_ascii() || std::str::from_utf8(v).is_ok()
}

/// Skips one unknown field's value (after its key).
fn skip(buf: &[u8], pos: &mut usize, tag: u32, wire: u8, depth: u32) -> Result<(), WireError> {
    // prost checks the limit before skipping anything, so the same body fails the same way.
    if depth == 0 {
        return Err(WireError::new("recursion limit reached"));
    }
    match wire {
        VARINT => varint(buf, pos).map(drop),
        I64 => take(buf, pos, 8).map(drop),
        I32 => take(buf, pos, 4).map(drop),
        LEN => {
            let n = varint(buf, pos)?;
            take(buf, pos, n).map(drop)
        }
        SGROUP => loop {
            if *pos >= buf.len() {
                return Err(WireError::new("buffer underflow in group"));
            }
            let (t, w) = key(buf, pos)?;
            if w == EGROUP {
                if t != tag {
                    return Err(WireError::new("unexpected end group tag"));
                }
                return Ok(());
            }
            skip(buf, pos, t, w, depth - 1)?;
        },
        _ => Err(WireError::new("unexpected end group tag")),
    }
}

/// Walks one message's bytes; returns the items in it.
fn walk(desc: &'static Desc, buf: &[u8], depth: u32) -> Result<u64, WireError> {
    let mut pos = 0;
    let mut items = u64::from(desc.item);
    // The items oneof: last variant wins, a repeated variant merges (as prost does).
    let mut variant = 0u32;
    let mut variant_items = 0u64;
    while pos < buf.len() {
        let (tag, wire) = key(buf, &mut pos)?;
        let slot = desc.index.get(tag as usize).copied().unwrap_or(0);
        if slot == 0 {
            skip(buf, &mut pos, tag, wire, depth)?;
            continue;
        }
        let field = &desc.fields[usize::from(slot) - 1];
        let at = |e: WireError| e.within(desc, field.name);
        match (field.kind, wire) {
            (Kind::Str, LEN) => {
                let n = varint(buf, &mut pos).map_err(at)?;
                let value = take(buf, &mut pos, n).map_err(at)?;
                if !utf8_ok(value) {
                    return Err(at(WireError::new("invalid string value: data is not UTF-8 encoded")));
                }
            }
            (Kind::Msg(inner), LEN) => {
                let n = varint(buf, &mut pos).map_err(at)?;
                let value = take(buf, &mut pos, n).map_err(at)?;
                if depth == 0 {
                    return Err(at(WireError::new("recursion limit reached")));
                }
                let n = walk(inner, value, depth - 1).map_err(at)?;
                if desc.item_oneof.is_empty() || !desc.item_oneof.contains(&tag) {
                    items += n;
                } else if variant == tag {
                    variant_items += n;
                } else {
                    variant = tag;
                    variant_items = n;
                }
            }
            (Kind::Bytes, LEN) => {
                let n = varint(buf, &mut pos).map_err(at)?;
                take(buf, &mut pos, n).map_err(at)?;
            }
            (Kind::Varint(_), VARINT) => {
                varint(buf, &mut pos).map_err(at)?;
            }
            (Kind::Fixed64(_), I64) => {
                take(buf, &mut pos, 8).map_err(at)?;
            }
            (Kind::Fixed32(_), I32) => {
                take(buf, &mut pos, 4).map_err(at)?;
            }
            (Kind::Varint(true), LEN) => {
                let n = varint(buf, &mut pos).map_err(at)?;
                let packed = take(buf, &mut pos, n).map_err(at)?;
                let mut p = 0;
                while p < packed.len() {
                    varint(packed, &mut p).map_err(at)?;
                }
            }
            (Kind::Fixed64(true), LEN) | (Kind::Fixed32(true), LEN) => {
                let width = if matches!(field.kind, Kind::Fixed64(_)) { 8 } else { 4 };
                let n = varint(buf, &mut pos).map_err(at)?;
                if n % width != 0 {
                    return Err(at(WireError::new("packed length is not a multiple of the element size")));
                }
                take(buf, &mut pos, n).map_err(at)?;
            }
            (kind, _) => return Err(at(wrong_wire_type(kind, wire))),
        }
    }
    Ok(items + variant_items)
}

#[cold]
fn wrong_wire_type(kind: Kind, wire: u8) -> WireError {
    let want = match kind {
        Kind::Varint(_) => VARINT,
        Kind::Fixed64(_) => I64,
        Kind::Fixed32(_) => I32,
        Kind::Bytes | Kind::Str | Kind::Msg(_) => LEN,
    };
    WireError::new(format!("invalid wire type: {} (expected {})", wire_name(wire), wire_name(want)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn counts_the_synthetic_request() {
        let body = crate::otlp::synth::traces_request(37, 3, 8, 1).encode_to_vec();
        assert_eq!(check(Signal::Traces, &body), Ok(37));
        assert_eq!(check(Signal::Traces, &[]), Ok(0));
    }

    #[test]
    fn errors_name_the_field() {
        let mut req = crate::otlp::synth::traces_request(1, 1, 4, 1);
        req.resource_spans[0].scope_spans[0].spans[0].name = "ok".into();
        let mut body = req.encode_to_vec();
        // Corrupt the span name's second byte ('k') into an invalid UTF-8 byte.
        let at = body.windows(2).position(|w| w == b"ok").unwrap();
        body[at + 1] = 0xff;
        let err = check(Signal::Traces, &body).unwrap_err().to_string();
        assert_eq!(err, "ExportTraceServiceRequest.resource_spans.scope_spans.spans.name: invalid string value: data is not UTF-8 encoded");
        assert!(prost::Message::decode(body.as_slice())
            .map(|_: opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest| ())
            .is_err());
    }
}
