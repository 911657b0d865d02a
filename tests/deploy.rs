//! The shipped deployment files checked against weir itself: the Kubernetes manifests
//! (the ConfigMap's config passes `weir --check`, ports, probes and grace periods match
//! it, the memory limit leaves room above the budgets), and the Prometheus alert rules
//! (`promtool check rules`, and `promtool test rules` with a case for every alert).
//! promtool comes from Debian's `prometheus` package, which `.ci/run` installs; without
//! it the test fails.

use serde::Deserialize;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every document of every YAML file in `deploy/kubernetes/`.
fn manifests() -> Vec<serde_yaml::Value> {
    let mut docs = Vec::new();
    for e in std::fs::read_dir(root().join("deploy/kubernetes")).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "yaml") {
            let text = std::fs::read_to_string(&path).unwrap();
            for d in serde_yaml::Deserializer::from_str(&text) {
                let v = serde_yaml::Value::deserialize(d).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                docs.push(v);
            }
        }
    }
    docs
}

fn kind<'a>(docs: &'a [serde_yaml::Value], k: &str) -> &'a serde_yaml::Value {
    docs.iter().find(|d| d["kind"] == k).unwrap_or_else(|| panic!("no {k} manifest"))
}

fn port_of(endpoint: &str) -> u64 {
    endpoint.rsplit(':').next().unwrap().parse().unwrap()
}

/// "1Gi", "512Mi", "1G" -> bytes.
fn quantity(q: &str) -> u64 {
    let units = [("Ki", 1u64 << 10), ("Mi", 1 << 20), ("Gi", 1 << 30), ("K", 1000), ("M", 1_000_000), ("G", 1_000_000_000)];
    for (suffix, m) in units {
        if let Some(n) = q.strip_suffix(suffix) {
            return n.parse::<u64>().unwrap() * m;
        }
    }
    q.parse().unwrap()
}

