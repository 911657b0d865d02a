//! The `loadbalancing` exporter with real processes: a tier-1 weir with a disk queue
//! routes by trace ID to tier-2 weirs that write what they receive to files. Every
//! trace's spans, sent in several requests, end up at exactly one tier-2; a tier-2
//! killed with `kill -9` leaves the ring after `failover_after` and its traces move to
//! the others with nothing lost (the moves counted), and rejoins once it is back; a
//! backend added to the resolver's file takes about its share of new traces.

mod support;

use prost::Message;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use support::process::Proc;
use support::*;

fn tier2(dir: &Path, i: usize) -> (Proc, PathBuf) {
    let out = dir.join(format!("out{i}"));
    let p = Proc::new(
        dir,
        &format!("tier2-{i}"),
        &format!(
            r#"
receiver:
  http_server: {{endpoint: "{{http}}"}}
  grpc_server: {{endpoint: "{{grpc}}"}}
  throttle: {{enabled: false}}
pipeline:
  shutdown_delay: 0s
  batch: {{max_items: 5000, timeout: 20ms}}
exporters:
  - {{type: file, path: "{}"}}
admin: {{endpoint: "{{admin}}"}}
log: {{level: warn}}
"#,
            out.display()
        ),
    );
    (p, out)
}

fn tier1(dir: &Path, backends_file: &Path) -> Proc {
    tier1_polling(dir, backends_file, "200ms")
}

fn tier1_polling(dir: &Path, backends_file: &Path, interval: &str) -> Proc {
    Proc::new(
        dir,
        "tier1",
        &format!(
            r#"
receiver:
  http_server: {{endpoint: "{{http}}"}}
  grpc_server: {{endpoint: "{{grpc}}"}}
  throttle: {{enabled: false}}
pipeline:
  shutdown_delay: 0s
  batch: {{max_items: 2000, timeout: 20ms}}
  queue:
    disk: {{path: "{}"}}
exporters:
  - type: loadbalancing
    routing_key: trace_id
    protocol: otlphttp
    compression: none
    timeout: 2s
    failover_after: 2s
    retry: {{initial_interval: 50ms, max_interval: 200ms, max_elapsed: 60s}}
    resolver:
      file: {{path: "{}", interval: {interval}}}
admin: {{endpoint: "{{admin}}"}}
log: {{level: info}}
"#,
            dir.join("queue").display(),
            backends_file.display()
        ),
    )
}

/// Requests carrying `traces` traces of 1-30 spans each (names `<trace>-<i>`), every trace
/// spread over two or more requests as a batching SDK sends them.
fn requests(first_trace: u64, traces: u64) -> Vec<Vec<u8>> {
    let mut reqs = Vec::new();
    let per_request = 8;
    for chunk in (first_trace..first_trace + traces).collect::<Vec<_>>().chunks(per_request) {
        // Each chunk's spans go out in three requests, round robin.
        let mut three = vec![traces_request(); 3];
        for &t in chunk {
            let n = 1 + (t * 7 % 30) as usize;
            for i in 0..n {
                let mut span = three[0].resource_spans[0].scope_spans[0].spans[0].clone();
                span.trace_id = trace_id(t).to_vec();
                span.name = format!("{t}-{i}");
                three[i % 3].resource_spans[0].scope_spans[0].spans.push(span);
            }
        }
        for mut r in three {
            r.resource_spans[0].scope_spans[0].spans.remove(0);
            if !r.resource_spans[0].scope_spans[0].spans.is_empty() {
                reqs.push(r.encode_to_vec());
            }
        }
    }
    reqs
}

fn traces_request() -> opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest {
    traces("lb", 1, 1)
}

fn trace_id(t: u64) -> [u8; 16] {
    let mut id = [0u8; 16];
    let x = t.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5555;
    id[..8].copy_from_slice(&x.to_le_bytes());
    id[8..].copy_from_slice(&(x.rotate_left(17) | 1).to_le_bytes());
    id
}

/// Span name → (tier-2 index, how many times) over every tier-2's output.
fn delivered(outs: &[PathBuf]) -> HashMap<String, (usize, u32)> {
    let mut seen: HashMap<String, (usize, u32)> = HashMap::new();
    for (i, out) in outs.iter().enumerate() {
        let text = std::fs::read_to_string(out.join("traces.jsonl")).unwrap_or_default();
        let whole = text.rfind('\n').map_or("", |n| &text[..n]);
        let lines: Vec<serde_json::Value> = whole.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
        for s in items_of(&lines, "traces") {
            if let Some(name) = s["name"].as_str() {
                let e = seen.entry(name.to_string()).or_insert((i, 0));
                e.1 += 1;
                if e.0 != i {
                    e.0 = usize::MAX;
                }
            }
        }
    }
    seen
}

