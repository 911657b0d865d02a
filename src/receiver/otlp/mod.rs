//! OTLP over HTTP and gRPC: the handlers and the payload decoding they share.

pub mod decode;
pub mod grpc;
pub mod http;
