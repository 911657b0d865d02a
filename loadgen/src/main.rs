//! loadgen: replays warmup / burst / bigpayload phases against weir (seed 002, 0x07 b/c)
//! and reports what happened per phase.
//!
//! Closed loop (default, like the seed): `-c` workers each send as soon as the previous
//! answer came. That loop has two flaws when the server refuses fast: a cheap 429 lets a
//! worker send again at once, so the offered load rises exactly when the server sheds, and
//! the latency of a request that had to wait for a free worker is never counted
//! (coordinated omission). Open loop (`-rate N`) sends on a fixed schedule whatever the
//! answers, and measures latency from the scheduled time.

mod args;
mod report;
mod scrape;
mod stats;

use anyhow::{Context, Result};
use args::Args;
use http::uri::PathAndQuery;
use prost::Message;
use stats::{Outcome, PhaseResult, PhaseStats, Second};
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The OTLP/gRPC trace export method.
const TRACES_PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

/// One phase's shape: concurrency, spans per request, attribute bytes per span.
struct Phase {
    name: &'static str,
    concurrency: usize,
    spans: usize,
    attr_bytes: usize,
}

/// Pre-encoded request variants (encoding and compression are done once, not per request).
struct Bodies {
    http: Vec<bytes::Bytes>,
    /// Protobuf messages, sent as they are over gRPC: encoding a 512-span message per
    /// request took most of loadgen's own core and left weir idle half the time.
    grpc: Vec<bytes::Bytes>,
}

fn bodies(a: &Args, p: &Phase) -> Result<Bodies> {
    let mut http = Vec::new();
    let mut grpc = Vec::new();
    for seed in 0..8u64 {
        // Four attributes share the phase's attribute bytes.
        let req = weir::otlp::synth::traces_request(p.spans, 4, (p.attr_bytes / 4).max(1), seed * 7919 + p.spans as u64);
        let raw = if a.encoding == "json" {
            weir::otlp::json::encode(&weir::signal::Payload::Traces(req.clone())).into_bytes()
        } else {
            req.encode_to_vec()
        };
        let body = if a.gzip {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(&raw)?;
            e.finish()?
        } else {
            raw
        };
        http.push(bytes::Bytes::from(body));
        grpc.push(bytes::Bytes::from(req.encode_to_vec()));
    }
    Ok(Bodies { http, grpc })
}

#[derive(Clone)]
enum Client {
    Http(reqwest::Client),
    Grpc(tonic::client::Grpc<tonic::transport::Channel>),
}

/// Sends one request: its outcome and the server's retry delay, if it gave one.
async fn send(a: &Args, client: &Client, bodies: &Bodies, i: usize) -> (Outcome, Option<Duration>) {
    match client {
        Client::Http(c) => {
            let ct = if a.encoding == "json" { "application/json" } else { "application/x-protobuf" };
            let mut req = c.post(&a.url).header("content-type", ct).body(bodies.http[i % bodies.http.len()].clone());
            if a.gzip {
                req = req.header("content-encoding", "gzip");
            }
            if let Some(t) = &a.token {
                req = req.header("x-bk-token", t);
            }
            match req.send().await {
                Ok(r) => {
                    let status = r.status().as_u16();
                    let retry = r
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.parse::<u64>().ok())
                        .map(Duration::from_secs);
                    let _ = r.bytes().await;
                    let o = match status {
                        200 => Outcome::Ok,
                        429 => Outcome::TooMany,
                        503 => Outcome::Unavailable,
                        _ => Outcome::Other,
                    };
                    (o, retry)
                }
                Err(_) => (Outcome::Transport, None),
            }
        }
        Client::Grpc(c) => {
            let mut c = c.clone();
            let mut req = tonic::Request::new(bodies.grpc[i % bodies.grpc.len()].clone());
            req.set_timeout(a.timeout);
            if let Some(t) = &a.token {
                if let Ok(v) = t.parse() {
                    req.metadata_mut().insert("x-bk-token", v);
                }
            }
            let sent = match c.ready().await {
                Ok(()) => c.unary(req, PathAndQuery::from_static(TRACES_PATH), weir::otlp::codec::BytesCodec).await.map(|_| ()),
                Err(e) => Err(tonic::Status::unavailable(format!("transport: {e}"))),
            };
            match sent {
                Ok(_) => (Outcome::Ok, None),
                Err(s) => {
                    let retry = weir::exporter::retry_delay_of(&s);
                    let o = match s.code() {
                        tonic::Code::ResourceExhausted => Outcome::TooMany,
                        tonic::Code::Unavailable if s.message().contains("transport") || s.message().contains("connect") => {
                            Outcome::Transport
                        }
                        tonic::Code::Unavailable => Outcome::Unavailable,
                        tonic::Code::DeadlineExceeded | tonic::Code::Unknown | tonic::Code::Cancelled => Outcome::Transport,
                        _ => Outcome::Other,
                    };
                    (o, retry)
                }
            }
        }
    }
}

