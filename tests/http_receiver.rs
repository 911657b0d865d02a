//! OTLP/HTTP protobuf over real sockets: every compression, every error status, and the
//! file exporter's output read back item by item.

mod support;

use prost::Message;
use std::io::Write;
use support::*;
use weir::rpc;

fn client() -> reqwest::Client {
    reqwest::Client::new()
}

async fn post(url: &str, ct: &str, encoding: Option<&str>, body: Vec<u8>) -> reqwest::Response {
    let mut req = client().post(url).header("content-type", ct).body(body);
    if let Some(e) = encoding {
        req = req.header("content-encoding", e);
    }
    req.send().await.expect("request sent")
}

#[tokio::test]
async fn every_compression_is_accepted_and_exported() {
    let w = start_default().await;
    let url = format!("{}/v1/traces", w.http());
    type Compress = Box<dyn Fn(&[u8]) -> Vec<u8>>;
    let compressions: Vec<(&str, Compress)> = vec![
        ("identity", Box::new(|d: &[u8]| d.to_vec())),
        ("gzip", Box::new(|d: &[u8]| gzip(d))),
        (
            "deflate",
            Box::new(|d: &[u8]| {
                let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
                e.write_all(d).unwrap();
                e.finish().unwrap()
            }),
        ),
        ("zstd", Box::new(|d: &[u8]| zstd::encode_all(d, 3).unwrap())),
        ("snappy", Box::new(|d: &[u8]| snap::raw::Encoder::new().compress_vec(d).unwrap())),
    ];
    for (name, compress) in &compressions {
        let body = compress(&traces(name, 3, 2).encode_to_vec());
        let resp = post(&url, "application/x-protobuf", Some(name), body).await;
        assert_eq!(resp.status(), 200, "{name}");
        assert_eq!(resp.headers()["content-type"], "application/x-protobuf");
        let bytes = resp.bytes().await.unwrap();
        let decoded = opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse::decode(bytes).unwrap();
        assert!(decoded.partial_success.is_none());
    }
    let spans = wait_items(&w.data_dir(), "traces", 15).await;
    assert_eq!(spans.len(), 15);
    for (name, _) in &compressions {
        for i in 0..3 {
            let want = format!("span-{name}-{i}");
            let span = spans.iter().find(|s| s["name"] == want.as_str()).unwrap_or_else(|| panic!("{want} missing"));
            let trace_id: String = (0..16u8).map(|b| format!("{:02x}", b ^ i as u8)).collect();
            assert_eq!(span["traceId"], trace_id.as_str());
            assert_eq!(span["kind"], 2);
            assert_eq!(span["attributes"][1]["key"], "attr.1");
            assert_eq!(span["attributes"][1]["value"]["stringValue"], format!("value-{i}-1").as_str());
        }
    }
    w.app.shutdown().await;
}

#[tokio::test]
async fn all_four_signals_over_http() {
    let w = start_default().await;
    let base = w.http();
    for (path, body) in [
        ("/v1/metrics", metrics("h", 4).encode_to_vec()),
        ("/v1/logs", logs("h", 5).encode_to_vec()),
        ("/v1development/profiles", profiles(2).encode_to_vec()),
    ] {
        let resp = post(&format!("{base}{path}"), "application/x-protobuf; charset=binary", None, body).await;
        assert_eq!(resp.status(), 200, "{path}");
    }
    assert_eq!(wait_items(&w.data_dir(), "metrics", 4).await.len(), 4);
    let logs = wait_items(&w.data_dir(), "logs", 5).await;
    assert_eq!(logs[4]["body"]["stringValue"], "log-h-4");
    let profs = wait_items(&w.data_dir(), "profiles", 2).await;
    assert_eq!(profs[1]["profileId"], "02".repeat(16).as_str());
    w.app.shutdown().await;
}

async fn status_of(resp: reqwest::Response) -> (u16, rpc::Status) {
    let code = resp.status().as_u16();
    let ct = resp.headers().get("content-type").map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
    let body = resp.bytes().await.unwrap();
    let status = if ct.starts_with("application/json") {
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        rpc::Status { code: v["code"].as_i64().unwrap() as i32, message: v["message"].as_str().unwrap().to_string(), details: vec![] }
    } else {
        rpc::Status::decode(body).expect("error body is a google.rpc.Status")
    };
    (code, status)
}

