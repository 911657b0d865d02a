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
    assert_eq!((c.receiver.http_server.http2_stream_window_bytes, c.receiver.grpc_server.http2_stream_window_bytes), (1 << 20, 1 << 20));
    assert_eq!(c.pipeline.queue.max_bytes, 0, "from the memory limit");
    let t = &c.receiver.throttle;
    assert!(t.enabled);
    assert_eq!(t.sample_interval, std::time::Duration::from_millis(250));
    assert_eq!((t.signal.cpu_slow_beta, t.signal.cpu_fast_beta, t.signal.fallback_cores), (0.95, 0.7, 0.0));
    assert_eq!((t.thresholds.cpu.enter, t.thresholds.cpu.exit, t.thresholds.cpu.hard, t.thresholds.cpu.breach_n), (0.80, 0.70, 0.90, 3));
    assert_eq!((t.thresholds.mem.enter, t.thresholds.mem.exit, t.thresholds.mem.hard, t.thresholds.mem.breach_n), (0.85, 0.78, 0.92, 1));
    assert_eq!((t.hold.max, t.hold.return_ratio, t.hold.max_held), (std::time::Duration::from_secs(5), 0.1, 1024));
    assert_eq!(t.hold.deadline_share, 0.8);
    assert_eq!(t.hold.deadline_return_ratio, Some(0.05), "held gRPC clients, which state their deadline, come back at 5%");
    use weir::config::auto::Auto;
    assert_eq!(t.max_inflight_per_core, Auto::Auto, "the adaptive limit");
    assert_eq!((t.max_inflight_wait, t.inflight_wait_min_body_bytes, t.queue_delay.target), (Auto::Auto, Auto::Auto, Auto::Auto));
    assert_eq!(t.max_inflight_queue_per_core, 1.0);
    let maxconns = |m: &Vec<String>| m.iter().any(|x| x == "maxconns");
    assert!(maxconns(&c.receiver.http_server.middlewares) && maxconns(&c.receiver.grpc_server.middlewares), "a connection cap from memory");
    assert_eq!(t.hold.max_held_bytes, 0, "automatic: bounded where the cgroup charges socket buffers");
}

#[test]
fn hold_return_ratio_may_go_below_the_default_down_to_a_hundredth() {
    let ratio =
        |r: &str| Config::from_yaml(&format!("exporters: [{{type: blackhole}}]\nreceiver: {{throttle: {{hold: {{return_ratio: {r}}}}}}}"));
    assert_eq!(ratio("0.05").unwrap().receiver.throttle.hold.return_ratio, 0.05);
    assert_eq!(ratio("0.01").unwrap().receiver.throttle.hold.return_ratio, 0.01);
    assert!(ratio("0.009").expect_err("below 0.01").to_string().contains("hold.return_ratio: must be in [0.01, 100]"));
    let stated = Config::from_yaml("exporters: [{type: blackhole}]\nreceiver: {throttle: {hold: {deadline_return_ratio: 0.05}}}").unwrap();
    assert_eq!((stated.receiver.throttle.hold.return_ratio, stated.receiver.throttle.hold.deadline_return_ratio), (0.1, Some(0.05)));
}

#[test]
fn partial_throttle_blocks_merge_over_defaults_and_rules_resolve_per_type() {
    let c = Config::from_yaml(
        "exporters: [{type: blackhole}]\nreceiver:\n  throttle:\n    thresholds: {cpu: {enter: 0.85, hard: 1.2}}\n    rules:\n      default: {drop_max: 0.2}\n      metrics: {enabled: false}\n      logs: {drop_min: 0.1}\n",
    )
    .unwrap();
    let t = &c.receiver.throttle;
    assert_eq!((t.thresholds.cpu.enter, t.thresholds.cpu.exit, t.thresholds.cpu.hard, t.thresholds.cpu.breach_n), (0.85, 0.70, 1.2, 3));
    use weir::signal::Signal;
    let traces = t.rules.resolve(Signal::Traces);
    assert_eq!((traces.enabled, traces.drop_min, traces.drop_max), (true, 0.0, 0.2));
    assert!(!t.rules.resolve(Signal::Metrics).enabled);
    let logs = t.rules.resolve(Signal::Logs);
    assert_eq!((logs.drop_min, logs.drop_max), (0.1, 0.2));
}

