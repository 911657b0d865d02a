//! A retry storm against weir in a REAL cgroup (1 CPU of quota): closed-loop clients that
//! ignore Retry-After and send again the moment they are answered, as the seed's loadgen
//! and many hand-written exporters do. With refusals held (`receiver.throttle.hold`),
//! refusing must not become the load: the accepted rate under the storm stays within a
//! stated fraction of the same weir's capacity measured in the same test with two
//! clients, refusals do not outnumber acceptances, and every refused request still gets its whole answer with a retry delay
//! (HTTP 429/503 + Retry-After, gRPC RESOURCE_EXHAUSTED/UNAVAILABLE + RetryInfo), never a
//! broken connection. Needs root and a writable cgroupfs (CI has both); it fails, never
//! skips, without them.

mod support;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use prost::Message;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::cgroup::TestCgroup;
use support::*;

/// The benchmark's settings (`config/bench.yaml`) with a blackhole exporter, and a longer
/// wait for the in-flight slot: this is a debug build, ten times slower per request.
const CONFIG: &str = r#"
receiver:
  http_server: {endpoint: "{http}", middlewares: ["content_decompressor", "throttle"]}
  grpc_server: {endpoint: "{grpc}", middlewares: ["content_decompressor", "throttle"]}
  throttle:
    enabled: true
    sample_interval: 250ms
    thresholds:
      cpu: {enter: 0.85, exit: 0.75, hard: 1.20, breach_n: 3}
    rules:
      default: {drop_min: 0.0, drop_max: 0.2}
    max_inflight_per_core: 1
    max_inflight_wait: 200ms
    max_inflight_queue_per_core: 1
    queue_delay: {target: 5ms}
exporters: [{type: blackhole}]
admin: {endpoint: "{admin}"}
log: {level: warn}
"#;

/// What the clients saw.
#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    refused: AtomicU64,
    /// A refusal without its retry delay, or with a body that is not a whole
    /// `google.rpc.Status`.
    incomplete: AtomicU64,
    /// No answer at all: a reset or closed connection, a timeout.
    broken: AtomicU64,
    other: AtomicU64,
}

impl Tally {
    fn ok(&self) -> u64 {
        self.ok.load(Ordering::Relaxed)
    }
}

