//! OTLP/HTTP (protobuf) to an upstream, retrying 429/502/503/504 and honouring Retry-After.

use super::retry::{with_retry, Attempt};
use super::{BoxFuture, ExportError, Exporter};
use crate::compression::{compress, Encoding};
use crate::config::OtlpHttpExporterConfig;
use crate::signal::Payload;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_ENCODING, CONTENT_TYPE, RETRY_AFTER};
use std::time::Duration;

/// The `otlphttp` exporter.
pub struct OtlpHttpExporter {
    name: String,
    client: reqwest::Client,
    config: OtlpHttpExporterConfig,
    /// Headers naming the tenant, filled per batch.
    per_tenant: Vec<(HeaderName, String)>,
}

impl OtlpHttpExporter {
    /// Builds the client.
    pub fn new(name: String, config: &OtlpHttpExporterConfig) -> Result<Self, String> {
        let mut headers = HeaderMap::new();
        let (fixed, templates) = super::split_headers(&config.headers);
        for (k, v) in &fixed {
            let key = HeaderName::from_bytes(k.as_bytes()).map_err(|e| format!("headers.{k}: {e}"))?;
            let value = HeaderValue::from_str(v).map_err(|e| format!("headers.{k}: {e}"))?;
            headers.insert(key, value);
        }
        let mut per_tenant = Vec::new();
        for (k, v) in templates {
            let key = HeaderName::from_bytes(k.as_bytes()).map_err(|e| format!("headers.{k}: {e}"))?;
            HeaderValue::from_str(&v.replace("${tenant}", "t")).map_err(|e| format!("headers.{k}: {e}"))?;
            per_tenant.push((key, v));
        }
        let client = reqwest::Client::builder().default_headers(headers).timeout(config.timeout).build().map_err(|e| e.to_string())?;
        Ok(OtlpHttpExporter { name, client, config: config.clone(), per_tenant })
    }

    async fn attempt(&self, url: &str, body: &bytes::Bytes, tenant: &[(HeaderName, HeaderValue)]) -> Attempt {
        let mut req = self.client.post(url).header(CONTENT_TYPE, "application/x-protobuf").body(body.clone());
        for (k, v) in tenant {
            req = req.header(k, v);
        }
        if self.config.compression != "none" {
            req = req.header(CONTENT_ENCODING, self.config.compression.as_str());
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
    fn splits_tenants(&self) -> bool {
        !self.per_tenant.is_empty()
    }
    fn export<'a>(&'a self, payload: &'a Payload, tenant: Option<&'a str>) -> BoxFuture<'a, Result<(), ExportError>> {
        Box::pin(async move {
            // A tenant name that is not a valid header value leaves the header out.
            let tenant_headers: Vec<(HeaderName, HeaderValue)> = self
                .per_tenant
                .iter()
                .filter_map(|(k, t)| Some((k.clone(), HeaderValue::from_str(&super::fill_tenant(t, tenant)?).ok()?)))
                .collect();
            let url = format!("{}{}", self.config.endpoint.trim_end_matches('/'), payload.signal().http_path());
            let raw = payload.to_bytes();
            let body = match Encoding::parse(&self.config.compression) {
                Some(encoding @ (Encoding::Gzip | Encoding::Zstd)) => bytes::Bytes::from(compress(encoding, &raw)?),
                _ => raw,
            };
            let r = with_retry(&self.config.retry, || self.attempt(&url, &body, &tenant_headers)).await;
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
