//! Logs: `resourceLogs` down to log records.

use super::common::{any_value, attributes, resource, scope};
use super::{enumeration, hex_id, list, object, opt, string, u32v, u64v, Path, R};
use crate::otlp::json::tree::{Key, Value};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs, SeverityNumber};

/// The export request's top-level fields.
pub(super) fn request(obj: &[(Key, Value)], root: &Path) -> R<ExportLogsServiceRequest> {
    let mut r = ExportLogsServiceRequest::default();
    for (k, v) in obj {
        if let "resourceLogs" | "resource_logs" = k.as_str() {
            r.resource_logs = list(v, &root.field("resourceLogs"), resource_logs)?;
        }
    }
    Ok(r)
}

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
