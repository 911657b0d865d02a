//! The byte bound on held refusals (`receiver.throttle.hold.max_held_bytes`), end to end
//! on real sockets. A held HTTP/1.1 refusal leaves its body in weir's socket buffer, which
//! cgroup v2 charges to the container; with the bound at 0 (automatic) weir reckons the
//! room from the cgroup's memory: the enter line less what it uses apart from `sock`.
//! Past the room a body is read away before the hold, and one too large to read is
//! answered at once. No v2 memory controller runs on the test machines, so the cgroup is
//! a fixture tree the sampler reads (the same reader the real-cgroup tests drive); the
//! sockets and what the kernel holds in them (`ss`) are real. Its own binary: it reads
//! process-wide hold metrics that the other throttle tests also move.

mod support;

use prost::Message;
use std::time::{Duration, Instant};
use support::throttle_fixture::*;
use support::*;

/// Rewrites the fixture's memory files: `current` bytes in use of a 100 MB limit, `sock`
/// of them socket buffers.
fn memory(root: &std::path::Path, current: u64, sock: u64) {
    let dir = root.join("sys/fs/cgroup");
    std::fs::write(dir.join("memory.max"), "100000000").unwrap();
    std::fs::write(dir.join("memory.stat.tmp"), format!("anon {current}\ninactive_file 0\nsock {sock}\n")).unwrap();
    std::fs::rename(dir.join("memory.stat.tmp"), dir.join("memory.stat")).unwrap();
    std::fs::write(dir.join("memory.current.tmp"), current.to_string()).unwrap();
    std::fs::rename(dir.join("memory.current.tmp"), dir.join("memory.current")).unwrap();
}

/// Bytes waiting unread in weir's end of each established connection on `port`, by the
/// client's port (`ss`, the kernel's own count).
fn unread_by_peer(port: u16) -> Vec<(u16, u64)> {
    let out =
        std::process::Command::new("ss").args(["-tnH", "state", "established", &format!("( sport = :{port} )")]).output().expect("ss runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            // Recv-Q Send-Q Local:Port Peer:Port
            let f: Vec<&str> = l.split_whitespace().collect();
            let peer = f.get(3)?.rsplit_once(':')?.1.parse().ok()?;
            Some((peer, f.first()?.parse().ok()?))
        })
        .collect()
}

async fn debug(admin: &str) -> serde_json::Value {
    reqwest::get(format!("{admin}/debug/throttle")).await.unwrap().json().await.unwrap()
}

