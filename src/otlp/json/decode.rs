//! OTLP/JSON decoding straight into the prost types, following the specification's
//! "JSON Protobuf Encoding": lowerCamelCase keys (snake_case accepted too), unknown keys
//! ignored, hex trace/span/profile IDs of the exact length, enums as integers or names,
//! 64-bit integers as numbers or decimal strings, doubles as numbers, numeric strings or
//! "NaN"/"Infinity"/"-Infinity", `bytes` as base64, `null` as the default value.
//!
//! Any error anywhere rejects the whole request, with the path to the offending value
//! (`resourceSpans[0].scopeSpans[1].spans[7].traceId: expected 32 hex characters`).
//! Nothing is dropped silently. The path is only rendered when an error occurs.

use super::tree::{Key, Value};
use crate::signal::{Payload, Signal};
use base64::Engine;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, ArrayValue, EntityRef, InstrumentationScope, KeyValue, KeyValueList};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs, SeverityNumber};
use opentelemetry_proto::tonic::metrics::v1::{
    exemplar, exponential_histogram_data_point, metric, number_data_point, summary_data_point, AggregationTemporality, Exemplar,
    ExponentialHistogram, ExponentialHistogramDataPoint, Gauge, Histogram, HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics,
    ScopeMetrics, Sum, Summary, SummaryDataPoint,
};
use opentelemetry_proto::tonic::profiles::v1development as prof;
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{span, status, ResourceSpans, ScopeSpans, Span, Status};
use std::fmt;

/// A decoding error with the path to the value that caused it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct JsonError {
    /// Where, e.g. `resourceSpans[0].scopeSpans[0].spans[3].traceId`.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

/// A path segment chain living on the stack; rendered only for errors.
#[derive(Clone, Copy)]
enum Seg<'a> {
    Root,
    Field(&'a Path<'a>, &'a str),
    Index(&'a Path<'a>, usize),
}

#[derive(Clone, Copy)]
struct Path<'a>(Seg<'a>);

impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Seg::Root => Ok(()),
            Seg::Field(parent, name) => {
                if matches!(parent.0, Seg::Root) {
                    write!(f, "{name}")
                } else {
                    write!(f, "{parent}.{name}")
                }
            }
            Seg::Index(parent, i) => write!(f, "{parent}[{i}]"),
        }
    }
}

impl<'a> Path<'a> {
    fn field(&'a self, name: &'a str) -> Path<'a> {
        Path(Seg::Field(self, name))
    }
    fn index(&'a self, i: usize) -> Path<'a> {
        Path(Seg::Index(self, i))
    }
    fn err(&self, message: impl Into<String>) -> JsonError {
        let path = self.to_string();
        JsonError { path: if path.is_empty() { "$".into() } else { path }, message: message.into() }
    }
}

type R<T> = Result<T, JsonError>;

/// Decodes an OTLP/JSON export request body.
pub fn decode(signal: Signal, body: &[u8]) -> R<Payload> {
    let root = Path(Seg::Root);
    if body.iter().all(u8::is_ascii_whitespace) {
        // An empty body is the empty request, as for protobuf.
        return Ok(match signal {
            Signal::Traces => Payload::Traces(Default::default()),
            Signal::Metrics => Payload::Metrics(Default::default()),
            Signal::Logs => Payload::Logs(Default::default()),
            Signal::Profiles => Payload::Profiles(Default::default()),
        });
    }
    let value = Value::parse(body).map_err(|e| root.err(format!("invalid JSON: {e}")))?;
    let obj = object(&value, &root)?;
    Ok(match signal {
        Signal::Traces => {
            let mut r = ExportTraceServiceRequest::default();
            for (k, v) in obj {
                if let "resourceSpans" | "resource_spans" = k.as_str() {
                    r.resource_spans = list(v, &root.field("resourceSpans"), resource_spans)?;
                }
            }
            Payload::Traces(r)
        }
        Signal::Metrics => {
            let mut r = ExportMetricsServiceRequest::default();
            for (k, v) in obj {
                if let "resourceMetrics" | "resource_metrics" = k.as_str() {
                    r.resource_metrics = list(v, &root.field("resourceMetrics"), resource_metrics)?;
                }
            }
            Payload::Metrics(r)
        }
        Signal::Logs => {
            let mut r = ExportLogsServiceRequest::default();
            for (k, v) in obj {
                if let "resourceLogs" | "resource_logs" = k.as_str() {
                    r.resource_logs = list(v, &root.field("resourceLogs"), resource_logs)?;
                }
            }
            Payload::Logs(r)
        }
        Signal::Profiles => {
            let mut r = ExportProfilesServiceRequest::default();
            for (k, v) in obj {
                match k.as_str() {
                    "resourceProfiles" | "resource_profiles" => {
                        r.resource_profiles = list(v, &root.field("resourceProfiles"), resource_profiles)?
                    }
                    "dictionary" => r.dictionary = opt(v, &root.field("dictionary"), dictionary)?,
                    _ => {}
                }
            }
            Payload::Profiles(r)
        }
    })
}

// ---- primitives ----

fn object<'v, 'a>(v: &'v Value<'a>, p: &Path) -> R<&'v [(Key<'a>, Value<'a>)]> {
    v.as_object().ok_or_else(|| p.err(format!("expected an object, got {}", kind(v))))
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A repeated field; `null` is the empty list.
fn list<T>(v: &Value, p: &Path, f: impl Fn(&Value, &Path) -> R<T>) -> R<Vec<T>> {
    match v {
        Value::Null => Ok(Vec::new()),
        Value::Array(items) => items.iter().enumerate().map(|(i, item)| f(item, &p.index(i))).collect(),
        other => Err(p.err(format!("expected an array, got {}", kind(other)))),
    }
}

