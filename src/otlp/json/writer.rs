//! A small JSON object writer that omits proto3 default values.

use base64::Engine;
use std::fmt::Write;

/// Appends a JSON string literal.
pub fn write_str(out: &mut String, s: &str) {
    out.push('"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc: Option<&str> = match b {
            b'"' => Some("\\\""),
            b'\\' => Some("\\\\"),
            b'\n' => Some("\\n"),
            b'\r' => Some("\\r"),
            b'\t' => Some("\\t"),
            0..=0x1f => None,
            _ => continue,
        };
        out.push_str(&s[start..i]);
        match esc {
            Some(e) => out.push_str(e),
            None => {
                let _ = write!(out, "\\u{b:04x}");
            }
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

/// Appends a double; non-finite values become the strings the specification allows.
pub fn write_f64(out: &mut String, v: f64) {
    if v.is_nan() {
        out.push_str("\"NaN\"");
    } else if v == f64::INFINITY {
        out.push_str("\"Infinity\"");
    } else if v == f64::NEG_INFINITY {
        out.push_str("\"-Infinity\"");
    } else {
        // Shortest representation that parses back to the same bits, with an exponent
        // for very large or small values (ryu, as serde_json uses).
        out.push_str(ryu::Buffer::new().format_finite(v));
    }
}

/// An open JSON object.
pub struct Obj<'a> {
    out: &'a mut String,
    first: bool,
}

impl<'a> Obj<'a> {
    /// Opens `{`.
    pub fn new(out: &'a mut String) -> Self {
        out.push('{');
        Obj { out, first: true }
    }

    /// Writes `"key":` (with a comma when needed) and returns the buffer for the value.
    pub fn key(&mut self, key: &str) -> &mut String {
        if !self.first {
            self.out.push(',');
        }
        self.first = false;
        self.out.push('"');
        self.out.push_str(key);
        self.out.push_str("\":");
        self.out
    }

    /// A string field, omitted when empty.
    pub fn str(&mut self, key: &str, v: &str) {
        if !v.is_empty() {
            let out = self.key(key);
            write_str(out, v);
        }
    }

    /// A 64-bit unsigned field as a decimal string, omitted when 0.
    pub fn u64s(&mut self, key: &str, v: u64) {
        if v != 0 {
            let _ = write!(self.key(key), "\"{v}\"");
        }
    }

    /// A 64-bit signed field as a decimal string, omitted when 0.
    pub fn i64s(&mut self, key: &str, v: i64) {
        if v != 0 {
            let _ = write!(self.key(key), "\"{v}\"");
        }
    }

    /// A 32-bit integer (or enum) field as a number, omitted when 0.
    pub fn int(&mut self, key: &str, v: i64) {
        if v != 0 {
            let _ = write!(self.key(key), "{v}");
        }
    }

    /// A double field, omitted when 0.
    pub fn f64(&mut self, key: &str, v: f64) {
        if v != 0.0 || v.is_sign_negative() {
            write_f64(self.key(key), v);
        }
    }

    /// An optional double (proto3 `optional`): written whenever present.
    pub fn opt_f64(&mut self, key: &str, v: Option<f64>) {
        if let Some(v) = v {
            write_f64(self.key(key), v);
        }
    }

    /// A bool field, omitted when false.
    pub fn bool(&mut self, key: &str, v: bool) {
        if v {
            self.key(key).push_str("true");
        }
    }

    /// An ID as lower-case hex, omitted when empty.
    pub fn hex(&mut self, key: &str, v: &[u8]) {
        if !v.is_empty() {
            let out = self.key(key);
            out.push('"');
            for b in v {
                let _ = write!(out, "{b:02x}");
            }
            out.push('"');
        }
    }

    /// A `bytes` field as base64, omitted when empty.
    pub fn b64(&mut self, key: &str, v: &[u8]) {
        if !v.is_empty() {
            let out = self.key(key);
            out.push('"');
            base64::engine::general_purpose::STANDARD.encode_string(v, out);
            out.push('"');
        }
    }

    /// A repeated field, omitted when empty; `f` writes one element.
    pub fn arr<T>(&mut self, key: &str, items: &[T], mut f: impl FnMut(&mut String, &T)) {
        if items.is_empty() {
            return;
        }
        let out = self.key(key);
        out.push('[');
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            f(out, item);
        }
        out.push(']');
    }

    /// A message field, omitted when absent.
    pub fn msg<T>(&mut self, key: &str, v: Option<&T>, f: impl FnOnce(&mut String, &T)) {
        if let Some(v) = v {
            f(self.key(key), v);
        }
    }

    /// Closes `}`.
    pub fn end(self) {
        self.out.push('}');
    }
}
