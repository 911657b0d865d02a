//! Shared test helpers: start a real weir on loopback ports, build OTLP requests, read
//! the file exporter's output back.
#![allow(dead_code)]

pub mod attack;
pub mod cgroup;
pub mod gen;
pub mod pki;
pub mod process;
pub mod throttle_fixture;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point, Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics};
use opentelemetry_proto::tonic::profiles::v1development::{Profile, ProfilesDictionary, ResourceProfiles, Sample, ScopeProfiles};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use std::path::{Path, PathBuf};
use weir::app::RunningApp;
use weir::config::Config;

/// A running weir and the temp dir its file exporter writes to.
pub struct Weir {
    pub app: RunningApp,
    pub dir: tempfile::TempDir,
}

impl Weir {
    pub fn http(&self) -> String {
        format!("http://{}", self.app.http_addr.expect("http enabled"))
    }
    pub fn grpc(&self) -> String {
        format!("http://{}", self.app.grpc_addr.expect("grpc enabled"))
    }
    pub fn admin(&self) -> String {
        format!("http://{}", self.app.admin_addr)
    }
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }
}

/// The YAML head every test config shares: loopback port 0 everywhere.
pub fn base_yaml(dir: &Path, extra_receiver: &str) -> String {
    format!(
        r#"
receiver:
  http_server:
    endpoint: "127.0.0.1:0"
    middlewares: ["logging", "content_decompressor"]
  grpc_server:
    endpoint: "127.0.0.1:0"
    middlewares: ["logging", "content_decompressor"]
{extra_receiver}
pipeline:
  batch:
    max_items: 100000
    timeout: 20ms
exporters:
  - type: file
    path: "{}"
admin:
  endpoint: "127.0.0.1:0"
"#,
        dir.join("data").display()
    )
}

/// Starts weir from YAML in which `{dir}` is replaced by a fresh temp dir.
pub async fn start_yaml(yaml: &str) -> Weir {
    let dir = tempfile::tempdir().expect("tempdir");
    let yaml = yaml.replace("{dir}", &dir.path().display().to_string());
    let config = Config::from_yaml(&yaml).unwrap_or_else(|e| panic!("config: {e}\n{yaml}"));
    let app = weir::app::start(config).await.expect("weir starts");
    Weir { app, dir }
}

/// Starts weir with the base config.
pub async fn start_default() -> Weir {
    start_yaml(&base_yaml(Path::new("{dir}"), "")).await
}

/// Reads every line of `<signal>.jsonl`, each a JSON export request.
pub fn read_lines(dir: &Path, signal: &str) -> Vec<serde_json::Value> {
    let path = dir.join(format!("{signal}.jsonl"));
    let Ok(text) = std::fs::read_to_string(&path) else { return Vec::new() };
    text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line in {}: {e}: {l}", path.display()))).collect()
}

