//! The durable queue with real processes and real files: `kill -9` at random moments
//! loses nothing acknowledged, damaged files are skipped and counted, a full filesystem
//! refuses with 503 and recovers by itself, and an outage builds a backlog on disk that
//! drains in order.
//!
//! Every test runs two weir binaries: the one under test, with `pipeline.queue.disk`,
//! exporting over OTLP/HTTP to a second weir (the sink) that writes what it receives to
//! JSON files. Spans carry unique names, so the sink's files say exactly which
//! acknowledged requests arrived and how many arrived twice.

mod support;

use prost::Message;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::process::{tail, Proc};
use support::*;

/// A weir binary at fixed ports, restartable with the same config.
/// The sink: a plain weir writing what it receives to `out`.
fn sink(dir: &Path, out: &Path) -> Proc {
    Proc::new(
        dir,
        "sink",
        &format!(
            r#"
receiver:
  http_server: {{endpoint: "{{http}}"}}
  grpc_server: {{endpoint: "{{grpc}}"}}
  throttle: {{enabled: false}}
pipeline:
  shutdown_delay: 0s
  export_workers: 1
  batch: {{max_items: 5000, timeout: 20ms}}
exporters:
  - {{type: file, path: "{}", max_file_bytes: 10737418240}}
admin: {{endpoint: "{{admin}}"}}
log: {{level: warn}}
"#,
            out.display()
        ),
    )
}

/// The weir under test: a disk queue at `queue`, exporting to `sink_port`;
/// `pipeline_extra` is more of the `pipeline` block.
fn source(dir: &Path, queue: &Path, sink_port: u16, pipeline_extra: &str) -> Proc {
    Proc::new(
        dir,
        "source",
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
    max_bytes: 8388608
    disk: {{path: "{}", segment_bytes: 1048576, max_bytes: 1073741824}}
{pipeline_extra}
exporters:
  - type: otlphttp
    endpoint: "http://127.0.0.1:{sink_port}"
    compression: none
    timeout: 2s
    retry: {{initial_interval: 50ms, max_interval: 300ms, max_elapsed: 3s}}
admin: {{endpoint: "{{admin}}"}}
log: {{level: info}}
"#,
            queue.display()
        ),
    )
}

/// A request of `n` spans named `<id>-<i>`, about `pad` bytes of attribute each.
fn request(id: u64, n: usize, pad: usize) -> Vec<u8> {
    let mut req = traces(&format!("r{id}"), n, 1);
    for (i, span) in req.resource_spans[0].scope_spans[0].spans.iter_mut().enumerate() {
        span.name = format!("{id}-{i}");
        if pad > 0 {
            span.attributes.push(kv("pad", &"x".repeat(pad)));
        }
    }
    req.encode_to_vec()
}

/// The sink's export requests so far: whole lines only (the sink may be writing the
/// last one while the test reads).
fn sink_lines(out: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(out.join("traces.jsonl")).unwrap_or_default();
    let whole = text.rfind('\n').map_or("", |i| &text[..i]);
    whole.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line in the sink's output: {e}"))).collect()
}

/// Span names in the sink's output, with how often each arrived. Line by line: a release
/// build under `scripts/crash-test.sh` writes gigabytes, too much to hold parsed at once.
fn sink_spans(out: &Path) -> HashMap<String, u32> {
    use std::io::BufRead;
    let mut seen = HashMap::new();
    let Ok(file) = std::fs::File::open(out.join("traces.jsonl")) else { return seen };
    for line in std::io::BufReader::new(file).lines() {
        let Ok(line) = line else { break };
        // A line still being written has no end yet: it is read on the next pass.
        let Ok(value) = serde_json::from_str::<serde_json::Value>(&line) else { break };
        for s in items_of(std::slice::from_ref(&value), "traces") {
            if let Some(name) = s.get("name").and_then(|n| n.as_str()) {
                *seen.entry(name.to_string()).or_insert(0) += 1;
            }
        }
    }
    seen
}