/// A message field; `null` is absent.
fn opt<T>(v: &Value, p: &Path, f: impl Fn(&Value, &Path) -> R<T>) -> R<Option<T>> {
    if v.is_null() {
        Ok(None)
    } else {
        f(v, p).map(Some)
    }
}

fn string(v: &Value, p: &Path) -> R<String> {
    match v {
        Value::Null => Ok(String::new()),
        Value::String(s) => Ok(String::from(&**s)),
        other => Err(p.err(format!("expected a string, got {}", kind(other)))),
    }
}

fn boolean(v: &Value, p: &Path) -> R<bool> {
    match v {
        Value::Null => Ok(false),
        Value::Bool(b) => Ok(*b),
        other => Err(p.err(format!("expected true or false, got {}", kind(other)))),
    }
}

/// An integer in [min, max] given as a JSON number (integral) or a decimal string.
fn integer(v: &Value, p: &Path, min: i128, max: i128, what: &str) -> R<i128> {
    let parsed: Option<i128> = match v {
        Value::Null => return Ok(0),
        Value::Number(n) => n.as_i64().map(i128::from).or_else(|| n.as_u64().map(i128::from)).or_else(|| {
            let f = n.as_f64()?;
            (f.fract() == 0.0 && f.abs() < 1.8e19).then_some(f as i128)
        }),
        Value::String(s) => s.trim().parse::<i128>().ok(),
        other => return Err(p.err(format!("expected {what} (number or decimal string), got {}", kind(other)))),
    };
    match parsed {
        Some(n) if n >= min && n <= max => Ok(n),
        Some(n) => Err(p.err(format!("{n} is out of range for {what}"))),
        None => Err(p.err(format!("expected {what} (number or decimal string), got {v}"))),
    }
}

fn u64v(v: &Value, p: &Path) -> R<u64> {
    integer(v, p, 0, u64::MAX as i128, "an unsigned 64-bit integer").map(|n| n as u64)
}
fn i64v(v: &Value, p: &Path) -> R<i64> {
    integer(v, p, i64::MIN as i128, i64::MAX as i128, "a 64-bit integer").map(|n| n as i64)
}
fn u32v(v: &Value, p: &Path) -> R<u32> {
    integer(v, p, 0, u32::MAX as i128, "an unsigned 32-bit integer").map(|n| n as u32)
}
fn i32v(v: &Value, p: &Path) -> R<i32> {
    integer(v, p, i32::MIN as i128, i32::MAX as i128, "a 32-bit integer").map(|n| n as i32)
}

fn f64v(v: &Value, p: &Path) -> R<f64> {
    match v {
        Value::Null => Ok(0.0),
        Value::Number(n) => n.as_f64().ok_or_else(|| p.err("number is not representable as a double")),
        Value::String(s) => match &**s {
            "NaN" => Ok(f64::NAN),
            "Infinity" => Ok(f64::INFINITY),
            "-Infinity" => Ok(f64::NEG_INFINITY),
            other => other.trim().parse::<f64>().ok().filter(|f| f.is_finite()).ok_or_else(|| {
                p.err(format!("expected a double (number, numeric string, \"NaN\", \"Infinity\" or \"-Infinity\"), got \"{other}\""))
            }),
        },
        other => Err(p.err(format!("expected a double, got {}", kind(other)))),
    }
}

fn bytes(v: &Value, p: &Path) -> R<Vec<u8>> {
    let s = match v {
        Value::Null => return Ok(Vec::new()),
        Value::String(s) => s.as_bytes(),
        other => return Err(p.err(format!("expected a base64 string, got {}", kind(other)))),
    };
    let e = base64::engine::general_purpose::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new().with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    );
    let u = base64::engine::general_purpose::GeneralPurpose::new(
        &base64::alphabet::URL_SAFE,
        base64::engine::GeneralPurposeConfig::new().with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    );
    e.decode(s).or_else(|_| u.decode(s)).map_err(|err| p.err(format!("invalid base64: {err}")))
}

/// A trace / span / profile ID: hex (either case) of exactly `len` bytes, or empty.
fn hex_id(v: &Value, p: &Path, len: usize) -> R<Vec<u8>> {
    let s = match v {
        Value::Null => return Ok(Vec::new()),
        Value::String(s) => s.as_bytes(),
        other => return Err(p.err(format!("expected {} hex characters, got {}", len * 2, kind(other)))),
    };
    if s.is_empty() {
        return Ok(Vec::new());
    }
    if s.len() != len * 2 {
        return Err(p.err(format!("expected {} hex characters, got {}", len * 2, s.len())));
    }
    let nib = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    s.chunks_exact(2)
        .map(|pair| Some(nib(pair[0])? << 4 | nib(pair[1])?))
        .collect::<Option<Vec<u8>>>()
        .ok_or_else(|| p.err(format!("expected {} hex characters, got a non-hex character", len * 2)))
}

/// An enum: an integer, or its proto name.
fn enumeration(v: &Value, p: &Path, by_name: impl Fn(&str) -> Option<i32>, what: &str) -> R<i32> {
    match v {
        Value::String(s) if s.parse::<i64>().is_err() => by_name(s).ok_or_else(|| p.err(format!("unknown {what} name \"{s}\""))),
        _ => i32v(v, p),
    }
}

// ---- common ----

