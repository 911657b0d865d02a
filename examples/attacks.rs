//! The attack benchmark: weir in a real 1-CPU / 300 MiB cgroup with the shipped
//! middlewares, one attack at a time, and beside it a legitimate client that sends 20
//! OTLP/HTTP requests a second, each on a new connection. One markdown row per attack:
//! weir's CPU (cores, averaged over the attack), its peak RSS, the legitimate client's
//! success rate and P99, the log weir wrote, OOM kills.
//!
//! `cargo run --release --example attacks -- --weir target/release/weir [--secs 10]
//! [--label after] [--attacks ping-then-silent,idle-tcp,...]` (root: it makes cgroups).
//! `scripts/bench-attacks.sh` runs it for this tree and for an older commit.

#[path = "../tests/support/attack.rs"]
mod attack;
#[path = "../tests/support/cgroup.rs"]
#[allow(dead_code)]
mod cgroup;

use attack::*;
use prost::Message;
use std::io::{ErrorKind, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const ALL: &[&str] = &[
    "ping-then-silent",
    "idle-tcp",
    "preface-only",
    "slowloris",
    "big-bodies",
    "big-bodies-chunked",
    "gzip-bombs",
    "bad-requests",
    "reset-flood",
];

/// The shipped configuration's receivers, a blackhole exporter.
const YAML: &str = r#"
receiver:
  http_server:
    endpoint: "127.0.0.1:{http}"
    middlewares: ["logging", "cors;allowedOrigins=*", "content_decompressor", "throttle", "maxconns;maxConnectionsRatio=256"]
  grpc_server:
    endpoint: "127.0.0.1:{grpc}"
    middlewares: ["logging", "content_decompressor", "throttle", "maxconns;maxConnectionsRatio=256"]
exporters: [{type: blackhole}]
admin: {endpoint: "127.0.0.1:{admin}"}
"#;

struct Args {
    weir: PathBuf,
    secs: u64,
    label: String,
    attacks: Vec<String>,
}

fn args() -> Args {
    let mut a = Args { weir: PathBuf::from("target/release/weir"), secs: 10, label: "this tree".into(), attacks: Vec::new() };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let v = it.next().unwrap_or_else(|| panic!("{k} needs a value"));
        match k.as_str() {
            "--weir" => a.weir = PathBuf::from(v),
            "--secs" => a.secs = v.parse().expect("--secs N"),
            "--label" => a.label = v,
            "--attacks" => a.attacks = v.split(',').map(str::to_string).collect(),
            other => panic!("unknown flag {other} (--weir, --secs, --label, --attacks)"),
        }
    }
    if a.attacks.is_empty() {
        a.attacks = ALL.iter().map(|s| s.to_string()).collect();
    }
    a
}

