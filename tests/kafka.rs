//! The `kafka` exporter against a real Kafka-compatible broker (tansu, in memory) and a
//! real weir process: what arrives in the topics is exactly what was sent, one trace per
//! message in one partition (the Java client's murmur2 agrees), oversized batches are cut
//! and an item too large for any message is counted, a broker stopped for 30 s under load
//! loses nothing weir acknowledged, unreachable or stalled brokers hold `/readyz` with a
//! log line naming them, and mutual TLS works through a TLS front (tansu's own TLS and SASL need
//! users that its in-memory store cannot keep, so SASL is not tested here).
//!
//! Needs `tansu` (`scripts/install-tansu.sh` installs it; `TANSU` names the binary, else
//! it is looked up on PATH and in that script's folder). The kafka-python consumer of
//! `scripts/python-sdk-test.sh` checks the same topics from outside.

mod support;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use rskafka::client::partition::UnknownTopicHandling;
use rskafka::client::ClientBuilder;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};
use support::process::Proc;
use support::*;

/// The tansu binary, or a panic that says how to get one.
fn tansu_bin() -> PathBuf {
    if let Ok(p) = std::env::var("TANSU") {
        return PathBuf::from(p);
    }
    let home = std::env::var("HOME").unwrap_or_default();
    let cached = PathBuf::from(home).join(".cache/weir-tools/tansu/bin/tansu");
    if cached.exists() {
        return cached;
    }
    let on_path = std::env::var("PATH").unwrap_or_default().split(':').map(|d| Path::new(d).join("tansu")).find(|p| p.exists());
    on_path.unwrap_or_else(|| panic!("tansu is needed: run scripts/install-tansu.sh (or set TANSU to the binary)"))
}

/// A tansu broker on a free port, memory storage; killed on drop.
struct Tansu {
    child: Child,
    port: u16,
    /// A TLS front's port and a client config for it, when clients must come through one.
    front: Option<(u16, std::sync::Arc<rustls::ClientConfig>)>,
}

impl Tansu {
    async fn start(dir: &Path) -> Tansu {
        Self::start_on(dir, free_port()).await
    }

    async fn start_on(dir: &Path, port: u16) -> Tansu {
        Self::start_advertising(dir, port, port).await
    }

    /// Listens on `port` and tells clients to come to `advertised` (a TLS front).
    async fn start_advertising(dir: &Path, port: u16, advertised: u16) -> Tansu {
        let url = format!("tcp://127.0.0.1:{port}");
        let adv = format!("tcp://127.0.0.1:{advertised}");
        let log = std::fs::File::create(dir.join(format!("tansu-{port}.log"))).unwrap();
        let child = Command::new(tansu_bin())
            .args(["broker", "--listener-url", &url, "--advertised-listener-url", &adv, "--storage-engine", "memory://tansu/"])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(std::process::Stdio::null())
            .spawn()
            .expect("tansu starts");
        let t = Tansu { child, port, front: None };
        let deadline = Instant::now() + Duration::from_secs(30);
        while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            assert!(Instant::now() < deadline, "tansu did not listen on {port}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        t
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.front.as_ref().map_or(self.port, |f| f.0))
    }

    async fn client(&self) -> rskafka::client::Client {
        let mut b = ClientBuilder::new(vec![self.addr()]);
        if let Some((_, tls)) = &self.front {
            b = b.tls_config(std::sync::Arc::clone(tls));
        }
        b.build().await.expect("a client reaches tansu")
    }

    fn signal(&self, sig: i32) {
        // SAFETY: a signal to our own child.
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }

    async fn create_topics(&self, topics: &[(&str, i32)]) {
        let client = self.client().await;
        let controller = client.controller_client().unwrap();
        for (name, partitions) in topics {
            controller.create_topic(*name, *partitions, 1, 5_000).await.unwrap_or_else(|e| panic!("create topic {name}: {e}"));
        }
    }