fn any_value(v: &Value, p: &Path) -> R<AnyValue> {
    let obj = object(v, p)?;
    let mut out = AnyValue { value: None };
    for (k, v) in obj {
        if v.is_null() {
            continue;
        }
        let value = match k.as_str() {
            "stringValue" | "string_value" => any_value::Value::StringValue(string(v, &p.field("stringValue"))?),
            "boolValue" | "bool_value" => any_value::Value::BoolValue(boolean(v, &p.field("boolValue"))?),
            "intValue" | "int_value" => any_value::Value::IntValue(i64v(v, &p.field("intValue"))?),
            "doubleValue" | "double_value" => any_value::Value::DoubleValue(f64v(v, &p.field("doubleValue"))?),
            "bytesValue" | "bytes_value" => any_value::Value::BytesValue(bytes(v, &p.field("bytesValue"))?),
            "arrayValue" | "array_value" => {
                let ap = p.field("arrayValue");
                let mut a = ArrayValue::default();
                for (k, v) in object(v, &ap)? {
                    if k == "values" {
                        a.values = list(v, &ap.field("values"), any_value)?;
                    }
                }
                any_value::Value::ArrayValue(a)
            }
            "kvlistValue" | "kvlist_value" => {
                let kp = p.field("kvlistValue");
                let mut l = KeyValueList::default();
                for (k, v) in object(v, &kp)? {
                    if k == "values" {
                        l.values = list(v, &kp.field("values"), key_value)?;
                    }
                }
                any_value::Value::KvlistValue(l)
            }
            "stringValueStrindex" | "string_value_strindex" => {
                any_value::Value::StringValueStrindex(i32v(v, &p.field("stringValueStrindex"))?)
            }
            _ => continue,
        };
        if out.value.is_some() {
            return Err(p.err("more than one value set in AnyValue"));
        }
        out.value = Some(value);
    }
    Ok(out)
}

fn key_value(v: &Value, p: &Path) -> R<KeyValue> {
    let mut kv = KeyValue::default();
    for (k, v) in object(v, p)? {
        match k.as_str() {
            "key" => kv.key = string(v, &p.field("key"))?,
            "value" => kv.value = opt(v, &p.field("value"), any_value)?,
            "keyStrindex" | "key_strindex" => kv.key_strindex = i32v(v, &p.field("keyStrindex"))?,
            _ => {}
        }
    }
    Ok(kv)
}

fn attributes(v: &Value, p: &Path) -> R<Vec<KeyValue>> {
    list(v, p, key_value)
}

fn resource(v: &Value, p: &Path) -> R<Resource> {
    let mut r = Resource::default();
    for (k, v) in object(v, p)? {
        match k.as_str() {
            "attributes" => r.attributes = attributes(v, &p.field("attributes"))?,
            "droppedAttributesCount" | "dropped_attributes_count" => {
                r.dropped_attributes_count = u32v(v, &p.field("droppedAttributesCount"))?
            }
            "entityRefs" | "entity_refs" => r.entity_refs = list(v, &p.field("entityRefs"), entity_ref)?,
            _ => {}
        }
    }
    Ok(r)
}

fn entity_ref(v: &Value, p: &Path) -> R<EntityRef> {
    let mut e = EntityRef::default();
    for (k, v) in object(v, p)? {
        match k.as_str() {
            "schemaUrl" | "schema_url" => e.schema_url = string(v, &p.field("schemaUrl"))?,
            "type" => e.r#type = string(v, &p.field("type"))?,
            "idKeys" | "id_keys" => e.id_keys = list(v, &p.field("idKeys"), string)?,
            "descriptionKeys" | "description_keys" => e.description_keys = list(v, &p.field("descriptionKeys"), string)?,
            _ => {}
        }
    }
    Ok(e)
}

fn scope(v: &Value, p: &Path) -> R<InstrumentationScope> {
    let mut s = InstrumentationScope::default();
    for (k, v) in object(v, p)? {
        match k.as_str() {
            "name" => s.name = string(v, &p.field("name"))?,
            "version" => s.version = string(v, &p.field("version"))?,
            "attributes" => s.attributes = attributes(v, &p.field("attributes"))?,
            "droppedAttributesCount" | "dropped_attributes_count" => {
                s.dropped_attributes_count = u32v(v, &p.field("droppedAttributesCount"))?
            }
            _ => {}
        }
    }
    Ok(s)
}

// ---- traces ----

fn resource_spans(v: &Value, p: &Path) -> R<ResourceSpans> {
    let mut r = ResourceSpans::default();
    for (k, v) in object(v, p)? {
        match k.as_str() {
            "resource" => r.resource = opt(v, &p.field("resource"), resource)?,
            "scopeSpans" | "scope_spans" => r.scope_spans = list(v, &p.field("scopeSpans"), scope_spans)?,
            "schemaUrl" | "schema_url" => r.schema_url = string(v, &p.field("schemaUrl"))?,
            _ => {}
        }
    }
    Ok(r)
}

fn scope_spans(v: &Value, p: &Path) -> R<ScopeSpans> {
    let mut s = ScopeSpans::default();
    for (k, v) in object(v, p)? {
        match k.as_str() {
            "scope" => s.scope = opt(v, &p.field("scope"), scope)?,
            "spans" => s.spans = list(v, &p.field("spans"), span)?,
            "schemaUrl" | "schema_url" => s.schema_url = string(v, &p.field("schemaUrl"))?,
            _ => {}
        }
    }
    Ok(s)
}

