//! Connections follow memory, not cores: weir in a real 1 CPU / 300 MiB cgroup with the
//! shipped `maxconns` (no options) takes 4,096 connected clients, each keeping its
//! connection and sending again, with no eviction, and its cap comes from the memory
//! limit (half of it at 32 KiB a connection: 4,800).

mod support;

use std::io::{Read, Write};
use std::time::Duration;
use support::cgroup::TestCgroup;
use support::*;

const CONFIG: &str = r#"
receiver:
  http_server: {endpoint: "{http}", middlewares: ["logging", "content_decompressor", "throttle", "maxconns"]}
  grpc_server: {endpoint: "{grpc}", middlewares: ["logging", "content_decompressor", "throttle", "maxconns"]}
exporters: [{type: blackhole}]
admin: {endpoint: "{admin}"}
log: {level: info}
"#;

const CLIENTS: usize = 4096;

fn request(addr: &str) -> Vec<u8> {
    let body = r#"{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"body":{"stringValue":"c"}}]}]}]}"#;
    format!("POST /v1/logs HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len())
        .into_bytes()
}

/// Reads one response head and body (Content-Length) from a kept-alive connection;
/// returns its status.
fn read_response(s: &mut std::net::TcpStream) -> Option<u16> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1024];
    loop {
        let n = s.read(&mut byte).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&byte[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|v| v.trim().parse().ok()).unwrap_or(0);
            while buf.len() < end + 4 + len {
                let n = s.read(&mut byte).ok()?;
                if n == 0 {
                    return None;
                }
                buf.extend_from_slice(&byte[..n]);
            }
            return head.split_whitespace().nth(1)?.parse().ok();
        }
    }
}

fn metric(text: &str, series: &str) -> f64 {
    text.lines().find(|l| l.starts_with(series)).and_then(|l| l.split_whitespace().last()?.parse().ok()).unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_300_mib_weir_keeps_4096_connected_clients_without_evicting() {
    let cg = TestCgroup::create("weir-e2e-conns", 1.0, 300 << 20);
    let weir = start_weir_in(&cg, CONFIG, 30).await;
    let addr = weir.http.trim_start_matches("http://").to_string();
    let admin = weir.admin.clone();
    let text = reqwest::get(format!("{admin}/metrics")).await.unwrap().text().await.unwrap();
    assert_eq!(metric(&text, "weir_receiver_max_connections{server=\"http\"}"), 4800.0, "half of 300 MiB at 32 KiB each");

    let (statuses, kept) = tokio::task::spawn_blocking(move || {
        let req = request(&addr);
        // Connected first, all of them; then each sends on its own connection, one client
        // after the other (connected clients, not a crowd of simultaneous requests).
        let mut conns = support::attack::open_conns(&addr, CLIENTS, b"");
        assert_eq!(conns.len(), CLIENTS, "every client connected");
        let mut statuses = std::collections::BTreeMap::new();
        for c in conns.iter_mut() {
            c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let status = c.write_all(&req).ok().and_then(|()| read_response(c));
            *statuses.entry(status).or_insert(0) += 1;
        }
        // All of them still connected: each sends again on its own connection.
        let mut kept = 0;
        for c in conns.iter_mut() {
            if c.write_all(&req).is_ok() && read_response(c) == Some(200) {
                kept += 1;
            }
        }
        (statuses, kept)
    })
    .await
    .unwrap();
    let refusals = || {
        let log = std::fs::read_to_string(&weir.log).unwrap_or_default();
        log.lines().filter(|l| l.contains("request refused")).take(5).collect::<Vec<_>>().join("\n")
    };
    assert_eq!(statuses.get(&Some(200)).copied().unwrap_or(0), CLIENTS, "every first request answered 200: {statuses:?}\n{}", refusals());
    assert_eq!(kept, CLIENTS, "every connection kept and served again");
    let text = reqwest::get(format!("{admin}/metrics")).await.unwrap().text().await.unwrap();
    let evicted: f64 = text
        .lines()
        .filter(|l| l.starts_with("weir_receiver_connections_closed_total{") && l.contains("reason=\"evicted\""))
        .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
        .sum();
    assert_eq!(evicted, 0.0, "no eviction churn");
    assert_eq!(cg.oom_kills(), 0);
}
