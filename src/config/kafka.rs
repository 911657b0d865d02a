//! The `kafka` exporter's keys, in the Collector's vocabulary where it has one
//! (docs/configuration.md#kafka).

use super::retry::RetryConfig;
use super::ConfigError;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

/// The `kafka` exporter.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaExporterConfig {
    /// Name used in metrics and logs; defaults to the type.
    #[serde(default)]
    pub name: Option<String>,
    /// Bootstrap brokers, `host:port`.
    pub brokers: Vec<String>,
    /// The client ID the brokers see.
    #[serde(default = "default_client_id")]
    pub client_id: String,
    /// Where traces go.
    #[serde(default = "default_traces")]
    pub traces: TopicConfig,
    /// Where metrics go.
    #[serde(default = "default_metrics")]
    pub metrics: TopicConfig,
    /// Where logs go.
    #[serde(default = "default_logs")]
    pub logs: TopicConfig,
    /// Where profiles go.
    #[serde(default = "default_profiles")]
    pub profiles: TopicConfig,
    /// One message per trace, keyed by the trace ID in hex, so that a trace stays in one
    /// partition.
    #[serde(default)]
    pub partition_traces_by_id: bool,
    /// How a key picks a partition: `murmur2` (the Java client's) or `fnv1a` (sarama's
    /// hash partitioner); agree with the other producers of the topic.
    #[serde(default)]
    pub partitioner: Partitioner,
    /// The message header that names the batch's tenant; empty leaves it out.
    #[serde(default = "default_tenant_header")]
    pub tenant_header: String,
    /// Producer settings.
    #[serde(default)]
    pub producer: ProducerConfig,
    /// Per produce attempt (a broker that does not answer in time is tried again).
    #[serde(default = "default_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// Retries of a batch.
    #[serde(default)]
    pub retry: RetryConfig,
    /// TLS to the brokers; absent: plain TCP.
    #[serde(default)]
    pub tls: Option<KafkaTlsConfig>,
    /// SASL authentication; absent: none.
    #[serde(default)]
    pub sasl: Option<SaslConfig>,
}

/// A signal's topic and message encoding.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TopicConfig {
    /// The topic; `${tenant}` is replaced by the batch's tenant.
    pub topic: String,
    /// `otlp_proto` (the received bytes as they are) or `otlp_json`.
    #[serde(default)]
    pub encoding: KafkaEncoding,
}

/// How messages are encoded.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum KafkaEncoding {
    /// The OTLP protobuf export request.
    #[default]
    OtlpProto,
    /// OTLP/JSON.
    OtlpJson,
}

/// The key-to-partition hash.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum Partitioner {
    /// `murmur2(key) & 0x7fffffff % partitions`, as the Java client.
    #[default]
    Murmur2,
    /// `|int32(fnv1a_32(key)) % partitions|`, as sarama's hash partitioner.
    Fnv1a,
}

/// `producer:`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProducerConfig {
    /// `all` (or `-1`): a message is done once every in-sync replica has it (the only
    /// setting: weir moves no queue cursor on a leader's word alone).
    #[serde(deserialize_with = "string_or_int")]
    pub required_acks: String,
    /// `none`, `gzip`, `snappy`, `lz4` or `zstd`.
    pub compression: String,
    /// The largest message weir sends; bigger batches are split at the wire.
    pub max_message_bytes: usize,
    /// How long a partition's producer waits for more messages before sending.
    #[serde(with = "humantime_serde")]
    pub linger: Duration,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        ProducerConfig {
            required_acks: "all".into(),
            compression: "none".into(),
            max_message_bytes: 1_000_000,
            linger: Duration::from_millis(5),
        }
    }
}

/// `tls:` (PEM files).
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct KafkaTlsConfig {
    /// The CA that signed the brokers' certificates; none: the system's roots.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// A client certificate, for brokers that ask for one (mutual TLS).
    #[serde(default)]
    pub cert_file: Option<PathBuf>,
    /// The client certificate's key.
    #[serde(default)]
    pub key_file: Option<PathBuf>,
}

/// `sasl:`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SaslConfig {
    /// `PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512`.
    pub mechanism: String,
    /// The user.
    pub username: String,
    /// The password (use `${env:VAR}` to keep it out of the file).
    pub password: String,
}

/// The Collector writes `required_acks` as a number (`-1`, `1`); the word `all` reads better.
fn string_or_int<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        Int(i64),
        Text(String),
    }
    Ok(match Either::deserialize(d)? {
        Either::Int(i) => i.to_string(),
        Either::Text(s) => s,
    })
}