fn span(v: &Value, p: &Path) -> R<Span> {
    let mut s = Span::default();
    for (k, v) in object(v, p)? {
        match k.as_str() {
            "traceId" | "trace_id" => s.trace_id = hex_id(v, &p.field("traceId"), 16)?,
            "spanId" | "span_id" => s.span_id = hex_id(v, &p.field("spanId"), 8)?,
            "traceState" | "trace_state" => s.trace_state = string(v, &p.field("traceState"))?,
            "parentSpanId" | "parent_span_id" => s.parent_span_id = hex_id(v, &p.field("parentSpanId"), 8)?,
            "flags" => s.flags = u32v(v, &p.field("flags"))?,
            "name" => s.name = string(v, &p.field("name"))?,
            "kind" => s.kind = enumeration(v, &p.field("kind"), |n| span::SpanKind::from_str_name(n).map(|e| e as i32), "SpanKind")?,
            "startTimeUnixNano" | "start_time_unix_nano" => s.start_time_unix_nano = u64v(v, &p.field("startTimeUnixNano"))?,
            "endTimeUnixNano" | "end_time_unix_nano" => s.end_time_unix_nano = u64v(v, &p.field("endTimeUnixNano"))?,
            "attributes" => s.attributes = attributes(v, &p.field("attributes"))?,
            "droppedAttributesCount" | "dropped_attributes_count" => {
                s.dropped_attributes_count = u32v(v, &p.field("droppedAttributesCount"))?
            }
            "events" => s.events = list(v, &p.field("events"), event)?,
            "droppedEventsCount" | "dropped_events_count" => s.dropped_events_count = u32v(v, &p.field("droppedEventsCount"))?,
            "links" => s.links = list(v, &p.field("links"), link)?,
            "droppedLinksCount" | "dropped_links_count" => s.dropped_links_count = u32v(v, &p.field("droppedLinksCount"))?,
            "status" => s.status = opt(v, &p.field("status"), span_status)?,
            _ => {}
        }
    }
    Ok(s)
}

fn event(v: &Value, p: &Path) -> R<span::Event> {
    let mut e = span::Event::default();
    for (k, v) in object(v, p)? {
        match k.as_str() {
            "timeUnixNano" | "time_unix_nano" => e.time_unix_nano = u64v(v, &p.field("timeUnixNano"))?,
            "name" => e.name = string(v, &p.field("name"))?,
            "attributes" => e.attributes = attributes(v, &p.field("attributes"))?,
            "droppedAttributesCount" | "dropped_attributes_count" => {
                e.dropped_attributes_count = u32v(v, &p.field("droppedAttributesCount"))?
            }
            _ => {}
        }
    }
    Ok(e)
}

fn link(v: &Value, p: &Path) -> R<span::Link> {
    let mut l = span::Link::default();
    for (k, v) in object(v, p)? {
        match k.as_str() {
            "traceId" | "trace_id" => l.trace_id = hex_id(v, &p.field("traceId"), 16)?,
            "spanId" | "span_id" => l.span_id = hex_id(v, &p.field("spanId"), 8)?,
            "traceState" | "trace_state" => l.trace_state = string(v, &p.field("traceState"))?,
            "attributes" => l.attributes = attributes(v, &p.field("attributes"))?,
            "droppedAttributesCount" | "dropped_attributes_count" => {
                l.dropped_attributes_count = u32v(v, &p.field("droppedAttributesCount"))?
            }
            "flags" => l.flags = u32v(v, &p.field("flags"))?,
            _ => {}
        }
    }
    Ok(l)
}

fn span_status(v: &Value, p: &Path) -> R<Status> {
    let mut s = Status::default();
    for (k, v) in object(v, p)? {
        match k.as_str() {
            "message" => s.message = string(v, &p.field("message"))?,
            "code" => s.code = enumeration(v, &p.field("code"), |n| status::StatusCode::from_str_name(n).map(|e| e as i32), "StatusCode")?,
            _ => {}
        }
    }
    Ok(s)
}

// ---- logs ----

fn resource_logs(v: &Value, p: &Path) -> R<ResourceLogs> {
    let mut r = ResourceLogs::default();
    for (k, v) in object(v, p)? {
        match k.as_str() {
            "resource" => r.resource = opt(v, &p.field("resource"), resource)?,
            "scopeLogs" | "scope_logs" => r.scope_logs = list(v, &p.field("scopeLogs"), scope_logs)?,
            "schemaUrl" | "schema_url" => r.schema_url = string(v, &p.field("schemaUrl"))?,
            _ => {}
        }
    }
    Ok(r)
}

fn scope_logs(v: &Value, p: &Path) -> R<ScopeLogs> {
    let mut s = ScopeLogs::default();
    for (k, v) in object(v, p)? {
        match k.as_str() {
            "scope" => s.scope = opt(v, &p.field("scope"), scope)?,
            "logRecords" | "log_records" => s.log_records = list(v, &p.field("logRecords"), log_record)?,
            "schemaUrl" | "schema_url" => s.schema_url = string(v, &p.field("schemaUrl"))?,
            _ => {}
        }
    }
    Ok(s)
}