/// Waits (up to `secs`) until every span of `acked` (request ids of `n` spans) is in the
/// sink's output; returns the names missing at the end and the duplicates.
async fn wait_delivered(out: &Path, acked: &HashSet<u64>, n: usize, secs: u64) -> (Vec<String>, u64) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let seen = sink_spans(out);
        let missing: Vec<String> =
            acked.iter().flat_map(|id| (0..n).map(move |i| format!("{id}-{i}"))).filter(|name| !seen.contains_key(name)).collect();
        let dups = seen.values().map(|&c| u64::from(c.saturating_sub(1))).sum();
        if missing.is_empty() || Instant::now() > deadline {
            return (missing, dups);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Posts a request; `Some(status)` when an answer came.
async fn post(client: &reqwest::Client, url: &str, body: Vec<u8>) -> Option<reqwest::Response> {
    client.post(format!("{url}/v1/traces")).header("content-type", "application/x-protobuf").body(body).send().await.ok()
}

/// Clients in a closed loop against `url()` until `stop`; the ids answered 200 land in
/// `acked`.
fn clients(
    n: usize,
    url: Arc<Mutex<String>>,
    spans: usize,
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<HashSet<u64>>>,
    next: Arc<AtomicU64>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..n)
        .map(|_| {
            let (url, stop, acked, next) = (url.clone(), stop.clone(), acked.clone(), next.clone());
            tokio::spawn(async move {
                let client = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
                while !stop.load(Ordering::Relaxed) {
                    let id = next.fetch_add(1, Ordering::Relaxed);
                    let u = url.lock().unwrap().clone();
                    match post(&client, &u, request(id, spans, 0)).await {
                        Some(r) if r.status() == 200 => {
                            acked.lock().unwrap().insert(id);
                        }
                        _ => tokio::time::sleep(Duration::from_millis(20)).await,
                    }
                }
            })
        })
        .collect()
}

/// `kill -9` at random moments, with the sink up and with it down: every span of every
/// acknowledged request reaches the sink. `CRASH_ITERATIONS` (default 4) sets how many
/// kills; `scripts/crash-test.sh` runs many.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_at_random_moments_loses_nothing_acknowledged() {
    let iterations: usize = std::env::var("CRASH_ITERATIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(4);
    let work = tempfile::tempdir().unwrap();
    let (queue, out) = (work.path().join("queue"), work.path().join("out"));
    let mut sink = sink(work.path(), &out);
    sink.start().await;
    let mut weir = source(work.path(), &queue, sink.http, "");
    weir.start().await;

    const SPANS: usize = 20;
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(HashSet::new()));
    let next = Arc::new(AtomicU64::new(0));
    let url = Arc::new(Mutex::new(weir.url()));
    let tasks = clients(4, url, SPANS, stop.clone(), acked.clone(), next.clone());
    let mut kills_with_sink_down = 0;
    for i in 0..iterations {
        let wait = rand::random_range(200..1200);
        tokio::time::sleep(Duration::from_millis(wait)).await;
        let sink_down = i % 2 == 1;
        if sink_down {
            sink.stop().await;
            tokio::time::sleep(Duration::from_millis(rand::random_range(100..600))).await;
            kills_with_sink_down += 1;
        }
        weir.kill9();
        tokio::time::sleep(Duration::from_millis(100)).await;
        weir.start().await;
        if sink_down {
            tokio::time::sleep(Duration::from_millis(300)).await;
            sink.start().await;
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    let acked = acked.lock().unwrap().clone();
    let sent = next.load(Ordering::Relaxed);
    let (missing, dups) = wait_delivered(&out, &acked, SPANS, 60).await;
    let replayed = metric_value(&weir.admin(), "weir_queue_replayed_items_total").await.unwrap_or(0.0);
    eprintln!(
        "{iterations} kills ({kills_with_sink_down} with the sink down): {} of {sent} requests acknowledged, {} spans missing, {dups} spans delivered twice, {replayed} items replayed by the last run",
        acked.len(),
        missing.len()
    );
    assert!(acked.len() > 50, "too few requests acknowledged to mean anything: {}\n{}", acked.len(), weir.log_text());
    assert!(
        missing.is_empty(),
        "{} acknowledged spans lost, e.g. {:?}\n{}",
        missing.len(),
        &missing[..missing.len().min(5)],
        weir.log_text()
    );
    weir.stop().await;
    sink.stop().await;
}

/// Writes `n` requests into a queue whose exporter has nowhere to send, then stops weir
/// (the records stay on disk). Returns the acknowledged ids.
async fn fill_offline(work: &Path, queue: &Path, n: u64, spans: usize, pad: usize) -> Vec<u64> {
    // Port 9 (discard) on loopback: nothing listens, the exporter retries.
    let mut weir = source(work, queue, 9, "");
    weir.start().await;
    let client = reqwest::Client::new();
    let mut acked = Vec::new();
    for id in 0..n {
        if let Some(r) = post(&client, &weir.url(), request(id, spans, pad)).await {
            assert_eq!(r.status(), 200, "{}", r.text().await.unwrap_or_default());
            acked.push(id);
        }
    }
    weir.stop().await;
    acked
}

fn segments(queue: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> =
        std::fs::read_dir(queue).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "wq")).collect();
    v.sort();
    v
}

