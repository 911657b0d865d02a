//! OTLP/gRPC to an upstream, retrying the specification's retryable codes.

use super::retry::{with_retry, Attempt};
use super::{BoxFuture, ExportError, Exporter};
use crate::config::OtlpExporterConfig;
use crate::otlp::codec::{Pieces, PiecesCodec};
use crate::rpc;
use crate::signal::{Payload, Signal};
use http::uri::PathAndQuery;
use prost::Message;
use std::time::Duration;
use tonic::codec::CompressionEncoding;
use tonic::metadata::{MetadataKey, MetadataMap, MetadataValue};
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};
use tonic::{Code, Status};

/// The `otlp` exporter.
pub struct OtlpGrpcExporter {
    name: String,
    channel: Channel,
    config: OtlpExporterConfig,
    metadata: MetadataMap,
    /// Metadata naming the tenant, filled per batch.
    per_tenant: Vec<(MetadataKey<tonic::metadata::Ascii>, String)>,
}

impl OtlpGrpcExporter {
    /// Connects lazily to `config.endpoint`.
    pub fn new(name: String, config: &OtlpExporterConfig) -> Result<Self, String> {
        let mut endpoint = Endpoint::from_shared(config.endpoint.clone()).map_err(|e| format!("endpoint: {e}"))?;
        if config.endpoint.starts_with("https://") {
            endpoint = endpoint.tls_config(ClientTlsConfig::new().with_enabled_roots()).map_err(|e| format!("tls: {e}"))?;
        }
        let channel = endpoint.connect_timeout(config.timeout).connect_lazy();
        let mut metadata = MetadataMap::new();
        let (fixed, templates) = super::split_headers(&config.headers);
        for (k, v) in &fixed {
            let key = MetadataKey::from_bytes(k.to_ascii_lowercase().as_bytes()).map_err(|e| format!("headers.{k}: {e}"))?;
            let value = MetadataValue::try_from(v.as_str()).map_err(|e| format!("headers.{k}: {e}"))?;
            metadata.insert(key, value);
        }
        let mut per_tenant = Vec::new();
        for (k, v) in templates {
            let key = MetadataKey::from_bytes(k.to_ascii_lowercase().as_bytes()).map_err(|e| format!("headers.{k}: {e}"))?;
            per_tenant.push((key, v));
        }
        Ok(OtlpGrpcExporter { name, channel, config: config.clone(), metadata, per_tenant })
    }

    async fn attempt(&self, signal: Signal, body: &Pieces, metadata: &MetadataMap) -> Attempt {
        let mut grpc = tonic::client::Grpc::new(self.channel.clone()).max_decoding_message_size(64 << 20);
        // tonic compresses the message itself (flate2 on zlib-rs for gzip, zstd's
        // default level for zstd): its framing leaves no place to hand it a compressed one.
        match self.config.compression.as_str() {
            "gzip" => grpc = grpc.send_compressed(CompressionEncoding::Gzip),
            "zstd" => grpc = grpc.send_compressed(CompressionEncoding::Zstd),
            _ => {}
        }
        if let Err(e) = grpc.ready().await {
            return Attempt::Retry { after: None, message: format!("channel not ready: {e}") };
        }
        let path = PathAndQuery::from_static(signal.grpc_path());
        match grpc.unary(self.request(body.clone(), metadata), path, PiecesCodec).await {
            Ok(_) => Attempt::Done,
            Err(status) => classify_status(&status),
        }
    }

    fn request<T>(&self, msg: T, metadata: &MetadataMap) -> tonic::Request<T> {
        let mut req = tonic::Request::new(msg);
        *req.metadata_mut() = metadata.clone();
        req.set_timeout(self.config.timeout);
        req
    }
}

/// Sorts a gRPC failure into retryable or permanent, per the OTLP specification.
pub fn classify_status(status: &Status) -> Attempt {
    let message = format!("{:?}: {}", status.code(), status.message());
    let retry_info = retry_delay(status);
    match status.code() {
        Code::Cancelled | Code::DeadlineExceeded | Code::Aborted | Code::OutOfRange | Code::Unavailable | Code::DataLoss => {
            Attempt::Retry { after: retry_info, message }
        }
        Code::ResourceExhausted if retry_info.is_some() => Attempt::Retry { after: retry_info, message },
        _ => Attempt::Permanent(message),
    }
}

/// The `google.rpc.RetryInfo` delay in a status's details, if any.
pub fn retry_delay(status: &Status) -> Option<Duration> {
    let details = rpc::Status::decode(status.details()).ok()?;
    details.details.iter().find(|a| a.type_url.ends_with("google.rpc.RetryInfo")).and_then(|any| {
        let info = rpc::RetryInfo::decode(any.value.as_slice()).ok()?;
        let d = info.retry_delay?;
        Some(Duration::new(d.seconds.max(0) as u64, d.nanos.max(0) as u32))
    })
}

impl Exporter for OtlpGrpcExporter {
    fn name(&self) -> &str {
        &self.name
    }
    fn splits_tenants(&self) -> bool {
        !self.per_tenant.is_empty()
    }
    fn export<'a>(&'a self, payload: &'a Payload, tenant: Option<&'a str>) -> BoxFuture<'a, Result<(), ExportError>> {
        Box::pin(async move {
            // Encoded once, sent as the pieces it is on every attempt (a batch of requests
            // that arrived as protobuf is forwarded without being decoded or joined: tonic's
            // buffer gets the one copy).
            let body = Pieces(payload.pieces());
            let mut metadata = self.metadata.clone();
            for (k, t) in &self.per_tenant {
                // A tenant name that is not a valid metadata value leaves it out.
                if let Some(v) = super::fill_tenant(t, tenant).and_then(|v| MetadataValue::try_from(v.as_str()).ok()) {
                    metadata.insert(k.clone(), v);
                }
            }
            let r = with_retry(&self.config.retry, || self.attempt(payload.signal(), &body, &metadata)).await;
            metrics::counter!(crate::telemetry::names::EXPORTER_REQUESTS, "exporter" => self.name.clone(), "outcome" => if r.is_ok() { "sent" } else { "failed" }).increment(1);
            r
        })
    }
}
