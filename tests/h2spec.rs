//! h2spec (the HTTP/2 conformance suite, `../shared/tools/h2spec`), strict mode, ten runs
//! in a row on both ports of a running weir. Every case passes, except "3.5 #2: Sends
//! invalid connection preface" on the OTLP/HTTP port, which also serves HTTP/1.1 (bytes
//! that are not the HTTP/2 preface are an HTTP/1.1 request there; the gRPC port answers
//! them with GOAWAY PROTOCOL_ERROR).

mod support;

use std::path::PathBuf;
use support::*;

fn h2spec() -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/tools/h2spec");
    assert!(path.exists(), "h2spec is missing at {} (see ../shared/tools/README.md)", path.display());
    path
}

/// Runs h2spec once; returns the failed cases' lines and the summary line.
fn run(port: u16, path: &str) -> (Vec<String>, String) {
    let out = std::process::Command::new(h2spec())
        .args(["--strict", "-h", "127.0.0.1", "-p", &port.to_string(), "-P", path, "-o", "3"])
        .output()
        .expect("h2spec runs");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let failures = text.split("Failures:").nth(1).unwrap_or("");
    let failed: Vec<String> = failures.lines().filter(|l| l.contains('×')).map(|l| l.trim().to_string()).collect();
    let summary = text.lines().find(|l| l.contains(" tests, ")).unwrap_or_else(|| panic!("no h2spec summary:\n{text}")).to_string();
    (failed, summary)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2spec_strict_passes_ten_times_on_both_ports() {
    // The shipped configuration's middlewares, on loopback ports.
    let w = start_yaml(
        r#"
receiver:
  http_server:
    endpoint: "127.0.0.1:0"
    middlewares: ["logging", "cors;allowedOrigins=*", "content_decompressor", "throttle", "maxconns;maxConnectionsRatio=256"]
  grpc_server:
    endpoint: "127.0.0.1:0"
    middlewares: ["logging", "content_decompressor", "throttle", "maxconns;maxConnectionsRatio=256"]
exporters: [{type: blackhole}]
admin: {endpoint: "127.0.0.1:0"}
"#,
    )
    .await;
    let http = w.app.http_addr.unwrap().port();
    let grpc = w.app.grpc_addr.unwrap().port();
    let result = tokio::task::spawn_blocking(move || {
        for i in 1..=10 {
            let (failed, summary) = run(http, "/v1/traces");
            assert!(
                failed.iter().all(|f| f.starts_with("× 2: Sends invalid connection preface")) && summary.contains("146 passed"),
                "OTLP/HTTP port, run {i}: {summary}\n{failed:#?}"
            );
            let (failed, summary) = run(grpc, "/opentelemetry.proto.collector.trace.v1.TraceService/Export");
            assert!(failed.is_empty() && summary.contains("147 passed"), "OTLP/gRPC port, run {i}: {summary}\n{failed:#?}");
        }
    })
    .await;
    if let Err(e) = result {
        std::panic::resume_unwind(e.into_panic());
    }
    w.app.shutdown().await;
}