/// Offsets of the records in a segment file (walking the length fields).
fn record_offsets(path: &Path) -> Vec<usize> {
    let b = std::fs::read(path).unwrap();
    let mut at = 0;
    let mut v = Vec::new();
    while at + 12 <= b.len() {
        v.push(at);
        at += 12 + u32::from_le_bytes(b[at + 4..at + 8].try_into().unwrap()) as usize;
    }
    v
}

/// Flipped bytes inside a record, a torn tail, a deleted cursor, an empty and a garbage
/// segment file: weir starts, skips and counts the damaged records, and exports all the
/// others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damaged_files_are_skipped_counted_and_the_rest_exported() {
    let work = tempfile::tempdir().unwrap();
    let (queue, out) = (work.path().join("queue"), work.path().join("out"));
    const SPANS: usize = 10;
    let acked = fill_offline(work.path(), &queue, 40, SPANS, 0).await;
    assert_eq!(acked.len(), 40);
    let segs = segments(&queue);
    let last = segs.iter().rev().find(|p| std::fs::metadata(p).unwrap().len() > 0).expect("a segment with records").clone();
    let offsets = record_offsets(&last);
    assert!(offsets.len() >= 10, "{} records in {}", offsets.len(), last.display());
    let mut b = std::fs::read(&last).unwrap();
    // Record 3: flip bytes in its payload. The last record: cut in half (a torn tail).
    b[offsets[3] + 60] ^= 0x5a;
    b[offsets[3] + 61] ^= 0xa5;
    let tail = offsets[offsets.len() - 1];
    b.truncate(tail + (b.len() - tail) / 2);
    std::fs::write(&last, &b).unwrap();
    // A lost cursor, an empty segment, a garbage one (named between real ones: after the
    // last id, so a reader meets it), and a stray file.
    let _ = std::fs::remove_file(queue.join("cursors").join("otlphttp"));
    std::fs::write(queue.join(format!("{:020}.wq", 5_000_000)), b"").unwrap();
    std::fs::write(queue.join(format!("{:020}.wq", 5_000_001)), vec![0x57u8; 70_000]).unwrap();
    std::fs::write(queue.join("notes.txt"), b"not a segment").unwrap();

    let mut sink = sink(work.path(), &out);
    sink.start().await;
    let mut weir = source(work.path(), &queue, sink.http, "");
    weir.start().await;
    // Two requests lost their record (3 and the torn last one): every other one arrives.
    let damaged: HashSet<u64> = [3, 39].into();
    let expect: HashSet<u64> = acked.iter().copied().filter(|id| !damaged.contains(id)).collect();
    let (missing, _) = wait_delivered(&out, &expect, SPANS, 30).await;
    assert!(missing.is_empty(), "{} spans missing: {:?}\n{}", missing.len(), &missing[..missing.len().min(5)], weir.log_text());
    // New data after the damage is accepted and exported too.
    let client = reqwest::Client::new();
    let r = post(&client, &weir.url(), request(1000, SPANS, 0)).await.expect("answer");
    assert_eq!(r.status(), 200);
    let (missing, _) = wait_delivered(&out, &[1000].into(), SPANS, 30).await;
    assert!(missing.is_empty(), "{missing:?}");
    let corrupt = metric_value(&weir.admin(), "weir_queue_corrupt_records_total").await.unwrap_or(0.0);
    assert!(corrupt >= 2.0, "the flipped record and the garbage segment are counted: {corrupt}\n{}", weir.log_text());
    let log = weir.log_text();
    assert!(log.contains("torn tail cut off"), "{log}");
    assert!(log.contains("damaged record skipped"), "{log}");
    assert!(weir.alive());
    weir.stop().await;
    sink.stop().await;
}

