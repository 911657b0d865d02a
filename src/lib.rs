//! weir: an OTLP ingestion gateway with adaptive, cgroup-aware overload protection.
//!
//! Receivers ([`receiver`]) decode OTLP over HTTP and gRPC and hand payloads to a
//! pipeline bounded in bytes ([`pipeline`]), which batches per signal and fans out to
//! exporters ([`exporter`]). [`app`] wires it together.
#![warn(missing_docs)]
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]

pub mod admission;
pub mod app;
pub mod compression;
pub mod config;
pub mod exporter;
pub mod otlp;
pub mod pipeline;
pub mod quota;
pub mod receiver;
pub mod signal;
pub mod sim;
pub mod telemetry;
pub mod throttle;

/// `google.rpc` messages compiled from `proto/` (Status, RetryInfo).
#[allow(missing_docs, clippy::all)]
pub mod rpc {
    include!(concat!(env!("OUT_DIR"), "/google.rpc.rs"));
}

/// Prometheus remote write 1.0 messages (`proto/prometheus/`).
#[allow(missing_docs, clippy::all)]
pub mod prompb {
    include!(concat!(env!("OUT_DIR"), "/prometheus.rs"));
}

/// Pyroscope push API messages (`proto/push/v1/`).
#[allow(missing_docs, clippy::all)]
pub mod pyroscope_push {
    include!(concat!(env!("OUT_DIR"), "/push.v1.rs"));
}

/// pprof's profile format (`proto/perftools/`).
#[allow(missing_docs, clippy::all)]
pub mod pprof {
    include!(concat!(env!("OUT_DIR"), "/perftools.profiles.rs"));
}
