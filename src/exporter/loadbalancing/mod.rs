//! The `loadbalancing` exporter: every span of a trace (or every item of a service, or of
//! a resource) to the same backend of a fleet, chosen by consistent hashing over the
//! backends that are healthy now (docs/configuration.md#the-loadbalancing-exporter).
//!
//! A batch is split at the wire ([`crate::otlp::split`]), so the parts carry the bytes
//! that arrived; each part goes to its backend with that backend's retries, so a backend
//! that asks for a delay pauses alone. A backend still failing after `failover_after`
//! leaves the ring, and its part is split again over the others (counted as rerouted);
//! a probe lets it back once it answers. The batch succeeds when every part has: with
//! the disk queue, it is acknowledged only then. Parts for a backend that is busy wait and
//! go together in its next request, up to the pipeline's batch limits ([`coalesce`]).

mod coalesce;
mod resolver;

use super::{BoxFuture, ExportError, Exporter, OtlpGrpcExporter, OtlpHttpExporter};
use crate::config::{BatchConfig, LoadBalancingExporterConfig, RetryConfig, RoutingKeyConfig};
use crate::exporter::ring::Ring;
use crate::otlp::split::{split, RoutingKey, Split};
use crate::signal::{Encoded, Payload, Signal};
use crate::telemetry::names;
use arc_swap::ArcSwap;
use bytes::Bytes;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

/// One backend.
struct Backend {
    endpoint: String,
    exporter: Arc<dyn Exporter>,
    /// Its parts waiting for the request in flight to end.
    coalescer: Arc<coalesce::Coalescer>,
    /// One attempt, no retries: the probe that lets a failed-over backend back in.
    probe: Box<dyn Exporter>,
    healthy: AtomicBool,
    /// Fires when the resolver drops it: its exports in flight give up and reroute.
    gone: watch::Sender<bool>,
    items: metrics::Counter,
}

/// A part of a batch, for one backend: its bytes and items.
type Part = (Arc<Backend>, Bytes, u64);

/// The healthy backends and their ring, swapped whole on every change.
struct Members {
    ring: Ring,
    /// In the ring's order.
    backends: Vec<Arc<Backend>>,
}

/// What the exporter, its resolver task and its probes share.
pub(crate) struct State {
    name: String,
    config: LoadBalancingExporterConfig,
    /// Every backend the resolver lists, healthy or not.
    all: Mutex<BTreeMap<String, Arc<Backend>>>,
    members: ArcSwap<Members>,
    /// Woken when a backend joins the ring.
    joined: Notify,
    rerouted: metrics::Counter,
    fallback: metrics::Counter,
    /// The pipeline's batch limits, applied again per backend.
    batch: BatchConfig,
}

impl State {
    fn backend(&self, endpoint: &str) -> Result<Arc<Backend>, String> {
        let config = self.config.backend(endpoint);
        let probe_config = crate::config::OtlpExporterConfig {
            retry: RetryConfig {
                initial_interval: Duration::from_millis(100),
                max_interval: Duration::from_millis(100),
                max_elapsed: Duration::ZERO,
            },
            ..config.clone()
        };
        let name = format!("{}/{endpoint}", self.name);
        let (exporter, probe): (Arc<dyn Exporter>, Box<dyn Exporter>) = if self.config.protocol == "otlphttp" {
            (Arc::new(OtlpHttpExporter::new(name.clone(), &config)?), Box::new(OtlpHttpExporter::new(name, &probe_config)?))
        } else {
            (Arc::new(OtlpGrpcExporter::new(name.clone(), &config)?), Box::new(OtlpGrpcExporter::new(name, &probe_config)?))
        };
        Ok(Arc::new(Backend {
            endpoint: endpoint.to_string(),
            exporter,
            coalescer: Arc::new(coalesce::Coalescer::new(&self.batch)),
            probe,
            healthy: AtomicBool::new(true),
            gone: watch::channel(false).0,
            items: metrics::counter!(names::LB_ITEMS, "exporter" => self.name.clone(), "backend" => endpoint.to_string()),
        }))
    }