#[tokio::test]
async fn error_statuses_carry_a_status_body_that_names_the_problem() {
    let yaml = base_yaml(std::path::Path::new("{dir}"), "").replace(
        "middlewares: [\"logging\", \"content_decompressor\"]\n  grpc_server",
        "middlewares: [\"logging\", \"content_decompressor\", \"maxbytes;maxRequestBytes=200000\"]\n    max_request_body_bytes: 100000\n  grpc_server",
    );
    let w = start_yaml(&yaml).await;
    let url = format!("{}/v1/traces", w.http());
    let pb = "application/x-protobuf";

    let (code, st) = status_of(post(&url, pb, None, b"\xff\xff\xff garbage".to_vec()).await).await;
    assert_eq!((code, st.code), (400, 3));
    assert!(st.message.contains("cannot decode traces"), "{}", st.message);

    let (code, st) = status_of(post(&url, pb, Some("br"), vec![1, 2, 3]).await).await;
    assert_eq!(code, 400);
    assert!(st.message.contains("Content-Encoding `br`"), "{}", st.message);

    let (code, st) = status_of(post(&url, pb, Some("gzip"), b"not gzip".to_vec()).await).await;
    assert_eq!(code, 400);
    assert!(st.message.contains("invalid gzip"), "{}", st.message);

    let (code, st) = status_of(post(&url, "text/plain", None, vec![]).await).await;
    assert_eq!(code, 415);
    assert!(st.message.contains("text/plain"), "{}", st.message);

    let resp = client().get(&url).send().await.unwrap();
    assert_eq!(resp.headers()["allow"], "POST");
    assert_eq!(status_of(resp).await.0, 405);

    let resp = client().post(format!("{}/v1/nothing", w.http())).header("content-type", pb).body(vec![]).send().await.unwrap();
    assert_eq!(status_of(resp).await.0, 404);

    // Wire body over max_request_body_bytes (100 kB) but under maxbytes (200 kB).
    let big = traces("big", 400, 10).encode_to_vec();
    assert!(big.len() > 100_000 && big.len() < 200_000, "{}", big.len());
    let (code, st) = status_of(post(&url, pb, None, big.clone()).await).await;
    assert_eq!(code, 413);
    assert!(st.message.contains("100000"), "{}", st.message);

    // Over maxbytes: refused from Content-Length before reading.
    let (code, st) = status_of(post(&url, pb, None, vec![0; 300_000]).await).await;
    assert_eq!(code, 413);
    assert!(st.message.contains("maxRequestBytes=200000"), "{}", st.message);

    // A gzip bomb: tiny on the wire, past the limit decompressed.
    let bomb = gzip(&vec![0u8; 10 << 20]);
    assert!(bomb.len() < 100_000);
    let (code, st) = status_of(post(&url, pb, Some("gzip"), bomb).await).await;
    assert_eq!(code, 413);
    assert!(st.message.contains("decompressed"), "{}", st.message);

    // Nothing of the refused requests reached the exporter.
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert!(read_lines(&w.data_dir(), "traces").is_empty());
    let rejected =
        metric_value(&w.admin(), "weir_receiver_requests_rejected_total{protocol=\"http\",signal=\"traces\",reason=\"too_large\"}").await;
    assert_eq!(rejected, Some(3.0));
    w.app.shutdown().await;
}

#[tokio::test]
async fn compressed_body_without_decompressor_is_refused() {
    let yaml = base_yaml(std::path::Path::new("{dir}"), "").replacen(
        "middlewares: [\"logging\", \"content_decompressor\"]",
        "middlewares: [\"logging\"]",
        1,
    );
    let w = start_yaml(&yaml).await;
    let body = gzip(&traces("x", 1, 1).encode_to_vec());
    let (code, st) = status_of(post(&format!("{}/v1/traces", w.http()), "application/x-protobuf", Some("gzip"), body).await).await;
    assert_eq!(code, 415);
    assert!(st.message.contains("content_decompressor"), "{}", st.message);
    w.app.shutdown().await;
}

#[tokio::test]
async fn h2c_prior_knowledge_works() {
    let w = start_default().await;
    let c = reqwest::Client::builder().http2_prior_knowledge().build().unwrap();
    let resp = c
        .post(format!("{}/v1/traces", w.http()))
        .header("content-type", "application/x-protobuf")
        .body(traces("h2", 2, 1).encode_to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.version(), reqwest::Version::HTTP_2);
    assert_eq!(resp.status(), 200);
    assert_eq!(wait_items(&w.data_dir(), "traces", 2).await.len(), 2);
    w.app.shutdown().await;
}

