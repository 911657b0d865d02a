//! OTLP encodings beyond what prost gives: canonical OTLP/JSON.

pub mod json;
pub mod synth;
