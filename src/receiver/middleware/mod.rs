//! The ordered middleware lists `receiver.http_server.middlewares` and
//! `receiver.grpc_server.middlewares`, items in the `name;key=value;key=value` form.
//!
//! Order rule: the list is applied first to last, each item wrapping what came before,
//! so the LAST item wraps outermost and runs FIRST on a request. `throttle` listed after
//! `content_decompressor` therefore runs before it. Authentication (when
//! `receiver.auth.tokens` is set) always wraps outside the whole list.

pub mod auth;
pub mod budget;
mod charge;
mod cors;
mod decompress;
pub mod drain;
mod grpc_status;
mod logging;
mod maxbytes;
pub mod refuse;
pub mod stack;
pub mod throttle;

pub use auth::AuthLayerState;
pub use refuse::reject;
pub use stack::{apply_grpc, apply_http, grpc_settings, GrpcSettings, HttpContext, ListenerSettings};
