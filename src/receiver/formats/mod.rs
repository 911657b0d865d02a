//! Formats other than OTLP, turned into OTLP payloads: Prometheus remote write 1.0
//! (metrics) and Pyroscope (profiles).

pub mod promrw;
pub mod pyroscope;