#[tokio::test]
async fn cors_preflight_and_admin_endpoints() {
    let yaml = base_yaml(std::path::Path::new("{dir}"), "").replacen(
        "middlewares: [\"logging\", \"content_decompressor\"]",
        "middlewares: [\"logging\", \"content_decompressor\", \"cors;allowedOrigins=https://app.example\"]",
        1,
    );
    let w = start_yaml(&yaml).await;
    let url = format!("{}/v1/traces", w.http());
    let resp = client()
        .request(reqwest::Method::OPTIONS, &url)
        .header("origin", "https://app.example")
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "content-type")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 204);
    assert_eq!(resp.headers()["access-control-allow-origin"], "https://app.example");
    let resp = client()
        .request(reqwest::Method::OPTIONS, &url)
        .header("origin", "https://evil.example")
        .header("access-control-request-method", "POST")
        .send()
        .await
        .unwrap();
    assert!(resp.headers().get("access-control-allow-origin").is_none());

    assert_eq!(client().get(format!("{}/healthz", w.admin())).send().await.unwrap().status(), 200);
    assert_eq!(client().get(format!("{}/readyz", w.admin())).send().await.unwrap().status(), 200);
    let text = client().get(format!("{}/metrics", w.admin())).send().await.unwrap().text().await.unwrap();
    assert!(text.contains("weir_pipeline_queue_bytes"), "{text}");
    w.app.shutdown().await;
}

#[tokio::test]
async fn http1_refusal_keeps_the_connection_for_modest_bodies() {
    // A refusal answers before reading the body. Over HTTP/1.1 the unread bytes would
    // force the connection closed (and the client might see a reset instead of the 429);
    // weir reads a modest body away, without decoding it, and keeps the connection.
    let extra = "  auth:\n    tenants:\n      slow: {rate: {requests_per_second: 0.001, burst: 1}}\n      fast: {}\n";
    let w = start_yaml(&base_yaml(std::path::Path::new("{dir}"), extra)).await;
    let addr = w.app.http_addr.unwrap();
    let valid = traces("keep", 2, 1).encode_to_vec();
    let junk = vec![7u8; 300_000]; // refused before anyone looks at it
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    assert_eq!(exchange(&mut s, "slow", &valid).await.map(|r| r.0), Some(200), "the burst allows one");
    for i in 0..5 {
        let (status, connection, body) = exchange(&mut s, "slow", &junk).await.unwrap_or_else(|| panic!("refusal {i}: connection lost"));
        assert_eq!(status, 429, "refusal {i}");
        assert_eq!(connection, None, "refusal {i} keeps the connection");
        assert!(String::from_utf8_lossy(&body).contains("quota"), "the Status body names the reason");
    }
    assert_eq!(exchange(&mut s, "fast", &valid).await.map(|r| r.0), Some(200), "same connection, next request served");

    // No Content-Length and no Transfer-Encoding: the request ends at its headers, so a
    // refusal has nothing to read away and the connection carries on.
    let bodyless = "POST /v1/traces HTTP/1.1\r\nhost: weir\r\ncontent-type: application/x-protobuf\r\nx-bk-token: slow\r\n\r\n";
    let (status, connection, _) = exchange_raw(&mut s, bodyless, &[]).await.expect("a status, not a reset");
    assert_eq!((status, connection), (429, None), "a bodyless refusal keeps the connection");
    assert_eq!(exchange(&mut s, "fast", &valid).await.map(|r| r.0), Some(200), "and the next request is served on it");

    // Over the limit: answered at once with Connection: close, body never read.
    let huge = vec![7u8; (weir::receiver::middleware::drain::MAX_BYTES + 1) as usize];
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (status, connection, _) = exchange(&mut s, "slow", &huge).await.expect("a status, not a reset");
    assert_eq!((status, connection.as_deref()), (429, Some("close")));

    // Unauthenticated: never read, whatever its size (an unknown client must not make
    // weir read bodies), so the connection is closed after the 401.
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (status, connection, body) = exchange(&mut s, "nobody", &junk).await.expect("a status, not a reset");
    assert_eq!((status, connection.as_deref()), (401, Some("close")));
    assert!(String::from_utf8_lossy(&body).contains("unknown token"));
    w.app.shutdown().await;
}

/// A weir with an in-flight cap of one request (0.5 per core, two cores assumed) and
/// `line` added to its throttle block, and that one slot taken by a request whose body
/// is sent slowly (admission happens at the headers): send the returned rest to free it.
async fn weir_with_its_one_slot_held(line: &str) -> (Weir, tokio::net::TcpStream, Vec<u8>) {
    let extra = format!(
        "  throttle:\n    enabled: true\n    signal: {{fallback_cores: 2}}\n    max_inflight_per_core: 0.5\n    slow_start: {{enabled: false}}\n{line}"
    );
    let yaml = base_yaml(std::path::Path::new("{dir}"), &extra).replacen(
        r#"middlewares: ["logging", "content_decompressor"]"#,
        r#"middlewares: ["logging", "content_decompressor", "throttle"]"#,
        1,
    );
    let w = start_yaml(&yaml).await;
    let (held, rest) = take_a_slot(w.app.http_addr.unwrap(), &traces("held", 3, 1).encode_to_vec()).await;
    (w, held, rest)
}