/// The queue on a 4 MiB tmpfs: once full, requests are refused with 503 and Retry-After,
/// weir stays up and acknowledges nothing it could not write; when space is freed it
/// accepts again by itself, and everything acknowledged is exported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_with_503_and_recovers_by_itself() {
    let work = tempfile::tempdir().unwrap();
    let mnt = work.path().join("small");
    std::fs::create_dir_all(&mnt).unwrap();
    let ok = Command::new("mount").args(["-t", "tmpfs", "-o", "size=4m", "tmpfs"]).arg(&mnt).status().expect("mount runs");
    assert!(ok.success(), "mounting a tmpfs needs root (CI runs as root)");
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(mnt.clone());
    // 1 MiB of filler, removed later to make room.
    let filler = mnt.join("filler");
    std::fs::write(&filler, vec![1u8; 1 << 20]).unwrap();
    let (queue, out) = (mnt.join("queue"), work.path().join("out"));
    let mut weir = source(work.path(), &queue, 9, "");
    weir.start().await;
    let client = reqwest::Client::new();
    const SPANS: usize = 20;
    let mut acked = HashSet::new();
    let mut refused = None;
    for id in 0..2000u64 {
        let r = post(&client, &weir.url(), request(id, SPANS, 200)).await.expect("weir answers");
        match r.status().as_u16() {
            200 => {
                acked.insert(id);
            }
            503 => {
                let retry = r.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_string);
                let text = r.text().await.unwrap_or_default();
                refused = Some((retry, text));
                break;
            }
            s => panic!("status {s}: {}", r.text().await.unwrap_or_default()),
        }
    }
    let (retry, text) = refused.expect("the 4 MiB filesystem fills");
    assert!(retry.is_some(), "503 without Retry-After");
    assert!(!acked.is_empty());
    let errors = metric_value(&weir.admin(), "weir_queue_write_errors_total{kind=\"no_space\"}").await.unwrap_or(0.0);
    assert!(errors >= 1.0, "no_space counted: {errors}; body {text:?}");
    // Still refusing, still up.
    for id in 5000..5005u64 {
        let r = post(&client, &weir.url(), request(id, SPANS, 200)).await.expect("weir answers");
        assert_eq!(r.status(), 503);
    }
    assert!(weir.alive());
    // Space returns: accepted again without a restart.
    std::fs::remove_file(&filler).unwrap();
    let r = post(&client, &weir.url(), request(9000, SPANS, 200)).await.expect("weir answers");
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap_or_default());
    acked.insert(9000);
    weir.stop().await;
    // Everything acknowledged is exported once a sink is there.
    let mut sink = sink(work.path(), &out);
    sink.start().await;
    let mut weir = source(work.path(), &queue, sink.http, "");
    weir.start().await;
    let (missing, _) = wait_delivered(&out, &acked, SPANS, 60).await;
    assert!(missing.is_empty(), "{} acknowledged spans missing after the disk was full\n{}", missing.len(), weir.log_text());
    weir.stop().await;
    sink.stop().await;
}

