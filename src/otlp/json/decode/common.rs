//! The messages every signal shares: attribute values, resources and scopes.

use super::{boolean, bytes, f64v, i32v, i64v, list, object, opt, string, u32v, Path, R};
use crate::otlp::json::tree::Value;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, ArrayValue, EntityRef, InstrumentationScope, KeyValue, KeyValueList};
use opentelemetry_proto::tonic::resource::v1::Resource;

pub(super) fn any_value(v: &Value, p: &Path) -> R<AnyValue> {
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

pub(super) fn attributes(v: &Value, p: &Path) -> R<Vec<KeyValue>> {
    list(v, p, key_value)
}

pub(super) fn resource(v: &Value, p: &Path) -> R<Resource> {
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

pub(super) fn scope(v: &Value, p: &Path) -> R<InstrumentationScope> {
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