fn log_record(v: &Value, p: &Path) -> R<LogRecord> {
    let mut r = LogRecord::default();
    for (k, v) in object(v, p)? {
        match k.as_str() {
            "timeUnixNano" | "time_unix_nano" => r.time_unix_nano = u64v(v, &p.field("timeUnixNano"))?,
            "observedTimeUnixNano" | "observed_time_unix_nano" => r.observed_time_unix_nano = u64v(v, &p.field("observedTimeUnixNano"))?,
            "severityNumber" | "severity_number" => {
                r.severity_number =
                    enumeration(v, &p.field("severityNumber"), |n| SeverityNumber::from_str_name(n).map(|e| e as i32), "SeverityNumber")?
            }
            "severityText" | "severity_text" => r.severity_text = string(v, &p.field("severityText"))?,
            "body" => r.body = opt(v, &p.field("body"), any_value)?,
            "attributes" => r.attributes = attributes(v, &p.field("attributes"))?,
            "droppedAttributesCount" | "dropped_attributes_count" => {
                r.dropped_attributes_count = u32v(v, &p.field("droppedAttributesCount"))?
            }
            "flags" => r.flags = u32v(v, &p.field("flags"))?,
            "traceId" | "trace_id" => r.trace_id = hex_id(v, &p.field("traceId"), 16)?,
            "spanId" | "span_id" => r.span_id = hex_id(v, &p.field("spanId"), 8)?,
            "eventName" | "event_name" => r.event_name = string(v, &p.field("eventName"))?,
            _ => {}
        }
    }
    Ok(r)
}

// ---- metrics ----

fn resource_metrics(v: &Value, p: &Path) -> R<ResourceMetrics> {
    let mut r = ResourceMetrics::default();
    for (k, v) in object(v, p)? {
        match k.as_str() {
            "resource" => r.resource = opt(v, &p.field("resource"), resource)?,
            "scopeMetrics" | "scope_metrics" => r.scope_metrics = list(v, &p.field("scopeMetrics"), scope_metrics)?,
            "schemaUrl" | "schema_url" => r.schema_url = string(v, &p.field("schemaUrl"))?,
            _ => {}
        }
    }
    Ok(r)
}

fn scope_metrics(v: &Value, p: &Path) -> R<ScopeMetrics> {
    let mut s = ScopeMetrics::default();
    for (k, v) in object(v, p)? {
        match k.as_str() {
            "scope" => s.scope = opt(v, &p.field("scope"), scope)?,
            "metrics" => s.metrics = list(v, &p.field("metrics"), metric)?,
            "schemaUrl" | "schema_url" => s.schema_url = string(v, &p.field("schemaUrl"))?,
            _ => {}
        }
    }
    Ok(s)
}

fn temporality(v: &Value, p: &Path) -> R<i32> {
    enumeration(v, p, |n| AggregationTemporality::from_str_name(n).map(|e| e as i32), "AggregationTemporality")
}

fn metric(v: &Value, p: &Path) -> R<Metric> {
    let mut m = Metric::default();
    let set_data = |data: metric::Data, p: &Path, m: &mut Metric| -> R<()> {
        if m.data.is_some() {
            return Err(p.err("more than one of gauge, sum, histogram, exponentialHistogram, summary set"));
        }
        m.data = Some(data);
        Ok(())
    };
    for (k, v) in object(v, p)? {
        match k.as_str() {
            "name" => m.name = string(v, &p.field("name"))?,
            "description" => m.description = string(v, &p.field("description"))?,
            "unit" => m.unit = string(v, &p.field("unit"))?,
            "metadata" => m.metadata = attributes(v, &p.field("metadata"))?,
            _ if v.is_null() => {}
            "gauge" => {
                let gp = p.field("gauge");
                let mut g = Gauge::default();
                for (k, v) in object(v, &gp)? {
                    if let "dataPoints" | "data_points" = k.as_str() {
                        g.data_points = list(v, &gp.field("dataPoints"), number_point)?;
                    }
                }
                set_data(metric::Data::Gauge(g), p, &mut m)?;
            }
            "sum" => {
                let sp = p.field("sum");
                let mut s = Sum::default();
                for (k, v) in object(v, &sp)? {
                    match k.as_str() {
                        "dataPoints" | "data_points" => s.data_points = list(v, &sp.field("dataPoints"), number_point)?,
                        "aggregationTemporality" | "aggregation_temporality" => {
                            s.aggregation_temporality = temporality(v, &sp.field("aggregationTemporality"))?
                        }
                        "isMonotonic" | "is_monotonic" => s.is_monotonic = boolean(v, &sp.field("isMonotonic"))?,
                        _ => {}
                    }
                }
                set_data(metric::Data::Sum(s), p, &mut m)?;
            }
            "histogram" => {
                let hp = p.field("histogram");
                let mut h = Histogram::default();
                for (k, v) in object(v, &hp)? {
                    match k.as_str() {
                        "dataPoints" | "data_points" => h.data_points = list(v, &hp.field("dataPoints"), histogram_point)?,
                        "aggregationTemporality" | "aggregation_temporality" => {
                            h.aggregation_temporality = temporality(v, &hp.field("aggregationTemporality"))?
                        }
                        _ => {}
                    }
                }
                set_data(metric::Data::Histogram(h), p, &mut m)?;
            }
            "exponentialHistogram" | "exponential_histogram" => {
                let hp = p.field("exponentialHistogram");
                let mut h = ExponentialHistogram::default();
                for (k, v) in object(v, &hp)? {
                    match k.as_str() {
                        "dataPoints" | "data_points" => h.data_points = list(v, &hp.field("dataPoints"), exp_histogram_point)?,
                        "aggregationTemporality" | "aggregation_temporality" => {
                            h.aggregation_temporality = temporality(v, &hp.field("aggregationTemporality"))?
                        }
                        _ => {}
                    }
                }
                set_data(metric::Data::ExponentialHistogram(h), p, &mut m)?;
            }
            "summary" => {
                let sp = p.field("summary");
                let mut s = Summary::default();
                for (k, v) in object(v, &sp)? {
                    if let "dataPoints" | "data_points" = k.as_str() {
                        s.data_points = list(v, &sp.field("dataPoints"), summary_point)?;
                    }
                }
                set_data(metric::Data::Summary(s), p, &mut m)?;
            }
            _ => {}
        }
    }
    Ok(m)
}

