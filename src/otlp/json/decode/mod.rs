//! OTLP/JSON decoding straight into the prost types, following the specification's
//! "JSON Protobuf Encoding": lowerCamelCase keys (snake_case accepted too), unknown keys
//! ignored, hex trace/span/profile IDs of the exact length, enums as integers or names,
//! 64-bit integers as numbers or decimal strings, doubles as numbers, numeric strings or
//! "NaN"/"Infinity"/"-Infinity", `bytes` as base64, `null` as the default value.
//!
//! Any error anywhere rejects the whole request, with the path to the offending value
//! (`resourceSpans[0].scopeSpans[1].spans[7].traceId: expected 32 hex characters`).
//! Nothing is dropped silently. The path is only rendered when an error occurs.
//!
//! This module holds the entry point, the error path and the scalar readers; each signal's
//! messages live in their own file, and the messages they share in `common`.

mod common;
mod logs;
mod metrics;
mod profiles;
mod traces;

use super::tree::{Key, Value};
use crate::signal::{Payload, Signal};
use base64::Engine;
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
        Signal::Traces => Payload::Traces(traces::request(obj, &root)?),
        Signal::Metrics => Payload::Metrics(metrics::request(obj, &root)?),
        Signal::Logs => Payload::Logs(logs::request(obj, &root)?),
        Signal::Profiles => Payload::Profiles(profiles::request(obj, &root)?),
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