/// Waits (bounded) until the file for `signal` holds `n` items, and returns the items.
pub async fn wait_items(dir: &Path, signal: &str, n: usize) -> Vec<serde_json::Value> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let items = items_of(&read_lines(dir, signal), signal);
        if items.len() >= n || std::time::Instant::now() > deadline {
            return items;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Flattens export requests into their items (spans, data points' metrics, log records, profiles).
pub fn items_of(lines: &[serde_json::Value], signal: &str) -> Vec<serde_json::Value> {
    let (res, scope, item) = match signal {
        "traces" => ("resourceSpans", "scopeSpans", "spans"),
        "metrics" => ("resourceMetrics", "scopeMetrics", "metrics"),
        "logs" => ("resourceLogs", "scopeLogs", "logRecords"),
        _ => ("resourceProfiles", "scopeProfiles", "profiles"),
    };
    let mut out = Vec::new();
    for l in lines {
        for r in l[res].as_array().into_iter().flatten() {
            for s in r[scope].as_array().into_iter().flatten() {
                out.extend(s[item].as_array().into_iter().flatten().cloned());
            }
        }
    }
    out
}

pub fn kv(key: &str, v: &str) -> KeyValue {
    KeyValue { key: key.into(), value: Some(AnyValue { value: Some(any_value::Value::StringValue(v.into())) }), ..Default::default() }
}

fn resource() -> Option<Resource> {
    Some(Resource { attributes: vec![kv("service.name", "weir-test")], ..Default::default() })
}

fn scope() -> Option<InstrumentationScope> {
    Some(InstrumentationScope { name: "weir-tests".into(), version: "1".into(), ..Default::default() })
}

/// `n` spans named `span-<tag>-<i>`, trace id bytes = i, each with `attrs` attributes.
pub fn traces(tag: &str, n: usize, attrs: usize) -> ExportTraceServiceRequest {
    let spans = (0..n)
        .map(|i| Span {
            trace_id: (0..16).map(|b| (b as u8) ^ (i as u8)).collect(),
            span_id: (0..8).map(|b| (b as u8).wrapping_add(1).wrapping_add(i as u8)).collect(),
            name: format!("span-{tag}-{i}"),
            kind: 2,
            start_time_unix_nano: 1_700_000_000_000_000_000 + i as u64,
            end_time_unix_nano: 1_700_000_000_000_001_000 + i as u64,
            attributes: (0..attrs).map(|a| kv(&format!("attr.{a}"), &format!("value-{i}-{a}"))).collect(),
            ..Default::default()
        })
        .collect();
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: resource(),
            scope_spans: vec![ScopeSpans { scope: scope(), spans, schema_url: String::new() }],
            schema_url: String::new(),
        }],
    }
}

pub fn metrics(tag: &str, n: usize) -> ExportMetricsServiceRequest {
    let metrics = (0..n)
        .map(|i| Metric {
            name: format!("metric-{tag}-{i}"),
            unit: "1".into(),
            data: Some(metric::Data::Gauge(Gauge {
                data_points: vec![NumberDataPoint {
                    time_unix_nano: 1_700_000_000_000_000_000,
                    value: Some(number_data_point::Value::AsInt(i as i64)),
                    attributes: vec![kv("i", &i.to_string())],
                    ..Default::default()
                }],
            })),
            ..Default::default()
        })
        .collect();
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: resource(),
            scope_metrics: vec![ScopeMetrics { scope: scope(), metrics, schema_url: String::new() }],
            schema_url: String::new(),
        }],
    }
}

pub fn logs(tag: &str, n: usize) -> ExportLogsServiceRequest {
    let records = (0..n)
        .map(|i| LogRecord {
            time_unix_nano: 1_700_000_000_000_000_000 + i as u64,
            severity_number: 9,
            severity_text: "INFO".into(),
            body: Some(AnyValue { value: Some(any_value::Value::StringValue(format!("log-{tag}-{i}"))) }),
            ..Default::default()
        })
        .collect();
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: resource(),
            scope_logs: vec![ScopeLogs { scope: scope(), log_records: records, schema_url: String::new() }],
            schema_url: String::new(),
        }],
    }
}

pub fn profiles(n: usize) -> ExportProfilesServiceRequest {
    let profiles = (0..n)
        .map(|i| Profile {
            profile_id: vec![i as u8 + 1; 16],
            time_unix_nano: 1_700_000_000_000_000_000,
            samples: vec![Sample { stack_index: 0, values: vec![10 + i as i64], ..Default::default() }],
            ..Default::default()
        })
        .collect();
    ExportProfilesServiceRequest {
        resource_profiles: vec![ResourceProfiles {
            resource: resource(),
            scope_profiles: vec![ScopeProfiles { scope: scope(), profiles, schema_url: String::new() }],
            schema_url: String::new(),
        }],
        dictionary: Some(ProfilesDictionary { string_table: vec![String::new(), "cpu".into()], ..Default::default() }),
    }
}

pub fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