#[test]
fn kubernetes_manifests_agree_with_weir() {
    let docs = manifests();
    // The kustomization lists every manifest.
    let kustomization = std::fs::read_to_string(root().join("deploy/kubernetes/kustomization.yaml")).unwrap();
    for e in std::fs::read_dir(root().join("deploy/kubernetes")).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        if name != "kustomization.yaml" {
            assert!(kustomization.contains(&name), "kustomization.yaml does not list {name}");
        }
    }

    // The ConfigMap's config passes `weir --check` (the same binary, the same loader).
    let cm = kind(&docs, "ConfigMap");
    let yaml = cm["data"]["weir.yaml"].as_str().expect("ConfigMap data weir.yaml");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("weir.yaml");
    std::fs::write(&file, yaml).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_weir")).arg("--check").arg("--config").arg(&file).output().unwrap();
    assert!(out.status.success(), "weir --check: {}", String::from_utf8_lossy(&out.stderr));
    let config = weir::config::Config::load(&file).unwrap();

    let deploy = kind(&docs, "Deployment");
    let pod = &deploy["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    let ports: Vec<(String, u64)> = c["ports"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|p| (p["name"].as_str().unwrap().to_string(), p["containerPort"].as_u64().unwrap()))
        .collect();
    let port_named = |n: &str| ports.iter().find(|(name, _)| name == n).map(|(_, p)| *p).unwrap_or_else(|| panic!("no container port {n}"));
    assert_eq!(port_named("otlp-grpc"), port_of(&config.receiver.grpc_server.endpoint));
    assert_eq!(port_named("otlp-http"), port_of(&config.receiver.http_server.endpoint));
    assert_eq!(port_named("admin"), port_of(&config.admin.endpoint));
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["livenessProbe"]["httpGet"]["port"], "admin");
    assert_eq!(c["readinessProbe"]["httpGet"]["port"], "admin");
    // The config is where the container reads it.
    let mount = c["volumeMounts"].as_sequence().unwrap().iter().find(|m| m["name"] == "config").expect("config mount");
    let args: Vec<&str> = c["args"].as_sequence().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert_eq!(args, ["--config", &format!("{}/weir.yaml", mount["mountPath"].as_str().unwrap())]);

    // The grace period covers the shutdown: the delay while endpoints update, then the drain.
    let grace = pod["terminationGracePeriodSeconds"].as_u64().unwrap();
    let needed = (config.pipeline.shutdown_delay + config.pipeline.shutdown_timeout).as_secs();
    assert!(grace > needed, "terminationGracePeriodSeconds {grace} must exceed shutdown_delay + shutdown_timeout ({needed} s)");

    // Non-root, read-only root filesystem.
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);

    // Guaranteed QoS (the throttle's levels are fractions of the limits), and memory for
    // the queue's and the bodies' budgets below the memory enter line.
    let res = &c["resources"];
    assert_eq!(res["requests"], res["limits"], "requests = limits");
    let limit = quantity(res["limits"]["memory"].as_str().unwrap());
    let bodies = match config.receiver.max_body_bytes_in_flight {
        0 => limit / 4,
        n => n,
    };
    let baseline = 64 << 20;
    let used = config.pipeline.queue.max_bytes as u64 + bodies + baseline;
    let enter = (limit as f64 * config.receiver.throttle.thresholds.mem.enter) as u64;
    assert!(used < enter, "queue + bodies + 64 MiB = {} MiB must stay below the memory enter line {} MiB", used >> 20, enter >> 20);
    // The HPA adds replicas before the throttle sheds.
    let hpa = kind(&docs, "HorizontalPodAutoscaler");
    let target = hpa["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"].as_f64().unwrap();
    assert!(target / 100.0 < config.receiver.throttle.thresholds.cpu.enter, "HPA target {target}% must be below the CPU enter line");
    assert_eq!(hpa["spec"]["scaleTargetRef"]["name"], deploy["metadata"]["name"]);

    // The Service exposes the same ports, gRPC marked as such.
    let svc = kind(&docs, "Service");
    for p in svc["spec"]["ports"].as_sequence().unwrap() {
        let target = p["targetPort"].as_str().unwrap();
        assert_eq!(p["port"].as_u64().unwrap(), port_named(target), "service port {target}");
    }
    let grpc = svc["spec"]["ports"].as_sequence().unwrap().iter().find(|p| p["targetPort"] == "otlp-grpc").unwrap();
    assert_eq!(grpc["appProtocol"], "grpc");
    // The selector of the Service, the PDB and the Deployment pick the same pods.
    let labels = &deploy["spec"]["template"]["metadata"]["labels"];
    for (k, v) in svc["spec"]["selector"].as_mapping().unwrap() {
        assert_eq!(&labels[k], v);
    }
    let pdb = kind(&docs, "PodDisruptionBudget");
    assert_eq!(pdb["spec"]["selector"]["matchLabels"], deploy["spec"]["selector"]["matchLabels"]);
}

fn promtool(args: &[&str]) -> String {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(root().join("deploy/prometheus"))
        .output()
        .expect("promtool (Debian package prometheus; .ci/run installs it)");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "promtool {args:?}:\n{text}");
    text
}