fn default_client_id() -> String {
    "weir".into()
}
fn topic(name: &str) -> TopicConfig {
    TopicConfig { topic: name.into(), encoding: KafkaEncoding::OtlpProto }
}
fn default_traces() -> TopicConfig {
    topic("otlp_spans")
}
fn default_metrics() -> TopicConfig {
    topic("otlp_metrics")
}
fn default_logs() -> TopicConfig {
    topic("otlp_logs")
}
fn default_profiles() -> TopicConfig {
    topic("otlp_profiles")
}
fn default_tenant_header() -> String {
    "tenant".into()
}
fn default_timeout() -> Duration {
    Duration::from_secs(10)
}

/// The smallest `max_message_bytes`: room for a resource, a scope and a small item.
pub const MIN_MESSAGE_BYTES: usize = 1024;

/// Whether `t` can be a Kafka topic name once `${tenant}` is filled with a legal name.
fn topic_ok(t: &str) -> bool {
    let t = t.replace("${tenant}", "t");
    !t.is_empty() && t.len() <= 249 && t != "." && t != ".." && t.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

impl KafkaExporterConfig {
    /// Checks what serde cannot; `key` names the exporter in errors.
    pub(super) fn validate(&self, key: &str) -> Result<(), ConfigError> {
        if self.brokers.is_empty() {
            return Err(ConfigError::invalid(format!("{key}.brokers"), "needs at least one `host:port`"));
        }
        for (i, b) in self.brokers.iter().enumerate() {
            let port_ok = b.rsplit_once(':').is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0));
            if !port_ok || b.contains("://") {
                return Err(ConfigError::invalid(format!("{key}.brokers[{i}]"), format!("`{b}` must be `host:port`")));
            }
        }
        for (signal, t) in [("traces", &self.traces), ("metrics", &self.metrics), ("logs", &self.logs), ("profiles", &self.profiles)] {
            if !topic_ok(&t.topic) {
                return Err(ConfigError::invalid(
                    format!("{key}.{signal}.topic"),
                    format!("`{}` is not a Kafka topic name (1 to 249 of a-z, A-Z, 0-9, `.`, `_`, `-`; `${{tenant}}` allowed)", t.topic),
                ));
            }
        }
        let p = &self.producer;
        if !matches!(p.required_acks.as_str(), "all" | "-1") {
            return Err(ConfigError::invalid(
                format!("{key}.producer.required_acks"),
                format!("`{}`: only `all` is supported (a batch is done when every in-sync replica has it)", p.required_acks),
            ));
        }
        if !matches!(p.compression.as_str(), "none" | "gzip" | "snappy" | "lz4" | "zstd") {
            return Err(ConfigError::invalid(
                format!("{key}.producer.compression"),
                format!("`{}` must be `none`, `gzip`, `snappy`, `lz4` or `zstd`", p.compression),
            ));
        }
        if p.max_message_bytes < MIN_MESSAGE_BYTES {
            return Err(ConfigError::invalid(format!("{key}.producer.max_message_bytes"), format!("must be at least {MIN_MESSAGE_BYTES}")));
        }
        if self.timeout.is_zero() {
            return Err(ConfigError::invalid(format!("{key}.timeout"), "must be > 0"));
        }
        self.retry.validate(key)?;
        if let Some(s) = &self.sasl {
            if !matches!(s.mechanism.as_str(), "PLAIN" | "SCRAM-SHA-256" | "SCRAM-SHA-512") {
                return Err(ConfigError::invalid(
                    format!("{key}.sasl.mechanism"),
                    format!("`{}` must be `PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512`", s.mechanism),
                ));
            }
            if s.username.is_empty() {
                return Err(ConfigError::invalid(format!("{key}.sasl.username"), "must not be empty"));
            }
        }
        if let Some(t) = &self.tls {
            if t.cert_file.is_some() != t.key_file.is_some() {
                return Err(ConfigError::invalid(format!("{key}.tls"), "`cert_file` and `key_file` go together"));
            }
        }
        Ok(())
    }

    /// Whether batches must hold one tenant each (a topic or the header names it).
    pub fn per_tenant(&self) -> bool {
        !self.tenant_header.is_empty()
            || [&self.traces, &self.metrics, &self.logs, &self.profiles].iter().any(|t| t.topic.contains("${tenant}"))
    }
}