    /// Rebuilds the ring from the healthy backends.
    fn rebuild(&self) {
        let all = self.all.lock().unwrap_or_else(|e| e.into_inner());
        let healthy: Vec<&Arc<Backend>> = all.values().filter(|b| b.healthy.load(Ordering::Acquire)).collect();
        let ring = Ring::new(&healthy.iter().map(|b| b.endpoint.as_str()).collect::<Vec<_>>());
        let backends = ring.endpoints().filter_map(|e| all.get(e).cloned()).collect();
        metrics::gauge!(names::LB_BACKENDS, "exporter" => self.name.clone()).set(ring.len() as f64);
        self.members.store(Arc::new(Members { ring, backends }));
        self.joined.notify_waiters();
    }

    fn changed(&self, change: &'static str, endpoint: &str) {
        tracing::info!(exporter = %self.name, backend = endpoint, change, "load-balancing ring changed");
        metrics::counter!(names::LB_MEMBERSHIP, "exporter" => self.name.clone(), "change" => change).increment(1);
    }

    /// The resolver's new set of endpoints.
    pub(crate) fn set_endpoints(self: &Arc<Self>, endpoints: Vec<String>) {
        let mut joined = Vec::new();
        {
            let mut all = self.all.lock().unwrap_or_else(|e| e.into_inner());
            all.retain(|e, b| {
                let keep = endpoints.contains(e);
                if !keep {
                    let _ = b.gone.send(true);
                    self.changed("left", e);
                }
                keep
            });
            for e in endpoints {
                if all.contains_key(&e) {
                    continue;
                }
                match self.backend(&e) {
                    Ok(b) => {
                        all.insert(e.clone(), b);
                        joined.push(e);
                    }
                    Err(err) => tracing::warn!(exporter = %self.name, backend = %e, error = %err, "cannot use this backend"),
                }
            }
        }
        for e in joined {
            self.changed("joined", &e);
        }
        self.rebuild();
    }

    /// `backend` failed for `failover_after`: out of the ring until a probe finds it healthy.
    fn fail_over(self: &Arc<Self>, backend: &Arc<Backend>) {
        if !backend.healthy.swap(false, Ordering::AcqRel) {
            return;
        }
        self.changed("failed_over", &backend.endpoint);
        self.rebuild();
        let (state, backend) = (Arc::clone(self), Arc::clone(backend));
        let every = (self.config.failover_after / 4).max(Duration::from_millis(500));
        tokio::spawn(async move {
            let empty = Payload::Encoded(Encoded::single(Signal::Traces, Bytes::new(), 0));
            let mut gone = backend.gone.subscribe();
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(every) => {}
                    _ = gone.wait_for(|g| *g) => return,
                }
                if backend.probe.export(&empty, None).await.is_ok() {
                    backend.healthy.store(true, Ordering::Release);
                    state.changed("rejoined", &backend.endpoint);
                    state.rebuild();
                    return;
                }
            }
        });
    }
}

/// The `loadbalancing` exporter.
pub struct LoadBalancingExporter {
    state: Arc<State>,
    key: RoutingKey,
}

impl LoadBalancingExporter {
    /// Builds the exporter and starts its resolver (in the running Tokio runtime).
    pub fn new(name: String, config: &LoadBalancingExporterConfig, batch: &BatchConfig) -> Result<Self, String> {
        let key = match config.routing_key {
            RoutingKeyConfig::TraceId => RoutingKey::TraceId,
            RoutingKeyConfig::Service => RoutingKey::Service,
            RoutingKeyConfig::Resource => RoutingKey::Resource,
        };
        let state = Arc::new(State {
            rerouted: metrics::counter!(names::LB_REROUTED, "exporter" => name.clone()),
            fallback: metrics::counter!(names::LB_FALLBACK, "exporter" => name.clone()),
            name,
            config: config.clone(),
            all: Mutex::new(BTreeMap::new()),
            members: ArcSwap::from_pointee(Members { ring: Ring::default(), backends: Vec::new() }),
            joined: Notify::new(),
            batch: batch.clone(),
        });
        resolver::start(&state)?;
        Ok(LoadBalancingExporter { state, key })
    }

