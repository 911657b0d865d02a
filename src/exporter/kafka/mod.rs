//! The `kafka` exporter: one topic per signal, the received OTLP bytes as the message (or
//! OTLP/JSON), keyed by trace ID when asked, cut to fit `max_message_bytes`, and done only
//! when every in-sync replica has it (docs/configuration.md#kafka).

mod client;
mod messages;
pub mod partition;

use super::retry::{with_retry, Attempt};
use super::{BoxFuture, ExportError, Exporter};
use crate::config::kafka::{KafkaExporterConfig, TopicConfig};
use crate::signal::{Payload, Signal};
use crate::telemetry::names;
use client::{Brokers, Failure};
use messages::Message;
use rskafka::record::Record;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// The `kafka` exporter.
pub struct KafkaExporter {
    name: String,
    config: KafkaExporterConfig,
    brokers: Arc<Brokers>,
    /// The next partition of an unkeyed message.
    next: AtomicUsize,
    /// Set once a broker has answered.
    ready: Arc<AtomicBool>,
    /// Per-message metrics, registered once rather than looked up per message.
    sent: metrics::Counter,
    refused: metrics::Counter,
    bytes: metrics::Counter,
    produce: metrics::Histogram,
}

/// Room left in a message for its key, headers and record framing.
const RECORD_OVERHEAD: usize = 256;

impl KafkaExporter {
    /// Builds the exporter; where a runtime runs, it starts connecting at once, so that an
    /// unreachable cluster shows in the log (naming the brokers) and on `/readyz`.
    pub fn new(name: String, config: &KafkaExporterConfig) -> Result<Self, String> {
        let brokers = Arc::new(Brokers::new(config)?);
        let ready = Arc::new(AtomicBool::new(false));
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(connect(name.clone(), Arc::downgrade(&brokers), Arc::clone(&ready)));
        }
        Ok(KafkaExporter {
            sent: metrics::counter!(names::KAFKA_MESSAGES, "exporter" => name.clone(), "outcome" => "sent"),
            refused: metrics::counter!(names::KAFKA_MESSAGES, "exporter" => name.clone(), "outcome" => "refused"),
            bytes: metrics::counter!(names::KAFKA_BYTES, "exporter" => name.clone()),
            produce: metrics::histogram!(names::KAFKA_PRODUCE_DURATION, "exporter" => name.clone()),
            name,
            config: config.clone(),
            brokers,
            next: AtomicUsize::new(0),
            ready,
        })
    }

    fn topic_config(&self, signal: Signal) -> &TopicConfig {
        match signal {
            Signal::Traces => &self.config.traces,
            Signal::Metrics => &self.config.metrics,
            Signal::Logs => &self.config.logs,
            Signal::Profiles => &self.config.profiles,
        }
    }

    fn error(&self, kind: &'static str) {
        metrics::counter!(names::KAFKA_ERRORS, "exporter" => self.name.clone(), "kind" => kind).increment(1);
    }

    fn up(&self, up: bool) {
        metrics::gauge!(names::KAFKA_UP, "exporter" => self.name.clone()).set(if up { 1.0 } else { 0.0 });
        if up {
            self.ready.store(true, Ordering::Release);
        }
    }

    /// One attempt at the messages still `pending`; those the brokers acknowledged leave
    /// it, those refused for good move to `refused`.
    async fn attempt(&self, topic: &str, list: &[Message], headers: &BTreeMap<String, Vec<u8>>, state: &Mutex<Progress>) -> Attempt {
        let producers = match tokio::time::timeout(self.config.timeout, self.brokers.producers(topic)).await {
            Ok(Ok(p)) => p,
            Ok(Err((failure, message))) => {
                self.error(if failure == Failure::NoTopic { "unknown_topic" } else { "connect" });
                self.up(failure == Failure::NoTopic);
                return Attempt::Retry { after: None, message };
            }
            Err(_) => {
                self.error("timeout");
                self.up(false);
                self.brokers.reconnect();
                return Attempt::Retry { after: None, message: format!("no answer from the brokers within {:?}", self.config.timeout) };
            }
        };
        let pending = state.lock().unwrap_or_else(|e| e.into_inner()).pending.clone();
        let ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
        let now = rskafka::chrono::DateTime::from_timestamp_millis(ms).unwrap_or_default();
        let sends = pending.iter().map(|&i| {
            let m = &list[i];
            let p = match &m.key {
                Some(k) => partition::of_key(self.config.partitioner, k, producers.len()),
                None => self.next.fetch_add(1, Ordering::Relaxed) % producers.len(),
            };
            let record = Record { key: m.key.clone(), value: Some(m.value.to_vec()), headers: headers.clone(), timestamp: now };
            let producer = Arc::clone(&producers[p]);
            async move {
                let started = Instant::now();
                let r = tokio::time::timeout(self.config.timeout, producer.produce(record)).await;
                (i, r, started.elapsed())
            }
        });
        let results = futures_util::future::join_all(sends).await;
        let mut progress = state.lock().unwrap_or_else(|e| e.into_inner());
        let mut last = None;
        progress.pending.clear();
        for (i, r, took) in results {
            match r {
                Ok(Ok(_offset)) => {
                    self.produce.record(took.as_secs_f64());
                    self.sent.increment(1);
                    self.bytes.increment(list[i].value.len() as u64);
                }
                Ok(Err(e)) => {
                    let failure = client::classify(&e);
                    self.error(failure.kind());
                    if failure == Failure::Refused {
                        self.refused.increment(1);
                        progress.refused += list[i].items;
                        progress.refused_reason = Some(e.to_string());
                    } else {
                        progress.pending.push(i);
                        last = Some(e.to_string());
                    }
                }
                Err(_) => {
                    self.error("timeout");
                    progress.pending.push(i);
                    last = Some(format!("no acknowledgement within {:?}", self.config.timeout));
                }
            }
        }
        match last {
            None => {
                self.up(true);
                Attempt::Done
            }
            Some(message) => {
                self.up(false);
                // The partitions are listed again next time: a leader may have moved.
                self.brokers.forget(topic);
                Attempt::Retry {
                    after: None,
                    message: format!(
                        "topic `{topic}`: {} of {} messages not acknowledged: {message}",
                        progress.pending.len(),
                        pending.len()
                    ),
                }
            }
        }
    }
}

