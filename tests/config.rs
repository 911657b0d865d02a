//! Config loading and validation: defaults, unknown keys, every rule, env overrides,
//! and the binary's `--check` / exit 64 behaviour.

use std::process::Command;
use weir::config::Config;

fn err(yaml: &str) -> String {
    Config::from_yaml(yaml).expect_err("must be rejected").to_string()
}

#[test]
fn defaults_fill_in() {
    let c = Config::from_yaml("exporters: [{type: blackhole}]").unwrap();
    assert_eq!(c.receiver.http_server.endpoint, "0.0.0.0:4318");
    assert_eq!(c.receiver.grpc_server.endpoint, "0.0.0.0:4317");
    assert_eq!(c.admin.endpoint, "0.0.0.0:8888");
    assert_eq!(c.receiver.http_server.max_request_body_bytes, 64 << 20);
    assert_eq!(c.receiver.grpc_server.max_recv_msg_size_bytes, 64 << 20);
    assert_eq!(c.pipeline.queue.max_bytes, 64 << 20);
}

#[test]
fn every_rule_names_its_key() {
    let cases = [
        ("exporters: [{type: blackhole}]\nreceiver: {http_server: {endpoit: x}}", "receiver.http_server.endpoit"),
        ("exporters: [{type: blackhole}]\nbogus: 1", "bogus"),
        ("exporters: [{type: blackhole}]\nreceiver: {http_server: {endpoint: nope}}", "receiver.http_server.endpoint"),
        ("exporters: [{type: blackhole}]\nreceiver: {grpc_server: {endpoint: \"host:99999\"}}", "receiver.grpc_server.endpoint"),
        (
            "exporters: [{type: blackhole}]\nreceiver: {http_server: {middlewares: [gzipper]}}",
            "receiver.http_server.middlewares[0]: unknown middleware `gzipper`",
        ),
        (
            "exporters: [{type: blackhole}]\nreceiver: {grpc_server: {middlewares: [cors]}}",
            "receiver.grpc_server.middlewares[0]: `cors` applies to the HTTP server only",
        ),
        ("exporters: [{type: blackhole}]\nreceiver: {http_server: {middlewares: [\"maxconns\"]}}", "exactly one of maxConnections"),
        ("exporters: [{type: blackhole}]\nreceiver: {http_server: {middlewares: [\"maxconns;maxConnections=0\"]}}", "maxConnections `0`"),
        ("exporters: [{type: blackhole}]\nreceiver: {http_server: {middlewares: [\"maxbytes;maxRequestBytes=x\"]}}", "maxRequestBytes"),
        ("exporters: [{type: blackhole}]\nreceiver: {http_server: {middlewares: [\"logging;level=3\"]}}", "unknown option `level`"),
        (
            "exporters: [{type: blackhole}]\nreceiver: {http_server: {max_request_body_bytes: 0}}",
            "receiver.http_server.max_request_body_bytes",
        ),
        (
            "exporters: [{type: blackhole}]\nreceiver: {http_server: {tls: {cert_file: /nonexistent.pem, key_file: /nonexistent.key}}}",
            "receiver.http_server.tls.cert_file",
        ),
        ("exporters: [{type: blackhole}]\nreceiver: {auth: {tokens: [\"\"]}}", "receiver.auth.tokens[0]"),
        ("exporters: [{type: blackhole}]\npipeline: {queue: {max_bytes: 0}}", "pipeline.queue.max_bytes"),
        ("exporters: [{type: blackhole}]\npipeline: {batch: {max_items: 0}}", "pipeline.batch.max_items"),
        ("exporters: [{type: blackhole}]\npipeline: {batch: {timeout: soon}}", "pipeline.batch.timeout"),
        ("exporters: []", "exporters: at least one exporter"),
        ("exporters: [{type: kafka}]", "kafka"),
        ("exporters: [{type: otlp, endpoint: \"localhost:4317\"}]", "exporters[0].endpoint"),
        ("exporters: [{type: otlp, endpoint: \"http://x:1\", compression: brotli}]", "exporters[0].compression"),
        ("exporters: [{type: otlphttp, endpoint: \"http://x:1\", retry: {initial_interval: 2s, max_interval: 1s}}]", "exporters[0].retry"),
        ("exporters: [{type: debug, verbosity: loud}]", "exporters[0].verbosity"),
        ("exporters: [{type: file, path: /tmp/x, colour: red}]", "colour"),
        ("exporters: [{type: blackhole}]\nlog: {format: xml}", "log.format"),
    ];
    for (yaml, want) in cases {
        let e = err(yaml);
        assert!(e.contains(want), "for {yaml:?}: got `{e}`, want it to mention `{want}`");
    }
}

#[test]
fn shipped_config_is_valid_and_check_prints_effective_config() {
    let out = Command::new(env!("CARGO_BIN_EXE_weir")).args(["--config", "config/weir.yaml", "--check"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let effective: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    assert_eq!(effective["receiver"]["grpc_server"]["endpoint"].as_str(), Some("0.0.0.0:4317"));
    assert_eq!(effective["exporters"][0]["type"].as_str(), Some("file"));
    assert_eq!(effective["pipeline"]["batch"]["max_items"].as_u64(), Some(8192), "defaults are filled in");
}

#[test]
fn env_overrides_the_file_and_bad_config_exits_64() {
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["--config", "config/weir.yaml", "--check"])
        .env("WEIR_RECEIVER__HTTP_SERVER__ENDPOINT", "127.0.0.1:9999")
        .env("WEIR_PIPELINE__QUEUE__MAX_BYTES", "1234")
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("endpoint: 127.0.0.1:9999"), "{text}");
    assert!(text.contains("max_bytes: 1234"), "{text}");

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "receiver:\n  http_server:\n    middlewares: [\"throttle;x\"]\nexporters: [{type: blackhole}]\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_weir")).args(["--config", bad.to_str().unwrap(), "--check"]).output().unwrap();
    assert_eq!(out.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("receiver.http_server.middlewares[0]"), "{stderr}");

    let out = Command::new(env!("CARGO_BIN_EXE_weir")).args(["--config", "/nonexistent/weir.yaml"]).output().unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not exist"));
}
