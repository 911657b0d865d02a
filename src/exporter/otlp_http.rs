//! OTLP/HTTP (protobuf) to an upstream, retrying 429/502/503/504 and honouring Retry-After.

use super::retry::{with_retry, Attempt};
use super::{BoxFuture, ExportError, Exporter};
use crate::config::OtlpHttpExporterConfig;
use crate::signal::Payload;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_ENCODING, CONTENT_TYPE, RETRY_AFTER};
use std::io::Write;
use std::time::Duration;

/// The `otlphttp` exporter.
pub struct OtlpHttpExporter {
    name: String,
    client: reqwest::Client,
    config: OtlpHttpExporterConfig,
}

impl OtlpHttpExporter {
    /// Builds the client.
    pub fn new(name: String, config: &OtlpHttpExporterConfig) -> Result<Self, String> {
        let mut headers = HeaderMap::new();
        for (k, v) in &config.headers {
            let key = HeaderName::from_bytes(k.as_bytes()).map_err(|e| format!("headers.{k}: {e}"))?;
            let value = HeaderValue::from_str(v).map_err(|e| format!("headers.{k}: {e}"))?;
            headers.insert(key, value);
        }
        let client = reqwest::Client::builder().default_headers(headers).timeout(config.timeout).build().map_err(|e| e.to_string())?;
        Ok(OtlpHttpExporter { name, client, config: config.clone() })
    }

    async fn attempt(&self, url: &str, body: &bytes::Bytes) -> Attempt {
        let mut req = self.client.post(url).header(CONTENT_TYPE, "application/x-protobuf").body(body.clone());
        if self.config.compression == "gzip" {
            req = req.header(CONTENT_ENCODING, "gzip");
        }
        match req.send().await {
            Err(e) => Attempt::Retry { after: None, message: format!("transport: {}", error_chain(&e)) },
            Ok(resp) => {
                let status = resp.status().as_u16();
                if (200..300).contains(&status) {
                    return Attempt::Done;
                }
                let after = resp
                    .headers()
                    .get(RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .map(Duration::from_secs);
                let message = format!("HTTP {status}");
                match status {
                    429 | 502 | 503 | 504 => Attempt::Retry { after, message },
                    _ => Attempt::Permanent(message),
                }
            }
        }
    }
}

impl Exporter for OtlpHttpExporter {
    fn name(&self) -> &str {
        &self.name
    }
    fn export<'a>(&'a self, payload: &'a Payload) -> BoxFuture<'a, Result<(), ExportError>> {
        Box::pin(async move {
            let url = format!("{}{}", self.config.endpoint.trim_end_matches('/'), payload.signal().http_path());
            let raw = payload.to_bytes();
            let body = if self.config.compression == "gzip" {
                let mut enc = flate2::write::GzEncoder::new(Vec::with_capacity(raw.len() / 4), flate2::Compression::fast());
                enc.write_all(&raw)?;
                bytes::Bytes::from(enc.finish()?)
            } else {
                raw
            };
            let r = with_retry(&self.config.retry, || self.attempt(&url, &body)).await;
            metrics::counter!(crate::telemetry::names::EXPORTER_REQUESTS, "exporter" => self.name.clone(), "outcome" => if r.is_ok() { "sent" } else { "failed" }).increment(1);
            r
        })
    }
}

/// An error with its causes ("error sending request: connection refused"): reqwest's own
/// message alone does not say what failed.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}