async fn wait_debug(admin: &str, what: &str, ok: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v = debug(admin).await;
        if ok(&v) {
            return v;
        }
        assert!(Instant::now() < deadline, "{what} never held: {}", v["hold"]);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn held_http1_bodies_stop_at_the_room_the_v2_memory_leaves_and_past_it_are_read_before_the_hold() {
    use tokio::io::AsyncWriteExt;
    let cg = tempfile::tempdir().unwrap();
    fixture(cg.path(), 0);
    // 0.85 x 100 MB = 85 MB enter line, 84.4 MB in use and none of it socket buffers:
    // room for 600 KB of held bodies.
    memory(cg.path(), 84_400_000, 0);
    let rules = "      default: {drop_min: 0.0, drop_max: 0.0}
    max_inflight_per_core: 1
    max_inflight_wait: 0ms
    hold: {max: 4s}
    queue_delay: {enabled: false}
    slow_start: {enabled: false}
    burst_damping: {enabled: false}
    bbr: {enabled: false}
    knee: {enabled: false}";
    let w = start_yaml(&yaml(cg.path(), rules)).await;
    let admin = w.admin();
    let addr = w.app.http_addr.unwrap();
    wait_debug(&admin, "the room from cgroup v2", |v| v["hold"]["room_bytes"] == 600_000).await;
    // Below the memory enter line: refusals are held, not answered at once for memory.
    assert!(debug(&admin).await["levels"]["mem"].as_f64().unwrap() < 0.85);

    // One request in flight, the core's only slot: its head and one byte, the rest later.
    let slow_body = traces("slow", 2, 1).encode_to_vec();
    let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /v1/traces HTTP/1.1\r\nhost: weir\r\ncontent-type: application/x-protobuf\r\ncontent-length: {}\r\n\r\n",
        slow_body.len()
    );
    slow.write_all(head.as_bytes()).await.unwrap();
    slow.write_all(&slow_body[..1]).await.unwrap();
    wait_debug(&admin, "the slow request in flight", |v| v["admission"]["inflight"] == 1).await;

    // Three 250 KB requests, one after another so that the order is known: the first two
    // fit the room and are held with their bodies left in the socket (nothing completed
    // yet: the longest hold); the third would pass the room, so its body is read away
    // first and then it is held too.
    let mut held = Vec::new();
    let mut ports = Vec::new();
    for i in 0..3u64 {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        ports.push(s.local_addr().unwrap().port());
        held.push(tokio::spawn(async move {
            let r = exchange(&mut s, "-", &vec![7u8; 250_000]).await;
            (r, Instant::now())
        }));
        wait_debug(&admin, "one more held", |v| v["hold"]["held"] == i + 1).await;
    }
    let v = debug(&admin).await;
    assert_eq!(v["hold"]["held_bytes"], 500_000, "the one read first takes no room: {}", v["hold"]);
    let read_first = || metric_value(&admin, "weir_throttle_holds_read_first_total");
    let deadline = Instant::now() + Duration::from_secs(5);
    while read_first().await != Some(1.0) {
        assert!(Instant::now() < deadline, "the third body was never read first");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // In the kernel: the first two bodies wait in weir's sockets, the third's was read.
    let unread = unread_by_peer(addr.port());
    let of = |port: u16| unread.iter().find(|(p, _)| *p == port).map(|(_, q)| *q);
    assert!(of(ports[0]).is_some_and(|q| q > 50_000), "first held body not in the socket: {unread:?}");
    assert!(of(ports[1]).is_some_and(|q| q > 50_000), "second held body not in the socket: {unread:?}");
    assert_eq!(of(ports[2]), Some(0), "the body read first left bytes in the socket: {unread:?}");
    // Read only to be dropped, it takes none of the body budget: only the slow request's
    // small body is charged.
    let in_flight = metric_value(&admin, "weir_receiver_body_bytes_in_flight").await.unwrap_or(0.0);
    assert!(in_flight <= slow_body.len() as f64, "held refusals charged {in_flight} bytes to the body budget");

    // A body past the room that a refusal does not read (over 1 MiB) is answered at once,
    // closing, with its answer intact.
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (status, connection, body) = exchange(&mut s, "-", &vec![7u8; 1_200_000]).await.expect("an answer, not a reset");
    let answered_at_once = Instant::now();
    assert_eq!(status, 429, "{}", String::from_utf8_lossy(&body));
    assert_eq!(connection.as_deref(), Some("close"));
    assert!(String::from_utf8_lossy(&body).contains("retry after"), "{}", String::from_utf8_lossy(&body));
    assert_eq!(metric_value(&admin, "weir_throttle_holds_skipped_total{reason=\"held_bytes\"}").await, Some(1.0));
    let v = debug(&admin).await;
    assert_eq!((v["hold"]["held"].as_u64(), v["hold"]["held_bytes"].as_u64()), (Some(3), Some(500_000)), "{}", v["hold"]);

    // The held ones are answered after their hold, each with a complete 429 on a kept
    // connection, after the one past the room.
    for h in held {
        let (r, at) = h.await.unwrap();
        let (status, connection, _) = r.expect("a held refusal's answer");
        assert_eq!((status, connection), (429, None));
        assert!(at > answered_at_once, "a held refusal was answered before the one past the room");
    }
    let v = wait_debug(&admin, "nothing held", |v| v["hold"]["held"] == 0).await;
    assert_eq!(v["hold"]["held_bytes"], 0);

    // More memory of weir's own shrinks the room; socket buffers do not.
    memory(cg.path(), 84_000_000, 0);
    wait_debug(&admin, "room from 84 MB with no sockets", |v| v["hold"]["room_bytes"] == 1_000_000).await;
    memory(cg.path(), 80_000_000, 15_000_000);
    wait_debug(&admin, "room from 80 MB of which 15 MB sockets", |v| v["hold"]["room_bytes"] == 20_000_000).await;

    let (status, _, _) = exchange_raw(&mut slow, "", &slow_body[1..]).await.expect("the first request's answer");
    assert_eq!(status, 200);
    w.app.shutdown().await;
}

#[tokio::test]
async fn a_configured_bound_is_the_room_whatever_the_cgroup_leaves() {
    let cg = tempfile::tempdir().unwrap();
    fixture(cg.path(), 0);
    memory(cg.path(), 10_000_000, 0);
    let rules = "      default: {drop_min: 0.0, drop_max: 0.0}
    hold: {max_held_bytes: 1048576}";
    let w = start_yaml(&yaml(cg.path(), rules)).await;
    wait_debug(&w.admin(), "the configured bound", |v| v["hold"]["room_bytes"] == 1_048_576).await;
    w.app.shutdown().await;
}
