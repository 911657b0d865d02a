//! The route → record type registry. Each receiver registers its own routes (HTTP paths,
//! gRPC method paths); unknown paths are admitted.

use crate::signal::Signal;

/// Path → record type. A short list compared by length first: faster than hashing for
/// the handful of routes a gateway has.
#[derive(Debug, Clone, Default)]
pub struct RouteRegistry {
    routes: Vec<(Box<str>, Signal)>,
}

impl RouteRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `path` as carrying `signal`.
    pub fn register(&mut self, path: &str, signal: Signal) {
        self.routes.retain(|(p, _)| &**p != path);
        self.routes.push((path.into(), signal));
    }

    /// The record type of `path`, if registered.
    pub fn classify(&self, path: &str) -> Option<Signal> {
        self.routes.iter().find(|(p, _)| p.len() == path.len() && &**p == path).map(|(_, s)| *s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_paths_classify_and_others_do_not() {
        let mut r = RouteRegistry::new();
        for s in Signal::ALL {
            r.register(s.http_path(), s);
            r.register(s.grpc_path(), s);
        }
        assert_eq!(r.classify("/v1/traces"), Some(Signal::Traces));
        assert_eq!(r.classify("/opentelemetry.proto.collector.logs.v1.LogsService/Export"), Some(Signal::Logs));
        assert_eq!(r.classify("/v1development/profiles"), Some(Signal::Profiles));
        assert_eq!(r.classify("/v1/traces/"), None);
        assert_eq!(r.classify("/metrics"), None);
    }
}