#[test]
fn alert_rules_pass_promtool_and_every_alert_is_tested() {
    promtool(&["check", "rules", "weir-rules.yaml"]);
    promtool(&["test", "rules", "weir-rules.test.yaml"]);
    let rules: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(root().join("deploy/prometheus/weir-rules.yaml")).unwrap()).unwrap();
    let tests: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(root().join("deploy/prometheus/weir-rules.test.yaml")).unwrap()).unwrap();
    let alerts: BTreeSet<&str> = rules["groups"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_sequence().unwrap())
        .map(|r| r["alert"].as_str().unwrap())
        .collect();
    let fired: BTreeSet<&str> = tests["tests"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|t| t["alert_rule_test"].as_sequence().unwrap())
        .filter(|a| a["exp_alerts"].as_sequence().is_some_and(|v| !v.is_empty()))
        .map(|a| a["alertname"].as_str().unwrap())
        .collect();
    assert_eq!(alerts, fired, "every alert has a test case in which it fires");
    for r in rules["groups"][0]["rules"].as_sequence().unwrap() {
        assert!(
            r["annotations"]["runbook"].as_str().is_some_and(|s| s.len() > 40),
            "{} needs a runbook line",
            r["alert"].as_str().unwrap()
        );
    }
    // Every metric the rules use is one weir exports (or Prometheus's own `up`).
    let text = std::fs::read_to_string(root().join("deploy/prometheus/weir-rules.yaml")).unwrap();
    let names = std::fs::read_to_string(root().join("src/telemetry/names.rs")).unwrap()
        + &std::fs::read_to_string(root().join("src/throttle/metrics.rs")).unwrap();
    for word in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        if word.starts_with("weir_") && !word.starts_with("weir_rules") {
            assert!(names.contains(&format!("\"{word}\"")), "the rules use {word}, which weir does not export");
        }
    }
}

