//! The queue in front of weir, seen through real sockets: while the only core is busy, a
//! request's bytes wait in the kernel, and the request must arrive at the service knowing
//! how long (`receiver::connection::stamp`, plumbed through `receiver::connection::listener::serve`).

use axum::routing::get;
use axum::Router;
use std::io::{Read, Write};
use std::time::Duration;
use weir::receiver::connection::stamp::RxStamp;

fn get_over_http1(addr: std::net::SocketAddr, path: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out.split("\r\n\r\n").nth(1).unwrap_or_default().to_string()
}

/// One runtime thread, blocked 400 ms by the first request's handler (a stand-in for a
/// core busy decoding). A second client sends its request once that handler has started:
/// it reaches its handler having waited most of the 400 ms, and says so. A third, sent on
/// an idle server, waited less.
#[tokio::test(flavor = "current_thread")]
async fn a_request_knows_how_long_it_waited_for_a_busy_server() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let started = std::sync::Arc::new(AtomicBool::new(false));
    let busy_started = std::sync::Arc::clone(&started);
    let app = Router::new()
        .route(
            "/busy",
            get(move || async move {
                busy_started.store(true, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(400));
                "done"
            }),
        )
        .route(
            "/waited",
            get(|req: axum::extract::Request| async move {
                req.extensions()
                    .get::<RxStamp>()
                    .and_then(RxStamp::waited_nanos)
                    .map_or("no stamp".to_string(), |n| (n / 1_000_000).to_string())
            }),
        );
    let server = weir::receiver::connection::listener::serve(weir::receiver::connection::listener::Listen::new("test", "127.0.0.1:0"), app)
        .await
        .unwrap();
    let addr = server.local_addr;

    // The kernel turns receive timestamps on a moment after the first socket asks for them
    // (deferred work; weir's listener asks at bind and keeps them on for its life). A
    // process whose first socket is this listener can see its first few requests
    // unstamped, so wait until a request on the idle server comes back stamped.
    let mut stamped = false;
    for _ in 0..200 {
        let got = tokio::task::spawn_blocking(move || get_over_http1(addr, "/waited")).await.unwrap();
        if got.parse::<u64>().is_ok() {
            stamped = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(stamped, "no request came back stamped within 2 s of the listener asking for stamps");

    let busy = std::thread::spawn(move || get_over_http1(addr, "/busy"));
    let waiting = std::thread::spawn(move || {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !started.load(Ordering::SeqCst) {
            assert!(std::time::Instant::now() < deadline, "the busy handler never ran");
            std::thread::sleep(Duration::from_millis(1));
        }
        get_over_http1(addr, "/waited")
    });
    // Lets the runtime serve both while the test's own threads wait.
    let (busy, waiting) = tokio::task::spawn_blocking(move || (busy.join().unwrap(), waiting.join().unwrap())).await.unwrap();
    assert_eq!(busy, "done");
    let waited_ms: u64 = waiting.parse().unwrap_or_else(|_| panic!("want milliseconds, got {waiting:?}"));
    assert!((100..5_000).contains(&waited_ms), "the second request waited {waited_ms} ms for the busy runtime, want most of 400");

    let idle = tokio::task::spawn_blocking(move || get_over_http1(addr, "/waited")).await.unwrap();
    let idle_ms: u64 = idle.parse().unwrap_or_else(|_| panic!("want milliseconds, got {idle:?}"));
    assert!(idle_ms < waited_ms, "on an idle server a request waited {idle_ms} ms, no less than the queued one's {waited_ms} ms");
    server.shutdown(Duration::from_secs(1)).await;
}