fn span_names(first_trace: u64, traces: u64) -> Vec<String> {
    (first_trace..first_trace + traces).flat_map(|t| (0..1 + (t * 7 % 30) as usize).map(move |i| format!("{t}-{i}"))).collect()
}

/// Sends every request; each must be acknowledged.
async fn send(url: &str, reqs: Vec<Vec<u8>>) {
    let client = reqwest::Client::new();
    for body in reqs {
        let r = client.post(format!("{url}/v1/traces")).header("content-type", "application/x-protobuf").body(body).send().await.unwrap();
        assert_eq!(r.status(), 200, "{}", r.text().await.unwrap_or_default());
    }
}

/// Waits until every name is delivered; the names missing at the deadline.
async fn wait_all(outs: &[PathBuf], names: &[String], secs: u64) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let seen = delivered(outs);
        let missing: Vec<String> = names.iter().filter(|n| !seen.contains_key(*n)).cloned().collect();
        if missing.is_empty() || Instant::now() > deadline {
            return missing;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Which tier-2 each trace went to (`usize::MAX`: more than one).
fn placement(outs: &[PathBuf], first_trace: u64, traces: u64) -> HashMap<u64, usize> {
    let seen = delivered(outs);
    let mut at: HashMap<u64, HashSet<usize>> = HashMap::new();
    for t in first_trace..first_trace + traces {
        for i in 0..1 + (t * 7 % 30) as usize {
            if let Some(&(where_, _)) = seen.get(&format!("{t}-{i}")) {
                at.entry(t).or_default().insert(where_);
            }
        }
    }
    at.into_iter().map(|(t, s)| (t, if s.len() == 1 { *s.iter().next().unwrap() } else { usize::MAX })).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traces_stay_whole_across_a_kill_and_a_new_backend() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    let mut tiers: Vec<(Proc, PathBuf)> = (0..4).map(|i| tier2(dir, i)).collect();
    for (p, _) in tiers.iter_mut() {
        p.start().await;
    }
    let outs: Vec<PathBuf> = tiers.iter().map(|(_, o)| o.clone()).collect();
    let backends = dir.join("backends");
    let urls: Vec<String> = tiers.iter().map(|(p, _)| p.url()).collect();
    let endpoints = |n: usize| urls[..n].join("\n");
    std::fs::write(&backends, endpoints(3)).unwrap();
    let mut lb = tier1(dir, &backends);
    lb.start().await;

    // Three backends: every trace at exactly one of them.
    send(&lb.url(), requests(0, 600)).await;
    let missing = wait_all(&outs, &span_names(0, 600), 30).await;
    assert!(missing.is_empty(), "{} spans missing, e.g. {:?}\n{}", missing.len(), &missing[..missing.len().min(5)], lb.log_text());
    let at = placement(&outs, 0, 600);
    assert!(at.values().all(|&w| w < 3), "a trace split over backends: {:?}", at.iter().find(|(_, &w)| w >= 3));
    for b in 0..3 {
        let n = at.values().filter(|&&w| w == b).count();
        assert!((120..=280).contains(&n), "backend {b} has {n} of 600 traces");
    }

    let routing: serde_json::Value = reqwest::get(format!("{}/debug/routing", lb.admin())).await.unwrap().json().await.unwrap();
    assert_eq!(routing[0]["ring"].as_array().map(Vec::len), Some(3), "{routing}");

    // One killed and back within failover_after: its traces wait for it, none lost or moved.
    tiers[1].0.kill9();
    let sending = tokio::spawn({
        let url = lb.url();
        async move { send(&url, requests(500, 300)).await }
    });
    tokio::time::sleep(Duration::from_millis(600)).await;
    tiers[1].0.start().await;
    sending.await.unwrap();
    let missing = wait_all(&outs, &span_names(500, 300), 30).await;
    assert!(missing.is_empty(), "{} spans lost across a quick restart, e.g. {:?}", missing.len(), &missing[..missing.len().min(5)]);
    let at = placement(&outs, 500, 300);
    assert!(at.values().all(|&w| w < 3), "a trace split over backends across a quick restart");
    assert!(at.values().filter(|&&w| w == 1).count() > 50, "the restarted backend kept its traces");

    // One killed for good: after failover_after its traces go to the other two; nothing lost.
    tiers[0].0.kill9();
    send(&lb.url(), requests(1000, 300)).await;
    let missing = wait_all(&outs, &span_names(1000, 300), 60).await;
    assert!(
        missing.is_empty(),
        "{} acknowledged spans lost after a kill, e.g. {:?}\n{}",
        missing.len(),
        &missing[..missing.len().min(5)],
        lb.log_text()
    );
    let at = placement(&outs, 1000, 300);
    assert!(at.values().all(|&w| w == 1 || w == 2), "with backend 0 dead, every trace at 1 or 2");
    let rerouted = metric_value(&lb.admin(), "weir_loadbalancing_rerouted_items_total").await.unwrap_or(0.0);
    assert!(rerouted > 0.0, "the moved items are counted");
    let scrape = reqwest::get(format!("{}/metrics", lb.admin())).await.unwrap().text().await.unwrap();
    let failed: f64 = scrape
        .lines()
        .filter(|l| l.starts_with("weir_loadbalancing_membership_changes_total{") && l.contains("change=\"failed_over\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(failed >= 1.0, "the failover is counted");

    // The dead one back and a fourth in the file: the first rejoins once its probe
    // answers, and the newcomer takes about a quarter of the new traces.
    tiers[0].0.start().await;
    std::fs::write(&backends, endpoints(4)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let routing: serde_json::Value = reqwest::get(format!("{}/debug/routing", lb.admin())).await.unwrap().json().await.unwrap();
        if routing[0]["ring"].as_array().map(Vec::len) == Some(4) {
            break;
        }
        assert!(Instant::now() < deadline, "the ring never reached 4: {routing}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    send(&lb.url(), requests(5000, 800)).await;
    let missing = wait_all(&outs, &span_names(5000, 800), 30).await;
    assert!(missing.is_empty(), "{} spans missing after the change", missing.len());
    let at = placement(&outs, 5000, 800);
    assert!(at.values().all(|&w| w < 4), "every new trace at exactly one backend");
    let newcomer = at.values().filter(|&&w| w == 3).count();
    assert!((120..=280).contains(&newcomer), "the new backend took {newcomer} of 800 new traces");
    assert!(at.values().filter(|&&w| w == 0).count() > 100, "the restarted backend is back in the ring");
    lb.stop().await;
    for (p, _) in tiers.iter_mut() {
        p.stop().await;
    }
}

/// The two-tier example in deploy/two-tier: both tiers' configs pass `weir --check`, and
/// tier 1 routes by trace ID over the tier-2 headless Service.
#[test]
fn the_two_tier_example_passes_weir_check() {
    use serde::Deserialize;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/two-tier");
    let mut configs = Vec::new();
    for name in ["tier1-config.yaml", "tier2.yaml"] {
        let text = std::fs::read_to_string(root.join(name)).unwrap();
        for d in serde_yaml::Deserializer::from_str(&text) {
            let v = serde_yaml::Value::deserialize(d).unwrap();
            if v["kind"] == "ConfigMap" {
                configs.push((name, v["data"]["weir.yaml"].as_str().unwrap().to_string()));
            }
        }
    }
    assert_eq!(configs.len(), 2);
    let dir = tempfile::tempdir().unwrap();
    for (name, yaml) in &configs {
        let file = dir.path().join("weir.yaml");
        std::fs::write(&file, yaml).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_weir")).arg("--check").arg("--config").arg(&file).output().unwrap();
        assert!(out.status.success(), "{name}: weir --check: {}", String::from_utf8_lossy(&out.stderr));
    }
    assert!(configs[0].1.contains("type: loadbalancing") && configs[0].1.contains("weir-tier2.observability.svc.cluster.local"));
    let kustomization = std::fs::read_to_string(root.join("kustomization.yaml")).unwrap();
    for f in ["../kubernetes", "tier2.yaml", "tier1-config.yaml", "tier1-queue.yaml"] {
        assert!(kustomization.contains(f), "kustomization.yaml does not name {f}");
    }
}

/// The backends file is re-read on SIGHUP, not only when its polling interval comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_re_reads_the_backends_file() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    let mut tiers: Vec<(Proc, PathBuf)> = (0..2).map(|i| tier2(dir, i)).collect();
    for (p, _) in tiers.iter_mut() {
        p.start().await;
    }
    let backends = dir.join("backends");
    std::fs::write(&backends, tiers[0].0.url()).unwrap();
    let mut lb = tier1_polling(dir, &backends, "1h");
    lb.start().await;
    let ring = |routing: &serde_json::Value| routing[0]["ring"].as_array().map_or(0, Vec::len);
    let get = |admin: String| async move {
        reqwest::get(format!("{admin}/debug/routing")).await.unwrap().json::<serde_json::Value>().await.unwrap()
    };
    assert_eq!(ring(&get(lb.admin()).await), 1);
    std::fs::write(&backends, format!("{}\n{}\n", tiers[0].0.url(), tiers[1].0.url())).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(ring(&get(lb.admin()).await), 1, "an hour's polling interval: not re-read yet");
    let pid = lb.child.as_ref().unwrap().id();
    assert!(std::process::Command::new("kill").args(["-HUP", &pid.to_string()]).status().unwrap().success());
    let deadline = Instant::now() + Duration::from_secs(5);
    while ring(&get(lb.admin()).await) != 2 {
        assert!(Instant::now() < deadline, "SIGHUP did not re-read the backends file\n{}", lb.log_text());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    lb.stop().await;
    for (p, _) in tiers.iter_mut() {
        p.stop().await;
    }
}