/// Scrapes /metrics and returns the value of the first sample line starting with `prefix`.
pub async fn metric_value(admin: &str, prefix: &str) -> Option<f64> {
    let text = reqwest::get(format!("{admin}/metrics")).await.ok()?.text().await.ok()?;
    text.lines().filter(|l| l.starts_with(prefix)).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).reduce(|a, b| a + b)
}

/// A free loopback port (bound then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Runs `start` on three ports from [`free_port`] (HTTP, gRPC, admin). `free_port` frees
/// a port before weir binds it, and a test running alongside can take it in between, so
/// a start that fails only with "Address already in use" is tried again on new ports (up
/// to 5 times); any other failure panics with what `start` said.
pub async fn on_free_ports<T, F: std::future::Future<Output = Result<T, String>>>(mut start: impl FnMut([u16; 3]) -> F) -> T {
    for attempt in 1.. {
        match start([free_port(), free_port(), free_port()]).await {
            Ok(t) => return t,
            Err(e) if attempt < 5 && e.contains("Address already in use") => continue,
            Err(e) => panic!("{e}"),
        }
    }
    unreachable!()
}

/// A weir process (the real binary) with its ports; killed on drop.
pub struct WeirProcess {
    pub child: std::process::Child,
    pub http: String,
    pub grpc: String,
    pub admin: String,
    pub log: PathBuf,
    pub _dir: tempfile::TempDir,
}

impl Drop for WeirProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl WeirProcess {
    /// Polls `/debug/throttle` (bounded).
    pub async fn debug(&self) -> serde_json::Value {
        match reqwest::get(format!("{}/debug/throttle", self.admin)).await {
            Ok(r) => r.json().await.unwrap_or(serde_json::Value::Null),
            Err(_) => serde_json::Value::Null,
        }
    }

    /// Waits until /readyz answers, panicking with the log after `secs`.
    pub async fn wait_ready(&mut self, secs: u64) {
        if let Err(e) = self.try_ready(secs).await {
            panic!("{e}");
        }
    }

