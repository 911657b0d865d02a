//! h2spec (the HTTP/2 conformance suite), strict mode, ten runs in a row on both ports of
//! a running weir. h2spec is found through `H2SPEC` (a path; CI sets it and a missing file
//! there fails the test) or on `PATH`; where neither has it, the test says so on its
//! output and passes without running, since no package registry serves h2spec. Every case passes, except "3.5 #2: Sends
//! invalid connection preface" on the OTLP/HTTP port, which also serves HTTP/1.1 (bytes
//! that are not the HTTP/2 preface are an HTTP/1.1 request there; the gRPC port answers
//! them with GOAWAY PROTOCOL_ERROR).

mod support;

use std::path::PathBuf;
use support::*;

/// h2spec from `H2SPEC` (required to exist when set) or `PATH`.
fn h2spec() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("H2SPEC").filter(|p| !p.is_empty()) {
        let path = PathBuf::from(p);
        assert!(path.is_file(), "H2SPEC is set but {} is not a file", path.display());
        return Some(path);
    }
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| PathBuf::from(d).join("h2spec")).find(|p| p.is_file())
}

/// Runs h2spec once; returns the failed cases' lines and the summary line.
fn run(h2spec: &std::path::Path, port: u16, path: &str) -> (Vec<String>, String) {
    let out = std::process::Command::new(h2spec)
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
    let Some(h2spec) = h2spec() else {
        println!("h2spec NOT RUN: no h2spec on PATH and H2SPEC unset (CI sets H2SPEC; see README, Testing)");
        eprintln!("h2spec NOT RUN: no h2spec on PATH and H2SPEC unset (CI sets H2SPEC; see README, Testing)");
        return;
    };
    // The shipped configuration's middlewares, on loopback ports.
    let w = start_yaml(
        r#"
receiver:
  http_server:
    endpoint: "127.0.0.1:0"
    middlewares: ["logging", "cors;allowedOrigins=*", "content_decompressor", "throttle", "maxconns"]
  grpc_server:
    endpoint: "127.0.0.1:0"
    middlewares: ["logging", "content_decompressor", "throttle", "maxconns"]
exporters: [{type: blackhole}]
admin: {endpoint: "127.0.0.1:0"}
"#,
    )
    .await;
    let http = w.app.http_addr.unwrap().port();
    let grpc = w.app.grpc_addr.unwrap().port();
    let result = tokio::task::spawn_blocking(move || {
        for i in 1..=10 {
            let (failed, summary) = run(&h2spec, http, "/v1/traces");
            assert!(
                failed.iter().all(|f| f.starts_with("× 2: Sends invalid connection preface")) && summary.contains("146 passed"),
                "OTLP/HTTP port, run {i}: {summary}\n{failed:#?}"
            );
            let (failed, summary) = run(&h2spec, grpc, "/opentelemetry.proto.collector.trace.v1.TraceService/Export");
            assert!(failed.is_empty() && summary.contains("147 passed"), "OTLP/gRPC port, run {i}: {summary}\n{failed:#?}");
        }
    })
    .await;
    if let Err(e) = result {
        std::panic::resume_unwind(e.into_panic());
    }
    w.app.shutdown().await;
}