/// `n` HTTP/1.1 clients (each its own connection pool) posting `body` in a closed loop
/// until `stop`, never waiting after a refusal.
fn http_clients(n: usize, url: &str, body: &bytes::Bytes, stop: &Arc<AtomicBool>, tally: &Arc<Tally>) -> Vec<tokio::task::JoinHandle<()>> {
    (0..n)
        .map(|_| {
            let (url, body, stop, tally) = (url.to_string(), body.clone(), stop.clone(), tally.clone());
            tokio::spawn(async move {
                let client = reqwest::Client::builder().timeout(Duration::from_secs(20)).build().unwrap();
                while !stop.load(Ordering::Relaxed) {
                    let sent = client.post(&url).header("content-type", "application/x-protobuf").body(body.clone()).send().await;
                    let Ok(r) = sent else {
                        tally.broken.fetch_add(1, Ordering::Relaxed);
                        continue;
                    };
                    let status = r.status().as_u16();
                    let retry_after = r.headers().get("retry-after").and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
                    let Ok(answer) = r.bytes().await else {
                        tally.broken.fetch_add(1, Ordering::Relaxed);
                        continue;
                    };
                    match status {
                        200 => {
                            tally.ok.fetch_add(1, Ordering::Relaxed);
                        }
                        429 | 503 => {
                            tally.refused.fetch_add(1, Ordering::Relaxed);
                            let whole = weir::rpc::Status::decode(answer.as_ref()).is_ok_and(|s| !s.message.is_empty());
                            if retry_after.is_none() || !whole {
                                tally.incomplete.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        _ => {
                            tally.other.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect()
}

/// `n` gRPC clients sharing one channel, exporting `req` in a closed loop until `stop`.
fn grpc_clients(
    n: usize,
    channel: tonic::transport::Channel,
    req: &opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest,
    stop: &Arc<AtomicBool>,
    tally: &Arc<Tally>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..n)
        .map(|_| {
            let (mut client, req, stop, tally) = (TraceServiceClient::new(channel.clone()), req.clone(), stop.clone(), tally.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let mut r = tonic::Request::new(req.clone());
                    r.set_timeout(Duration::from_secs(20));
                    match client.export(r).await {
                        Ok(_) => {
                            tally.ok.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(s)
                            if matches!(s.code(), tonic::Code::ResourceExhausted | tonic::Code::Unavailable)
                                && !s.message().contains("transport") =>
                        {
                            tally.refused.fetch_add(1, Ordering::Relaxed);
                            if weir::exporter::retry_delay_of(&s).is_none() {
                                tally.incomplete.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        Err(s)
                            if matches!(
                                s.code(),
                                tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Cancelled | tonic::Code::Unknown
                            ) =>
                        {
                            tally.broken.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(_) => {
                            tally.other.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect()
}

async fn run_for(secs: u64, tasks: Vec<tokio::task::JoinHandle<()>>, stop: &Arc<AtomicBool>) {
    tokio::time::sleep(Duration::from_secs(secs)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
}

/// Accepted requests per second of `tally` over a window of `secs` that starts after `skip`
/// seconds (the storm's first wave of new connections is left out of the rate).
async fn accepted_rate(tally: &Arc<Tally>, skip: u64, secs: u64) -> f64 {
    tokio::time::sleep(Duration::from_secs(skip)).await;
    let (t0, n0) = (Instant::now(), tally.ok());
    tokio::time::sleep(Duration::from_secs(secs)).await;
    (tally.ok() - n0) as f64 / t0.elapsed().as_secs_f64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_of_clients_that_retry_at_once_keeps_goodput_and_gets_whole_answers() {
    let cg = TestCgroup::create("weir-e2e-storm", 1.0, 1 << 30);
    let weir = start_weir_in(&cg, CONFIG, 30).await;
    let url = format!("{}/v1/traces", weir.http);
    // 100 spans of 10 attributes: about 60 KB, a request of a few milliseconds.
    let req = weir::otlp::synth::traces_request(100, 10, 32, 7);
    let body = bytes::Bytes::from(req.encode_to_vec());

    // Capacity: two clients keep the one core busy without a queue (the benchmark's A;
    // here the throttle is on, and may refuse a few when a request waited behind the
    // other one past the queue-delay target: only what it accepts counts).
    let calm = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let tasks = http_clients(2, &url, &body, &stop, &calm);
    let capacity = accepted_rate(&calm, 2, 6).await;
    run_for(0, tasks, &stop).await;
    assert!(capacity > 0.0, "nothing accepted with two clients: {}", log_of(&weir));

    // The storm: 200 HTTP/1.1 clients and 40 gRPC streams, none of them waiting after a
    // refusal.
    let storm = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let channel = tonic::transport::Endpoint::from_shared(weir.grpc.clone()).unwrap().connect_lazy();
    let mut tasks = http_clients(200, &url, &body, &stop, &storm);
    tasks.extend(grpc_clients(40, channel, &req, &stop, &storm));
    let under_storm = accepted_rate(&storm, 4, 10).await;
    run_for(0, tasks, &stop).await;
    let refused = storm.refused.load(Ordering::Relaxed);
    let held = metric_value(&weir.admin, "weir_throttle_hold_seconds_count").await.unwrap_or(0.0);
    let ratio = under_storm / capacity;
    eprintln!(
        "capacity {capacity:.0}/s; under the storm {under_storm:.0}/s ({:.0}%), {refused} refused ({held} held), {} broken, {} incomplete, {} other",
        ratio * 100.0,
        storm.broken.load(Ordering::Relaxed),
        storm.incomplete.load(Ordering::Relaxed),
        storm.other.load(Ordering::Relaxed),
    );
    assert!(refused > 0, "the storm must overload weir (nothing refused)");
    assert!(held > 0.0, "refusals must be held");
    // Held refusals are answered early when the core falls idle or nobody waits in its
    // line (at the latest when the storm stops and the core empties), and counted.
    let released = metric_value(&weir.admin, "weir_throttle_holds_released_total{").await.unwrap_or(0.0);
    assert!(released > 0.0, "no held refusal was answered early ({held} held)");
    assert_eq!(storm.broken.load(Ordering::Relaxed), 0, "every refused client must get its answer, not a broken connection");
    assert_eq!(storm.incomplete.load(Ordering::Relaxed), 0, "every refusal must be whole and carry its retry delay");
    assert_eq!(storm.other.load(Ordering::Relaxed), 0, "no other status");
    // What holding refusals buys, measured on the counts rather than on the machine's
    // speed: a refusal answered at once comes straight back, so refusals outnumber
    // acceptances ten times over (21K refusals against about 1.9K acceptances in the
    // same 14 s with `hold: {enabled: false}`); held, the clients come back at about half
    // the completion rate (4.8K against 9.5K here, 3.5K against 6.4K on a slower CI
    // machine). Both counts scale with the machine, so the bound holds on a slow one.
    let accepted = storm.ok();
    assert!((refused as f64) <= 1.5 * accepted as f64, "{refused} refusals against {accepted} acceptances: refusing has become the load");
    // The goodput itself depends on the machine and its neighbours (65-71% here, 46% on a
    // busier CI machine, 12% without held refusals): this bound only catches a collapse.
    // The release benchmark (scripts/bench-storm.sh) gives the numbers that count.
    assert!(ratio >= 0.30, "accepted {under_storm:.0}/s under the storm, {:.0}% of the {capacity:.0}/s capacity", ratio * 100.0);
    assert_eq!(cg.oom_kills(), 0);
}

fn log_of(w: &WeirProcess) -> String {
    std::fs::read_to_string(&w.log).unwrap_or_default()
}