    /// Waits until /readyz answers; the error says why not, with the log.
    pub async fn try_ready(&mut self, secs: u64) -> Result<(), String> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        loop {
            if let Ok(r) = reqwest::get(format!("{}/readyz", self.admin)).await {
                if r.status() == 200 {
                    return Ok(());
                }
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("weir exited early ({status}):\n{}", std::fs::read_to_string(&self.log).unwrap_or_default()));
            }
            if std::time::Instant::now() >= deadline {
                return Err(format!("weir not ready:\n{}", std::fs::read_to_string(&self.log).unwrap_or_default()));
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
}

/// [`spawn_weir_in`] on free ports ([`on_free_ports`]), then waits until ready.
pub async fn start_weir_in(cg: &cgroup::TestCgroup, yaml: &str, secs: u64) -> WeirProcess {
    on_free_ports(|ports| async move {
        let mut weir = spawn_weir_in(cg, yaml, ports);
        weir.try_ready(secs).await.map(|()| weir)
    })
    .await
}

/// Writes `yaml` (with `{http}`, `{grpc}`, `{admin}`, `{dir}` filled in) and starts the
/// weir binary inside `cg`, listening on `[h, g, a]`.
pub fn spawn_weir_in(cg: &cgroup::TestCgroup, yaml: &str, ports: [u16; 3]) -> WeirProcess {
    spawn_weir_with(yaml, ports, |cfg, log| cg.spawn(Path::new(env!("CARGO_BIN_EXE_weir")), &["--config", cfg], log))
}

/// The weir binary in the test's own cgroup (no limit of its own), optionally pinned to
/// one CPU with `taskset`, on free ports; waits until ready.
pub async fn start_weir_plain(yaml: &str, secs: u64, pin_cpu: Option<usize>) -> WeirProcess {
    on_free_ports(|ports| async move {
        let mut weir = spawn_weir_with(yaml, ports, |cfg, log| {
            let weir = env!("CARGO_BIN_EXE_weir");
            let mut cmd = match pin_cpu {
                Some(cpu) => {
                    let mut c = std::process::Command::new("taskset");
                    c.args(["-c", &cpu.to_string(), weir]);
                    c
                }
                None => std::process::Command::new(weir),
            };
            let out = std::fs::File::create(log).unwrap();
            cmd.args(["--config", cfg])
                .stdout(out.try_clone().unwrap())
                .stderr(out)
                .stdin(std::process::Stdio::null())
                .spawn()
                .expect("weir (and taskset, from util-linux) start")
        });
        weir.try_ready(secs).await.map(|()| weir)
    })
    .await
}

fn spawn_weir_with(yaml: &str, [h, g, a]: [u16; 3], spawn: impl FnOnce(&str, &Path) -> std::process::Child) -> WeirProcess {
    let dir = tempfile::tempdir().unwrap();
    let yaml = yaml
        .replace("{http}", &format!("127.0.0.1:{h}"))
        .replace("{grpc}", &format!("127.0.0.1:{g}"))
        .replace("{admin}", &format!("127.0.0.1:{a}"))
        .replace("{dir}", &dir.path().display().to_string());
    let cfg = dir.path().join("weir.yaml");
    std::fs::write(&cfg, yaml).unwrap();
    let log = dir.path().join("weir.log");
    let child = spawn(cfg.to_str().unwrap(), &log);
    WeirProcess {
        child,
        http: format!("http://127.0.0.1:{h}"),
        grpc: format!("http://127.0.0.1:{g}"),
        admin: format!("http://127.0.0.1:{a}"),
        log,
        _dir: dir,
    }
}

/// Writes one HTTP/1.1 POST on `s` and reads the response: (status, Connection header,
/// body), or `None` when the connection is gone.
pub async fn exchange(s: &mut tokio::net::TcpStream, token: &str, body: &[u8]) -> Option<(u16, Option<String>, Vec<u8>)> {
    let head = format!(
        "POST /v1/traces HTTP/1.1\r\nhost: weir\r\ncontent-type: application/x-protobuf\r\nx-bk-token: {token}\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    exchange_raw(s, &head, body).await
}

/// Sends `head` and `body` as they are; (status, Connection header, body) of the answer.
pub async fn exchange_raw(s: &mut tokio::net::TcpStream, head: &str, body: &[u8]) -> Option<(u16, Option<String>, Vec<u8>)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // The body may be cut off by a refusal; what matters is whether a response follows.
    let _ = s.write_all(head.as_bytes()).await;
    let _ = s.write_all(body).await;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let status = head.split_whitespace().nth(1)?.parse().ok()?;
            let header = |name: &str| head.lines().find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_string()));
            let len: usize = header("content-length:")?.parse().ok()?;
            while buf.len() < end + 4 + len {
                let n = s.read(&mut chunk).await.ok()?;
                if n == 0 {
                    return None;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            return Some((status, header("connection:"), buf[end + 4..end + 4 + len].to_vec()));
        }
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Takes an in-flight slot of the weir at `http_addr` with an HTTP/1.1 request of `body`
/// that sends its head and one byte of the body, and waits until weir has admitted it.
/// Writing the returned rest on the returned connection completes it and frees the slot.
pub async fn take_a_slot(http_addr: std::net::SocketAddr, body: &[u8]) -> (tokio::net::TcpStream, Vec<u8>) {
    use tokio::io::AsyncWriteExt;
    let mut conn = tokio::net::TcpStream::connect(http_addr).await.unwrap();
    let head =
        format!("POST /v1/traces HTTP/1.1\r\nhost: weir\r\ncontent-type: application/x-protobuf\r\ncontent-length: {}\r\n\r\n", body.len());
    conn.write_all(head.as_bytes()).await.unwrap();
    conn.write_all(&body[..1]).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    (conn, body[1..].to_vec())
}