#[test]
fn every_rule_names_its_key() {
    let cases = [
        ("exporters: [{type: blackhole}]\nreceiver: {http_server: {endpoit: x}}", "receiver.http_server.endpoit"),
        ("exporters: [{type: blackhole}]\nbogus: 1", "bogus"),
        ("exporters: [{type: blackhole}]\nreceiver: {throttle: {queue_delay: {target: 0s}}}", "receiver.throttle.queue_delay.target"),
        ("exporters: [{type: blackhole}]\nreceiver: {http_server: {endpoint: nope}}", "receiver.http_server.endpoint"),
        (
            "exporters: [{type: blackhole}]\nreceiver: {grpc_server: {http2_stream_window_bytes: 16384}}",
            "receiver.grpc_server.http2_stream_window_bytes: must be between 65535 and 2147483647, got 16384",
        ),
        (
            "exporters: [{type: blackhole}]\nreceiver: {http_server: {http2_stream_window_bytes: 4294967295}}",
            "receiver.http_server.http2_stream_window_bytes",
        ),
        ("exporters: [{type: blackhole}]\nreceiver: {grpc_server: {endpoint: \"host:99999\"}}", "receiver.grpc_server.endpoint"),
        (
            "exporters: [{type: blackhole}]\nreceiver: {http_server: {middlewares: [gzipper]}}",
            "receiver.http_server.middlewares[0]: unknown middleware `gzipper`",
        ),
        (
            "exporters: [{type: blackhole}]\nreceiver: {grpc_server: {middlewares: [cors]}}",
            "receiver.grpc_server.middlewares[0]: `cors` applies to the HTTP server only",
        ),
        (
            "exporters: [{type: blackhole}]\nreceiver: {http_server: {middlewares: [\"maxconns;maxConnections=5;maxConnectionsRatio=2\"]}}",
            "at most one of maxConnections",
        ),
        ("exporters: [{type: blackhole}]\nreceiver: {throttle: {max_inflight_per_core: lots}}", "neither `auto` nor a number"),
        ("exporters: [{type: blackhole}]\nreceiver: {throttle: {max_inflight_wait: 20}}", "needs a unit"),
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
        (
            "exporters: [{type: blackhole}]\nreceiver: {auth: {quota_store: {type: memcached, url: \"redis://h:1\"}}}",
            "receiver.auth.quota_store.type: `memcached` is not a store weir knows",
        ),
        (
            "exporters: [{type: blackhole}]\nreceiver: {auth: {quota_store: {type: redis, url: \"rediss://h:1\", tls: {ca_file: /nonexistent/ca.pem}}}}",
            "receiver.auth.quota_store.tls.ca_file: /nonexistent/ca.pem is not a readable file",
        ),
        (
            "exporters: [{type: blackhole}]\nreceiver: {auth: {quota_store: {type: redis, url: \"redis://h:1\", tls: {}}}}",
            "use rediss:// for TLS",
        ),
        (
            "exporters: [{type: blackhole}]\nreceiver: {auth: {quota_store: {type: redis, url: \"http://h:1\"}}}",
            "must start with redis:// or rediss://",
        ),
        (
            "exporters: [{type: blackhole}]\nreceiver: {auth: {quota_store: {type: redis, url: \"redis://h:1\", sync_interval: 1ms}}}",
            "receiver.auth.quota_store.sync_interval",
        ),
        ("exporters: [{type: blackhole}]\nreceiver: {auth: {quota_store: {type: redis}}}", "url"),
        ("exporters: [{type: blackhole}]\npipeline: {batch: {max_items: 0}}", "pipeline.batch.max_items"),
        ("exporters: [{type: blackhole}]\npipeline: {batch: {timeout: soon}}", "pipeline.batch.timeout"),
        ("exporters: []", "exporters: at least one exporter"),
        ("exporters: [{type: pulsar}]", "pulsar"),
        ("exporters: [{type: otlp, endpoint: \"localhost:4317\"}]", "exporters[0].endpoint"),
        (
            "exporters: [{type: otlp, endpoint: \"http://x:1\", compression: brotli}]",
            "exporters[0].compression: `brotli` must be `gzip`, `zstd` or `none`",
        ),
        ("exporters: [{type: otlphttp, endpoint: \"http://x:1\", retry: {initial_interval: 2s, max_interval: 1s}}]", "exporters[0].retry"),
        ("exporters: [{type: debug, verbosity: loud}]", "exporters[0].verbosity"),
        ("exporters: [{type: file, path: /tmp/x, colour: red}]", "colour"),
        ("exporters: [{type: blackhole}]\nlog: {format: xml}", "log.format"),
        (
            "exporters: [{type: blackhole}]\nreceiver: {throttle: {thresholds: {cpu: {enter: 0.6, exit: 0.7}}}}",
            "receiver.throttle.thresholds.cpu: need 0 <= exit < enter < hard",
        ),
        ("exporters: [{type: blackhole}]\nreceiver: {throttle: {thresholds: {mem: {hard: 0.5}}}}", "receiver.throttle.thresholds.mem"),
        ("exporters: [{type: blackhole}]\nreceiver: {throttle: {pid: {setpoint: 3}}}", "receiver.throttle.pid.setpoint: must be in (0, 2]"),
        ("exporters: [{type: blackhole}]\nreceiver: {throttle: {pid: {ki: -1}}}", "receiver.throttle.pid.ki"),
        ("exporters: [{type: blackhole}]\nreceiver: {throttle: {pid: {min_rate: 10, max_rate: 5}}}", "receiver.throttle.pid.max_rate"),
        (
            "exporters: [{type: blackhole}]\nreceiver: {throttle: {thresholds: {cpu: {breach_n: 0}}}}",
            "receiver.throttle.thresholds.cpu.breach_n",
        ),
        ("exporters: [{type: blackhole}]\nreceiver: {throttle: {signal: {cpu_slow_beta: 1.0}}}", "receiver.throttle.signal.cpu_slow_beta"),
        ("exporters: [{type: blackhole}]\nreceiver: {throttle: {signal: {cpu_fast_beta: -0.1}}}", "receiver.throttle.signal.cpu_fast_beta"),
        ("exporters: [{type: blackhole}]\nreceiver: {throttle: {signal: {fallback_cores: -1}}}", "receiver.throttle.signal.fallback_cores"),
        ("exporters: [{type: blackhole}]\nreceiver: {throttle: {sample_interval: 1ms}}", "receiver.throttle.sample_interval"),
        (
            "exporters: [{type: blackhole}]\nreceiver: {throttle: {rules: {traces: {drop_max: 1.5}}}}",
            "receiver.throttle.rules.traces.drop_max",
        ),
        (
            "exporters: [{type: blackhole}]\nreceiver: {throttle: {rules: {logs: {drop_min: 0.6, drop_max: 0.5}}}}",
            "receiver.throttle.rules.logs: drop_min 0.6 > drop_max 0.5",
        ),
        ("exporters: [{type: blackhole}]\nreceiver: {throttle: {rules: {spans: {drop_max: 0.5}}}}", "spans"),
        ("exporters: [{type: blackhole}]\nreceiver: {throttle: {retry_after: {mode: soon}}}", "receiver.throttle.retry_after.mode"),
        ("exporters: [{type: blackhole}]\nreceiver: {throttle: {retry_after: {min: 10s, max: 5s}}}", "receiver.throttle.retry_after"),
        ("exporters: [{type: blackhole}]\nreceiver: {http_server: {middlewares: [\"throttle;mode=x\"]}}", "unknown option `mode`"),
        (
            "exporters: [{type: blackhole}]\nreceiver: {auth: {tenants: {t1: {tokens: [k1], rate: {requests_per_second: 0}}}}}",
            "receiver.auth.tenants.t1.rate",
        ),
        (
            "exporters: [{type: blackhole}]\nreceiver: {auth: {tenants: {t1: {tokens: [k1], rate: {requests_per_second: 5, burst: 0}}}}}",
            "receiver.auth.tenants.t1.rate",
        ),
        ("exporters: [{type: blackhole}]\npipeline: {queue: {critical_reserve: 1.0}}", "pipeline.queue.critical_reserve"),
        (
            "exporters: [{type: blackhole}]\nreceiver: {auth: {tenants: {t1: {tokens: [k1], items: {logs: 0.5}}}}}",
            "receiver.auth.tenants.t1.items.logs",
        ),
        ("exporters: [{type: blackhole}]\nreload: {watch: true}", "watch"),
        (
            "exporters: [{type: blackhole}]\nreceiver: {throttle: {hold: {return_ratio: 0}}}",
            "receiver.throttle.hold.return_ratio: must be in [0.01, 100]",
        ),
        ("exporters: [{type: blackhole}]\nreceiver: {throttle: {hold: {max: 2m}}}", "receiver.throttle.hold.max"),
        (
            "exporters: [{type: blackhole}]\nreceiver: {throttle: {hold: {deadline_return_ratio: 200}}}",
            "receiver.throttle.hold.deadline_return_ratio: must be in [0.01, 100]",
        ),
        (
            "exporters: [{type: blackhole}]\nreceiver: {throttle: {hold: {deadline_share: 1}}}",
            "receiver.throttle.hold.deadline_share: must be in [0, 0.95]",
        ),
        (
            "exporters: [{type: blackhole}]\nreceiver: {throttle: {max_inflight_queue_per_core: -1}}",
            "receiver.throttle.max_inflight_queue_per_core",
        ),
        (
            "exporters: [{type: blackhole}]\nreceiver: {grpc_server: {connections: {receive_buffer: 4096}}}",
            "receiver.grpc_server.connections.receive_buffer: must be 0 (the kernel's default) or between 65536",
        ),
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
fn check_redacts_tokens_and_the_quota_store_password() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("fleet.yaml");
    std::fs::write(
        &cfg,
        "receiver:\n  auth:\n    tenants: {acme: {tokens: [tok-s3cret], rate: {requests_per_second: 5, burst: 5}}}\n    \
         quota_store: {type: redis, url: \"redis://weir:pw-s3cret@redis:6379/1\"}\nexporters: [{type: blackhole}]\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_weir")).args(["--config", cfg.to_str().unwrap(), "--check"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(!text.contains("s3cret"), "{text}");
    assert!(text.contains("url: redis://<redacted>@redis:6379/1"), "{text}");
    assert!(text.contains("sync_interval: 200ms") && text.contains("key_prefix: 'weir:'"), "defaults shown: {text}");
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

/// Kubernetes gives every pod of a namespace with a Service named `weir` variables such as
/// `WEIR_PORT=tcp://10.96.0.12:4317`: weir starts, naming each one it ignores. A variable
/// that names a section but a wrong key is still an error naming the key.
#[test]
fn kubernetes_service_variables_are_ignored_with_a_warning() {
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["--config", "config/weir.yaml", "--check"])
        .env("WEIR_PORT", "tcp://10.96.0.12:4317")
        .env("WEIR_SERVICE_HOST", "10.96.0.12")
        .env("WEIR_PORT_4317_TCP_ADDR", "10.96.0.12")
        .env("WEIR_RECEIVER__HTTP_SERVER__ENDPOINT", "127.0.0.1:9999")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    for name in ["WEIR_PORT", "WEIR_SERVICE_HOST", "WEIR_PORT_4317_TCP_ADDR"] {
        assert!(stderr.contains(&format!("ignoring environment variable {name}:")), "{name} not named: {stderr}");
    }
    assert!(String::from_utf8_lossy(&out.stdout).contains("endpoint: 127.0.0.1:9999"), "known keys still apply");

    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["--config", "config/weir.yaml", "--check"])
        .env("WEIR_RECEIVER__HTTP_SERVER__ENDPIONT", "127.0.0.1:9999")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("endpiont"), "{}", String::from_utf8_lossy(&out.stderr));
}

