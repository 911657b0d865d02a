//! Canonical OTLP/JSON encoding of the four export requests.

use super::writer::{write_f64, write_str, Obj};
use crate::signal::Payload;
use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, EntityRef, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::metrics::v1::{
    exemplar, exponential_histogram_data_point::Buckets, metric::Data, number_data_point, Exemplar, ExponentialHistogramDataPoint,
    HistogramDataPoint, Metric, NumberDataPoint, SummaryDataPoint,
};
use opentelemetry_proto::tonic::profiles::v1development as prof;
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{span, Span, Status};
use std::fmt::Write;

/// Encodes one export request as canonical OTLP/JSON.
///
/// An encoded payload is decoded first; callers that can report a decode failure
/// should pass [`Payload::decoded`] (here a failure gives an empty request, `{}`).
pub fn encode(payload: &Payload) -> String {
    if let Payload::Encoded(_) = payload {
        return payload.decoded().map_or_else(|_| String::from("{}"), |d| encode(&d));
    }
    let mut out = String::with_capacity(payload.encoded_len() * 2 + 16);
    let mut o = Obj::new(&mut out);
    match payload {
        Payload::Traces(r) => o.arr("resourceSpans", &r.resource_spans, |out, rs| {
            let mut o = Obj::new(out);
            o.msg("resource", rs.resource.as_ref(), resource);
            o.arr("scopeSpans", &rs.scope_spans, |out, ss| {
                let mut o = Obj::new(out);
                o.msg("scope", ss.scope.as_ref(), scope);
                o.arr("spans", &ss.spans, span);
                o.str("schemaUrl", &ss.schema_url);
                o.end();
            });
            o.str("schemaUrl", &rs.schema_url);
            o.end();
        }),
        Payload::Metrics(r) => o.arr("resourceMetrics", &r.resource_metrics, |out, rm| {
            let mut o = Obj::new(out);
            o.msg("resource", rm.resource.as_ref(), resource);
            o.arr("scopeMetrics", &rm.scope_metrics, |out, sm| {
                let mut o = Obj::new(out);
                o.msg("scope", sm.scope.as_ref(), scope);
                o.arr("metrics", &sm.metrics, metric);
                o.str("schemaUrl", &sm.schema_url);
                o.end();
            });
            o.str("schemaUrl", &rm.schema_url);
            o.end();
        }),
        Payload::Logs(r) => o.arr("resourceLogs", &r.resource_logs, |out, rl| {
            let mut o = Obj::new(out);
            o.msg("resource", rl.resource.as_ref(), resource);
            o.arr("scopeLogs", &rl.scope_logs, |out, sl| {
                let mut o = Obj::new(out);
                o.msg("scope", sl.scope.as_ref(), scope);
                o.arr("logRecords", &sl.log_records, log_record);
                o.str("schemaUrl", &sl.schema_url);
                o.end();
            });
            o.str("schemaUrl", &rl.schema_url);
            o.end();
        }),
        Payload::Profiles(r) => profiles(&mut o, r),
        Payload::Encoded(_) => unreachable!("decoded above"),
    }
    o.end();
    out
}

fn resource(out: &mut String, r: &Resource) {
    let mut o = Obj::new(out);
    o.arr("attributes", &r.attributes, key_value);
    o.int("droppedAttributesCount", r.dropped_attributes_count.into());
    o.arr("entityRefs", &r.entity_refs, entity_ref);
    o.end();
}