/// As many file descriptors as the hard limit allows, for this process and weir.
fn raise_nofile() {
    // SAFETY: getrlimit/setrlimit with a valid rlimit struct.
    unsafe {
        let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 {
            r.rlim_cur = r.rlim_max.min(1 << 20);
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = args();
    raise_nofile();
    assert!(args.weir.exists(), "no weir binary at {}", args.weir.display());
    println!("| weir | attack | weir CPU (cores) | peak RSS (MiB) | legitimate requests served | legitimate P99 (ms) | log written (KiB) | OOM kills |");
    println!("|---|---|---|---|---|---|---|---|");
    for name in &args.attacks {
        let row = run(&args, name).await;
        println!("{row}");
        std::io::stdout().flush().unwrap();
    }
}

async fn run(args: &Args, name: &str) -> String {
    let cg = cgroup::TestCgroup::create(&format!("weir-attack-{name}"), 1.0, 300 << 20);
    let dir = tempfile::tempdir().unwrap();
    let (h, g, a) = (free_port(), free_port(), free_port());
    let cfg = dir.path().join("weir.yaml");
    std::fs::write(&cfg, YAML.replace("{http}", &h.to_string()).replace("{grpc}", &g.to_string()).replace("{admin}", &a.to_string()))
        .unwrap();
    let log = dir.path().join("weir.log");
    let mut child = cg.spawn(&args.weir, &["--config", cfg.to_str().unwrap()], &log);
    let ready = Instant::now();
    while !reqwest::get(format!("http://127.0.0.1:{a}/readyz")).await.is_ok_and(|r| r.status() == 200) {
        assert!(ready.elapsed() < Duration::from_secs(20), "weir did not start:\n{}", std::fs::read_to_string(&log).unwrap_or_default());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pid = child.id();
    let http = format!("127.0.0.1:{h}");
    let stop = Arc::new(AtomicBool::new(false));
    let log_before = std::fs::metadata(&log).map_or(0, |m| m.len());
    let cpu_before = process_cpu(pid);
    let started = Instant::now();
    let attack = start_attack(name, &http, &stop);
    // The attack takes hold for a moment before the legitimate client starts.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let legit = tokio::spawn(legitimate(http.clone(), Arc::clone(&stop)));
    tokio::time::sleep(Duration::from_secs(args.secs)).await;
    stop.store(true, Ordering::Relaxed);
    let alive = child.try_wait().unwrap().is_none();
    let cpu = if alive { process_cpu(pid).saturating_sub(cpu_before) } else { Duration::ZERO };
    let peak = if alive { peak_rss(pid) } else { 0 };
    let elapsed = started.elapsed();
    let (ok, total, p99) = legit.await.unwrap();
    for t in attack {
        let _ = t.await;
    }
    let log_after = std::fs::metadata(&log).map_or(0, |m| m.len());
    let oom = cg.oom_kills();
    let _ = child.kill();
    let _ = child.wait();
    drop(cg);
    format!(
        "| {} | {name} | {:.2} | {} | {ok}/{total} ({:.0}%) | {} | {} | {oom}{} |",
        args.label,
        cpu.as_secs_f64() / elapsed.as_secs_f64(),
        peak >> 20,
        100.0 * ok as f64 / total.max(1) as f64,
        p99.as_millis(),
        log_after.saturating_sub(log_before) >> 10,
        if alive { "" } else { " (weir died)" },
    )
}

/// 20 requests a second, each on a new connection, 5 s each at most, until `stop`:
/// (served, sent, P99 of all, failures counted at their full wait).
async fn legitimate(http: String, stop: Arc<AtomicBool>) -> (usize, usize, Duration) {
    let body = weir::otlp::synth::traces_request(50, 10, 16, 1).encode_to_vec();
    let client = reqwest::Client::builder().pool_max_idle_per_host(0).timeout(Duration::from_secs(5)).build().unwrap();
    let mut tasks = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        let (client, url, body) = (client.clone(), format!("http://{http}/v1/traces"), body.clone());
        tasks.push(tokio::spawn(async move {
            let t = Instant::now();
            let r = client.post(url).header("content-type", "application/x-protobuf").body(body).send().await;
            (r.is_ok_and(|r| r.status() == 200), t.elapsed())
        }));
    }
    let mut ok = 0;
    let mut times = Vec::new();
    for t in tasks {
        let (served, took) = t.await.unwrap();
        ok += usize::from(served);
        times.push(took);
    }
    times.sort();
    let p99 = times.get((times.len() * 99 / 100).min(times.len().saturating_sub(1))).copied().unwrap_or_default();
    (ok, times.len(), p99)
}

/// Starts the named attack; its tasks end once `stop` is set.
fn start_attack(name: &str, http: &str, stop: &Arc<AtomicBool>) -> Vec<tokio::task::JoinHandle<()>> {
    let (http, stop) = (http.to_string(), Arc::clone(stop));
    let blocking = |f: Box<dyn FnOnce() + Send>| vec![tokio::task::spawn_blocking(f)];
    match name {
        // One h2c connection floods PINGs for 2 s without reading the ACKs, then stays.
        "ping-then-silent" => blocking(Box::new(move || {
            let mut s = TcpStream::connect(&http).unwrap();
            s.write_all(&h2_preface()).unwrap();
            s.set_nonblocking(true).unwrap();
            let pings: Vec<u8> = (0..1000u64).flat_map(|i| frame(0x6, 0, 0, &i.to_be_bytes())).collect();
            let (mut sent, until) = (0usize, Instant::now() + Duration::from_secs(2));
            while Instant::now() < until {
                match s.write(&pings[sent % pings.len()..]) {
                    Ok(n) => sent += n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(5)),
                    Err(_) => break,
                }
            }
            hold(&stop);
        })),
        // 640 TCP connections that never send a byte.
        "idle-tcp" => blocking(Box::new(move || {
            let _c = open_conns(&http, 640, b"");
            hold(&stop);
        })),
        // 5000 h2c connections that send the preface and SETTINGS, then nothing.
        "preface-only" => blocking(Box::new(move || {
            let _c = open_conns(&http, 5000, &h2_preface());
            hold(&stop);
        })),
        // 1000 connections sending a request head one byte a second, reconnecting.
        "slowloris" => blocking(Box::new(move || {
            let head = b"POST /v1/traces HTTP/1.1\r\nHost: weir\r\nContent-Type: application/x-protobuf\r\nX-Pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n";
            let mut conns: Vec<(Option<TcpStream>, usize)> = open_conns(&http, 1000, b"P").into_iter().map(|s| (Some(s), 1)).collect();
            conns.resize_with(1000, || (None, 0));
            while !stop.load(Ordering::Relaxed) {
                // Closed ones come back, a few per round (a connect may wait a second
                // on a full backlog).
                let mut reconnects = 0;
                for (s, at) in conns.iter_mut() {
                    let i = *at % head.len();
                    if s.as_mut().is_none_or(|s| s.write_all(&head[i..i + 1]).is_err()) {
                        *s = None;
                        *at = 0;
                        if reconnects < 20 && !stop.load(Ordering::Relaxed) {
                            reconnects += 1;
                            *s = open_conns(&http, 1, b"P").pop();
                        }
                    }
                    *at += 1;
                }
                sleep_unless(&stop, Duration::from_secs(1));
            }
        })),
        // 20 h2c connections of 10 streams, each declaring 60 MiB (or, chunked, declaring
        // nothing) and pushing 3 MiB.
        "big-bodies" | "big-bodies-chunked" => {
            let declared = name == "big-bodies";
            (0..20)
                .map(|_| {
                    let (http, stop) = (http.clone(), Arc::clone(&stop));
                    tokio::spawn(async move {
                        while !stop.load(Ordering::Relaxed) {
                            let _ = big_bodies_connection(&http, &stop, declared).await;
                        }
                    })
                })
                .collect()
        }
        // Four clients posting 60 MiB of zeros in 61 KB of gzip, over and over.
        "gzip-bombs" => {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
            gz.write_all(&vec![0u8; 60 << 20]).unwrap();
            let bomb = bytes::Bytes::from(gz.finish().unwrap());
            posting_loops(4, &http, &stop, bomb, Some("gzip"))
        }
        // Eight clients posting bodies that are not protobuf, over and over.
        "bad-requests" => posting_loops(8, &http, &stop, bytes::Bytes::from_static(b"\xff\xff\xff"), None),
        // MadeYouReset: bursts of streams that weir must reset, reconnecting.
        "reset-flood" => blocking(Box::new(move || {
            let head = hpack_post("/v1/traces", &[("content-type", "application/x-protobuf"), ("content-length", "5")]);
            while !stop.load(Ordering::Relaxed) {
                let Ok(mut s) = TcpStream::connect(&http) else { continue };
                if s.write_all(&h2_preface()).is_err() {
                    continue;
                }
                let _ = s.set_read_timeout(Some(Duration::from_millis(1)));
                let mut id = 1u32;
                let mut sink = [0u8; 65536];
                while !stop.load(Ordering::Relaxed) && id < (1 << 30) {
                    let burst: Vec<u8> = (0..100).flat_map(|i| frame(0x1, 0x5, id + 2 * i, &head)).collect();
                    id += 200;
                    if s.write_all(&burst).is_err() {
                        break;
                    }
                    let _ = std::io::Read::read(&mut s, &mut sink);
                }
            }
        })),
        other => panic!("unknown attack {other} (known: {})", ALL.join(", ")),
    }
}

fn hold(stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn sleep_unless(stop: &AtomicBool, d: Duration) {
    let until = Instant::now() + d;
    while Instant::now() < until && !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn posting_loops(
    n: usize,
    http: &str,
    stop: &Arc<AtomicBool>,
    body: bytes::Bytes,
    encoding: Option<&'static str>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..n)
        .map(|_| {
            let (url, stop, body) = (format!("http://{http}/v1/traces"), Arc::clone(stop), body.clone());
            tokio::spawn(async move {
                let client = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
                while !stop.load(Ordering::Relaxed) {
                    let mut r = client.post(&url).header("content-type", "application/x-protobuf").body(body.clone());
                    if let Some(e) = encoding {
                        r = r.header("content-encoding", e);
                    }
                    if r.send().await.is_err() {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            })
        })
        .collect()
}

/// One connection of the big-bodies attack, until `stop` or the connection fails.
async fn big_bodies_connection(http: &str, stop: &Arc<AtomicBool>, declared: bool) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let tcp = tokio::net::TcpStream::connect(http).await?;
    let (h2, conn) = h2::client::Builder::new().max_send_buffer_size(4 << 20).handshake::<_, bytes::Bytes>(tcp).await?;
    tokio::spawn(conn);
    let mut streams = tokio::task::JoinSet::new();
    while !stop.load(Ordering::Relaxed) {
        while streams.len() < 10 {
            let mut h2 = h2.clone().ready().await?;
            let mut req = http::Request::post(format!("http://{http}/v1/traces")).header("content-type", "application/x-protobuf");
            if declared {
                req = req.header("content-length", (60u64 << 20).to_string());
            }
            let req = req.body(())?;
            let (resp, mut body) = h2.send_request(req, false)?;
            let stop = Arc::clone(stop);
            streams.spawn(async move {
                let chunk = bytes::Bytes::from(vec![0x0a; 16 << 10]);
                let push = async {
                    let mut sent = 0usize;
                    while sent < 3 << 20 && !stop.load(Ordering::Relaxed) {
                        body.reserve_capacity(chunk.len());
                        match std::future::poll_fn(|cx| body.poll_capacity(cx)).await {
                            Some(Ok(n)) if n > 0 => {
                                let n = n.min(chunk.len());
                                if body.send_data(chunk.slice(..n), false).is_err() {
                                    break;
                                }
                                sent += n;
                            }
                            _ => break,
                        }
                    }
                    // Holds the stream open, its body unfinished, until weir answers.
                    std::future::pending::<()>().await
                };
                tokio::select! {
                    _ = resp => {}
                    _ = push => {}
                    _ = tokio::time::sleep(Duration::from_secs(5)) => {}
                }
            });
        }
        streams.join_next().await;
    }
    Ok(())
}