/// `${env:NAME}` and `${env:NAME:-default}` in YAML values (the Collector's convention):
/// secrets and per-pod values from the environment, typed like the key; a missing
/// variable without a default is an error naming the key and the variable.
#[test]
fn env_references_in_yaml_values() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("weir.yaml");
    std::fs::write(
        &path,
        "receiver:\n  http_server:\n    endpoint: \"127.0.0.1:${env:TEST_HTTP_PORT}\"\n  grpc_server:\n    endpoint: \"${env:TEST_GRPC_ENDPOINT:-127.0.0.1:14317}\"\npipeline:\n  queue:\n    max_bytes: ${env:TEST_QUEUE_BYTES}\nexporters: [{type: blackhole}]\n",
    )
    .unwrap();
    let run = |vars: &[(&str, &str)]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_weir"));
        cmd.args(["--config", path.to_str().unwrap(), "--check"]);
        for (k, v) in vars {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    };
    let out = run(&[("TEST_HTTP_PORT", "9999"), ("TEST_QUEUE_BYTES", "1234")]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let effective: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    assert_eq!(effective["receiver"]["http_server"]["endpoint"].as_str(), Some("127.0.0.1:9999"));
    assert_eq!(effective["receiver"]["grpc_server"]["endpoint"].as_str(), Some("127.0.0.1:14317"), "the default");
    assert_eq!(effective["pipeline"]["queue"]["max_bytes"].as_u64(), Some(1234), "a whole reference takes the key's type");

    let out = run(&[("TEST_HTTP_PORT", "9999")]);
    assert_eq!(out.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("pipeline.queue.max_bytes") && stderr.contains("TEST_QUEUE_BYTES"), "{stderr}");
}

