//! The connection to the brokers: TLS and SASL, the topics' partitions, one batching
//! producer per partition, and what a failure means (retry, or drop the message).

use crate::config::kafka::KafkaExporterConfig;
use rskafka::client::error::{Error as ClientError, ProtocolError};
use rskafka::client::partition::{Compression, UnknownTopicHandling};
use rskafka::client::producer::aggregator::RecordAggregator;
use rskafka::client::producer::{BatchProducer, BatchProducerBuilder, Error as ProduceError};
use rskafka::client::{Client, ClientBuilder, Credentials, SaslConfig};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A partition's producer.
pub type Producer = Arc<BatchProducer<RecordAggregator>>;

/// How long a topic's partition list is trusted before it is asked for again.
const TOPIC_TTL: Duration = Duration::from_secs(30);

/// The brokers, connected on first use and again after a failure.
pub struct Brokers {
    builder: Box<dyn Fn() -> ClientBuilder + Send + Sync>,
    brokers: String,
    compression: Compression,
    linger: Duration,
    max_batch_bytes: usize,
    /// Bounds a connection attempt: a broker that accepts but never answers (stopped,
    /// overloaded) must not hold the connection lock.
    timeout: Duration,
    client: tokio::sync::Mutex<Option<Arc<Client>>>,
    topics: std::sync::Mutex<HashMap<String, (Vec<Producer>, Instant)>>,
}

/// What a failed produce means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The broker refused the message for good (too large, invalid): drop it.
    Refused,
    /// The topic does not exist (yet): ask again, retry.
    NoTopic,
    /// The broker is unreachable, slow, or changed leaders: retry.
    Transient,
}

impl Failure {
    /// The `kind` label of `weir_kafka_errors_total`.
    pub fn kind(self) -> &'static str {
        match self {
            Failure::Refused => "refused",
            Failure::NoTopic => "unknown_topic",
            Failure::Transient => "transient",
        }
    }
}

/// Classifies a produce error.
pub fn classify(e: &ProduceError) -> Failure {
    let ProduceError::Client(c) = e else {
        // The aggregator's "too large" cannot happen (messages are cut to fit first); a
        // failed flush is the connection's.
        return if matches!(e, ProduceError::TooLarge) { Failure::Refused } else { Failure::Transient };
    };
    match c.as_ref() {
        ClientError::ServerError { protocol_error, .. } => match protocol_error {
            ProtocolError::MessageTooLarge
            | ProtocolError::RecordListTooLarge
            | ProtocolError::InvalidRecord
            | ProtocolError::CorruptMessage => Failure::Refused,
            ProtocolError::UnknownTopicOrPartition => Failure::NoTopic,
            _ => Failure::Transient,
        },
        _ => Failure::Transient,
    }
}

