//! Profiles: `resourceProfiles` down to samples, and the request-wide dictionary the
//! samples index into.

use super::common::{any_value, resource, scope};
use super::{bytes, hex_id, i32v, i64v, list, object, opt, string, u32v, u64v, Path, R};
use crate::otlp::json::tree::{Key, Value};
use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
use opentelemetry_proto::tonic::profiles::v1development as prof;

/// The export request's top-level fields.
pub(super) fn request(obj: &[(Key, Value)], root: &Path) -> R<ExportProfilesServiceRequest> {
    let mut r = ExportProfilesServiceRequest::default();
    for (k, v) in obj {
        match k.as_str() {
            "resourceProfiles" | "resource_profiles" => r.resource_profiles = list(v, &root.field("resourceProfiles"), resource_profiles)?,
            "dictionary" => r.dictionary = opt(v, &root.field("dictionary"), dictionary)?,
            _ => {}
        }
    }
    Ok(r)
}

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
            "mappingTable" | "mapping_table" => d.mapping_table = list(v, &p.field("mappingTable"), mapping)?,
            "locationTable" | "location_table" => d.location_table = list(v, &p.field("locationTable"), location)?,
            "functionTable" | "function_table" => d.function_table = list(v, &p.field("functionTable"), function)?,
            "linkTable" | "link_table" => d.link_table = list(v, &p.field("linkTable"), link)?,
            "stringTable" | "string_table" => d.string_table = list(v, &p.field("stringTable"), string)?,
            "attributeTable" | "attribute_table" => d.attribute_table = list(v, &p.field("attributeTable"), key_value_and_unit)?,
            "stackTable" | "stack_table" => d.stack_table = list(v, &p.field("stackTable"), stack)?,
            _ => {}
        }
    }
    Ok(d)
}

fn mapping(v: &Value, p: &Path) -> R<prof::Mapping> {
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
}

fn location(v: &Value, p: &Path) -> R<prof::Location> {
    let mut l = prof::Location::default();
    for (k, v) in object(v, p)? {
        match k.as_str() {
            "mappingIndex" | "mapping_index" => l.mapping_index = i32v(v, &p.field("mappingIndex"))?,
            "address" => l.address = u64v(v, &p.field("address"))?,
            "lines" => l.lines = list(v, &p.field("lines"), line)?,
            "attributeIndices" | "attribute_indices" => l.attribute_indices = list(v, &p.field("attributeIndices"), i32v)?,
            _ => {}
        }
    }
    Ok(l)
}

fn line(v: &Value, p: &Path) -> R<prof::Line> {
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
}

fn function(v: &Value, p: &Path) -> R<prof::Function> {
    let mut f = prof::Function::default();
    for (k, v) in object(v, p)? {
        match k.as_str() {
            "nameStrindex" | "name_strindex" => f.name_strindex = i32v(v, &p.field("nameStrindex"))?,
            "systemNameStrindex" | "system_name_strindex" => f.system_name_strindex = i32v(v, &p.field("systemNameStrindex"))?,
            "filenameStrindex" | "filename_strindex" => f.filename_strindex = i32v(v, &p.field("filenameStrindex"))?,
            "startLine" | "start_line" => f.start_line = i64v(v, &p.field("startLine"))?,
            _ => {}
        }
    }
    Ok(f)
}

fn link(v: &Value, p: &Path) -> R<prof::Link> {
    let mut l = prof::Link::default();
    for (k, v) in object(v, p)? {
        match k.as_str() {
            "traceId" | "trace_id" => l.trace_id = hex_id(v, &p.field("traceId"), 16)?,
            "spanId" | "span_id" => l.span_id = hex_id(v, &p.field("spanId"), 8)?,
            _ => {}
        }
    }
    Ok(l)
}

fn key_value_and_unit(v: &Value, p: &Path) -> R<prof::KeyValueAndUnit> {
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
}

fn stack(v: &Value, p: &Path) -> R<prof::Stack> {
    let mut s = prof::Stack::default();
    for (k, v) in object(v, p)? {
        if let "locationIndices" | "location_indices" = k.as_str() {
            s.location_indices = list(v, &p.field("locationIndices"), i32v)?;
        }
    }
    Ok(s)
}