#[test]
fn tenants_and_priorities() {
    use weir::config::Priority;
    let c = Config::from_yaml(
        "exporters: [{type: blackhole}]\nreceiver:\n  auth:\n    tokens: [a]\n    tenants: {gold: {tokens: [g1, g2], priority: critical}, bulk: {tokens: [b1], priority: sheddable}}\n  throttle:\n    rules: {logs: {priority: sheddable}}\n",
    )
    .unwrap();
    let pairs = |v: &[(&str, &str)]| v.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect::<Vec<_>>();
    let a = weir::config::token_label("a");
    assert_eq!(c.receiver.auth.all_tokens(), pairs(&[("a", &a), ("b1", "bulk"), ("g1", "gold"), ("g2", "gold")]));
    let m = weir::throttle::manager::ThrottleManager::new(&c.receiver.throttle).with_tenants(&c.receiver.auth);
    use weir::signal::Signal;
    assert_eq!(m.priority(Signal::Traces, Some("gold")), Priority::Critical);
    assert_eq!(m.priority(Signal::Traces, Some("a")), Priority::Normal);
    assert_eq!(m.priority(Signal::Logs, None), Priority::Sheddable);
    assert_eq!(m.priority(Signal::Logs, Some("gold")), Priority::Critical, "the tenant wins");
    assert!(err("exporters: [{type: blackhole}]\nreceiver: {auth: {tenants: {x: {priority: vip}}}}").contains("vip"));
}

