//! (Own test binary: its metric assertions need a process where no other test sends data.)
//! The throttle end to end on real sockets, with the cgroup read from a fixture tree the
//! test rewrites (the real-cgroup test is `cgroup_e2e.rs`): Open answers 503 / gRPC
//! RESOURCE_EXHAUSTED with retry info, Shedding answers 429, a refused gzip bomb is never
//! read or decompressed, and an idle machine refuses nothing.

mod support;

use support::throttle_fixture::*;
use support::*;

#[tokio::test]
async fn a_refused_gzip_bomb_is_never_read_or_decompressed() {
    let cg = tempfile::tempdir().unwrap();
    fixture(cg.path(), 990);
    let w = start_yaml(&yaml(cg.path(), "      default: {drop_min: 0.0, drop_max: 1.0}")).await;
    wait_state(&w.admin(), "logs", "open").await;
    let bomb = gzip(&vec![0u8; 80 << 20]);
    let resp = post(&format!("{}/v1/logs", w.http()), bomb, true).await;
    assert_eq!(resp.status(), 503);
    // Nothing was fed to the decompressor and no body bytes were counted as received.
    assert_eq!(metric_value(&w.admin(), "weir_receiver_decompressed_input_bytes_total").await, None);
    assert_eq!(metric_value(&w.admin(), "weir_receiver_request_bytes_total").await, None);
    w.app.shutdown().await;
}