#[tokio::test]
async fn a_full_inflight_cap_queues_for_max_inflight_wait() {
    let (w, held, rest) = weir_with_its_one_slot_held("    max_inflight_wait: 3s\n    inflight_wait_min_body_bytes: 0\n").await;
    // A second request waits for the held one's slot instead of being refused.
    waits_for_the_held_slot(&w, traces("second", 2, 1).encode_to_vec(), held, &rest).await;
    assert_eq!(wait_items(&w.data_dir(), "traces", 5).await.len(), 5, "both requests' spans exported");
    w.app.shutdown().await;
}

/// Sends `body` while the slot of [`weir_with_its_one_slot_held`] is taken: it must wait,
/// not be refused, and be admitted (200) once the held request's `rest` frees the slot.
async fn waits_for_the_held_slot(w: &Weir, body: Vec<u8>, mut held: tokio::net::TcpStream, rest: &[u8]) {
    use tokio::io::AsyncWriteExt;
    let waiting = tokio::spawn(post_owned(format!("{}/v1/traces", w.http()), body));
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "the request is waiting, not refused");
    held.write_all(rest).await.unwrap();
    let status = tokio::time::timeout(std::time::Duration::from_secs(5), waiting).await.expect("admitted once the slot is free").unwrap();
    assert_eq!(status, 200);
}

/// `inflight_wait_min_body_bytes`: a body declared smaller is refused at once (here not
/// held, to see it at once), a larger one waits for the slot.
#[tokio::test]
async fn only_bodies_of_inflight_wait_min_body_bytes_wait_for_a_slot() {
    let small = traces("small", 2, 1).encode_to_vec();
    let large = traces("large", 40, 1).encode_to_vec();
    assert!(large.len() > small.len() + 1);
    let line = format!("    max_inflight_wait: 3s\n    inflight_wait_min_body_bytes: {}\n    hold: {{enabled: false}}\n", small.len() + 1);
    let (w, held, rest) = weir_with_its_one_slot_held(&line).await;
    let url = format!("{}/v1/traces", w.http());
    // Refused at once: well before the 3 s it would have waited, the slot still taken.
    let send = client().post(&url).header("content-type", "application/x-protobuf").body(small).send();
    let refused = tokio::time::timeout(std::time::Duration::from_secs(1), send).await.expect("refused without waiting").unwrap();
    assert_eq!(refused.status().as_u16(), 429, "a small body does not wait");
    assert!(refused.headers().contains_key("retry-after"), "and is told when to come back");
    waits_for_the_held_slot(&w, large, held, &rest).await;
    assert_eq!(wait_items(&w.data_dir(), "traces", 43).await.len(), 43, "the held and the large request's spans exported");
    w.app.shutdown().await;
}

