//! Refusals read no more of the request bodies than admitted requests do, on real
//! sockets: a refused HTTP/1.1 body over 64 KiB is read away (and its connection kept)
//! only within what admissions have earned, and past that it is left unread, answered
//! with `Connection: close` and counted in `weir_receiver_refused_bodies_unread_total`.
//! With no admitted request in flight the reads take the core from nobody, and refused
//! bodies are read.
//! The budget is process-wide, so this file holds one test: its own process.

mod support;

use prost::Message;
use std::time::Duration;
use support::throttle_fixture::*;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One HTTP/1.1 request of `body` on a new connection, read while it is still being sent
/// (as hyper and Go's net/http do): its status and Connection header, or `None` when no
/// whole answer came.
async fn send_reading(addr: std::net::SocketAddr, body: &[u8]) -> Option<(u16, Option<String>)> {
    let (mut rd, mut wr) = tokio::net::TcpStream::connect(addr).await.ok()?.into_split();
    let head =
        format!("POST /v1/traces HTTP/1.1\r\nhost: weir\r\ncontent-type: application/x-protobuf\r\ncontent-length: {}\r\n\r\n", body.len());
    let body = body.to_vec();
    let writer = tokio::spawn(async move {
        // Cut off by a refusal that closes: what matters is the answer.
        let _ = wr.write_all(head.as_bytes()).await;
        let _ = wr.write_all(&body).await;
        wr
    });
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let answer = loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let header = |name: &str| head.lines().find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_string()));
            let len: usize = header("content-length:")?.parse().ok()?;
            if buf.len() >= end + 4 + len {
                break Some((head.split_whitespace().nth(1)?.parse().ok()?, header("connection:")));
            }
        }
        match tokio::time::timeout(Duration::from_secs(10), rd.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            _ => break None,
        }
    };
    writer.abort();
    answer
}

#[tokio::test]
async fn past_what_admissions_earn_a_refused_body_is_left_unread_and_its_connection_closed() {
    let cg = tempfile::tempdir().unwrap();
    fixture(cg.path(), 100);
    let rules = "      default: {drop_min: 1.0, drop_max: 1.0}\n      logs: {drop_min: 0.0, drop_max: 0.0}";
    // The fixture's 1000-byte memory limit would leave the body budget and the queue a
    // few hundred bytes: room for nothing here.
    let yaml = yaml(cg.path(), rules).replacen("receiver:\n", "receiver:\n  max_body_bytes_in_flight: 10485760\n", 1).replacen(
        "pipeline:\n",
        "pipeline:\n  queue: {max_bytes: 10485760}\n",
        1,
    );
    let w = start_yaml(&yaml).await;
    let addr = w.app.http_addr.unwrap();
    wait_state(&w.admin(), "traces", "normal").await;
    // Memory at 88%: Shedding (traces all refused, logs all admitted), and above the
    // enter line, so refusals are answered at once.
    fixture(cg.path(), 880);
    wait_state(&w.admin(), "traces", "shedding").await;

    // With nothing admitted in flight the reads take the core from nobody: refused
    // bodies are read, and their connections kept.
    let body = vec![7u8; 1 << 20];
    for i in 0..12 {
        assert_eq!(send_reading(addr, &body).await, Some((429, None)), "request {i}, nothing admitted");
    }

    // An admitted request in flight (its head and one byte of its body): refusals now
    // read only the budget's 8 MiB burst and its floor (4 MiB a second). 1 MiB is the
    // most a refusal reads to keep its connection.
    let allowed = || {
        let admin = w.admin();
        async move {
            let key = "weir_throttle_requests_total{protocol=\"http\",record_type=\"logs\",decision=\"allowed\"";
            metric_value(&admin, key).await.unwrap_or(0.0)
        }
    };
    let slow_body = logs("slow", 1).encode_to_vec();
    let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /v1/logs HTTP/1.1\r\nhost: weir\r\ncontent-type: application/x-protobuf\r\ncontent-length: {}\r\n\r\n",
        slow_body.len()
    );
    slow.write_all(head.as_bytes()).await.unwrap();
    slow.write_all(&slow_body[..1]).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while allowed().await < 1.0 {
        assert!(std::time::Instant::now() < deadline, "the slow request was never admitted");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (mut kept, mut closed, mut reset) = (0, 0, 0);
    for i in 0..24 {
        match send_reading(addr, &body).await {
            Some((status, connection)) => {
                assert_eq!(status, 429, "request {i}");
                if connection.as_deref() == Some("close") {
                    closed += 1;
                } else {
                    kept += 1;
                }
            }
            None => reset += 1,
        }
    }
    eprintln!("{kept} kept, {closed} closed, {reset} reset");
    assert!(kept >= 8, "the burst reads 8 bodies of 1 MiB: {kept} kept, {closed} closed, {reset} reset");
    assert!(kept <= 16, "reads past the budget: {kept} kept, {closed} closed, {reset} reset");
    assert!(reset <= closed, "a client that reads while it sends gets its answer: {closed} closed, {reset} reset");
    let unread = metric_value(&w.admin(), "weir_receiver_refused_bodies_unread_total").await.unwrap_or(0.0);
    assert_eq!(unread, (closed + reset) as f64, "every body left unread is counted");

    // A small body is read whatever the budget: its connection stays.
    assert_eq!(send_reading(addr, &vec![7u8; 32 << 10]).await, Some((429, None)));
    // The slow request completes; with nothing in flight, a large body is read again.
    slow.write_all(&slow_body[1..]).await.unwrap();
    let mut answer = [0u8; 12];
    slow.read_exact(&mut answer).await.unwrap();
    assert_eq!(&answer, b"HTTP/1.1 200");
    assert_eq!(send_reading(addr, &body).await, Some((429, None)));
    w.app.shutdown().await;
}
