//! Memory must come back: in a REAL memory-limited cgroup, large requests drive weir into
//! a memory-caused Open state; once the load stops and the batch is exported, the freed
//! memory returns to the kernel (jemalloc's background purge), the level falls and the
//! state is Normal again. Requests travel as their protobuf bytes, so the queued bytes
//! are about what the pipeline holds: the lines sit below the 150 MB queue bound.

mod support;

use prost::Message;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::cgroup::TestCgroup;
use support::*;

const LIMIT: u64 = 512 << 20;

const CONFIG: &str = r#"
receiver:
  http_server: {endpoint: "{http}", middlewares: ["content_decompressor", "throttle"]}
  grpc_server: {endpoint: "{grpc}", middlewares: ["throttle"]}
  throttle:
    enabled: true
    sample_interval: 100ms
    thresholds:
      cpu: {enabled: false, enter: 0.8, exit: 0.7, hard: 0.9}
      mem: {enter: 0.15, exit: 0.10, hard: 0.22, breach_n: 1}
pipeline:
  queue: {max_bytes: 150000000}
  batch: {max_items: 100000000, max_bytes: 150000000, timeout: 3s}
exporters: [{type: blackhole}]
admin: {endpoint: "{admin}"}
log: {level: warn}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_open_state_recovers_when_memory_is_returned() {
    let cg = TestCgroup::create("weir-e2e-mem", 2.0, LIMIT);
    let mut weir = start_weir_in(&cg, CONFIG, 30).await;
    let dbg = weir.debug().await;
    assert_eq!(dbg["mem_limit_bytes"], LIMIT, "weir reads its memory limit from the real cgroup ({}): {dbg}", cg.layout);
    let baseline = dbg["levels"]["mem"].as_f64().unwrap();
    assert!(baseline < 0.10, "starts low: {baseline}");

    // ~4 MB requests: 2000 spans with 10 attributes of 200 bytes.
    let body = bytes::Bytes::from(weir::otlp::synth::traces_request(2000, 10, 200, 3).encode_to_vec());
    let stop = Arc::new(AtomicBool::new(false));
    let refused = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let (stop, refused, body, url) = (stop.clone(), refused.clone(), body.clone(), format!("{}/v1/traces", weir.http));
        tasks.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            while !stop.load(Ordering::Relaxed) {
                if let Ok(r) = client.post(&url).header("content-type", "application/x-protobuf").body(body.clone()).send().await {
                    if r.status() == 503 {
                        refused.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            }
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut peak = 0.0f64;
    let mut opened = false;
    while Instant::now() < deadline && !opened {
        let d = weir.debug().await;
        peak = peak.max(d["levels"]["mem"].as_f64().unwrap_or(0.0));
        opened = d["states"]["traces"] == "open";
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Keep the pressure a moment so refusals are observed, then stop.
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    assert!(
        opened,
        "memory never drove the state to Open (peak level {peak}):\n{}",
        std::fs::read_to_string(&weir.log).unwrap_or_default()
    );
    assert!(refused.load(Ordering::Relaxed) > 0, "Open refused requests");
    eprintln!("peak memory level {peak:.3} of {} MiB", LIMIT >> 20);

    // The batch flushes (3 s timeout), memory is freed and returned: level falls, Normal.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = serde_json::Value::Null;
    while Instant::now() < deadline {
        last = weir.debug().await;
        if last["states"]["traces"] == "normal" && last["levels"]["mem"].as_f64().is_some_and(|m| m < 0.10) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!("after load: {}", last["levels"]);
    assert_eq!(last["states"]["traces"], "normal", "state returned to Normal: {last}");
    assert!(last["levels"]["mem"].as_f64().unwrap() < 0.10, "memory level fell below exit: {last}");
    assert!(weir.child.try_wait().unwrap().is_none(), "weir still running");
    assert_eq!(cg.oom_kills(), 0, "no OOM kill");
    let small = weir::otlp::synth::traces_request(10, 2, 8, 1).encode_to_vec();
    let r = reqwest::Client::new()
        .post(format!("{}/v1/traces", weir.http))
        .header("content-type", "application/x-protobuf")
        .body(small)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}
