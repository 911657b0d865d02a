//! Receivers: OTLP over HTTP and gRPC, Prometheus remote write and Pyroscope, on one
//! connection layer and one middleware stack. See docs/architecture.md.
//!
//! - [`connection`]: listeners, TLS, HTTP/1.1 and HTTP/2 serving, stamped socket I/O;
//! - [`middleware`]: the tower layers every request passes (auth, throttle, bodies);
//! - [`otlp`] and [`formats`]: the handlers, which decode and hand to [`ingest`];
//! - [`routes`], [`format`], [`response`], [`tenant`], [`requests`]: what they all share.

pub mod connection;
pub mod format;
pub mod formats;
pub mod ingest;
pub mod middleware;
pub mod otlp;
pub mod requests;
pub mod response;
pub mod routes;
pub mod tenant;

pub use ingest::Ingest;
pub use requests::{count_rejection, count_request, RefusalLogged, REFUSAL_LINES_PER_SECOND};
pub use tenant::{Tenant, TenantCounters};
