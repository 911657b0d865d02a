//! `exporters:`: a list, every item `{type: ..., ...}`; each batch goes to all of them.

pub use super::retry::RetryConfig;
use super::ConfigError;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

/// One exporter.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum ExporterConfig {
    /// OTLP/JSON lines, one file per signal, rotated by size.
    File(FileExporterConfig),
    /// OTLP/gRPC to an upstream.
    Otlp(OtlpExporterConfig),
    /// OTLP/HTTP protobuf to an upstream.
    Otlphttp(OtlpHttpExporterConfig),
    /// Logs counts (and items with `verbosity: detailed`).
    Debug(DebugExporterConfig),
    /// Counts only; for benchmarks.
    Blackhole(BlackholeExporterConfig),
    /// Routes by trace ID (or service, or resource) to a fleet of OTLP backends.
    Loadbalancing(LoadBalancingExporterConfig),
    /// Kafka topics, one per signal.
    Kafka(Box<super::kafka::KafkaExporterConfig>),
}

/// The `file` exporter.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileExporterConfig {
    /// Name used in metrics and logs; defaults to the type.
    #[serde(default)]
    pub name: Option<String>,
    /// Directory; files are `<signal>.jsonl` in it.
    #[serde(default = "default_file_dir")]
    pub path: PathBuf,
    /// Rotate a file once it passes this size.
    #[serde(default = "default_rotate_bytes")]
    pub max_file_bytes: u64,
    /// Rotated files kept per signal (`traces.jsonl.1` is the newest).
    #[serde(default = "default_max_files")]
    pub max_files: usize,
}

fn default_file_dir() -> PathBuf {
    PathBuf::from("./data")
}
fn default_rotate_bytes() -> u64 {
    100 * 1024 * 1024
}
fn default_max_files() -> usize {
    5
}

/// The `otlp` (gRPC) and `otlphttp` exporters.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OtlpExporterConfig {
    /// Name used in metrics and logs; defaults to the type.
    #[serde(default)]
    pub name: Option<String>,
    /// `http://host:port` or `https://host:port` (gRPC), or the base URL (HTTP).
    pub endpoint: String,
    /// `gzip` (the default), `zstd` or `none`.
    #[serde(default = "default_compression")]
    pub compression: String,
    /// Per-attempt timeout.
    #[serde(default = "default_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// Retries.
    #[serde(default)]
    pub retry: RetryConfig,
    /// Extra request headers / metadata (e.g. an upstream token).
    #[serde(default)]
    pub headers: std::collections::BTreeMap<String, String>,
}

/// The `otlphttp` exporter: the same keys as `otlp`; `endpoint` is the base URL to which
/// `/v1/traces` etc. are appended.
pub type OtlpHttpExporterConfig = OtlpExporterConfig;

fn default_compression() -> String {
    "gzip".into()
}
fn default_timeout() -> Duration {
    Duration::from_secs(10)
}

/// The `debug` exporter.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct DebugExporterConfig {
    /// Name used in metrics and logs; defaults to the type.
    #[serde(default)]
    pub name: Option<String>,
    /// `basic` logs counts; `detailed` logs every item too.
    #[serde(default = "default_verbosity")]
    pub verbosity: String,
}

fn default_verbosity() -> String {
    "basic".into()
}

/// The `blackhole` exporter.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct BlackholeExporterConfig {
    /// Name used in metrics and logs; defaults to the type.
    #[serde(default)]
    pub name: Option<String>,
}

/// What the `loadbalancing` exporter routes by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum RoutingKeyConfig {
    /// Each span's trace ID (log records' too where they carry one; metrics by resource).
    #[default]
    TraceId,
    /// The resource's `service.name`.
    Service,
    /// The whole resource.
    Resource,
}

/// The `loadbalancing` exporter.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadBalancingExporterConfig {
    /// Name used in metrics and logs; defaults to the type.
    #[serde(default)]
    pub name: Option<String>,
    /// `trace_id` (the default), `service` or `resource`.
    #[serde(default)]
    pub routing_key: RoutingKeyConfig,
    /// `otlp` (gRPC, the default) or `otlphttp`: how each backend is spoken to.
    #[serde(default = "default_protocol")]
    pub protocol: String,
    /// A backend failing this long leaves the ring (its data goes to the others) until a
    /// probe finds it healthy again.
    #[serde(default = "default_failover_after", with = "humantime_serde")]
    pub failover_after: Duration,
    /// Where the backends come from: exactly one of `static`, `dns` or `file`.
    pub resolver: ResolverConfig,
    /// Per backend, as for `otlp` / `otlphttp`.
    #[serde(default = "default_compression")]
    pub compression: String,
    /// Per attempt, per backend.
    #[serde(default = "default_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// The whole batch's retries (`max_elapsed` bounds a batch across failovers).
    #[serde(default)]
    pub retry: RetryConfig,
    /// Extra headers / metadata on every backend request (`${tenant}` allowed).
    #[serde(default)]
    pub headers: std::collections::BTreeMap<String, String>,
}

fn default_protocol() -> String {
    "otlp".into()
}
fn default_failover_after() -> Duration {
    Duration::from_secs(10)
}

/// `resolver:` of the `loadbalancing` exporter.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ResolverConfig {
    /// A fixed list of endpoints (`http://host:port`).
    #[serde(default, rename = "static")]
    pub fixed: Option<Vec<String>>,
    /// A DNS name whose addresses are the backends (a headless Service).
    #[serde(default)]
    pub dns: Option<DnsResolverConfig>,
    /// A file with one endpoint a line, re-read when it changes.
    #[serde(default)]
    pub file: Option<FileResolverConfig>,
}

