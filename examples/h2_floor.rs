//! The floor under a refusal's cost: a bare HTTP/2 server that answers every request
//! with weir's quota refusal (429, `retry-after`, the same 112-byte body) and does
//! nothing else. No routing, no auth, no throttle, no tower, no hyper, no task per
//! stream: the h2 crate weir is built on, weir's socket layer (`stamp::Stamped`:
//! read-ahead, gathered writes), weir's allocator and runtime. What weir spends on a
//! refusal above what this spends is what weir itself adds; the rest is HTTP/2 framing,
//! HPACK and the kernel. `scripts/bench-throughput.sh` runs it next to weir.
//!
//! `cargo run --release --example h2_floor -- 127.0.0.1:4320` (`FLOOR_WINDOW=0` sets the
//! initial stream window, default weir's 1 MiB: 0 shows what a body the client may not
//! send costs, which is what weir's closed window during refusals buys).

use bytes::Bytes;
use std::time::Duration;
use weir::receiver::connection::stamp::{enable_on_listener, Stamped};

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[path = "common/refusal.rs"]
mod refusal;

fn main() {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:4320".into());
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&addr).await.unwrap_or_else(|e| panic!("cannot listen on {addr}: {e}"));
        enable_on_listener(&listener);
        let body = Bytes::from(refusal::quota_refusal_body());
        println!("h2_floor listening on {}", listener.local_addr().expect("bound address"));
        loop {
            let (stream, _) = match listener.accept().await {
                Ok(x) => x,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            tokio::spawn(serve(Stamped::new(stream), body.clone()));
        }
    });
}

/// One connection, with the HTTP/2 settings weir uses: every stream answered where it
/// is accepted.
async fn serve(io: Stamped, body: Bytes) {
    let mut builder = h2::server::Builder::new();
    builder
        .initial_window_size(
            std::env::var("FLOOR_WINDOW").ok().and_then(|v| v.parse().ok()).unwrap_or(weir::config::DEFAULT_H2_STREAM_WINDOW),
        )
        .initial_connection_window_size(weir::config::DEFAULT_H2_STREAM_WINDOW)
        .max_concurrent_streams(200)
        .max_local_error_reset_streams(Some(100_000));
    let Ok(mut conn) = builder.handshake::<_, Bytes>(io).await else { return };
    while let Some(Ok((request, mut respond))) = conn.accept().await {
        drop(request);
        let head = http::Response::builder()
            .status(429)
            .header("content-type", "application/x-protobuf")
            .header("retry-after", "1")
            .header("content-length", body.len())
            .body(())
            .expect("static response head");
        if let Ok(mut send) = respond.send_response(head, false) {
            let _ = send.send_data(body.clone(), true);
        }
    }
}