/// A real Prometheus (Debian's package) scrapes a weir under load (with tenants, a quota
/// that refuses, and a disk queue); every query of every dashboard panel must return data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dashboard_panel_returns_data_from_a_real_prometheus() {
    use prost::Message;
    let dash: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("deploy/grafana/weir-dashboard.json")).unwrap()).unwrap();
    let exprs: Vec<(String, String)> = dash["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| {
            let title = p["title"].as_str().unwrap().to_string();
            p["targets"].as_array().unwrap().iter().map(move |t| (title.clone(), t["expr"].as_str().unwrap().to_string()))
        })
        .collect();
    assert!(exprs.len() >= 8);

    let dir = tempfile::tempdir().unwrap();
    let (http, grpc, admin, prom) = (free_port(), free_port(), free_port(), free_port());
    let config = format!(
        r#"
receiver:
  http_server: {{endpoint: "127.0.0.1:{http}"}}
  grpc_server: {{endpoint: "127.0.0.1:{grpc}"}}
  auth:
    tenants:
      team-a: {{tokens: [token-of-a]}}
      team-b: {{tokens: [token-of-b], rate: {{requests_per_second: 1, burst: 1}}}}
pipeline:
  shutdown_delay: 0s
  queue:
    disk: {{path: "{queue}"}}
exporters: [{{type: blackhole}}]
admin: {{endpoint: "127.0.0.1:{admin}"}}
log: {{level: warn}}
"#,
        queue = dir.path().join("queue").display()
    );
    std::fs::write(dir.path().join("weir.yaml"), config).unwrap();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _weir = Kill(
        Command::new(env!("CARGO_BIN_EXE_weir"))
            .arg("--config")
            .arg(dir.path().join("weir.yaml"))
            .stderr(std::fs::File::create(dir.path().join("weir.log")).unwrap())
            .spawn()
            .unwrap(),
    );
    std::fs::write(
        dir.path().join("prometheus.yml"),
        format!("global: {{scrape_interval: 1s, evaluation_interval: 1s}}\nscrape_configs:\n  - job_name: weir\n    static_configs: [{{targets: [\"127.0.0.1:{admin}\"]}}]\n"),
    )
    .unwrap();
    let _prometheus = Kill(
        Command::new("prometheus")
            .arg(format!("--config.file={}", dir.path().join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("tsdb").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{prom}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("prometheus.log")).unwrap())
            .spawn()
            .expect("prometheus (Debian package prometheus; .ci/run installs it)"),
    );
    let client = reqwest::Client::new();
    let ready = |url: String| {
        let client = client.clone();
        async move {
            for _ in 0..300 {
                if client.get(&url).send().await.is_ok_and(|r| r.status() == 200) {
                    return true;
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            false
        }
    };
    assert!(ready(format!("http://127.0.0.1:{admin}/readyz")).await, "{}", std::fs::read_to_string(dir.path().join("weir.log")).unwrap());
    assert!(
        ready(format!("http://127.0.0.1:{prom}/-/ready")).await,
        "{}",
        std::fs::read_to_string(dir.path().join("prometheus.log")).unwrap_or_default()
    );
    // Traffic for 8 s: both tenants, team-b over its quota.
    let body = weir::otlp::synth::traces_request(50, 4, 16, 1).encode_to_vec();
    let started = std::time::Instant::now();
    while started.elapsed() < std::time::Duration::from_secs(8) {
        for token in ["token-of-a", "token-of-b", "token-of-b"] {
            let _ = client
                .post(format!("http://127.0.0.1:{http}/v1/traces"))
                .header("content-type", "application/x-protobuf")
                .header("authorization", format!("Bearer {token}"))
                .body(body.clone())
                .send()
                .await;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // Every query is valid and names metrics weir exports; every panel shows data (a
    // target may be empty when what it counts did not happen, e.g. dropped items).
    let names = std::fs::read_to_string(root().join("src/telemetry/names.rs")).unwrap()
        + &std::fs::read_to_string(root().join("src/throttle/metrics.rs")).unwrap();
    let mut with_data = BTreeSet::new();
    for (title, expr) in &exprs {
        for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).filter(|w| w.starts_with("weir_")) {
            let base = word.strip_suffix("_bucket").unwrap_or(word);
            assert!(names.contains(&format!("\"{base}\"")), "{title}: {word} is not a metric weir exports");
        }
        let r: serde_json::Value = client
            .get(format!("http://127.0.0.1:{prom}/api/v1/query"))
            .query(&[("query", expr.as_str())])
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(r["status"], "success", "{title}: {expr}: {r}");
        if r["data"]["result"].as_array().is_some_and(|v| !v.is_empty()) {
            with_data.insert(title.as_str());
        }
    }
    let titles: BTreeSet<&str> = exprs.iter().map(|(t, _)| t.as_str()).collect();
    let empty: Vec<_> = titles.difference(&with_data).collect();
    assert!(empty.is_empty(), "panels without data: {empty:?}");
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `log.format: json` writes one JSON object per line with the documented fields:
/// `timestamp`, `level`, `target`, and `fields` holding `message` and the event's fields.
#[test]
fn json_logs_have_stable_field_names() {
    let dir = tempfile::tempdir().unwrap();
    let (http, grpc, admin) = (free_port(), free_port(), free_port());
    let config = format!(
        "receiver:\n  http_server: {{endpoint: \"127.0.0.1:{http}\"}}\n  grpc_server: {{endpoint: \"127.0.0.1:{grpc}\"}}\npipeline: {{shutdown_delay: 0s}}\nexporters: [{{type: blackhole}}]\nadmin: {{endpoint: \"127.0.0.1:{admin}\"}}\nlog: {{level: info, format: json}}\n"
    );
    std::fs::write(dir.path().join("weir.yaml"), config).unwrap();
    let log = dir.path().join("weir.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("--config")
        .arg(dir.path().join("weir.yaml"))
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !std::fs::read_to_string(&log).unwrap_or_default().contains("admin listening") {
        assert!(std::time::Instant::now() < deadline, "weir did not start: {}", std::fs::read_to_string(&log).unwrap_or_default());
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.lines().count() >= 3, "{text}");
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        for key in ["timestamp", "level", "target"] {
            assert!(v[key].is_string(), "no {key}: {line}");
        }
        assert!(v["fields"]["message"].is_string(), "no fields.message: {line}");
        assert!(!line.contains('\u{1b}'), "colour codes in a log file: {line}");
    }
    assert!(text.contains("\"shutdown complete\""), "{text}");
}