    /// Every message of `topic`: (partition, key, tenant header, value).
    async fn consume(&self, topic: &str) -> Vec<(i32, Option<Vec<u8>>, Option<Vec<u8>>, Vec<u8>)> {
        let client = self.client().await;
        let topics = client.list_topics().await.unwrap();
        let partitions = topics.into_iter().find(|t| t.name == topic).unwrap_or_else(|| panic!("topic {topic} exists")).partitions;
        let mut out = Vec::new();
        for p in partitions {
            let pc = client.partition_client(topic, p, UnknownTopicHandling::Retry).await.unwrap();
            let mut offset = 0;
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                assert!(Instant::now() < deadline, "{topic}/{p}: stuck at offset {offset}");
                let (records, high) = pc.fetch_records(offset, 1..50_000_000, 200).await.unwrap();
                for r in &records {
                    let rec = &r.record;
                    out.push((p, rec.key.clone(), rec.headers.get("tenant").cloned(), rec.value.clone().unwrap_or_default()));
                    offset = r.offset + 1;
                }
                if offset >= high {
                    break;
                }
            }
        }
        out
    }
}

impl Drop for Tansu {
    fn drop(&mut self) {
        self.signal(libc::SIGCONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn weir(dir: &Path, brokers: &str, exporter_extra: &str, pipeline_extra: &str) -> Proc {
    weir_with(dir, brokers, exporter_extra, pipeline_extra, "")
}

fn weir_with(dir: &Path, brokers: &str, exporter_extra: &str, pipeline_extra: &str, receiver_extra: &str) -> Proc {
    Proc::new(
        dir,
        "weir",
        &format!(
            r#"
receiver:
  http_server: {{endpoint: "{{http}}"}}
  grpc_server: {{endpoint: "{{grpc}}"}}
  throttle: {{enabled: false}}
{receiver_extra}
pipeline:
  shutdown_delay: 0s
  batch: {{max_items: 2000, timeout: 20ms}}
{pipeline_extra}
exporters:
  - type: kafka
    brokers: ["{brokers}"]
    timeout: 2s
    retry: {{initial_interval: 50ms, max_interval: 500ms, max_elapsed: 120s}}
{exporter_extra}
admin: {{endpoint: "{{admin}}"}}
log: {{level: info}}
"#
        ),
    )
}

async fn post(url: &str, path: &str, body: Vec<u8>) -> u16 {
    let r = reqwest::Client::new().post(format!("{url}{path}")).header("content-type", "application/x-protobuf").body(body).send().await;
    r.map(|r| r.status().as_u16()).unwrap_or(0)
}

/// Waits until weir has exported (or dropped) `n` items of every signal together.
async fn wait_settled(w: &Proc, n: f64) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let done = metric_value(&w.admin(), "weir_items_exported_total").await.unwrap_or(0.0)
            + metric_value(&w.admin(), "weir_items_dropped_total").await.unwrap_or(0.0);
        if done >= n {
            return;
        }
        assert!(Instant::now() < deadline, "only {done} of {n} items settled:\n{}", process::tail(&w.log_text()));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The spans of a message holding a trace export request.
fn spans_of(v: &[u8]) -> Vec<opentelemetry_proto::tonic::trace::v1::Span> {
    let req = ExportTraceServiceRequest::decode(v).expect("each message is an export request");
    req.resource_spans.into_iter().flat_map(|r| r.scope_spans).flat_map(|s| s.spans).collect()
}

fn hex(id: &[u8]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// `traces` traces of 3 spans each, named `<t>-<i>`, every trace spread over three requests.
fn trace_requests(traces: u64) -> Vec<Vec<u8>> {
    let mut three = vec![support::traces("k", 0, 0); 3];
    for t in 0..traces {
        for i in 0..3u64 {
            let mut span = support::traces("k", 1, 1).resource_spans[0].scope_spans[0].spans[0].clone();
            span.trace_id = (t * 1_000_003 + 7).to_be_bytes().iter().chain(&t.to_le_bytes()).copied().collect();
            span.name = format!("{t}-{i}");
            three[i as usize].resource_spans[0].scope_spans[0].spans.push(span);
        }
    }
    three.into_iter().map(|r| r.encode_to_vec()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_item_arrives_once_one_trace_per_message_in_its_murmur2_partition() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Tansu::start(dir.path()).await;
    broker.create_topics(&[("otlp_spans", 4), ("otlp_metrics", 1), ("otlp_logs", 2)]).await;
    let mut w = weir(dir.path(), &broker.addr(), "    partition_traces_by_id: true", "");
    w.start().await;
    let mut sent = 0.0;
    for body in trace_requests(60) {
        assert_eq!(post(&w.url(), "/v1/traces", body).await, 200);
    }
    sent += 180.0;
    assert_eq!(post(&w.url(), "/v1/metrics", support::metrics("m", 25).encode_to_vec()).await, 200);
    assert_eq!(post(&w.url(), "/v1/logs", support::logs("l", 40).encode_to_vec()).await, 200);
    sent += 65.0;
    wait_settled(&w, sent).await;
    assert_eq!(metric_value(&w.admin(), "weir_items_dropped_total").await.unwrap_or(0.0), 0.0);

    let mut trace_partition: HashMap<Vec<u8>, i32> = HashMap::new();
    let mut names = HashSet::new();
    let messages = broker.consume("otlp_spans").await;
    for (p, key, _, value) in &messages {
        let req = ExportTraceServiceRequest::decode(value.as_slice()).expect("each message is an export request");
        let spans: Vec<_> = req.resource_spans.iter().flat_map(|r| &r.scope_spans).flat_map(|s| &s.spans).collect();
        let ids: HashSet<&Vec<u8>> = spans.iter().map(|s| &s.trace_id).collect();
        assert_eq!(ids.len(), 1, "one trace per message");
        let id = ids.into_iter().next().unwrap();
        assert_eq!(key.as_deref(), Some(hex(id).as_bytes()), "keyed by the trace ID in hex");
        let want = (weir::exporter::kafka_partition::murmur2(hex(id).as_bytes()) & 0x7fff_ffff) % 4;
        assert_eq!(*p, want, "the Java client's partition for key {}", hex(id));
        assert_eq!(*trace_partition.entry(id.clone()).or_insert(*p), *p, "a trace stays in one partition");
        for s in spans {
            assert!(names.insert(s.name.clone()), "span {} twice", s.name);
        }
    }
    assert_eq!(names.len(), 180, "every span once");
    assert_eq!(trace_partition.len(), 60);
    let used: HashSet<i32> = trace_partition.values().copied().collect();
    assert_eq!(used.len(), 4, "60 traces use all 4 partitions");

    let metrics: usize = broker
        .consume("otlp_metrics")
        .await
        .iter()
        .map(|(_, _, _, v)| ExportMetricsServiceRequest::decode(v.as_slice()).unwrap())
        .flat_map(|r| r.resource_metrics)
        .flat_map(|r| r.scope_metrics)
        .map(|s| s.metrics.len())
        .sum();
    assert_eq!(metrics, 25);
    let logs = broker.consume("otlp_logs").await;
    let records: usize = logs
        .iter()
        .map(|(_, _, _, v)| ExportLogsServiceRequest::decode(v.as_slice()).unwrap())
        .flat_map(|r| r.resource_logs)
        .flat_map(|r| r.scope_logs)
        .map(|s| s.log_records.len())
        .sum();
    assert_eq!(records, 40);
    assert!(metric_value(&w.admin(), "weir_kafka_messages_total{exporter=\"kafka\",outcome=\"sent\"}").await.unwrap() >= 62.0);
    assert_eq!(metric_value(&w.admin(), "weir_kafka_up").await, Some(1.0));
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_batches_are_cut_and_an_item_too_large_for_any_message_is_counted() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Tansu::start(dir.path()).await;
    broker.create_topics(&[("otlp_spans", 3)]).await;
    let mut w = weir(dir.path(), &broker.addr(), "    producer: {max_message_bytes: 4096}", "");
    w.start().await;
    let mut req = support::traces("big", 300, 3);
    req.resource_spans[0].scope_spans[0].spans[17].name = "x".repeat(20_000);
    assert_eq!(post(&w.url(), "/v1/traces", req.encode_to_vec()).await, 200);
    wait_settled(&w, 300.0).await;
    let dropped = metric_value(&w.admin(), "weir_items_dropped_total{signal=\"traces\",exporter=\"kafka\",reason=\"too_large\"}").await;
    assert_eq!(dropped, Some(1.0), "the 20 KB span is counted as dropped, too large");
    assert_eq!(metric_value(&w.admin(), "weir_items_exported_total").await, Some(299.0));
    let messages = broker.consume("otlp_spans").await;
    assert!(messages.len() >= 10, "cut into many messages: {}", messages.len());
    let mut names = HashSet::new();
    for (_, key, _, v) in &messages {
        assert!(key.is_none(), "unkeyed without partition_traces_by_id");
        assert!(v.len() <= 4096, "a message of {} bytes", v.len());
        for s in spans_of(v) {
            assert!(names.insert(s.name.clone()));
        }
    }
    assert_eq!(names.len(), 299);
    assert!(!names.contains(&"x".repeat(20_000)));
    let partitions: HashSet<i32> = messages.iter().map(|m| m.0).collect();
    assert_eq!(partitions.len(), 3, "unkeyed messages spread over every partition");
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_stopped_for_30s_under_load_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Tansu::start(dir.path()).await;
    broker.create_topics(&[("otlp_spans", 2)]).await;
    let queue = dir.path().join("queue");
    let mut w = weir(dir.path(), &broker.addr(), "", &format!("  queue:\n    disk: {{path: \"{}\"}}", queue.display()));
    w.start().await;

    // 50 requests of 20 spans a second for 45 s; the broker is stopped from 5 s to 35 s.
    let load = {
        let url = w.url();
        tokio::spawn(async move {
            let mut acked = Vec::new();
            let start = Instant::now();
            let mut n = 0u64;
            while start.elapsed() < Duration::from_secs(45) {
                let req = support::traces(&format!("r{n}"), 20, 1);
                if post(&url, "/v1/traces", req.encode_to_vec()).await == 200 {
                    acked.push(n);
                }
                n += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            (acked, n)
        })
    };
    tokio::time::sleep(Duration::from_secs(5)).await;
    broker.signal(libc::SIGSTOP);
    tokio::time::sleep(Duration::from_secs(20)).await;
    let up_during = metric_value(&w.admin(), "weir_kafka_up").await;
    let errors_during = metric_value(&w.admin(), "weir_kafka_errors_total").await.unwrap_or(0.0);
    let backlog = metric_value(&w.admin(), "weir_queue_disk_records").await.unwrap_or(0.0);
    tokio::time::sleep(Duration::from_secs(10)).await;
    broker.signal(libc::SIGCONT);
    let (acked, sent) = load.await.unwrap();
    assert!(acked.len() as u64 > sent / 2, "weir kept acknowledging while the broker was stopped: {} of {sent}", acked.len());
    wait_settled(&w, acked.len() as f64 * 20.0).await;
    assert_eq!(up_during, Some(0.0), "weir_kafka_up shows the outage");
    assert!(errors_during > 0.0, "the outage counts errors");
    assert!(backlog > 0.0, "the disk queue held the backlog");
    assert_eq!(metric_value(&w.admin(), "weir_kafka_up").await, Some(1.0), "and the recovery");

    let mut seen: BTreeMap<String, u32> = BTreeMap::new();
    for (_, _, _, v) in broker.consume("otlp_spans").await {
        for s in spans_of(&v) {
            *seen.entry(s.name.clone()).or_default() += 1;
        }
    }
    let missing: Vec<String> =
        acked.iter().flat_map(|n| (0..20).map(move |i| format!("span-r{n}-{i}"))).filter(|name| !seen.contains_key(name)).collect();
    assert!(missing.is_empty(), "{} acknowledged spans lost, e.g. {:?}", missing.len(), &missing[..missing.len().min(5)]);
    let twice = seen.values().filter(|&&c| c > 1).count();
    println!("acknowledged {} requests of {sent}; {} spans in Kafka; {twice} delivered more than once", acked.len(), seen.len());
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_brokers_hold_readiness_and_the_log_names_them() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut w = weir(dir.path(), &format!("127.0.0.1:{port}"), "", "");
    w.spawn();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut named = false;
    while Instant::now() < deadline {
        let log = w.log_text();
        named = log.contains("cannot reach the brokers") && log.contains(&format!("127.0.0.1:{port}"));
        if named {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(named, "the log names the broker:\n{}", w.log_text());
    let ready = reqwest::get(format!("{}/readyz", w.admin())).await.unwrap().status().as_u16();
    assert_eq!(ready, 503, "not ready while no broker answers");
    let broker = Tansu::start_on(dir.path(), port).await;
    let deadline = Instant::now() + Duration::from_secs(40);
    while reqwest::get(format!("{}/readyz", w.admin())).await.unwrap().status() != 200 {
        assert!(Instant::now() < deadline, "ready once the broker answers:\n{}", process::tail(&w.log_text()));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(broker);
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_tenant_gets_its_topic_and_its_name_in_a_header() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Tansu::start(dir.path()).await;
    broker.create_topics(&[("spans.team-a", 1), ("spans.team-b", 1)]).await;
    let auth = "  auth:\n    tenants:\n      team-a: {tokens: [token-a]}\n      team-b: {tokens: [token-b]}";
    let mut w = weir_with(dir.path(), &broker.addr(), "    traces: {topic: \"spans.${tenant}\"}", "", auth);
    w.start().await;
    let client = reqwest::Client::new();
    for i in 0..10 {
        for (tenant, token) in [("team-a", "token-a"), ("team-b", "token-b")] {
            let mut req = support::traces("t", 3, 1);
            for (j, s) in req.resource_spans[0].scope_spans[0].spans.iter_mut().enumerate() {
                s.name = format!("{tenant}/{i}/{j}");
            }
            let r = client
                .post(format!("{}/v1/traces", w.url()))
                .header("content-type", "application/x-protobuf")
                .header("authorization", format!("Bearer {token}"))
                .body(req.encode_to_vec())
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
        }
    }
    wait_settled(&w, 60.0).await;
    for tenant in ["team-a", "team-b"] {
        let mut spans = 0;
        for (_, _, header, v) in broker.consume(&format!("spans.{tenant}")).await {
            assert_eq!(header.as_deref(), Some(tenant.as_bytes()), "the tenant header");
            for s in spans_of(&v) {
                assert!(s.name.starts_with(&format!("{tenant}/")), "{} in {tenant}'s topic", s.name);
                spans += 1;
            }
        }
        assert_eq!(spans, 30, "{tenant}'s spans, all in its topic");
    }
    w.stop().await;
}

/// A mutual-TLS front for a broker: accepts TLS with a server certificate for 127.0.0.1
/// from a test CA, requires a client certificate from the same CA, and forwards the bytes
/// to `backend`. Returns the CA, a client certificate and key (PEM paths), the count of
/// handshakes that succeeded, and a test client's TLS config.
type Front = ([PathBuf; 3], std::sync::Arc<std::sync::atomic::AtomicUsize>, std::sync::Arc<rustls::ClientConfig>);

async fn tls_front(dir: &Path, listener: tokio::net::TcpListener, backend: u16) -> Front {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let p = support::pki::pki();
    let write = |name: &str, pem: &str| {
        let path = dir.join(name);
        std::fs::write(&path, pem).unwrap();
        path
    };
    let files = [write("ca.pem", &p.ca_pem), write("client.pem", &p.client_cert), write("client.key", &p.client_key)];
    let certs = |pem: &str| rustls_pemfile::certs(&mut pem.as_bytes()).collect::<Result<Vec<_>, _>>().unwrap();
    let key = |pem: &str| rustls_pemfile::private_key(&mut pem.as_bytes()).unwrap().unwrap();
    let roots = || {
        let mut r = rustls::RootCertStore::empty();
        r.add(certs(&p.ca_pem).remove(0)).unwrap();
        Arc::new(r)
    };
    let verifier = rustls::server::WebPkiClientVerifier::builder(roots()).build().unwrap();
    let server = rustls::ServerConfig::builder()
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs(&p.server_cert), key(&p.server_key))
        .unwrap();
    let client = rustls::ClientConfig::builder()
        .with_root_certificates(roots())
        .with_client_auth_cert(certs(&p.client_cert), key(&p.client_key))
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
    let handshakes = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&handshakes);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, count) = (acceptor.clone(), Arc::clone(&count));
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else { return };
                count.fetch_add(1, Ordering::Relaxed);
                let Ok(mut plain) = tokio::net::TcpStream::connect(("127.0.0.1", backend)).await else { return };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
            });
        }
    });
    (files, handshakes, Arc::new(client))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_to_the_brokers() {
    let dir = tempfile::tempdir().unwrap();
    let front = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let front_port = front.local_addr().unwrap().port();
    let broker_port = free_port();
    let ([ca, cert, key], handshakes, client) = tls_front(dir.path(), front, broker_port).await;
    let mut broker = Tansu::start_advertising(dir.path(), broker_port, front_port).await;
    broker.front = Some((front_port, client));
    broker.create_topics(&[("otlp_spans", 2)]).await;
    let tls = format!("    tls: {{ca_file: \"{}\", cert_file: \"{}\", key_file: \"{}\"}}", ca.display(), cert.display(), key.display());
    let mut w = weir(dir.path(), &format!("127.0.0.1:{front_port}"), &tls, "");
    w.start().await;
    assert_eq!(post(&w.url(), "/v1/traces", support::traces("tls", 50, 1).encode_to_vec()).await, 200);
    wait_settled(&w, 50.0).await;
    assert_eq!(metric_value(&w.admin(), "weir_items_exported_total").await, Some(50.0));
    assert!(handshakes.load(std::sync::atomic::Ordering::Relaxed) > 0, "weir came in through the TLS front");
    let spans: usize = broker
        .consume("otlp_spans")
        .await
        .iter()
        .map(|(_, _, _, v)| ExportTraceServiceRequest::decode(v.as_slice()).unwrap().resource_spans[0].scope_spans[0].spans.len())
        .sum();
    assert_eq!(spans, 50);

    // Without the client certificate the front refuses, and weir says so and stays unready.
    let no_cert = format!("    tls: {{ca_file: \"{}\"}}", ca.display());
    let dir2 = tempfile::tempdir().unwrap();
    let mut w2 = weir(dir2.path(), &format!("127.0.0.1:{front_port}"), &no_cert, "");
    w2.spawn();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(reqwest::get(format!("{}/readyz", w2.admin())).await.unwrap().status().as_u16(), 503);
    assert!(w2.log_text().contains("cannot reach the brokers"), "{}", w2.log_text());
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_that_accepts_but_never_answers_at_start_times_out_and_is_tried_again() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Tansu::start(dir.path()).await;
    broker.signal(libc::SIGSTOP);
    let mut w = weir(dir.path(), &broker.addr(), "", "");
    w.spawn();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !w.log_text().contains("answered within") {
        assert!(Instant::now() < deadline, "the connection attempt is bounded by `timeout`:\n{}", w.log_text());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(reqwest::get(format!("{}/readyz", w.admin())).await.unwrap().status().as_u16(), 503);
    broker.signal(libc::SIGCONT);
    let deadline = Instant::now() + Duration::from_secs(40);
    while reqwest::get(format!("{}/readyz", w.admin())).await.unwrap().status() != 200 {
        assert!(Instant::now() < deadline, "ready once the broker answers:\n{}", process::tail(&w.log_text()));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    w.stop().await;
}
