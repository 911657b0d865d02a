//! Hot reload with the real binary: SIGHUP reloads rules, tenants and quotas atomically
//! (the config hash on /debug/throttle changes, weir_config_reloads_total counts it); a
//! config that fails validation is refused and the running one stays.

mod support;

use std::sync::Arc;

use std::time::{Duration, Instant};
use support::*;

fn config(http: u16, grpc: u16, admin: u16, drop_max: &str, rate: &str) -> String {
    format!(
        "receiver:\n  http_server: {{endpoint: \"127.0.0.1:{http}\", middlewares: [\"throttle\"]}}\n  grpc_server: {{endpoint: \"127.0.0.1:{grpc}\"}}\n  auth:\n    tenants:\n      t1: {{rate: {rate}}}\n  throttle:\n    rules:\n      default: {{drop_max: {drop_max}}}\nexporters: [{{type: blackhole}}]\nadmin: {{endpoint: \"127.0.0.1:{admin}\"}}\n"
    )
}

/// Ports a test's weir listens on.
#[derive(Clone, Copy)]
struct Ports {
    h: u16,
    g: u16,
    a: u16,
}

/// Writes `config(ports)` to `path`, starts the weir binary on it and waits for /readyz,
/// on free ports ([`on_free_ports`]).
async fn spawn_weir(path: &std::path::Path, config: impl Fn(Ports) -> String) -> (std::process::Child, Ports, String) {
    let log = path.with_extension("log");
    on_free_ports(|[h, g, a]| {
        let ports = Ports { h, g, a };
        std::fs::write(path, config(ports)).unwrap();
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["--config", path.to_str().unwrap()])
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let admin = format!("http://127.0.0.1:{a}");
        let log = &log;
        async move {
            let deadline = Instant::now() + Duration::from_secs(20);
            while !reqwest::get(format!("{admin}/readyz")).await.is_ok_and(|r| r.status() == 200) {
                if child.try_wait().unwrap().is_some() {
                    return Err(format!("weir exited early:\n{}", std::fs::read_to_string(log).unwrap_or_default()));
                }
                assert!(Instant::now() < deadline, "weir did not start");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Ok((child, ports, admin))
        }
    })
    .await
}

async fn debug(admin: &str) -> serde_json::Value {
    reqwest::get(format!("{admin}/debug/throttle")).await.unwrap().json().await.unwrap()
}