fn entity_ref(out: &mut String, e: &EntityRef) {
    let mut o = Obj::new(out);
    o.str("schemaUrl", &e.schema_url);
    o.str("type", &e.r#type);
    o.arr("idKeys", &e.id_keys, |out, k| write_str(out, k));
    o.arr("descriptionKeys", &e.description_keys, |out, k| write_str(out, k));
    o.end();
}

fn scope(out: &mut String, s: &InstrumentationScope) {
    let mut o = Obj::new(out);
    o.str("name", &s.name);
    o.str("version", &s.version);
    o.arr("attributes", &s.attributes, key_value);
    o.int("droppedAttributesCount", s.dropped_attributes_count.into());
    o.end();
}

fn key_value(out: &mut String, kv: &KeyValue) {
    let mut o = Obj::new(out);
    o.str("key", &kv.key);
    o.msg("value", kv.value.as_ref(), any_value);
    o.int("keyStrindex", kv.key_strindex.into());
    o.end();
}

fn any_value(out: &mut String, v: &AnyValue) {
    let mut o = Obj::new(out);
    match &v.value {
        None => {}
        Some(any_value::Value::StringValue(s)) => write_str(o.key("stringValue"), s),
        Some(any_value::Value::BoolValue(b)) => o.key("boolValue").push_str(if *b { "true" } else { "false" }),
        Some(any_value::Value::IntValue(i)) => {
            let _ = write!(o.key("intValue"), "\"{i}\"");
        }
        Some(any_value::Value::DoubleValue(d)) => write_f64(o.key("doubleValue"), *d),
        Some(any_value::Value::ArrayValue(a)) => {
            let out = o.key("arrayValue");
            let mut a_obj = Obj::new(out);
            a_obj.arr("values", &a.values, any_value);
            a_obj.end();
        }
        Some(any_value::Value::KvlistValue(kv)) => {
            let out = o.key("kvlistValue");
            let mut k_obj = Obj::new(out);
            k_obj.arr("values", &kv.values, key_value);
            k_obj.end();
        }
        Some(any_value::Value::BytesValue(b)) => {
            let out = o.key("bytesValue");
            out.push('"');
            base64::Engine::encode_string(&base64::engine::general_purpose::STANDARD, b, out);
            out.push('"');
        }
        Some(any_value::Value::StringValueStrindex(i)) => {
            let _ = write!(o.key("stringValueStrindex"), "{i}");
        }
    }
    o.end();
}

fn span(out: &mut String, s: &Span) {
    let mut o = Obj::new(out);
    o.hex("traceId", &s.trace_id);
    o.hex("spanId", &s.span_id);
    o.str("traceState", &s.trace_state);
    o.hex("parentSpanId", &s.parent_span_id);
    o.int("flags", s.flags.into());
    o.str("name", &s.name);
    o.int("kind", s.kind.into());
    o.u64s("startTimeUnixNano", s.start_time_unix_nano);
    o.u64s("endTimeUnixNano", s.end_time_unix_nano);
    o.arr("attributes", &s.attributes, key_value);
    o.int("droppedAttributesCount", s.dropped_attributes_count.into());
    o.arr("events", &s.events, event);
    o.int("droppedEventsCount", s.dropped_events_count.into());
    o.arr("links", &s.links, link);
    o.int("droppedLinksCount", s.dropped_links_count.into());
    o.msg("status", s.status.as_ref(), status);
    o.end();
}

fn event(out: &mut String, e: &span::Event) {
    let mut o = Obj::new(out);
    o.u64s("timeUnixNano", e.time_unix_nano);
    o.str("name", &e.name);
    o.arr("attributes", &e.attributes, key_value);
    o.int("droppedAttributesCount", e.dropped_attributes_count.into());
    o.end();
}

fn link(out: &mut String, l: &span::Link) {
    let mut o = Obj::new(out);
    o.hex("traceId", &l.trace_id);
    o.hex("spanId", &l.span_id);
    o.str("traceState", &l.trace_state);
    o.arr("attributes", &l.attributes, key_value);
    o.int("droppedAttributesCount", l.dropped_attributes_count.into());
    o.int("flags", l.flags.into());
    o.end();
}

fn status(out: &mut String, s: &Status) {
    let mut o = Obj::new(out);
    o.str("message", &s.message);
    o.int("code", s.code.into());
    o.end();
}

fn log_record(out: &mut String, r: &LogRecord) {
    let mut o = Obj::new(out);
    o.u64s("timeUnixNano", r.time_unix_nano);
    o.u64s("observedTimeUnixNano", r.observed_time_unix_nano);
    o.int("severityNumber", r.severity_number.into());
    o.str("severityText", &r.severity_text);
    o.msg("body", r.body.as_ref(), any_value);
    o.arr("attributes", &r.attributes, key_value);
    o.int("droppedAttributesCount", r.dropped_attributes_count.into());
    o.int("flags", r.flags.into());
    o.hex("traceId", &r.trace_id);
    o.hex("spanId", &r.span_id);
    o.str("eventName", &r.event_name);
    o.end();
}

fn metric(out: &mut String, m: &Metric) {
    let mut o = Obj::new(out);
    o.str("name", &m.name);
    o.str("description", &m.description);
    o.str("unit", &m.unit);
    match &m.data {
        None => {}
        Some(Data::Gauge(g)) => {
            let mut d = Obj::new(o.key("gauge"));
            d.arr("dataPoints", &g.data_points, number_point);
            d.end();
        }
        Some(Data::Sum(s)) => {
            let mut d = Obj::new(o.key("sum"));
            d.arr("dataPoints", &s.data_points, number_point);
            d.int("aggregationTemporality", s.aggregation_temporality.into());
            d.bool("isMonotonic", s.is_monotonic);
            d.end();
        }
        Some(Data::Histogram(h)) => {
            let mut d = Obj::new(o.key("histogram"));
            d.arr("dataPoints", &h.data_points, histogram_point);
            d.int("aggregationTemporality", h.aggregation_temporality.into());
            d.end();
        }
        Some(Data::ExponentialHistogram(h)) => {
            let mut d = Obj::new(o.key("exponentialHistogram"));
            d.arr("dataPoints", &h.data_points, exp_histogram_point);
            d.int("aggregationTemporality", h.aggregation_temporality.into());
            d.end();
        }
        Some(Data::Summary(s)) => {
            let mut d = Obj::new(o.key("summary"));
            d.arr("dataPoints", &s.data_points, summary_point);
            d.end();
        }
    }
    o.arr("metadata", &m.metadata, key_value);
    o.end();
}

fn u64_string(out: &mut String, v: &u64) {
    let _ = write!(out, "\"{v}\"");
}

fn f64_item(out: &mut String, v: &f64) {
    write_f64(out, *v);
}

fn number_point(out: &mut String, p: &NumberDataPoint) {
    let mut o = Obj::new(out);
    o.arr("attributes", &p.attributes, key_value);
    o.u64s("startTimeUnixNano", p.start_time_unix_nano);
    o.u64s("timeUnixNano", p.time_unix_nano);
    match p.value {
        Some(number_data_point::Value::AsDouble(d)) => write_f64(o.key("asDouble"), d),
        Some(number_data_point::Value::AsInt(i)) => {
            let _ = write!(o.key("asInt"), "\"{i}\"");
        }
        None => {}
    }
    o.arr("exemplars", &p.exemplars, exemplar);
    o.int("flags", p.flags.into());
    o.end();
}

fn histogram_point(out: &mut String, p: &HistogramDataPoint) {
    let mut o = Obj::new(out);
    o.arr("attributes", &p.attributes, key_value);
    o.u64s("startTimeUnixNano", p.start_time_unix_nano);
    o.u64s("timeUnixNano", p.time_unix_nano);
    o.u64s("count", p.count);
    o.opt_f64("sum", p.sum);
    o.arr("bucketCounts", &p.bucket_counts, u64_string);
    o.arr("explicitBounds", &p.explicit_bounds, f64_item);
    o.arr("exemplars", &p.exemplars, exemplar);
    o.int("flags", p.flags.into());
    o.opt_f64("min", p.min);
    o.opt_f64("max", p.max);
    o.end();
}

fn buckets(out: &mut String, b: &Buckets) {
    let mut o = Obj::new(out);
    o.int("offset", b.offset.into());
    o.arr("bucketCounts", &b.bucket_counts, u64_string);
    o.end();
}

fn exp_histogram_point(out: &mut String, p: &ExponentialHistogramDataPoint) {
    let mut o = Obj::new(out);
    o.arr("attributes", &p.attributes, key_value);
    o.u64s("startTimeUnixNano", p.start_time_unix_nano);
    o.u64s("timeUnixNano", p.time_unix_nano);
    o.u64s("count", p.count);
    o.opt_f64("sum", p.sum);
    o.int("scale", p.scale.into());
    o.u64s("zeroCount", p.zero_count);
    o.msg("positive", p.positive.as_ref(), buckets);
    o.msg("negative", p.negative.as_ref(), buckets);
    o.int("flags", p.flags.into());
    o.arr("exemplars", &p.exemplars, exemplar);
    o.opt_f64("min", p.min);
    o.opt_f64("max", p.max);
    o.f64("zeroThreshold", p.zero_threshold);
    o.end();
}

fn summary_point(out: &mut String, p: &SummaryDataPoint) {
    let mut o = Obj::new(out);
    o.arr("attributes", &p.attributes, key_value);
    o.u64s("startTimeUnixNano", p.start_time_unix_nano);
    o.u64s("timeUnixNano", p.time_unix_nano);
    o.u64s("count", p.count);
    o.f64("sum", p.sum);
    o.arr("quantileValues", &p.quantile_values, |out, q| {
        let mut o = Obj::new(out);
        o.f64("quantile", q.quantile);
        o.f64("value", q.value);
        o.end();
    });
    o.int("flags", p.flags.into());
    o.end();
}

fn exemplar(out: &mut String, e: &Exemplar) {
    let mut o = Obj::new(out);
    o.arr("filteredAttributes", &e.filtered_attributes, key_value);
    o.u64s("timeUnixNano", e.time_unix_nano);
    match e.value {
        Some(exemplar::Value::AsDouble(d)) => write_f64(o.key("asDouble"), d),
        Some(exemplar::Value::AsInt(i)) => {
            let _ = write!(o.key("asInt"), "\"{i}\"");
        }
        None => {}
    }
    o.hex("spanId", &e.span_id);
    o.hex("traceId", &e.trace_id);
    o.end();
}

fn profiles(o: &mut Obj<'_>, r: &ExportProfilesServiceRequest) {
    o.arr("resourceProfiles", &r.resource_profiles, |out, rp| {
        let mut o = Obj::new(out);
        o.msg("resource", rp.resource.as_ref(), resource);
        o.arr("scopeProfiles", &rp.scope_profiles, |out, sp| {
            let mut o = Obj::new(out);
            o.msg("scope", sp.scope.as_ref(), scope);
            o.arr("profiles", &sp.profiles, profile);
            o.str("schemaUrl", &sp.schema_url);
            o.end();
        });
        o.str("schemaUrl", &rp.schema_url);
        o.end();
    });
    o.msg("dictionary", r.dictionary.as_ref(), dictionary);
}

fn int_item(out: &mut String, v: &i32) {
    let _ = write!(out, "{v}");
}

fn i64_string(out: &mut String, v: &i64) {
    let _ = write!(out, "\"{v}\"");
}

fn dictionary(out: &mut String, d: &prof::ProfilesDictionary) {
    let mut o = Obj::new(out);
    o.arr("mappingTable", &d.mapping_table, |out, m| {
        let mut o = Obj::new(out);
        o.u64s("memoryStart", m.memory_start);
        o.u64s("memoryLimit", m.memory_limit);
        o.u64s("fileOffset", m.file_offset);
        o.int("filenameStrindex", m.filename_strindex.into());
        o.arr("attributeIndices", &m.attribute_indices, int_item);
        o.end();
    });
    o.arr("locationTable", &d.location_table, |out, l| {
        let mut o = Obj::new(out);
        o.int("mappingIndex", l.mapping_index.into());
        o.u64s("address", l.address);
        o.arr("lines", &l.lines, |out, line| {
            let mut o = Obj::new(out);
            o.int("functionIndex", line.function_index.into());
            o.i64s("line", line.line);
            o.i64s("column", line.column);
            o.end();
        });
        o.arr("attributeIndices", &l.attribute_indices, int_item);
        o.end();
    });
    o.arr("functionTable", &d.function_table, |out, f| {
        let mut o = Obj::new(out);
        o.int("nameStrindex", f.name_strindex.into());
        o.int("systemNameStrindex", f.system_name_strindex.into());
        o.int("filenameStrindex", f.filename_strindex.into());
        o.i64s("startLine", f.start_line);
        o.end();
    });
    o.arr("linkTable", &d.link_table, |out, l| {
        let mut o = Obj::new(out);
        o.hex("traceId", &l.trace_id);
        o.hex("spanId", &l.span_id);
        o.end();
    });
    o.arr("stringTable", &d.string_table, |out, s| write_str(out, s));
    o.arr("attributeTable", &d.attribute_table, |out, a| {
        let mut o = Obj::new(out);
        o.int("keyStrindex", a.key_strindex.into());
        o.msg("value", a.value.as_ref(), any_value);
        o.int("unitStrindex", a.unit_strindex.into());
        o.end();
    });
    o.arr("stackTable", &d.stack_table, |out, s| {
        let mut o = Obj::new(out);
        o.arr("locationIndices", &s.location_indices, int_item);
        o.end();
    });
    o.end();
}

fn value_type(out: &mut String, v: &prof::ValueType) {
    let mut o = Obj::new(out);
    o.int("typeStrindex", v.type_strindex.into());
    o.int("unitStrindex", v.unit_strindex.into());
    o.end();
}

fn profile(out: &mut String, p: &prof::Profile) {
    let mut o = Obj::new(out);
    o.msg("sampleType", p.sample_type.as_ref(), value_type);
    o.arr("samples", &p.samples, |out, s| {
        let mut o = Obj::new(out);
        o.int("stackIndex", s.stack_index.into());
        o.arr("attributeIndices", &s.attribute_indices, int_item);
        o.int("linkIndex", s.link_index.into());
        o.arr("values", &s.values, i64_string);
        o.arr("timestampsUnixNano", &s.timestamps_unix_nano, u64_string);
        o.end();
    });
    o.u64s("timeUnixNano", p.time_unix_nano);
    o.u64s("durationNano", p.duration_nano);
    o.msg("periodType", p.period_type.as_ref(), value_type);
    o.i64s("period", p.period);
    o.hex("profileId", &p.profile_id);
    o.int("droppedAttributesCount", p.dropped_attributes_count.into());
    o.str("originalPayloadFormat", &p.original_payload_format);
    o.b64("originalPayload", &p.original_payload);
    o.arr("attributeIndices", &p.attribute_indices, int_item);
    o.end();
}

/// The JSON export response with a partial success: `rejected` items of `signal` were
/// refused for `message`. Counts are 64-bit, so they are strings.
pub fn encode_partial_success(signal: crate::signal::Signal, rejected: i64, message: &str) -> String {
    let field = match signal {
        crate::signal::Signal::Traces => "rejectedSpans",
        crate::signal::Signal::Metrics => "rejectedDataPoints",
        crate::signal::Signal::Logs => "rejectedLogRecords",
        crate::signal::Signal::Profiles => "rejectedProfiles",
    };
    let mut out = String::new();
    let mut o = Obj::new(&mut out);
    {
        let mut ps = Obj::new(o.key("partialSuccess"));
        ps.i64s(field, rejected);
        ps.str("errorMessage", message);
        ps.end();
    }
    o.end();
    out
}