#[test]
fn tenants_are_names_and_tokens_stay_secret() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("team-b-tokens");
    std::fs::write(&file, "# rotated 2026-11\nsecret-b1\n\n  secret-b2  \n").unwrap();
    let yaml = format!(
        "exporters: [{{type: blackhole}}]\nreceiver:\n  auth:\n    tenants:\n      team-a: {{tokens: [secret-a]}}\n      team-b: {{tokens_file: \"{}\"}}\n      legacy-secret: {{priority: critical}}\n",
        file.display()
    );
    let c = Config::from_yaml(&yaml).unwrap();
    let mut tokens = c.receiver.auth.all_tokens();
    tokens.sort();
    let legacy = weir::config::token_label("legacy-secret");
    assert!(legacy.starts_with("token-") && !legacy.contains("secret"), "{legacy}");
    let want: Vec<(String, String)> = vec![
        ("legacy-secret".into(), legacy.clone()),
        ("secret-a".into(), "team-a".into()),
        ("secret-b1".into(), "team-b".into()),
        ("secret-b2".into(), "team-b".into()),
    ];
    assert_eq!(tokens, want, "the older shape (keyed by token) becomes a tenant named by a hash");
    assert!(c.receiver.auth.tenants.contains_key(&legacy) && !c.receiver.auth.tenants.contains_key("legacy-secret"));
    // A token shared by two tenants is an error that names the tenants, not the token.
    let e = err("exporters: [{type: blackhole}]\nreceiver: {auth: {tenants: {a: {tokens: [same-secret]}, b: {tokens: [same-secret]}}}}");
    assert!(e.contains("receiver.auth.tenants.b.tokens") && !e.contains("same-secret"), "{e}");
    let e = err("exporters: [{type: blackhole}]\nreceiver: {auth: {tenants: {a: {tokens_file: /nonexistent/tokens}}}}");
    assert!(e.contains("receiver.auth.tenants.a.tokens_file") && e.contains("/nonexistent/tokens"), "{e}");
}