fn number_point(v: &Value, p: &Path) -> R<NumberDataPoint> {
    let mut d = NumberDataPoint::default();
    for (k, v) in object(v, p)? {
        match k.as_str() {
            "attributes" => d.attributes = attributes(v, &p.field("attributes"))?,
            "startTimeUnixNano" | "start_time_unix_nano" => d.start_time_unix_nano = u64v(v, &p.field("startTimeUnixNano"))?,
            "timeUnixNano" | "time_unix_nano" => d.time_unix_nano = u64v(v, &p.field("timeUnixNano"))?,
            "exemplars" => d.exemplars = list(v, &p.field("exemplars"), exemplar)?,
            "flags" => d.flags = u32v(v, &p.field("flags"))?,
            _ if v.is_null() => {}
            "asDouble" | "as_double" => set_once(&mut d.value, number_data_point::Value::AsDouble(f64v(v, &p.field("asDouble"))?), p)?,
            "asInt" | "as_int" => set_once(&mut d.value, number_data_point::Value::AsInt(i64v(v, &p.field("asInt"))?), p)?,
            _ => {}
        }
    }
    Ok(d)
}

fn set_once<T>(slot: &mut Option<T>, value: T, p: &Path) -> R<()> {
    if slot.is_some() {
        return Err(p.err("both asDouble and asInt set"));
    }
    *slot = Some(value);
    Ok(())
}

fn histogram_point(v: &Value, p: &Path) -> R<HistogramDataPoint> {
    let mut d = HistogramDataPoint::default();
    for (k, v) in object(v, p)? {
        match k.as_str() {
            "attributes" => d.attributes = attributes(v, &p.field("attributes"))?,
            "startTimeUnixNano" | "start_time_unix_nano" => d.start_time_unix_nano = u64v(v, &p.field("startTimeUnixNano"))?,
            "timeUnixNano" | "time_unix_nano" => d.time_unix_nano = u64v(v, &p.field("timeUnixNano"))?,
            "count" => d.count = u64v(v, &p.field("count"))?,
            "sum" => d.sum = opt(v, &p.field("sum"), f64v)?,
            "bucketCounts" | "bucket_counts" => d.bucket_counts = list(v, &p.field("bucketCounts"), u64v)?,
            "explicitBounds" | "explicit_bounds" => d.explicit_bounds = list(v, &p.field("explicitBounds"), f64v)?,
            "exemplars" => d.exemplars = list(v, &p.field("exemplars"), exemplar)?,
            "flags" => d.flags = u32v(v, &p.field("flags"))?,
            "min" => d.min = opt(v, &p.field("min"), f64v)?,
            "max" => d.max = opt(v, &p.field("max"), f64v)?,
            _ => {}
        }
    }
    Ok(d)
}

fn buckets(v: &Value, p: &Path) -> R<exponential_histogram_data_point::Buckets> {
    let mut b = exponential_histogram_data_point::Buckets::default();
    for (k, v) in object(v, p)? {
        match k.as_str() {
            "offset" => b.offset = i32v(v, &p.field("offset"))?,
            "bucketCounts" | "bucket_counts" => b.bucket_counts = list(v, &p.field("bucketCounts"), u64v)?,
            _ => {}
        }
    }
    Ok(b)
}

fn exp_histogram_point(v: &Value, p: &Path) -> R<ExponentialHistogramDataPoint> {
    let mut d = ExponentialHistogramDataPoint::default();
    for (k, v) in object(v, p)? {
        match k.as_str() {
            "attributes" => d.attributes = attributes(v, &p.field("attributes"))?,
            "startTimeUnixNano" | "start_time_unix_nano" => d.start_time_unix_nano = u64v(v, &p.field("startTimeUnixNano"))?,
            "timeUnixNano" | "time_unix_nano" => d.time_unix_nano = u64v(v, &p.field("timeUnixNano"))?,
            "count" => d.count = u64v(v, &p.field("count"))?,
            "sum" => d.sum = opt(v, &p.field("sum"), f64v)?,
            "scale" => d.scale = i32v(v, &p.field("scale"))?,
            "zeroCount" | "zero_count" => d.zero_count = u64v(v, &p.field("zeroCount"))?,
            "positive" => d.positive = opt(v, &p.field("positive"), buckets)?,
            "negative" => d.negative = opt(v, &p.field("negative"), buckets)?,
            "flags" => d.flags = u32v(v, &p.field("flags"))?,
            "exemplars" => d.exemplars = list(v, &p.field("exemplars"), exemplar)?,
            "min" => d.min = opt(v, &p.field("min"), f64v)?,
            "max" => d.max = opt(v, &p.field("max"), f64v)?,
            "zeroThreshold" | "zero_threshold" => d.zero_threshold = f64v(v, &p.field("zeroThreshold"))?,
            _ => {}
        }
    }
    Ok(d)
}