/// `resolver.dns`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DnsResolverConfig {
    /// The name to resolve.
    pub hostname: String,
    /// The backends' port.
    pub port: u16,
    /// How often to resolve again.
    #[serde(default = "default_resolve_interval", with = "humantime_serde")]
    pub interval: Duration,
}

/// `resolver.file`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FileResolverConfig {
    /// The file: one endpoint a line; blank lines and `#` comments are skipped.
    pub path: PathBuf,
    /// How often to look for changes.
    #[serde(default = "default_file_interval", with = "humantime_serde")]
    pub interval: Duration,
}

fn default_resolve_interval() -> Duration {
    Duration::from_secs(5)
}
fn default_file_interval() -> Duration {
    Duration::from_secs(1)
}

impl LoadBalancingExporterConfig {
    /// The options of one backend at `endpoint`, as an `otlp` / `otlphttp` exporter's,
    /// retrying for at most `failover_after` before the batch fails over.
    pub fn backend(&self, endpoint: &str) -> OtlpExporterConfig {
        OtlpExporterConfig {
            name: self.name.clone(),
            endpoint: endpoint.to_string(),
            compression: self.compression.clone(),
            timeout: self.timeout,
            retry: RetryConfig { max_elapsed: self.failover_after, ..self.retry.clone() },
            headers: self.headers.clone(),
        }
    }

    fn validate(&self, key: &str) -> Result<(), ConfigError> {
        if !matches!(self.protocol.as_str(), "otlp" | "otlphttp") {
            return Err(ConfigError::invalid(format!("{key}.protocol"), format!("`{}` must be `otlp` or `otlphttp`", self.protocol)));
        }
        if self.failover_after.is_zero() {
            return Err(ConfigError::invalid(format!("{key}.failover_after"), "must be > 0"));
        }
        let r = &self.resolver;
        let set = [r.fixed.is_some(), r.dns.is_some(), r.file.is_some()].iter().filter(|&&b| b).count();
        if set != 1 {
            return Err(ConfigError::invalid(format!("{key}.resolver"), "needs exactly one of `static`, `dns` or `file`"));
        }
        for (i, e) in r.fixed.iter().flatten().enumerate() {
            if !(e.starts_with("http://") || e.starts_with("https://")) {
                return Err(ConfigError::invalid(
                    format!("{key}.resolver.static[{i}]"),
                    format!("`{e}` must start with http:// or https://"),
                ));
            }
        }
        if let Some(d) = &r.dns {
            if d.hostname.is_empty() || d.port == 0 || d.interval.is_zero() {
                return Err(ConfigError::invalid(format!("{key}.resolver.dns"), "needs a hostname, a port and an interval > 0"));
            }
        }
        if let Some(f) = &r.file {
            if f.interval.is_zero() {
                return Err(ConfigError::invalid(format!("{key}.resolver.file.interval"), "must be > 0"));
            }
        }
        Ok(())
    }
}

impl ExporterConfig {
    /// The exporter's name for metrics and logs.
    pub fn name(&self) -> String {
        let (name, kind) = match self {
            ExporterConfig::File(c) => (&c.name, "file"),
            ExporterConfig::Otlp(c) => (&c.name, "otlp"),
            ExporterConfig::Otlphttp(c) => (&c.name, "otlphttp"),
            ExporterConfig::Debug(c) => (&c.name, "debug"),
            ExporterConfig::Blackhole(c) => (&c.name, "blackhole"),
            ExporterConfig::Loadbalancing(c) => (&c.name, "loadbalancing"),
            ExporterConfig::Kafka(c) => (&c.name, "kafka"),
        };
        name.clone().unwrap_or_else(|| kind.to_string())
    }

    pub(super) fn validate(&self, key: &str) -> Result<(), ConfigError> {
        let check_common = |endpoint: &str, compression: &str, timeout: Duration, retry: &RetryConfig| {
            if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
                return Err(ConfigError::invalid(format!("{key}.endpoint"), format!("`{endpoint}` must start with http:// or https://")));
            }
            if !matches!(compression, "gzip" | "zstd" | "none") {
                return Err(ConfigError::invalid(
                    format!("{key}.compression"),
                    format!("`{compression}` must be `gzip`, `zstd` or `none`"),
                ));
            }
            if timeout.is_zero() {
                return Err(ConfigError::invalid(format!("{key}.timeout"), "must be > 0"));
            }
            retry.validate(key)
        };
        match self {
            ExporterConfig::File(c) => {
                if c.max_file_bytes == 0 {
                    return Err(ConfigError::invalid(format!("{key}.max_file_bytes"), "must be > 0"));
                }
                Ok(())
            }
            ExporterConfig::Otlp(c) => check_common(&c.endpoint, &c.compression, c.timeout, &c.retry),
            ExporterConfig::Otlphttp(c) => check_common(&c.endpoint, &c.compression, c.timeout, &c.retry),
            ExporterConfig::Debug(c) => {
                if !matches!(c.verbosity.as_str(), "basic" | "detailed") {
                    return Err(ConfigError::invalid(format!("{key}.verbosity"), "must be `basic` or `detailed`"));
                }
                Ok(())
            }
            ExporterConfig::Blackhole(_) => Ok(()),
            ExporterConfig::Loadbalancing(c) => {
                let probe = c.backend("http://backend");
                check_common(&probe.endpoint, &c.compression, c.timeout, &c.retry)?;
                c.validate(key)
            }
            ExporterConfig::Kafka(c) => c.validate(key),
        }
    }
}