impl Brokers {
    /// Checks the TLS files and SASL settings now, so that a bad path fails at start.
    pub fn new(config: &KafkaExporterConfig) -> Result<Self, String> {
        let tls = match &config.tls {
            Some(t) => Some(Arc::new(tls_config(t)?)),
            None => None,
        };
        let sasl = config.sasl.as_ref().map(|s| {
            let c = Credentials::new(s.username.clone(), s.password.clone());
            match s.mechanism.as_str() {
                "PLAIN" => SaslConfig::Plain(c),
                "SCRAM-SHA-256" => SaslConfig::ScramSha256(c),
                _ => SaslConfig::ScramSha512(c),
            }
        });
        let (brokers, client_id, timeout) = (config.brokers.clone(), config.client_id.clone(), config.timeout);
        let builder = move || {
            // Each call into the client gives up after `timeout`, so that weir's own retry
            // (and its metrics and logs) sees an unreachable broker.
            let backoff = rskafka::BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(1),
                base: 2.0,
                deadline: Some(timeout),
            };
            let mut b = ClientBuilder::new(brokers.clone()).client_id(client_id.as_str()).backoff_config(backoff);
            if let Some(t) = &tls {
                b = b.tls_config(Arc::clone(t));
            }
            if let Some(s) = &sasl {
                b = b.sasl_config(s.clone());
            }
            b
        };
        let compression = match config.producer.compression.as_str() {
            "gzip" => Compression::Gzip,
            "snappy" => Compression::Snappy,
            "lz4" => Compression::Lz4,
            "zstd" => Compression::Zstd,
            _ => Compression::NoCompression,
        };
        Ok(Brokers {
            builder: Box::new(builder),
            brokers: config.brokers.join(", "),
            compression,
            linger: config.producer.linger,
            max_batch_bytes: config.producer.max_message_bytes,
            timeout: config.timeout,
            client: tokio::sync::Mutex::new(None),
            topics: std::sync::Mutex::new(HashMap::new()),
        })
    }

    /// The connected client, connecting first if there is none; the error names the
    /// brokers tried.
    pub async fn client(&self) -> Result<Arc<Client>, String> {
        let mut c = self.client.lock().await;
        if let Some(c) = c.as_ref() {
            return Ok(Arc::clone(c));
        }
        let client = match tokio::time::timeout(self.timeout, (self.builder)().build()).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return Err(format!("no broker of [{}] reachable: {e}", self.brokers)),
            Err(_) => return Err(format!("no broker of [{}] answered within {:?}", self.brokers, self.timeout)),
        };
        let client = Arc::new(client);
        *c = Some(Arc::clone(&client));
        Ok(client)
    }

    /// The producers of `topic`'s partitions, in partition order.
    pub async fn producers(&self, topic: &str) -> Result<Vec<Producer>, (Failure, String)> {
        if let Some((p, at)) = self.topics.lock().unwrap_or_else(|e| e.into_inner()).get(topic) {
            if at.elapsed() < TOPIC_TTL {
                return Ok(p.clone());
            }
        }
        let client = self.client().await.map_err(|e| (Failure::Transient, e))?;
        let listed = client.list_topics().await.map_err(|e| (Failure::Transient, format!("listing topics: {e}")))?;
        let Some(t) = listed.into_iter().find(|t| t.name == topic) else {
            // Asking for the topic by name lets a broker that creates topics on demand
            // create it; the next attempt lists it.
            let _ = client.partition_client(topic, 0, UnknownTopicHandling::Error).await;
            return Err((Failure::NoTopic, format!("topic `{topic}` does not exist on [{}]", self.brokers)));
        };
        let mut producers = Vec::with_capacity(t.partitions.len());
        for p in t.partitions {
            let pc = client
                .partition_client(topic, p, UnknownTopicHandling::Error)
                .await
                .map_err(|e| (Failure::Transient, format!("topic `{topic}` partition {p}: {e}")))?;
            let producer = BatchProducerBuilder::new(Arc::new(pc))
                .with_linger(self.linger)
                .with_compression(self.compression)
                .build(RecordAggregator::new(self.max_batch_bytes));
            producers.push(Arc::new(producer));
        }
        if producers.is_empty() {
            return Err((Failure::NoTopic, format!("topic `{topic}` has no partitions")));
        }
        self.topics.lock().unwrap_or_else(|e| e.into_inner()).insert(topic.to_string(), (producers.clone(), Instant::now()));
        Ok(producers)
    }

    /// Forgets `topic`'s partitions (after it went missing or its leader moved).
    pub fn forget(&self, topic: &str) {
        self.topics.lock().unwrap_or_else(|e| e.into_inner()).remove(topic);
    }

    /// Forgets the connection, so the next call connects anew.
    pub fn reconnect(&self) {
        // Someone connecting now holds the lock: that is a new connection already.
        if let Ok(mut c) = self.client.try_lock() {
            *c = None;
        }
        self.topics.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// Sends what the producers still hold (at shutdown).
    pub async fn flush(&self) {
        let all: Vec<Producer> = self.topics.lock().unwrap_or_else(|e| e.into_inner()).values().flat_map(|(p, _)| p.clone()).collect();
        for p in all {
            let _ = p.flush().await;
        }
    }
}

/// A rustls client config from the PEM files: the CA (else the system's roots) and an
/// optional client certificate.
fn tls_config(t: &crate::config::kafka::KafkaTlsConfig) -> Result<rustls::ClientConfig, String> {
    let read = |p: &std::path::Path| std::fs::read(p).map_err(|e| format!("tls: cannot read {}: {e}", p.display()));
    let mut roots = rustls::RootCertStore::empty();
    match &t.ca_file {
        Some(ca) => {
            for c in rustls_pemfile::certs(&mut read(ca)?.as_slice()) {
                let c = c.map_err(|e| format!("tls.ca_file {}: {e}", ca.display()))?;
                roots.add(c).map_err(|e| format!("tls.ca_file {}: {e}", ca.display()))?;
            }
            if roots.is_empty() {
                return Err(format!("tls.ca_file {}: no certificate in it", ca.display()));
            }
        }
        None => {
            for c in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(c);
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("tls: {e}"))?
        .with_root_certificates(roots);
    match (&t.cert_file, &t.key_file) {
        (Some(cert), Some(key)) => {
            let certs = rustls_pemfile::certs(&mut read(cert)?.as_slice())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("tls.cert_file {}: {e}", cert.display()))?;
            let key = rustls_pemfile::private_key(&mut read(key)?.as_slice())
                .map_err(|e| format!("tls.key_file {}: {e}", key.display()))?
                .ok_or_else(|| format!("tls.key_file {}: no private key in it", key.display()))?;
            builder.with_client_auth_cert(certs, key).map_err(|e| format!("tls: client certificate: {e}"))
        }
        _ => Ok(builder.with_no_client_auth()),
    }
}
