//! End to end in a REAL cgroup (1 CPU of quota): load weir until the throttle leaves
//! Normal, see 429/503 with Retry-After and gRPC RESOURCE_EXHAUSTED with RetryInfo,
//! remove the load and see it return to Normal. Needs root and a writable cgroupfs
//! (CI has both); it fails, never skips, without them.

mod support;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use prost::Message;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::cgroup::TestCgroup;
use support::*;

const CONFIG: &str = r#"
receiver:
  http_server: {endpoint: "{http}", middlewares: ["content_decompressor", "throttle"]}
  grpc_server: {endpoint: "{grpc}", middlewares: ["content_decompressor", "throttle"]}
  throttle:
    enabled: true
    sample_interval: 100ms
    thresholds:
      cpu: {enter: 0.6, exit: 0.4, hard: 0.97, breach_n: 2}
    rules:
      default: {drop_min: 0.3, drop_max: 1.0}
exporters: [{type: blackhole}]
admin: {endpoint: "{admin}"}
log: {level: warn}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpu_overload_in_a_real_cgroup_sheds_then_recovers() {
    let cg = TestCgroup::create("weir-e2e-cpu", 1.0, 1 << 30);
    let mut weir = start_weir_in(&cg, CONFIG, 30).await;
    let dbg = weir.debug().await;
    assert_eq!(dbg["effective_cores"], 1.0, "weir must read its 1-CPU quota from the real cgroup ({}): {dbg}", cg.layout);
    assert_eq!(dbg["states"]["traces"], "normal");

    let body = bytes::Bytes::from(weir::otlp::synth::traces_request(512, 10, 32, 7).encode_to_vec());
    let stop = Arc::new(AtomicBool::new(false));
    let counts: Arc<[AtomicU64; 4]> = Arc::new(Default::default()); // 200, 429, 503, missing Retry-After
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (stop, counts, body, url) = (stop.clone(), counts.clone(), body.clone(), format!("{}/v1/traces", weir.http));
        tasks.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            while !stop.load(Ordering::Relaxed) {
                let Ok(r) = client.post(&url).header("content-type", "application/x-protobuf").body(body.clone()).send().await else {
                    continue;
                };
                let i = match r.status().as_u16() {
                    200 => 0,
                    429 => 1,
                    503 => 2,
                    _ => continue,
                };
                if i > 0 && !r.headers().contains_key("retry-after") {
                    counts[3].fetch_add(1, Ordering::Relaxed);
                }
                counts[i].fetch_add(1, Ordering::Relaxed);
                let _ = r.bytes().await;
            }
        }));
    }

    let deadline = Instant::now() + Duration::from_secs(90);
    let mut left_normal = None;
    while Instant::now() < deadline {
        let d = weir.debug().await;
        if d["states"]["traces"] != "normal" && !d.is_null() {
            left_normal = Some(d);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let left_normal = left_normal.unwrap_or_else(|| panic!("throttle never left Normal under load: {}", log_of(&weir)));
    eprintln!("left normal: levels={} states={}", left_normal["levels"], left_normal["states"]);

    // While overloaded, a gRPC export is refused with RESOURCE_EXHAUSTED + RetryInfo.
    let ch = tonic::transport::Channel::from_shared(weir.grpc.clone()).unwrap().connect().await.unwrap();
    let small = weir::otlp::synth::traces_request(8, 2, 8, 1);
    let mut grpc_refusal = None;
    let probe_deadline = Instant::now() + Duration::from_secs(30);
    while grpc_refusal.is_none() && Instant::now() < probe_deadline {
        let asked = Instant::now();
        match TraceServiceClient::new(ch.clone()).export(small.clone()).await {
            // A held refusal announces what is left of the delay after its hold: the
            // wait the client is given is the hold plus the announced delay.
            Err(e) if e.code() == tonic::Code::ResourceExhausted => {
                grpc_refusal = Some(weir::exporter::retry_delay_of(&e).map(|d| d + asked.elapsed()))
            }
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    let grpc_refusal = grpc_refusal.expect("a gRPC request was refused while overloaded");
    assert!(grpc_refusal.is_some_and(|d| d >= Duration::from_secs(1)), "RetryInfo with a delay (plus the hold): {grpc_refusal:?}");

    let (ok, shed, open, missing) = (
        counts[0].load(Ordering::Relaxed),
        counts[1].load(Ordering::Relaxed),
        counts[2].load(Ordering::Relaxed),
        counts[3].load(Ordering::Relaxed),
    );
    eprintln!("http statuses under load: 200={ok} 429={shed} 503={open}");
    assert!(ok > 0, "some requests were admitted");
    assert!(shed + open > 0, "overload was answered with 429/503");
    assert_eq!(missing, 0, "every refusal carried Retry-After");

    // Load gone: back to Normal.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let d = weir.debug().await;
        if all_normal(&d) {
            break;
        }
        assert!(Instant::now() < deadline, "never returned to Normal: {d}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(weir.child.try_wait().unwrap().is_none(), "weir still running");
    assert_eq!(cg.oom_kills(), 0);
    let r = reqwest::Client::new()
        .post(format!("{}/v1/traces", weir.http))
        .header("content-type", "application/x-protobuf")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "admitted again after recovery");
}

fn all_normal(d: &serde_json::Value) -> bool {
    ["traces", "metrics", "logs", "profiles"].iter().all(|t| d["states"][t] == "normal")
}

fn log_of(w: &WeirProcess) -> String {
    std::fs::read_to_string(&w.log).unwrap_or_default()
}