fn summary_point(v: &Value, p: &Path) -> R<SummaryDataPoint> {
    let mut d = SummaryDataPoint::default();
    for (k, v) in object(v, p)? {
        match k.as_str() {
            "attributes" => d.attributes = attributes(v, &p.field("attributes"))?,
            "startTimeUnixNano" | "start_time_unix_nano" => d.start_time_unix_nano = u64v(v, &p.field("startTimeUnixNano"))?,
            "timeUnixNano" | "time_unix_nano" => d.time_unix_nano = u64v(v, &p.field("timeUnixNano"))?,
            "count" => d.count = u64v(v, &p.field("count"))?,
            "sum" => d.sum = f64v(v, &p.field("sum"))?,
            "quantileValues" | "quantile_values" => {
                d.quantile_values = list(v, &p.field("quantileValues"), |v, p| {
                    let mut q = summary_data_point::ValueAtQuantile::default();
                    for (k, v) in object(v, p)? {
                        match k.as_str() {
                            "quantile" => q.quantile = f64v(v, &p.field("quantile"))?,
                            "value" => q.value = f64v(v, &p.field("value"))?,
                            _ => {}
                        }
                    }
                    Ok(q)
                })?
            }
            "flags" => d.flags = u32v(v, &p.field("flags"))?,
            _ => {}
        }
    }
    Ok(d)
}

fn exemplar(v: &Value, p: &Path) -> R<Exemplar> {
    let mut e = Exemplar::default();
    for (k, v) in object(v, p)? {
        match k.as_str() {
            "filteredAttributes" | "filtered_attributes" => e.filtered_attributes = attributes(v, &p.field("filteredAttributes"))?,
            "timeUnixNano" | "time_unix_nano" => e.time_unix_nano = u64v(v, &p.field("timeUnixNano"))?,
            "spanId" | "span_id" => e.span_id = hex_id(v, &p.field("spanId"), 8)?,
            "traceId" | "trace_id" => e.trace_id = hex_id(v, &p.field("traceId"), 16)?,
            _ if v.is_null() => {}
            "asDouble" | "as_double" => set_once(&mut e.value, exemplar::Value::AsDouble(f64v(v, &p.field("asDouble"))?), p)?,
            "asInt" | "as_int" => set_once(&mut e.value, exemplar::Value::AsInt(i64v(v, &p.field("asInt"))?), p)?,
            _ => {}
        }
    }
    Ok(e)
}

// ---- profiles ----

fn resource_profiles(v: &Value, p: &Path) -> R<prof::ResourceProfiles> {
    let mut r = prof::ResourceProfiles::default();
    for (k, v) in object(v, p)? {
        match k.as_str() {
            "resource" => r.resource = opt(v, &p.field("resource"), resource)?,
            "scopeProfiles" | "scope_profiles" => r.scope_profiles = list(v, &p.field("scopeProfiles"), scope_profiles)?,
            "schemaUrl" | "schema_url" => r.schema_url = string(v, &p.field("schemaUrl"))?,
            _ => {}
        }
    }
    Ok(r)
}

fn scope_profiles(v: &Value, p: &Path) -> R<prof::ScopeProfiles> {
    let mut s = prof::ScopeProfiles::default();
    for (k, v) in object(v, p)? {
        match k.as_str() {
            "scope" => s.scope = opt(v, &p.field("scope"), scope)?,
            "profiles" => s.profiles = list(v, &p.field("profiles"), profile)?,
            "schemaUrl" | "schema_url" => s.schema_url = string(v, &p.field("schemaUrl"))?,
            _ => {}
        }
    }
    Ok(s)
}

fn value_type(v: &Value, p: &Path) -> R<prof::ValueType> {
    let mut t = prof::ValueType::default();
    for (k, v) in object(v, p)? {
        match k.as_str() {
            "typeStrindex" | "type_strindex" => t.type_strindex = i32v(v, &p.field("typeStrindex"))?,
            "unitStrindex" | "unit_strindex" => t.unit_strindex = i32v(v, &p.field("unitStrindex"))?,
            _ => {}
        }
    }
    Ok(t)
}

fn profile(v: &Value, p: &Path) -> R<prof::Profile> {
    let mut o = prof::Profile::default();
    for (k, v) in object(v, p)? {
        match k.as_str() {
            "sampleType" | "sample_type" => o.sample_type = opt(v, &p.field("sampleType"), value_type)?,
            "samples" => o.samples = list(v, &p.field("samples"), sample)?,
            "timeUnixNano" | "time_unix_nano" => o.time_unix_nano = u64v(v, &p.field("timeUnixNano"))?,
            "durationNano" | "duration_nano" => o.duration_nano = u64v(v, &p.field("durationNano"))?,
            "periodType" | "period_type" => o.period_type = opt(v, &p.field("periodType"), value_type)?,
            "period" => o.period = i64v(v, &p.field("period"))?,
            "profileId" | "profile_id" => o.profile_id = hex_id(v, &p.field("profileId"), 16)?,
            "droppedAttributesCount" | "dropped_attributes_count" => {
                o.dropped_attributes_count = u32v(v, &p.field("droppedAttributesCount"))?
            }
            "originalPayloadFormat" | "original_payload_format" => {
                o.original_payload_format = string(v, &p.field("originalPayloadFormat"))?
            }
            "originalPayload" | "original_payload" => o.original_payload = bytes(v, &p.field("originalPayload"))?,
            "attributeIndices" | "attribute_indices" => o.attribute_indices = list(v, &p.field("attributeIndices"), i32v)?,
            _ => {}
        }
    }
    Ok(o)
}