/// Requests waiting in the line for a slot do not hold the queue's room: with room for
/// three bodies and one slot, five requests that arrive while the slot is taken all wait,
/// none refused 503 as if the queue were full while it is empty. Once the slot is free
/// they go in one after the other; one may still find the queue full then (the file
/// exporter may lag), and is told so.
#[tokio::test]
async fn requests_waiting_for_a_slot_do_not_hold_queue_room() {
    let body = traces("queued", 40, 1).encode_to_vec();
    // Refusals answered at once (not held), to see any at once.
    let line =
        "    max_inflight_wait: 10s\n    inflight_wait_min_body_bytes: 0\n    max_inflight_queue_per_core: 8\n    hold: {enabled: false}\n";
    let extra = format!(
        "  throttle:\n    enabled: true\n    signal: {{fallback_cores: 2}}\n    max_inflight_per_core: 0.5\n    slow_start: {{enabled: false}}\n{line}"
    );
    let yaml = base_yaml(std::path::Path::new("{dir}"), &extra)
        .replacen(
            r#"middlewares: ["logging", "content_decompressor"]"#,
            r#"middlewares: ["logging", "content_decompressor", "throttle"]"#,
            1,
        )
        .replacen("pipeline:\n", &format!("pipeline:\n  queue:\n    max_bytes: {}\n", body.len() * 4), 1)
        .replacen("max_items: 100000", "max_items: 40", 1); // a body is a batch, sent at once
    let w = start_yaml(&yaml).await;
    let (mut held, rest) = take_a_slot(w.app.http_addr.unwrap(), &traces("held", 3, 1).encode_to_vec()).await;
    let url = format!("{}/v1/traces", w.http());
    let send = |url: String, body: Vec<u8>| async move {
        let r = client().post(url).header("content-type", "application/x-protobuf").body(body).send().await.unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    };
    let waiting: Vec<_> = (0..5).map(|_| tokio::spawn(send(url.clone(), body.clone()))).collect();
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let answered = waiting.iter().filter(|t| t.is_finished()).count();
    assert_eq!(answered, 0, "all five wait for the slot; none is refused while the queue is empty");
    {
        use tokio::io::AsyncWriteExt;
        held.write_all(&rest).await.unwrap();
    }
    let mut statuses = Vec::new();
    for t in waiting {
        // Well before their 10 s wait ends: a waiter that leaves the line without the slot
        // it was woken for passes the wake-up on.
        statuses.push(tokio::time::timeout(std::time::Duration::from_secs(5), t).await.expect("answered").unwrap());
    }
    let ok = statuses.iter().filter(|(s, _)| *s == 200).count();
    assert!(statuses.iter().all(|(s, m)| *s == 200 || (*s == 503 && m.contains("queue is full"))), "{statuses:?}");
    assert!(ok >= 3, "the queue had room for three: {statuses:?}");
    let spans = 3 + 40 * ok;
    assert_eq!(wait_items(&w.data_dir(), "traces", spans).await.len(), spans, "every accepted span exported");
    w.app.shutdown().await;
}

async fn post_owned(url: String, body: Vec<u8>) -> u16 {
    client().post(url).header("content-type", "application/x-protobuf").body(body).send().await.unwrap().status().as_u16()
}

/// What an h2 client may send on a fresh stream before weir reads anything: the stream
/// window weir announced (capped by the connection window, which weir raises to 1 MiB).
async fn first_stream_capacity(addr: std::net::SocketAddr, path: &str) -> u32 {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    // The client's own send buffer (400 KiB by default) must not be the limit seen.
    let (mut h2, conn) =
        h2::client::Builder::new().max_send_buffer_size(4 << 20).handshake::<_, bytes::Bytes>(tcp).await.expect("h2 handshake");
    tokio::spawn(conn);
    let post = |path: &str| {
        axum::http::Request::post(format!("http://{addr}{path}")).header("content-type", "application/x-protobuf").body(()).unwrap()
    };
    // One whole request first, so weir's SETTINGS and connection WINDOW_UPDATE are in.
    h2 = h2.ready().await.unwrap();
    let (resp, mut body) = h2.send_request(post(path), false).unwrap();
    body.send_data(traces("window", 1, 1).encode_to_vec().into(), true).unwrap();
    assert_eq!(resp.await.unwrap().status(), 200);
    h2 = h2.ready().await.unwrap();
    let (_resp, mut body) = h2.send_request(post(path), false).unwrap();
    body.reserve_capacity(4 << 20);
    let mut seen = 0;
    // Capacity comes as it is granted; take the largest seen within a moment.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_millis(300);
    while let Ok(Some(cap)) = tokio::time::timeout_at(deadline, std::future::poll_fn(|cx| body.poll_capacity(cx))).await {
        seen = seen.max(cap.unwrap() as u32);
    }
    seen
}

/// `http2_stream_window_bytes` is what a client sees: 64 KiB where configured (a refused
/// request then costs weir at most that much received and discarded), 1 MiB by default.
#[tokio::test]
async fn the_http2_stream_window_is_what_the_config_says() {
    let yaml = base_yaml(std::path::Path::new("{dir}"), "").replace(
        "    middlewares: [\"logging\", \"content_decompressor\"]\n  grpc_server:",
        "    middlewares: [\"logging\", \"content_decompressor\"]\n    http2_stream_window_bytes: 65535\n  grpc_server:",
    );
    assert!(yaml.contains("http2_stream_window_bytes: 65535"), "{yaml}");
    let w = start_yaml(&yaml).await;
    let small = first_stream_capacity(w.app.http_addr.unwrap(), "/v1/traces").await;
    assert_eq!(small, 65535, "configured stream window");
    let w2 = start_default().await;
    let default = first_stream_capacity(w2.app.http_addr.unwrap(), "/v1/traces").await;
    // The connection window (also 1 MiB) may still be short of the first request's few
    // body bytes, not yet given back.
    let full = weir::config::DEFAULT_H2_STREAM_WINDOW;
    assert!((full - 1024..=full).contains(&default), "default stream window: {default}, want about {full}");
}