/// The sink is down for a minute (`OUTAGE_SECS`) under steady load: the backlog builds on
/// disk, weir's RSS stays bounded, and when the sink returns the backlog drains in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_builds_a_backlog_on_disk_that_drains_in_order() {
    let outage: u64 = std::env::var("OUTAGE_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(60);
    let work = tempfile::tempdir().unwrap();
    let (queue, out) = (work.path().join("queue"), work.path().join("out"));
    let mut sink = sink(work.path(), &out);
    sink.start().await;
    // One export at a time, so the sink's file shows the order of delivery.
    let mut weir = source(work.path(), &queue, sink.http, "  export_workers: 1");
    weir.start().await;
    sink.stop().await;
    // Steady load: one client, 50 spans per request (about 100 KB), 20 requests a second.
    const SPANS: usize = 50;
    let client = reqwest::Client::new();
    let started = Instant::now();
    let mut acked = Vec::new();
    let mut peak_rss = 0;
    let mut id = 0u64;
    while started.elapsed() < Duration::from_secs(outage) {
        let r = post(&client, &weir.url(), request(id, SPANS, 2000)).await.expect("weir answers");
        assert_eq!(r.status(), 200, "refused during the outage: {}", r.text().await.unwrap_or_default());
        acked.push(id);
        id += 1;
        peak_rss = peak_rss.max(weir.rss_kb());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let backlog = metric_value(&weir.admin(), "weir_queue_disk_bytes").await.unwrap_or(0.0);
    let lag = metric_value(&weir.admin(), "weir_queue_exporter_lag_records").await.unwrap_or(0.0);
    sink.start().await;
    let probe = post(&client, &sink.url(), request(u64::MAX, 1, 0)).await.map(|r| r.status().as_u16());
    let ss = Command::new("ss").args(["-ltnp"]).output().map(|o| String::from_utf8_lossy(&o.stdout).to_string()).unwrap_or_default();
    assert_eq!(probe, Some(200), "the sink at {} does not answer after its restart; listening:\n{ss}", sink.url());
    let t = Instant::now();
    let set: HashSet<u64> = acked.iter().copied().collect();
    let mut drain_rss = 0;
    // The sink's own count says when everything may be there (parsing its JSON files
    // over and over would be slow); then the files are checked once.
    let want = (acked.len() * SPANS) as f64;
    while t.elapsed() < Duration::from_secs(120) {
        drain_rss = drain_rss.max(weir.rss_kb());
        if metric_value(&sink.admin(), "weir_items_exported_total").await.unwrap_or(0.0) >= want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let drained = t.elapsed();
    let (missing, dups) = wait_delivered(&out, &set, SPANS, 10).await;
    eprintln!(
        "outage {outage} s: {} requests ({} spans) acknowledged, backlog {:.1} MiB on disk, {lag} records behind; peak RSS {} MiB during the outage, {} MiB draining; drained in {:.1} s; {dups} duplicates",
        acked.len(),
        acked.len() * SPANS,
        backlog / 1048576.0,
        peak_rss / 1024,
        drain_rss / 1024,
        drained.as_secs_f64()
    );
    assert!(
        missing.is_empty(),
        "{} spans missing after the outage\nsource:\n{}\nsink:\n{}",
        missing.len(),
        tail(&weir.log_text()),
        tail(&sink.log_text())
    );
    assert!(backlog > 1_000_000.0, "the backlog was on disk: {backlog} bytes");
    // In order: the sink's output lists the requests in the order they were accepted.
    let mut order = Vec::new();
    for s in items_of(&sink_lines(&out), "traces") {
        if let Some(req) = s.get("name").and_then(|n| n.as_str()).and_then(|n| n.split('-').next()?.parse::<u64>().ok()) {
            if req != u64::MAX && order.last() != Some(&req) {
                order.push(req);
            }
        }
    }
    assert!(order.windows(2).all(|w| w[0] < w[1]), "requests arrived out of order: {:?}", &order[..order.len().min(20)]);
    // Reading the backlog back is bounded by the in-memory budget (8 MiB here), not by
    // the backlog (over 100 MiB): draining adds at most that budget and the batches'
    // encoding to what weir used during the outage.
    assert!(
        drain_rss < peak_rss + 48 * 1024,
        "RSS {} MiB while draining a {:.0} MiB backlog, {} MiB before",
        drain_rss / 1024,
        backlog / 1048576.0,
        peak_rss / 1024
    );
    weir.stop().await;
    sink.stop().await;
}
