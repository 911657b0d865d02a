//! The JSON tree the OTLP/JSON decoder walks: keys and strings borrowed from the request
//! body where they hold no escape, objects as their entries in document order.
//!
//! `serde_json::Value` made every key and every string a `String` and every object a
//! `BTreeMap`, all freed again once the prost types were built: in a profile of the
//! receiver decoding 700 KB trace bodies, building and dropping that tree (map inserts,
//! allocation, frees) took about a quarter of the CPU. Here a string with no escape is a
//! slice of the body, and an object is one `Vec` of its entries. serde_json still parses
//! (and bounds nesting at 128 levels, so neither parsing nor dropping can overflow the
//! stack).
//!
//! Duplicate keys are all kept, in order, so for a plain field the last one wins, as with
//! `serde_json::Value`; where a field may be set once (an `AnyValue`'s value, a metric's
//! data, a point's value) a duplicate is refused as a second value, which is what it is.

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use std::borrow::Cow;
use std::fmt;

/// A JSON value.
pub(super) enum Value<'a> {
    Null,
    Bool(bool),
    Number(serde_json::Number),
    String(Cow<'a, str>),
    Array(Vec<Value<'a>>),
    Object(Vec<(Key<'a>, Value<'a>)>),
}

/// An object key.
pub(super) struct Key<'a>(Cow<'a, str>);

impl Key<'_> {
    pub(super) fn as_str(&self) -> &str {
        &self.0
    }
}

impl PartialEq<str> for Key<'_> {
    fn eq(&self, other: &str) -> bool {
        *self.0 == *other
    }
}

impl<'a> Value<'a> {
    /// Parses a whole document; trailing characters other than white space are an error.
    pub(super) fn parse(body: &'a [u8]) -> serde_json::Result<Value<'a>> {
        serde_json::from_slice(body)
    }

    pub(super) fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    pub(super) fn as_object(&self) -> Option<&[(Key<'a>, Value<'a>)]> {
        match self {
            Value::Object(entries) => Some(entries),
            _ => None,
        }
    }
}

/// As JSON for strings, numbers, booleans and null (what an error message quotes);
/// arrays and objects by their kind.
impl fmt::Display for Value<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Null => f.write_str("null"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Number(n) => write!(f, "{n}"),
            Value::String(s) => match serde_json::to_string(&**s) {
                Ok(quoted) => f.write_str(&quoted),
                Err(_) => write!(f, "\"{s}\""),
            },
            Value::Array(_) => f.write_str("an array"),
            Value::Object(_) => f.write_str("an object"),
        }
    }
}

impl<'de> Deserialize<'de> for Value<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ValueVisitor)
    }
}

struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, b: bool) -> Result<Value<'de>, E> {
        Ok(Value::Bool(b))
    }
    fn visit_i64<E>(self, n: i64) -> Result<Value<'de>, E> {
        Ok(Value::Number(n.into()))
    }
    fn visit_u64<E>(self, n: u64) -> Result<Value<'de>, E> {
        Ok(Value::Number(n.into()))
    }
    fn visit_f64<E>(self, n: f64) -> Result<Value<'de>, E> {
        // As serde_json::Value: a number too large for a double parses as infinity, which
        // JSON cannot hold; it becomes null.
        Ok(serde_json::Number::from_f64(n).map_or(Value::Null, Value::Number))
    }
    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Value<'de>, E> {
        Ok(Value::String(Cow::Borrowed(s)))
    }
    fn visit_str<E>(self, s: &str) -> Result<Value<'de>, E> {
        Ok(Value::String(Cow::Owned(s.to_owned())))
    }
    fn visit_string<E>(self, s: String) -> Result<Value<'de>, E> {
        Ok(Value::String(Cow::Owned(s)))
    }
    fn visit_unit<E>(self) -> Result<Value<'de>, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value<'de>, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value<'de>, D::Error> {
        Value::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value<'de>, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value<'de>, A::Error> {
        let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(0));
        while let Some(entry) = map.next_entry()? {
            entries.push(entry);
        }
        Ok(Value::Object(entries))
    }
}

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(KeyVisitor)
    }
}

struct KeyVisitor;

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = Key<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }
    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Borrowed(s)))
    }
    fn visit_str<E>(self, s: &str) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Owned(s.to_owned())))
    }
    fn visit_string<E>(self, s: String) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Owned(s)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_without_escapes_borrow_the_body_and_escaped_ones_are_decoded() {
        let body = br#"{"plain": "abc", "esc\u0061ped": "a\"b\u00e9", "n": [1, -2, 2.5, 18446744073709551615], "t": true, "z": null}"#;
        let v = Value::parse(body).unwrap();
        let entries = v.as_object().unwrap();
        let keys: Vec<&str> = entries.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["plain", "escaped", "n", "t", "z"]);
        match (&entries[0].0 .0, &entries[0].1) {
            (Cow::Borrowed(_), Value::String(Cow::Borrowed(s))) => assert_eq!(*s, "abc"),
            _ => panic!("a string without escapes should borrow the body"),
        }
        assert!(matches!(entries[1].0 .0, Cow::Owned(_)));
        match &entries[1].1 {
            Value::String(s) => assert_eq!(&**s, "a\"b\u{e9}"),
            _ => panic!("expected a string"),
        }
        match &entries[2].1 {
            Value::Array(items) => {
                let shown: Vec<String> = items.iter().map(|i| i.to_string()).collect();
                assert_eq!(shown, ["1", "-2", "2.5", "18446744073709551615"]);
            }
            _ => panic!("expected an array"),
        }
        assert!(matches!(entries[3].1, Value::Bool(true)));
        assert!(entries[4].1.is_null());
        assert_eq!(entries[4].1.to_string(), "null");
    }

    #[test]
    fn duplicate_keys_are_kept_in_order() {
        let v = Value::parse(br#"{"a": 1, "a": 2}"#).unwrap();
        let shown: Vec<String> = v.as_object().unwrap().iter().map(|(k, v)| format!("{}={v}", k.as_str())).collect();
        assert_eq!(shown, ["a=1", "a=2"]);
    }

    #[test]
    fn bad_documents_are_errors() {
        for bad in [&b"{"[..], b"[1,]", b"{\"a\" 1}", b"{} x", b"\"\xff\""] {
            assert!(Value::parse(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
        // Nesting past serde_json's limit is an error, not a stack overflow.
        let deep = "[".repeat(10_000);
        assert!(Value::parse(deep.as_bytes()).is_err());
    }
}