fn sample(v: &Value, p: &Path) -> R<prof::Sample> {
    let mut s = prof::Sample::default();
    for (k, v) in object(v, p)? {
        match k.as_str() {
            "stackIndex" | "stack_index" => s.stack_index = i32v(v, &p.field("stackIndex"))?,
            "attributeIndices" | "attribute_indices" => s.attribute_indices = list(v, &p.field("attributeIndices"), i32v)?,
            "linkIndex" | "link_index" => s.link_index = i32v(v, &p.field("linkIndex"))?,
            "values" => s.values = list(v, &p.field("values"), i64v)?,
            "timestampsUnixNano" | "timestamps_unix_nano" => s.timestamps_unix_nano = list(v, &p.field("timestampsUnixNano"), u64v)?,
            _ => {}
        }
    }
    Ok(s)
}

fn dictionary(v: &Value, p: &Path) -> R<prof::ProfilesDictionary> {
    let mut d = prof::ProfilesDictionary::default();
    for (k, v) in object(v, p)? {
        match k.as_str() {
            "mappingTable" | "mapping_table" => {
                d.mapping_table = list(v, &p.field("mappingTable"), |v, p| {
                    let mut m = prof::Mapping::default();
                    for (k, v) in object(v, p)? {
                        match k.as_str() {
                            "memoryStart" | "memory_start" => m.memory_start = u64v(v, &p.field("memoryStart"))?,
                            "memoryLimit" | "memory_limit" => m.memory_limit = u64v(v, &p.field("memoryLimit"))?,
                            "fileOffset" | "file_offset" => m.file_offset = u64v(v, &p.field("fileOffset"))?,
                            "filenameStrindex" | "filename_strindex" => m.filename_strindex = i32v(v, &p.field("filenameStrindex"))?,
                            "attributeIndices" | "attribute_indices" => m.attribute_indices = list(v, &p.field("attributeIndices"), i32v)?,
                            _ => {}
                        }
                    }
                    Ok(m)
                })?
            }
            "locationTable" | "location_table" => {
                d.location_table = list(v, &p.field("locationTable"), |v, p| {
                    let mut l = prof::Location::default();
                    for (k, v) in object(v, p)? {
                        match k.as_str() {
                            "mappingIndex" | "mapping_index" => l.mapping_index = i32v(v, &p.field("mappingIndex"))?,
                            "address" => l.address = u64v(v, &p.field("address"))?,
                            "lines" => {
                                l.lines = list(v, &p.field("lines"), |v, p| {
                                    let mut line = prof::Line::default();
                                    for (k, v) in object(v, p)? {
                                        match k.as_str() {
                                            "functionIndex" | "function_index" => line.function_index = i32v(v, &p.field("functionIndex"))?,
                                            "line" => line.line = i64v(v, &p.field("line"))?,
                                            "column" => line.column = i64v(v, &p.field("column"))?,
                                            _ => {}
                                        }
                                    }
                                    Ok(line)
                                })?
                            }
                            "attributeIndices" | "attribute_indices" => l.attribute_indices = list(v, &p.field("attributeIndices"), i32v)?,
                            _ => {}
                        }
                    }
                    Ok(l)
                })?
            }
            "functionTable" | "function_table" => {
                d.function_table = list(v, &p.field("functionTable"), |v, p| {
                    let mut f = prof::Function::default();
                    for (k, v) in object(v, p)? {
                        match k.as_str() {
                            "nameStrindex" | "name_strindex" => f.name_strindex = i32v(v, &p.field("nameStrindex"))?,
                            "systemNameStrindex" | "system_name_strindex" => {
                                f.system_name_strindex = i32v(v, &p.field("systemNameStrindex"))?
                            }
                            "filenameStrindex" | "filename_strindex" => f.filename_strindex = i32v(v, &p.field("filenameStrindex"))?,
                            "startLine" | "start_line" => f.start_line = i64v(v, &p.field("startLine"))?,
                            _ => {}
                        }
                    }
                    Ok(f)
                })?
            }
            "linkTable" | "link_table" => {
                d.link_table = list(v, &p.field("linkTable"), |v, p| {
                    let mut l = prof::Link::default();
                    for (k, v) in object(v, p)? {
                        match k.as_str() {
                            "traceId" | "trace_id" => l.trace_id = hex_id(v, &p.field("traceId"), 16)?,
                            "spanId" | "span_id" => l.span_id = hex_id(v, &p.field("spanId"), 8)?,
                            _ => {}
                        }
                    }
                    Ok(l)
                })?
            }
            "stringTable" | "string_table" => d.string_table = list(v, &p.field("stringTable"), string)?,
            "attributeTable" | "attribute_table" => {
                d.attribute_table = list(v, &p.field("attributeTable"), |v, p| {
                    let mut a = prof::KeyValueAndUnit::default();
                    for (k, v) in object(v, p)? {
                        match k.as_str() {
                            "keyStrindex" | "key_strindex" => a.key_strindex = i32v(v, &p.field("keyStrindex"))?,
                            "value" => a.value = opt(v, &p.field("value"), any_value)?,
                            "unitStrindex" | "unit_strindex" => a.unit_strindex = i32v(v, &p.field("unitStrindex"))?,
                            _ => {}
                        }
                    }
                    Ok(a)
                })?
            }
            "stackTable" | "stack_table" => {
                d.stack_table = list(v, &p.field("stackTable"), |v, p| {
                    let mut s = prof::Stack::default();
                    for (k, v) in object(v, p)? {
                        if let "locationIndices" | "location_indices" = k.as_str() {
                            s.location_indices = list(v, &p.field("locationIndices"), i32v)?;
                        }
                    }
                    Ok(s)
                })?
            }
            _ => {}
        }
    }
    Ok(d)
}
