//! OTLP encodings beyond what prost gives: canonical OTLP/JSON.

pub mod chunk;
pub mod codec;
pub mod json;
pub mod profiles;
pub mod split;
pub mod synth;
pub mod wire;