/// Where a batch's messages stand across attempts.
#[derive(Default)]
struct Progress {
    /// Indices of the messages not acknowledged yet.
    pending: Vec<usize>,
    /// Items in messages the brokers refused for good.
    refused: usize,
    refused_reason: Option<String>,
}

/// The topic for a batch of `tenant`'s: `${tenant}` filled with the tenant (`default`
/// without one), every character a topic cannot hold replaced by `_`.
fn topic_name(template: &str, tenant: Option<&str>) -> String {
    if !template.contains("${tenant}") {
        return template.to_string();
    }
    let tenant: String =
        tenant.unwrap_or("default").chars().map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '_' }).collect();
    let mut t = template.replace("${tenant}", &tenant);
    t.truncate(249);
    t
}

/// Connects at start, and again until a broker answers; logs each failure naming the
/// brokers. Ends with the exporter.
async fn connect(name: String, brokers: Weak<Brokers>, ready: Arc<AtomicBool>) {
    let mut wait = Duration::from_secs(1);
    loop {
        let Some(b) = brokers.upgrade() else { return };
        match b.client().await {
            Ok(_) => {
                tracing::info!(exporter = %name, "kafka: connected");
                metrics::gauge!(names::KAFKA_UP, "exporter" => name.clone()).set(1.0);
                ready.store(true, Ordering::Release);
                return;
            }
            Err(e) => {
                tracing::error!(exporter = %name, error = %e, retry_in = ?wait, "kafka: cannot reach the brokers; not ready until one answers");
                metrics::gauge!(names::KAFKA_UP, "exporter" => name.clone()).set(0.0);
                metrics::counter!(names::KAFKA_ERRORS, "exporter" => name.clone(), "kind" => "connect").increment(1);
            }
        }
        drop(b);
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(Duration::from_secs(30));
    }
}

impl Exporter for KafkaExporter {
    fn name(&self) -> &str {
        &self.name
    }
    fn splits_tenants(&self) -> bool {
        self.config.per_tenant()
    }
    fn ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }
    fn export<'a>(&'a self, payload: &'a Payload, tenant: Option<&'a str>) -> BoxFuture<'a, Result<(), ExportError>> {
        Box::pin(async move {
            let signal = payload.signal();
            let tc = self.topic_config(signal);
            let topic = topic_name(&tc.topic, tenant);
            let mut headers = BTreeMap::new();
            if let (false, Some(t)) = (self.config.tenant_header.is_empty(), tenant) {
                headers.insert(self.config.tenant_header.clone(), t.as_bytes().to_vec());
            }
            let framing = RECORD_OVERHEAD + headers.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>();
            let budget = self.config.producer.max_message_bytes.saturating_sub(framing).max(crate::config::kafka::MIN_MESSAGE_BYTES / 2);
            let by_trace = self.config.partition_traces_by_id && signal == Signal::Traces;
            let built = messages::build(payload, tc.encoding, by_trace, budget).map_err(ExportError::Permanent)?;
            if built.oversized_items > 0 {
                self.error("too_large");
            }
            let state = Mutex::new(Progress { pending: (0..built.list.len()).collect(), ..Progress::default() });
            let r = with_retry(&self.config.retry, || self.attempt(&topic, &built.list, &headers, &state)).await;
            metrics::counter!(names::EXPORTER_REQUESTS, "exporter" => self.name.clone(), "outcome" => if r.is_ok() { "sent" } else { "failed" })
                .increment(1);
            r?;
            let progress = state.into_inner().unwrap_or_else(|e| e.into_inner());
            let mut dropped = Vec::new();
            if built.oversized_items > 0 {
                dropped.push(("too_large", built.oversized_items));
            }
            if progress.refused > 0 {
                dropped.push(("refused_by_broker", progress.refused));
            }
            if dropped.is_empty() {
                return Ok(());
            }
            let message = format!(
                "topic `{topic}`: {} items larger than producer.max_message_bytes ({}) left out; {} refused by the brokers{}",
                built.oversized_items,
                self.config.producer.max_message_bytes,
                progress.refused,
                progress.refused_reason.map(|r| format!(" ({r})")).unwrap_or_default()
            );
            Err(ExportError::Partial { dropped, message })
        })
    }
    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move { self.brokers.flush().await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_take_the_tenant_and_only_legal_characters() {
        assert_eq!(topic_name("otlp_spans", Some("acme")), "otlp_spans");
        assert_eq!(topic_name("spans.${tenant}", Some("acme")), "spans.acme");
        assert_eq!(topic_name("spans.${tenant}", Some("a b/c")), "spans.a_b_c");
        assert_eq!(topic_name("spans.${tenant}", None), "spans.default");
        assert_eq!(topic_name("${tenant}", Some(&"x".repeat(400))).len(), 249);
    }
}