#[test]
fn an_older_shape_token_listed_in_tokens_is_that_tenant_with_one_warning() {
    // The shape documented before tenants had names: the token as a tenant key, and the
    // same token in receiver.auth.tokens.
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("old.yaml");
    std::fs::write(
        &cfg,
        "receiver:\n  auth:\n    tokens: [old-s3cret, plain-s3cret]\n    tenants: {old-s3cret: {priority: critical}}\nexporters: [{type: blackhole}]\n",
    )
    .unwrap();
    let c = Config::load(&cfg).expect("the older shape still loads");
    let name = weir::config::token_label("old-s3cret");
    let mut tokens = c.receiver.auth.all_tokens();
    tokens.sort();
    assert_eq!(
        tokens,
        vec![("old-s3cret".to_string(), name.clone()), ("plain-s3cret".to_string(), weir::config::token_label("plain-s3cret"))],
        "the token is that tenant, once"
    );
    assert_eq!(c.receiver.auth.warnings.len(), 1, "{:?}", c.receiver.auth.warnings);
    let w = &c.receiver.auth.warnings[0];
    assert!(w.contains("receiver.auth.tokens[0]") && w.contains(&name) && w.contains("migrate") && !w.contains("s3cret"), "{w}");
    // The binary starts with it (exit 0) and prints the warning, never the token.
    let out = Command::new(env!("CARGO_BIN_EXE_weir")).args(["--config", cfg.to_str().unwrap(), "--check"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.matches("warning:").count(), 1, "{stderr}");
    assert!(!stderr.contains("s3cret") && !String::from_utf8_lossy(&out.stdout).contains("s3cret"), "{stderr}");
    // A token of a named tenant listed in tokens stays an error.
    let e = err("exporters: [{type: blackhole}]\nreceiver: {auth: {tokens: [t-s3cret], tenants: {acme: {tokens: [t-s3cret]}}}}");
    assert!(e.contains("receiver.auth.tokens[0]") && e.contains("acme") && !e.contains("s3cret"), "{e}");
}

#[test]
fn version_names_the_commit_and_the_tree() {
    let out = Command::new(env!("CARGO_BIN_EXE_weir")).arg("--version").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with(&format!("weir {} (commit ", env!("CARGO_PKG_VERSION"))), "{text}");
    let head = Command::new("git").args(["rev-parse", "--short=12", "HEAD"]).output().ok().filter(|o| o.status.success());
    match head {
        Some(h) => {
            let commit = String::from_utf8_lossy(&h.stdout).trim().to_string();
            assert!(text.contains(&format!("commit {commit}, ")), "built from {commit}: {text}");
            assert!(text.contains("clean tree") || text.contains("modified tree"), "{text}");
        }
        None => assert!(text.contains("commit unknown"), "{text}"),
    }
}

#[test]
fn memory_lines_keep_room_above_the_hard_line_in_small_containers() {
    let t = weir::config::ThresholdsConfig::default();
    assert_eq!(t.mem_headroom_bytes, 48 << 20);
    // 150 MiB: hard at 1 - 48/150 = 0.68, the other lines moved down as much.
    let m = t.mem_for(Some(150 << 20));
    assert!((m.hard - 0.68).abs() < 1e-9, "{m:?}");
    assert!((m.enter - (0.68 - 0.07)).abs() < 1e-9 && (m.exit - (0.68 - 0.14)).abs() < 1e-9, "{m:?}");
    // A container large enough keeps the lines as written; so does no limit, or 0.
    assert_eq!(t.mem_for(Some(4 << 30)), t.mem);
    assert_eq!(t.mem_for(None), t.mem);
    let off = weir::config::ThresholdsConfig { mem_headroom_bytes: 0, ..t.clone() };
    assert_eq!(off.mem_for(Some(150 << 20)), off.mem);
}

