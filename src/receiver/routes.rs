//! Every path the receivers serve, in one table: the HTTP router mounts it, the
//! throttle's classifier and the refusal metrics read each path's signal from it.

use crate::signal::Signal;

/// What serves a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handler {
    /// OTLP/HTTP export (`POST /v1/…`).
    OtlpHttp,
    /// OTLP/gRPC export method, served by the gRPC server.
    OtlpGrpc,
    /// Prometheus remote write 1.0.
    RemoteWrite,
    /// Pyroscope's `/ingest` API.
    PyroscopeIngest,
    /// Pyroscope's push API (Connect over HTTP).
    PyroscopePush,
}

/// One path, the signal it carries and what serves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// The request path (for gRPC, the method path).
    pub path: &'static str,
    /// The record type its requests carry.
    pub signal: Signal,
    /// What serves it.
    pub handler: Handler,
}

const fn otlp(signal: Signal, handler: Handler) -> Route {
    let path = match handler {
        Handler::OtlpGrpc => signal.grpc_path(),
        _ => signal.http_path(),
    };
    Route { path, signal, handler }
}

const fn other(path: &'static str, signal: Signal, handler: Handler) -> Route {
    Route { path, signal, handler }
}

/// The table. A path appears once.
pub const ROUTES: [Route; 13] = [
    otlp(Signal::Traces, Handler::OtlpHttp),
    otlp(Signal::Metrics, Handler::OtlpHttp),
    otlp(Signal::Logs, Handler::OtlpHttp),
    otlp(Signal::Profiles, Handler::OtlpHttp),
    otlp(Signal::Traces, Handler::OtlpGrpc),
    otlp(Signal::Metrics, Handler::OtlpGrpc),
    otlp(Signal::Logs, Handler::OtlpGrpc),
    otlp(Signal::Profiles, Handler::OtlpGrpc),
    other("/prometheus/write", Signal::Metrics, Handler::RemoteWrite),
    other("/api/v1/write", Signal::Metrics, Handler::RemoteWrite),
    other("/pyroscope/ingest", Signal::Profiles, Handler::PyroscopeIngest),
    other("/ingest", Signal::Profiles, Handler::PyroscopeIngest),
    other("/push.v1.PusherService/Push", Signal::Profiles, Handler::PyroscopePush),
];

/// The routes served over plain HTTP (everything but the OTLP/gRPC methods).
pub fn http() -> impl Iterator<Item = &'static Route> {
    ROUTES.iter().filter(|r| r.handler != Handler::OtlpGrpc)
}

/// The signal a path carries, if it is a receiver path.
pub fn classify(path: &str) -> Option<Signal> {
    ROUTES.iter().find(|r| r.path == path).map(|r| r.signal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classify_knows_every_receiver_path() {
        assert_eq!(classify("/v1/logs"), Some(Signal::Logs));
        assert_eq!(classify("/api/v1/write"), Some(Signal::Metrics));
        assert_eq!(classify("/push.v1.PusherService/Push"), Some(Signal::Profiles));
        assert_eq!(classify("/metrics"), None);
        for s in Signal::ALL {
            assert_eq!(classify(s.grpc_path()), Some(s));
            assert_eq!(classify(s.http_path()), Some(s));
        }
    }

    #[test]
    fn every_path_is_listed_once() {
        for (i, r) in ROUTES.iter().enumerate() {
            assert!(ROUTES[i + 1..].iter().all(|o| o.path != r.path), "{} twice", r.path);
        }
    }
}
