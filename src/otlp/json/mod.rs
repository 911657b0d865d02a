//! OTLP/JSON ("JSON Protobuf Encoding" of the OTLP specification).
//!
//! The decoder ([`decode`]) fills the prost types directly and names the path of any
//! error. The encoder writes canonical OTLP/JSON straight from the prost types: lowerCamelCase
//! keys, hex trace/span/profile IDs, integer enums, 64-bit integers as decimal strings,
//! default values omitted (oneof members are always written).

mod decode;
mod encode;
mod tree;
mod writer;

pub use decode::{decode, JsonError};
pub use encode::{encode, encode_partial_success};

/// Appends `s` as a JSON string literal.
pub fn write_json_str(out: &mut String, s: &str) {
    writer::write_str(out, s)
}
