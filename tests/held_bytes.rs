//! The byte bound on held refusals (`receiver.throttle.hold.max_held_bytes`), end to end
//! on real sockets. A held HTTP/1.1 refusal leaves its body in weir's socket buffer, which
//! cgroup v2 charges to the container; with the bound at 0 (automatic) weir reckons the
//! room from the cgroup's memory: the enter line less what it uses apart from `sock`.
//! A body a refusal may read (a declared length up to 1 MiB) is read away during the
//! hold instead and takes no room; past the room a larger one is answered at once. No v2 memory controller runs on the test machines, so the cgroup is
//! a fixture tree the sampler reads (the same reader the real-cgroup tests drive); the
//! sockets and what the kernel holds in them (`ss`) are real. Its own binary: it reads
//! process-wide hold metrics that the other throttle tests also move (only one test here
//! reads `weir_throttle_holds_skipped_total`).

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

/// Starts weir on a v2 fixture whose memory leaves `room` bytes below the enter line
/// (85 MB of a 100 MB limit), with one request in flight on its only slot so that every
/// other request is refused (by the in-flight cap) and held, for up to 4 s. Returns weir,
/// its fixture, and the slow request's connection and remaining body.
async fn held_weir(room: u64) -> (Weir, tempfile::TempDir, tokio::net::TcpStream, Vec<u8>) {
    use tokio::io::AsyncWriteExt;
    let cg = tempfile::tempdir().unwrap();
    fixture(cg.path(), 0);
    memory(cg.path(), 85_000_000 - room, 0);
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
    wait_debug(&admin, "the room from cgroup v2", |v| v["hold"]["room_bytes"] == room).await;
    // Below the memory enter line: refusals are held, not answered at once for memory.
    assert!(debug(&admin).await["levels"]["mem"].as_f64().unwrap() < 0.85);
    // One request in flight, the core's only slot: its head and one byte, the rest later.
    let slow_body = traces("slow", 2, 1).encode_to_vec();
    let mut slow = tokio::net::TcpStream::connect(w.app.http_addr.unwrap()).await.unwrap();
    let head = format!(
        "POST /v1/traces HTTP/1.1\r\nhost: weir\r\ncontent-type: application/x-protobuf\r\ncontent-length: {}\r\n\r\n",
        slow_body.len()
    );
    slow.write_all(head.as_bytes()).await.unwrap();
    slow.write_all(&slow_body[..1]).await.unwrap();
    wait_debug(&admin, "the slow request in flight", |v| v["admission"]["inflight"] == 1).await;
    (w, cg, slow, slow_body[1..].to_vec())
}

/// Sends `n` bodies of `len` bytes on new connections, one after another, each held before
/// the next goes; their answers (with the time each came) and the clients' ports.
async fn send_held(w: &Weir, n: u64, len: usize) -> (Vec<tokio::task::JoinHandle<(Option<Answer>, Instant)>>, Vec<u16>) {
    let (mut answers, mut ports) = (Vec::new(), Vec::new());
    let held_before = debug(&w.admin()).await["hold"]["held"].as_u64().unwrap();
    for i in 0..n {
        let mut s = tokio::net::TcpStream::connect(w.app.http_addr.unwrap()).await.unwrap();
        ports.push(s.local_addr().unwrap().port());
        answers.push(tokio::spawn(async move {
            let r = exchange(&mut s, "-", &vec![7u8; len]).await;
            (r, Instant::now())
        }));
        wait_debug(&w.admin(), "one more held", |v| v["hold"]["held"] == held_before + i + 1).await;
    }
    (answers, ports)
}

type Answer = (u16, Option<String>, Vec<u8>);

