//! Traces: `resourceSpans` down to spans, their events, links and status.

use super::common::{attributes, resource, scope};
use super::{enumeration, hex_id, list, object, opt, string, u32v, u64v, Path, R};
use crate::otlp::json::tree::{Key, Value};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::{span, status, ResourceSpans, ScopeSpans, Span, Status};

/// The export request's top-level fields.
pub(super) fn request(obj: &[(Key, Value)], root: &Path) -> R<ExportTraceServiceRequest> {
    let mut r = ExportTraceServiceRequest::default();
    for (k, v) in obj {
        if let "resourceSpans" | "resource_spans" = k.as_str() {
            r.resource_spans = list(v, &root.field("resourceSpans"), resource_spans)?;
        }
    }
    Ok(r)
}

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