#[test]
fn a_loadbalancing_resolver_is_exactly_one_and_errors_name_the_key() {
    let lb = |resolver: &str| format!("exporters:\n  - type: loadbalancing\n    resolver: {resolver}\n");
    let e = err(&lb("{}"));
    assert!(e.contains("exporters[0].resolver") && e.contains("exactly one"), "{e}");
    let e = err(&lb("{static: [\"http://a:4317\"], file: {path: /tmp/x}}"));
    assert!(e.contains("exporters[0].resolver"), "{e}");
    let e = err(&lb("{static: [\"a:4317\"]}"));
    assert!(e.contains("exporters[0].resolver.static[0]"), "{e}");
    let e = err(&lb("{dns: {hostname: tier2, port: 0}}"));
    assert!(e.contains("exporters[0].resolver.dns"), "{e}");
    let e = err("exporters:\n  - {type: loadbalancing, protocol: kafka, resolver: {static: [\"http://a:4317\"]}}\n");
    assert!(e.contains("exporters[0].protocol"), "{e}");
    let ok = Config::from_yaml(&lb("{dns: {hostname: weir-tier2.observability.svc.cluster.local, port: 4317}}")).unwrap();
    assert_eq!(ok.exporters.len(), 1);
}

#[test]
fn kafka_settings_are_checked_and_errors_name_the_key() {
    let k = |extra: &str| format!("exporters:\n  - type: kafka\n    brokers: [\"kafka-0:9092\"]\n{extra}");
    let ok = Config::from_yaml(&k("")).unwrap();
    let weir::config::ExporterConfig::Kafka(c) = &ok.exporters[0] else { panic!("a kafka exporter") };
    assert_eq!((c.traces.topic.as_str(), c.metrics.topic.as_str(), c.logs.topic.as_str()), ("otlp_spans", "otlp_metrics", "otlp_logs"));
    assert_eq!(c.producer.max_message_bytes, 1_000_000);
    assert_eq!(c.producer.required_acks, "all");
    let e = err("exporters:\n  - {type: kafka, brokers: []}\n");
    assert!(e.contains("exporters[0].brokers"), "{e}");
    let e = err("exporters:\n  - {type: kafka, brokers: [\"kafka://k:9092\"]}\n");
    assert!(e.contains("exporters[0].brokers[0]") && e.contains("host:port"), "{e}");
    let e = err(&k("    traces: {topic: \"spans/all\"}\n"));
    assert!(e.contains("exporters[0].traces.topic"), "{e}");
    Config::from_yaml(&k("    traces: {topic: \"spans.${tenant}\", encoding: otlp_json}\n")).unwrap();
    let e = err(&k("    traces: {topic: t, encoding: avro}\n"));
    assert!(e.contains("avro") || e.contains("encoding"), "{e}");
    let e = err(&k("    producer: {required_acks: 1}\n"));
    assert!(e.contains("exporters[0].producer.required_acks") && e.contains("all"), "{e}");
    let e = err(&k("    producer: {compression: brotli}\n"));
    assert!(e.contains("exporters[0].producer.compression"), "{e}");
    let e = err(&k("    producer: {max_message_bytes: 100}\n"));
    assert!(e.contains("exporters[0].producer.max_message_bytes"), "{e}");
    let e = err(&k("    sasl: {mechanism: GSSAPI, username: u, password: p}\n"));
    assert!(e.contains("exporters[0].sasl.mechanism"), "{e}");
    let e = err(&k("    tls: {cert_file: /c.pem}\n"));
    assert!(e.contains("exporters[0].tls"), "{e}");
    let e = err(&k("    partitioner: crc32\n"));
    assert!(e.contains("crc32") || e.contains("partitioner"), "{e}");
}