#[tokio::test]
async fn a_held_http1_body_is_read_away_during_the_hold_and_takes_no_room_and_no_body_budget() {
    let (w, _cg, mut slow, rest) = held_weir(100_000).await;
    let admin = w.admin();
    // Three 250 KB bodies, more than the 100 KB room: each is held all the same, its body
    // read away while its client waits.
    let (answers, ports) = send_held(&w, 3, 250_000).await;
    let v = debug(&admin).await;
    assert_eq!(v["hold"]["held_bytes"], 0, "read away, nothing counts against the room: {}", v["hold"]);
    // In the kernel: nothing of them waits in weir's sockets once read.
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let unread = unread_by_peer(w.app.http_addr.unwrap().port());
        let of = |port: u16| unread.iter().find(|(p, _)| *p == port).map(|(_, q)| *q);
        if ports.iter().all(|p| of(*p) == Some(0)) {
            break;
        }
        assert!(Instant::now() < deadline, "held bodies left in weir's sockets: {unread:?} (clients {ports:?})");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(debug(&admin).await["hold"]["held"], 3, "still held after their bodies were read");
    // Read only to be dropped, they take none of the body budget: only the slow
    // request's small body is charged.
    let in_flight = metric_value(&admin, "weir_receiver_body_bytes_in_flight").await.unwrap_or(0.0);
    assert!(in_flight <= rest.len() as f64 + 1.0, "held refusals charged {in_flight} bytes to the body budget");
    // A request with no body at all (no length, no transfer coding) leaves nothing unread:
    // held too, taking no room.
    let mut bare = tokio::net::TcpStream::connect(w.app.http_addr.unwrap()).await.unwrap();
    let bare_answer = tokio::spawn(async move {
        exchange_raw(&mut bare, "POST /v1/traces HTTP/1.1\r\nhost: weir\r\ncontent-type: application/x-protobuf\r\n\r\n", b"").await
    });
    let v = wait_debug(&admin, "the body-less request held", |v| v["hold"]["held"] == 4).await;
    assert_eq!(v["hold"]["held_bytes"], 0, "{}", v["hold"]);
    let (status, connection, _) = bare_answer.await.unwrap().expect("the body-less refusal's answer");
    assert_eq!((status, connection), (429, None));
    // Each answered after its hold with a complete 429 on a connection that stays open.
    for a in answers {
        let (r, _) = a.await.unwrap();
        let (status, connection, body) = r.expect("a held refusal's answer");
        assert_eq!((status, connection), (429, None), "{}", String::from_utf8_lossy(&body));
        assert!(String::from_utf8_lossy(&body).contains("retry after"), "{}", String::from_utf8_lossy(&body));
    }
    let (status, _, _) = exchange_raw(&mut slow, "", &rest).await.expect("the first request's answer");
    assert_eq!(status, 200);
    w.app.shutdown().await;
}

#[tokio::test]
async fn bodies_too_large_to_read_first_stop_at_the_room_the_v2_memory_leaves() {
    // 0.85 x 100 MB = 85 MB enter line, 82 MB in use and none of it socket buffers: room
    // for 3 MB of unread bodies.
    let (w, cg, mut slow, rest) = held_weir(3_000_000).await;
    let admin = w.admin();
    // Two 1.2 MB bodies (more than a refusal reads) fit and are held unread.
    let (answers, ports) = send_held(&w, 2, 1_200_000).await;
    let v = debug(&admin).await;
    assert_eq!(v["hold"]["held_bytes"], 2_400_000, "{}", v["hold"]);
    let unread = unread_by_peer(w.app.http_addr.unwrap().port());
    let of = |port: u16| unread.iter().find(|(p, _)| *p == port).map(|(_, q)| *q);
    assert!(ports.iter().all(|p| of(*p).is_some_and(|q| q > 50_000)), "held bodies not in weir's sockets: {unread:?}");
    // The third would pass the room: answered at once, closing, with its answer intact.
    let mut s = tokio::net::TcpStream::connect(w.app.http_addr.unwrap()).await.unwrap();
    let (status, connection, body) = exchange(&mut s, "-", &vec![7u8; 1_200_000]).await.expect("an answer, not a reset");
    let answered_at_once = Instant::now();
    assert_eq!(status, 429, "{}", String::from_utf8_lossy(&body));
    assert_eq!(connection.as_deref(), Some("close"));
    assert_eq!(metric_value(&admin, "weir_throttle_holds_skipped_total{reason=\"held_bytes\"}").await, Some(1.0));
    let v = debug(&admin).await;
    assert_eq!((v["hold"]["held"].as_u64(), v["hold"]["held_bytes"].as_u64()), (Some(2), Some(2_400_000)), "{}", v["hold"]);
    // The held ones are answered after their hold, after the one past the room.
    for a in answers {
        let (r, at) = a.await.unwrap();
        let (status, _, _) = r.expect("a held refusal's answer");
        assert_eq!(status, 429);
        assert!(at > answered_at_once, "a held refusal was answered before the one past the room");
    }
    let v = wait_debug(&admin, "nothing held", |v| v["hold"]["held"] == 0).await;
    assert_eq!(v["hold"]["held_bytes"], 0);

    // More memory of weir's own shrinks the room; socket buffers do not.
    memory(cg.path(), 84_000_000, 0);
    wait_debug(&admin, "room from 84 MB with no sockets", |v| v["hold"]["room_bytes"] == 1_000_000).await;
    memory(cg.path(), 80_000_000, 15_000_000);
    wait_debug(&admin, "room from 80 MB of which 15 MB sockets", |v| v["hold"]["room_bytes"] == 20_000_000).await;

    let (status, _, _) = exchange_raw(&mut slow, "", &rest).await.expect("the first request's answer");
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