    /// Splits `bytes` over the ring now; `None` when the ring is empty.
    fn assign(&self, signal: Signal, bytes: Bytes, items: u64) -> Result<Option<Vec<Part>>, ExportError> {
        let members = self.state.members.load_full();
        if members.ring.is_empty() {
            return Ok(None);
        }
        let mut route = |k: &[u8]| members.ring.pick(k).unwrap_or(0);
        let (split, stats) = split(signal, &bytes, self.key, &mut route).map_err(|e| ExportError::Permanent(e.to_string()))?;
        self.state.fallback.increment(stats.fallback_items);
        Ok(Some(match split {
            Split::Whole(d) => vec![(Arc::clone(&members.backends[d]), bytes, items)],
            Split::Parts(parts) => parts
                .into_iter()
                .map(|(d, b, n)| {
                    // Metrics count data points: walked; spans and log records were counted by the split.
                    let n = n.unwrap_or_else(|| crate::otlp::wire::check(signal, &b).map_or(0, |n| n as u64));
                    (Arc::clone(&members.backends[d]), Bytes::from(b), n)
                })
                .collect(),
        }))
    }
}

/// One part to its backend, with the parts waiting beside it: `Ok(true)` delivered,
/// `Ok(false)` to reroute (the backend failed for `failover_after`, or left the resolver).
async fn deliver(backend: &Backend, signal: Signal, bytes: Bytes, items: u64, tenant: Option<&str>) -> Result<bool, ExportError> {
    let gone = backend.gone.subscribe();
    match backend.coalescer.send(Arc::clone(&backend.exporter), gone, signal, bytes, items, tenant).await {
        coalesce::Outcome::Delivered => {
            backend.items.increment(items);
            Ok(true)
        }
        coalesce::Outcome::Reroute => Ok(false),
        coalesce::Outcome::Permanent(m) => Err(ExportError::Permanent(m)),
    }
}

impl Exporter for LoadBalancingExporter {
    fn name(&self) -> &str {
        &self.state.name
    }

    fn splits_tenants(&self) -> bool {
        self.state.config.headers.values().any(|v| v.contains("${tenant}"))
    }

    fn routing(&self) -> Option<serde_json::Value> {
        let ring: Vec<String> = self.state.members.load().ring.endpoints().map(str::to_string).collect();
        let all = self.state.all.lock().unwrap_or_else(|e| e.into_inner());
        let backends: Vec<serde_json::Value> =
            all.values().map(|b| serde_json::json!({"endpoint": b.endpoint, "healthy": b.healthy.load(Ordering::Acquire)})).collect();
        Some(serde_json::json!({
            "exporter": self.state.name,
            "routing_key": self.state.config.routing_key,
            "protocol": self.state.config.protocol,
            "failover_after": format!("{:?}", self.state.config.failover_after),
            "ring": ring,
            "backends": backends,
        }))
    }

    fn export<'a>(&'a self, payload: &'a Payload, tenant: Option<&'a str>) -> BoxFuture<'a, Result<(), ExportError>> {
        Box::pin(async move {
            let signal = payload.signal();
            let started = Instant::now();
            let max_elapsed = self.state.config.retry.max_elapsed;
            // (bytes, items, rerouted): what is still to deliver.
            let mut pending = vec![(payload.to_bytes(), payload.item_count() as u64, false)];
            while !pending.is_empty() {
                let mut jobs = Vec::new();
                for (bytes, items, rerouted) in std::mem::take(&mut pending) {
                    match self.assign(signal, bytes.clone(), items)? {
                        Some(parts) => jobs.extend(parts.into_iter().map(|(b, by, n)| (b, by, n, rerouted))),
                        None => pending.push((bytes, items, rerouted)),
                    }
                }
                let results =
                    futures_util::future::join_all(jobs.iter().map(|(b, by, n, _)| deliver(b, signal, by.clone(), *n, tenant))).await;
                for ((backend, bytes, items, rerouted), r) in jobs.into_iter().zip(results) {
                    match r? {
                        true if rerouted => self.state.rerouted.increment(items),
                        true => {}
                        false => {
                            if !*backend.gone.borrow() {
                                self.state.fail_over(&backend);
                            }
                            pending.push((bytes, items, true));
                        }
                    }
                }
                if pending.is_empty() {
                    break;
                }
                if started.elapsed() >= max_elapsed {
                    return Err(ExportError::RetriesExhausted { elapsed: started.elapsed(), last: "no backend took the data".into() });
                }
                // Nothing in the ring: wait for a backend to join (or a while).
                if self.state.members.load().ring.is_empty() {
                    let _ = tokio::time::timeout(Duration::from_secs(1), self.state.joined.notified()).await;
                }
            }
            Ok(())
        })
    }
}
