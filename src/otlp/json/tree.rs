//! The JSON tree the OTLP/JSON decoder walks: keys and strings borrowed from the request
//! body where they hold no escape, objects as their entries in document order.
//!
//! `serde_json::Value` makes every key and every string a `String` and every object a
//! `BTreeMap`, all freed again once the prost types are built, and building and dropping
//! that tree is a large share of decoding
//! (`docs/benchmarks.md#measurements-behind-the-decoders`). Here a string with no escape
//! is a slice of the body, and an object is one `Vec` of its entries. serde_json still
//! parses (and bounds nesting at 128 levels, so neither parsing nor dropping can overflow
//! the stack).
//!
//! A key that appears twice in one object keeps its last value, as with
//! `serde_json::Value`: the earlier ones are dropped before the decoder sees them, so an
//! invalid earlier copy is no error and a field that may be set once (an `AnyValue`'s
//! value, a metric's data) is not refused for it. The remaining entries keep document
//! order; the one difference from `serde_json::Value` is that when a field is given under
//! both its spellings (`traceId` and `trace_id`), the later in the document wins, not the
//! later in sorted order.

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
        // serde_json refuses a number out of a double's range while parsing, so `n` is
        // finite; as with serde_json::Value, a non-finite one would become null.
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
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value<'de>, A::Error> {
        let mut entries: Vec<(Key<'de>, Value<'de>)> = Vec::new();
        while let Some(entry) = map.next_entry()? {
            entries.push(entry);
        }
        keep_last_of_each_key(&mut entries);
        Ok(Value::Object(entries))
    }
}

/// Drops every entry whose key appears again later in the object. OTLP objects have a
/// handful of keys, so a pairwise look costs less than hashing; a large object (a
/// hostile one with thousands of keys) is checked in O(n log n) by sorting positions.
/// Its cost is a small share of decoding (`docs/benchmarks.md#measurements-behind-the-decoders`).
fn keep_last_of_each_key(entries: &mut Vec<(Key<'_>, Value<'_>)>) {
    let n = entries.len();
    if n < 2 {
        return;
    }
    let mut dropped = Vec::new();
    if n <= 16 {
        for i in 0..n {
            if entries[i + 1..].iter().any(|(k, _)| k.0 == entries[i].0 .0) {
                dropped.resize(n, false);
                dropped[i] = true;
            }
        }
    } else {
        let mut order: Vec<usize> = (0..n).collect();
        // Stable: equal keys stay in document order, so each run's last is the one kept.
        order.sort_by(|&a, &b| entries[a].0 .0.cmp(&entries[b].0 .0));
        for w in order.windows(2) {
            if entries[w[0]].0 .0 == entries[w[1]].0 .0 {
                dropped.resize(n, false);
                dropped[w[0]] = true;
            }
        }
    }
    if !dropped.is_empty() {
        let mut i = 0;
        entries.retain(|_| {
            i += 1;
            !dropped[i - 1]
        });
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

    fn shown(body: &[u8]) -> Vec<String> {
        Value::parse(body).unwrap().as_object().unwrap().iter().map(|(k, v)| format!("{}={v}", k.as_str())).collect()
    }

    #[test]
    fn a_repeated_key_keeps_its_last_value_and_the_rest_keep_document_order() {
        assert_eq!(shown(br#"{"b": 0, "a": 1, "c": 2, "a": 3}"#), ["b=0", "c=2", "a=3"]);
        // An escaped spelling is the same key.
        assert_eq!(shown(br#"{"a": 1, "a": 2}"#), ["a=2"]);
        // A large object goes the sorting way: same answer.
        let mut big = String::from("{");
        for i in 0..40 {
            big.push_str(&format!("\"k{}\": {i},", i % 20));
        }
        big.push_str("\"last\": true}");
        let got = shown(big.as_bytes());
        let want: Vec<String> = (20..40).map(|i| format!("k{}={i}", i % 20)).chain(["last=true".to_string()]).collect();
        assert_eq!(got, want);
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