async fn client(a: &Args) -> Result<Client> {
    if a.protocol == "grpc" {
        let mut ep = tonic::transport::Endpoint::from_shared(a.url.clone())?.timeout(a.timeout).connect_timeout(Duration::from_secs(5));
        ep = ep.tcp_nodelay(true);
        let ch = ep.connect_lazy();
        let mut c = tonic::client::Grpc::new(ch).max_decoding_message_size(64 << 20);
        if a.gzip {
            c = c.send_compressed(tonic::codec::CompressionEncoding::Gzip);
        }
        Ok(Client::Grpc(c))
    } else {
        let mut b = reqwest::Client::builder().timeout(a.timeout).pool_max_idle_per_host(a.concurrency * 2);
        if a.http2 {
            b = b.http2_prior_knowledge();
        }
        Ok(Client::Http(b.build()?))
    }
}

/// A fraction in [0, 1) from a counter (splitmix64): deterministic, no shared state.
fn jitter(i: usize) -> f64 {
    let mut z = (i as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
}

async fn run_phase(
    a: Arc<Args>,
    p: &Phase,
    shared: Option<&Client>,
    stop: Arc<AtomicBool>,
    run_start: Instant,
) -> Result<(PhaseResult, Vec<Second>)> {
    let bodies = Arc::new(bodies(&a, p)?);
    let client = match shared {
        Some(c) => c.clone(),
        None => client(&a).await?,
    };
    let start = Instant::now();
    let deadline = start + a.phase_duration;
    let stats = Arc::new(PhaseStats::new(p.name, p.spans as u64, run_start.elapsed().as_secs()));
    let issued = Arc::new(AtomicU64::new(0));
    let budget = if a.max_requests == 0 { u64::MAX } else { a.max_requests };
    let mut tasks = Vec::new();
    if a.rate > 0.0 {
        // Open loop: one request per tick of the schedule, each in its own task; in-flight
        // is bounded (10 × c) so a dead server cannot make us grow without bound, and a
        // tick that finds the bound full is counted as a transport error at its scheduled time.
        let interval = Duration::from_secs_f64(1.0 / a.rate);
        let limit = Arc::new(tokio::sync::Semaphore::new(p.concurrency * 10));
        let mut n = 0u64;
        loop {
            let scheduled = start + interval.mul_f64(n as f64);
            if scheduled >= deadline || stop.load(Ordering::Relaxed) || n >= budget {
                break;
            }
            tokio::time::sleep_until(scheduled.into()).await;
            let i = n as usize;
            n += 1;
            let Ok(permit) = Arc::clone(&limit).try_acquire_owned() else {
                stats.record(run_start.elapsed().as_secs(), Outcome::Transport, Duration::ZERO);
                continue;
            };
            let (a, client, bodies, stats) = (Arc::clone(&a), client.clone(), Arc::clone(&bodies), Arc::clone(&stats));
            tasks.push(tokio::spawn(async move {
                let (outcome, _) = send(&a, &client, &bodies, i).await;
                stats.record(run_start.elapsed().as_secs(), outcome, scheduled.elapsed());
                drop(permit);
            }));
        }
    } else {
        for w in 0..p.concurrency {
            let (a, client, bodies, stats, stop, issued) =
                (Arc::clone(&a), client.clone(), Arc::clone(&bodies), Arc::clone(&stats), Arc::clone(&stop), Arc::clone(&issued));
            tasks.push(tokio::spawn(async move {
                let mut i = w;
                while Instant::now() < deadline && !stop.load(Ordering::Relaxed) && issued.fetch_add(1, Ordering::Relaxed) < budget {
                    let t0 = Instant::now();
                    // A request still unanswered when the phase ends is cancelled and not
                    // counted: the phase is measured over its own length, not stretched
                    // by answers that come later (a held refusal, a stalled server).
                    // With -keep-connections it is let finish instead (its connection
                    // stays for the next phase) and not counted either.
                    let (outcome, retry) = if a.keep_connections {
                        let r = send(&a, &client, &bodies, i).await;
                        if Instant::now() >= deadline {
                            break;
                        }
                        r
                    } else {
                        let Ok(r) = tokio::time::timeout_at(deadline.into(), send(&a, &client, &bodies, i)).await else {
                            break;
                        };
                        r
                    };
                    stats.record(run_start.elapsed().as_secs(), outcome, t0.elapsed());
                    i += 1;
                    if let (true, Some(d)) = (a.respect_retry_after, retry) {
                        // Up to half again as long, as exporters jitter their retries: a
                        // whole-second Retry-After honoured to the millisecond by every
                        // worker would bring them all back at once.
                        let d = d.mul_f64(1.0 + 0.5 * jitter(i));
                        let wake = (Instant::now() + d).min(deadline);
                        tokio::time::sleep_until(wake.into()).await;
                    }
                }
            }));
        }
    }
    // Closed loop with -keep-connections: requests unanswered at the deadline may finish
    // (bounded by the request timeout) after the phase, whose length stays what was measured.
    let late = a.keep_connections && a.rate == 0.0;
    let join_by = if late { deadline + a.timeout } else { deadline };
    for t in tasks {
        let abort = t.abort_handle();
        if tokio::time::timeout_at(join_by.into(), t).await.is_err() {
            abort.abort();
        }
    }
    let elapsed = if late { start.elapsed().min(a.phase_duration) } else { start.elapsed() };
    Ok(stats.finish(p.concurrency, elapsed))
}

#[tokio::main]
async fn main() -> Result<()> {
    let a = match Args::parse(std::env::args().skip(1)) {
        Ok(a) => Arc::new(a),
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = Arc::clone(&stop);
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("interrupted: finishing and printing what we have");
                stop.store(true, Ordering::Relaxed);
            }
        });
    }
    let run_start = Instant::now();
    let samples = Arc::new(std::sync::Mutex::new(Vec::new()));
    let scraper = a.metrics_url.clone().map(|url| {
        let (samples, stop) = (Arc::clone(&samples), Arc::clone(&stop));
        tokio::spawn(async move {
            let c = reqwest::Client::builder().timeout(Duration::from_secs(2)).build().unwrap_or_default();
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                if let Ok(r) = c.get(&url).send().await {
                    if let Ok(text) = r.text().await {
                        let s = scrape::parse(run_start.elapsed().as_secs_f64(), &text);
                        samples.lock().unwrap_or_else(|e| e.into_inner()).push(s);
                    }
                }
            }
        })
    });
    let c = a.concurrency;
    let all = [
        Phase { name: "warmup", concurrency: (c / 5).max(1), spans: a.warmup_spans, attr_bytes: 128 },
        Phase { name: "burst", concurrency: c, spans: a.burst_spans, attr_bytes: 1024 },
        Phase { name: "bigpayload", concurrency: c, spans: a.bigpayload_spans, attr_bytes: 4096 },
    ];
    let mut results = Vec::new();
    let mut seconds = Vec::new();
    let shared = if a.keep_connections { Some(client(&a).await?) } else { None };
    for p in all.iter().filter(|p| a.phases.iter().any(|n| n == p.name)) {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let (r, s) = run_phase(Arc::clone(&a), p, shared.as_ref(), Arc::clone(&stop), run_start)
            .await
            .with_context(|| format!("phase {}", p.name))?;
        r.print();
        results.push(r);
        seconds.extend(s);
    }
    stop.store(true, Ordering::Relaxed);
    if let Some(s) = scraper {
        s.abort();
    }
    let samples = samples.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if let Some(path) = &a.json {
        let doc = serde_json::json!({ "args": &*a, "phases": results, "seconds": seconds, "metrics": samples });
        std::fs::write(path, serde_json::to_vec_pretty(&doc)?).with_context(|| format!("writing {path}"))?;
    }
    if let Some(path) = &a.report {
        let title = format!(
            "loadgen: {} {} c={} {}",
            a.protocol,
            a.encoding,
            a.concurrency,
            if a.rate > 0.0 { format!("open loop {}/s", a.rate) } else { "closed loop".into() }
        );
        report::draw(path, &title, &seconds, &samples)?;
    }
    Ok(())
}