#[tokio::test]
async fn sighup_reloads_and_refuses_a_bad_config() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("weir.yaml");
    let (mut child, Ports { h, g, a }, admin) =
        spawn_weir(&path, |p| config(p.h, p.g, p.a, "1.0", "{requests_per_second: 1000, burst: 1000}")).await;
    let before = debug(&admin).await;
    assert_eq!(before["rules"]["traces"]["drop_max"], 1.0);
    let hash0 = before["config_hash"].as_str().unwrap().to_string();
    let url = format!("http://127.0.0.1:{h}/v1/traces");
    let send = || {
        reqwest::Client::new()
            .post(&url)
            .header("content-type", "application/x-protobuf")
            .header("x-bk-token", "t1")
            .body(Vec::new())
            .send()
    };
    assert_eq!(send().await.unwrap().status(), 200);

    // New rule and a tight quota; SIGHUP.
    std::fs::write(&path, config(h, g, a, "0.3", "{requests_per_second: 1, burst: 1}")).unwrap();
    let pid = child.id().to_string();
    assert!(std::process::Command::new("kill").args(["-HUP", &pid]).status().unwrap().success());
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut after = debug(&admin).await;
    while after["config_hash"] == hash0.as_str() {
        assert!(Instant::now() < deadline, "reload never applied");
        tokio::time::sleep(Duration::from_millis(50)).await;
        after = debug(&admin).await;
    }
    assert_eq!(after["rules"]["traces"]["drop_max"], 0.3);
    assert_eq!(send().await.unwrap().status(), 200, "first request within the new burst");
    assert_eq!(send().await.unwrap().status(), 429, "the new 1/s quota applies");
    assert_eq!(metric_value(&admin, "weir_config_reloads_total{result=\"success\"}").await, Some(1.0));

    // A config that breaks a rule: refused, the running one stays.
    let hash1 = after["config_hash"].as_str().unwrap().to_string();
    std::fs::write(&path, config(h, g, a, "1.5", "{requests_per_second: 1, burst: 1}")).unwrap();
    assert!(std::process::Command::new("kill").args(["-HUP", &pid]).status().unwrap().success());
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric_value(&admin, "weir_config_reloads_total{result=\"failure\"}").await != Some(1.0) {
        assert!(Instant::now() < deadline, "the bad reload was not counted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let last = debug(&admin).await;
    assert_eq!(last["config_hash"], hash1.as_str());
    assert_eq!(last["rules"]["traces"]["drop_max"], 0.3);
    let _ = child.kill();
    let _ = child.wait();
}

#[tokio::test]
async fn a_watched_file_reloads_without_a_signal() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("weir.yaml");
    let with_watch = |p: Ports, drop_max: &str| {
        format!("{}reload: {{watch_file: true, interval: 100ms}}\n", config(p.h, p.g, p.a, drop_max, "{requests_per_second: 100}"))
    };
    let (mut child, ports, admin) = spawn_weir(&path, |p| with_watch(p, "1.0")).await;
    assert_eq!(debug(&admin).await["admission"]["pid"]["enabled"], false, "the PID controller is off by default");
    // Make sure the modification time moves even on coarse-grained filesystems.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    // The new rule and the PID controller, turned on with its own setpoint, both apply.
    let pid_on = with_watch(ports, "0.4").replace("  throttle:\n", "  throttle:\n    pid: {enabled: true, setpoint: 0.9, kp: 0.5}\n");
    std::fs::write(&path, pid_on).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while debug(&admin).await["rules"]["traces"]["drop_max"] != 0.4 {
        assert!(Instant::now() < deadline, "the watched file was not reloaded");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pid = &debug(&admin).await["admission"]["pid"];
    assert_eq!(
        (pid["enabled"].as_bool(), pid["setpoint"].as_f64(), pid["limiting"].as_bool()),
        (Some(true), Some(0.9), Some(false)),
        "{pid}"
    );
    let _ = child.kill();
    let _ = child.wait();
}

/// On SIGTERM weir stays for `pipeline.shutdown_delay`: `/readyz` answers 503 at once (a
/// load balancer stops sending) while requests are still served, then it stops. Before,
/// it stopped accepting at once and clients saw connection errors on every rollout.
#[tokio::test]
async fn sigterm_keeps_serving_for_the_shutdown_delay() {
    let yaml = "receiver:\n  http_server: {endpoint: \"{http}\"}\n  grpc_server: {endpoint: \"{grpc}\"}\npipeline: {shutdown_delay: 1500ms}\nexporters: [{type: blackhole}]\nadmin: {endpoint: \"{admin}\"}\n";
    let mut weir = start_weir_plain(yaml, 20, None).await;
    // Load across the signal: four clients posting without pause from before SIGTERM to
    // 1.3 s after it (inside the delay) must see only 200s, no refused or reset connection.
    let stop_at = Arc::new(std::sync::Mutex::new(None::<Instant>));
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let (url, stop_at) = (format!("{}/v1/traces", weir.http), stop_at.clone());
            tokio::spawn(async move {
                let client = reqwest::Client::new();
                let (mut ok, mut failed) = (0u32, Vec::new());
                while stop_at.lock().unwrap().is_none_or(|t| Instant::now() < t) {
                    match client.post(&url).header("content-type", "application/x-protobuf").body(Vec::new()).send().await {
                        Ok(r) if r.status() == 200 => ok += 1,
                        Ok(r) => failed.push(format!("status {}", r.status())),
                        Err(e) => failed.push(format!("{e:?}")),
                    }
                }
                (ok, failed)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pid = weir.child.id().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let signalled = Instant::now();
    *stop_at.lock().unwrap() = Some(signalled + Duration::from_millis(1300));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let ready = reqwest::get(format!("{}/readyz", weir.admin)).await.unwrap().status();
    assert_eq!(ready, 503, "not ready once SIGTERM came");
    let served = reqwest::Client::new()
        .post(format!("{}/v1/traces", weir.http))
        .header("content-type", "application/x-protobuf")
        .body(Vec::new())
        .send()
        .await
        .expect("still accepting during the delay");
    assert_eq!(served.status(), 200);
    for c in clients {
        let (ok, failed) = c.await.unwrap();
        assert!(ok > 0 && failed.is_empty(), "{ok} answered, failures across SIGTERM: {failed:?}");
    }
    let status = tokio::task::spawn_blocking(move || weir.child.wait().unwrap()).await.unwrap();
    let took = signalled.elapsed();
    assert!(status.success(), "{status}");
    assert!(took >= Duration::from_millis(1400), "stopped after {took:?}, before the 1.5 s delay");
}
