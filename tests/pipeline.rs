//! The bounded pipeline and the exporters, end to end over real sockets: a full queue
//! answers 503 / UNAVAILABLE with a retry delay, a clean shutdown loses nothing,
//! `otlp` and `otlphttp` deliver to a second weir, and retries honour Retry-After.

mod support;

use axum::http::StatusCode;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use prost::Message;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::*;

/// An upstream that answers each request with the next status in `script` (then 200),
/// counting the requests it saw.
async fn scripted_upstream(script: Vec<(u16, Option<&'static str>)>, delay: Duration) -> (String, Arc<AtomicUsize>) {
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&seen);
    let script = Arc::new(script);
    let app = axum::Router::new().fallback(move || {
        let n = counter.fetch_add(1, Ordering::SeqCst);
        let script = Arc::clone(&script);
        async move {
            tokio::time::sleep(delay).await;
            let (code, retry_after) = script.get(n).copied().unwrap_or((200, None));
            let mut resp = axum::response::Response::new(axum::body::Body::empty());
            *resp.status_mut() = StatusCode::from_u16(code).unwrap();
            if let Some(r) = retry_after {
                resp.headers_mut().insert("retry-after", r.parse().unwrap());
            }
            resp
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), seen)
}

fn with_exporters(exporters: &str, pipeline: &str) -> String {
    let base = base_yaml(std::path::Path::new("{dir}"), "");
    let start = base.find("pipeline:").unwrap();
    let end = base.find("admin:").unwrap();
    format!("{}{pipeline}\nexporters:\n{exporters}\n{}", &base[..start], &base[end..])
}

#[tokio::test]
async fn full_queue_answers_503_and_unavailable_with_retry_delay() {
    // The upstream holds each export for 3 s, so accepted data stays in the budget.
    let (upstream, _) = scripted_upstream(vec![], Duration::from_secs(3)).await;
    let yaml = with_exporters(
        &format!("  - type: otlphttp\n    endpoint: \"{upstream}\"\n    compression: none\n"),
        "pipeline:\n  queue:\n    max_bytes: 3000\n    retry_after: 7s\n  batch:\n    max_items: 1\n    timeout: 10ms\n",
    );
    let w = start_yaml(&yaml).await;
    let body = traces("q", 5, 5).encode_to_vec();
    let c = reqwest::Client::new();
    let mut statuses = Vec::new();
    for _ in 0..10 {
        let r = c
            .post(format!("{}/v1/traces", w.http()))
            .header("content-type", "application/x-protobuf")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        statuses.push((r.status().as_u16(), r.headers().get("retry-after").map(|v| v.to_str().unwrap().to_string())));
    }
    assert_eq!(statuses[0].0, 200);
    let full: Vec<_> = statuses.iter().filter(|(s, _)| *s == 503).collect();
    assert!(!full.is_empty(), "{statuses:?}");
    // Held refusals announce the 7 s less their hold (at most hold.max, 2 s).
    let announced = |ra: &Option<String>| ra.as_deref().and_then(|v| v.parse::<u64>().ok());
    assert!(full.iter().all(|(_, ra)| announced(ra).is_some_and(|s| (5..=7).contains(&s))), "{statuses:?}");

    let ch = tonic::transport::Channel::from_shared(w.grpc()).unwrap().connect().await.unwrap();
    let asked = std::time::Instant::now();
    let err = TraceServiceClient::new(ch).export(traces("q", 5, 5)).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable);
    // Refused before the body is read and held: the hold and the announced rest make 7 s.
    let delay = weir::exporter::retry_delay_of(&err).expect("RetryInfo");
    let held = asked.elapsed();
    assert!(delay <= Duration::from_secs(7) && delay + held >= Duration::from_secs(7), "{delay:?} after {held:?}");
    let rejected = metric_value(&w.admin(), "weir_items_rejected_total{signal=\"traces\",reason=\"queue_full\"}").await.unwrap();
    assert!(rejected >= 5.0, "{rejected}");
    assert!(w.app.queued_bytes() <= 3000 + body.len());
}

#[tokio::test]
async fn clean_shutdown_exports_everything_accepted() {
    let yaml = base_yaml(std::path::Path::new("{dir}"), "").replace("timeout: 20ms", "timeout: 5s");
    let w = start_yaml(&yaml).await;
    let mut tasks = Vec::new();
    for i in 0..20 {
        let url = format!("{}/v1/traces", w.http());
        tasks.push(tokio::spawn(async move {
            let body = traces(&format!("s{i}"), 25, 3).encode_to_vec();
            reqwest::Client::new()
                .post(url)
                .header("content-type", "application/x-protobuf")
                .body(body)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }));
    }
    let ch = tonic::transport::Channel::from_shared(w.grpc()).unwrap().connect().await.unwrap();
    for i in 0..10 {
        TraceServiceClient::new(ch.clone()).export(traces(&format!("g{i}"), 10, 3)).await.unwrap();
    }
    let mut accepted = 100;
    for t in tasks {
        if t.await.unwrap() == 200 {
            accepted += 25;
        }
    }
    assert_eq!(accepted, 600);
    let dir = w.data_dir();
    // The batch timeout is 5 s: nothing is flushed yet; shutdown must flush it all.
    w.app.shutdown().await;
    let spans = items_of(&read_lines(&dir, "traces"), "traces");
    assert_eq!(spans.len(), accepted);
    let mut names: Vec<_> = spans.iter().map(|s| s["name"].as_str().unwrap().to_string()).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), accepted, "no duplicates, no losses");
}

#[tokio::test]
async fn otlp_and_otlphttp_exporters_deliver_to_a_second_weir() {
    let sink = start_default().await;
    let yaml = with_exporters(
        &format!(
            // gzip (the default) and zstd, each over gRPC and over HTTP.
            "  - type: otlp\n    endpoint: \"{0}\"\n  - type: otlphttp\n    name: via-http\n    endpoint: \"{1}\"\n  \
             - type: otlp\n    name: grpc-zstd\n    compression: zstd\n    endpoint: \"{0}\"\n  \
             - type: otlphttp\n    name: http-zstd\n    compression: zstd\n    endpoint: \"{1}\"\n",
            sink.grpc(),
            sink.http()
        ),
        "pipeline:\n  batch:\n    timeout: 20ms\n",
    );
    let front = start_yaml(&yaml).await;
    let c = reqwest::Client::new();
    for (path, body) in [
        ("/v1/traces", traces("fw", 4, 2).encode_to_vec()),
        ("/v1/logs", logs("fw", 3).encode_to_vec()),
        ("/v1/metrics", metrics("fw", 2).encode_to_vec()),
    ] {
        let r = c.post(format!("{}{path}", front.http())).header("content-type", "application/x-protobuf").body(body).send().await.unwrap();
        assert_eq!(r.status(), 200);
    }
    // Each item arrives four times: once per exporter.
    assert_eq!(wait_items(&sink.data_dir(), "traces", 16).await.len(), 16);
    assert_eq!(wait_items(&sink.data_dir(), "logs", 12).await.len(), 12);
    assert_eq!(wait_items(&sink.data_dir(), "metrics", 8).await.len(), 8);
    for encoding in ["gzip", "zstd"] {
        let inflated =
            metric_value(&sink.admin(), &format!("weir_receiver_decompressed_input_bytes_total{{encoding=\"{encoding}\"}}")).await;
        assert!(inflated.is_some_and(|v| v > 0.0), "the sink inflated no {encoding}: {inflated:?}");
    }
    front.app.shutdown().await;
    sink.app.shutdown().await;
}

#[tokio::test]
async fn otlphttp_retries_honour_retry_after_then_drop_with_reason() {
    let (upstream, seen) = scripted_upstream(vec![(503, Some("1")), (429, None)], Duration::ZERO).await;
    let yaml = with_exporters(
        &format!("  - type: otlphttp\n    name: flaky\n    endpoint: \"{upstream}\"\n    retry: {{initial_interval: 50ms, max_interval: 100ms, max_elapsed: 10s}}\n"),
        "pipeline:\n  batch:\n    timeout: 10ms\n",
    );
    let w = start_yaml(&yaml).await;
    let started = std::time::Instant::now();
    let r = reqwest::Client::new()
        .post(format!("{}/v1/traces", w.http()))
        .header("content-type", "application/x-protobuf")
        .body(traces("r", 3, 1).encode_to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while seen.load(Ordering::SeqCst) < 3 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(seen.load(Ordering::SeqCst), 3, "503, 429, then 200");
    assert!(started.elapsed() >= Duration::from_secs(1), "Retry-After: 1 was honoured");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let exported = metric_value(&w.admin(), "weir_items_exported_total{signal=\"traces\",exporter=\"flaky\"}").await;
    assert_eq!(exported, Some(3.0));

    // A permanent 400 drops at once, counted with its reason.
    let (bad, _) = scripted_upstream(vec![(400, None)], Duration::ZERO).await;
    let yaml = with_exporters(
        &format!("  - type: otlphttp\n    name: rejecting\n    endpoint: \"{bad}\"\n"),
        "pipeline:\n  batch:\n    timeout: 10ms\n",
    );
    let w2 = start_yaml(&yaml).await;
    reqwest::Client::new()
        .post(format!("{}/v1/logs", w2.http()))
        .header("content-type", "application/x-protobuf")
        .body(logs("x", 4).encode_to_vec())
        .send()
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut dropped = None;
    while dropped.is_none() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        dropped =
            metric_value(&w2.admin(), "weir_items_dropped_total{signal=\"logs\",exporter=\"rejecting\",reason=\"permanent_error\"}").await;
    }
    assert_eq!(dropped, Some(4.0));
}

/// The throttle refuses up front what cannot fit in the queue, before the body is read.
/// An OTLP/JSON body counts as half its length (protobuf takes a third to nine tenths
/// of it): an idle weir whose whole budget is smaller than the JSON body, but larger
/// than what it encodes to, still accepts it.
#[tokio::test]
async fn an_idle_weir_accepts_a_json_body_that_fits_once_encoded() {
    let json = std::fs::read(format!("{}/tests/data/otlp-examples/trace.json", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let budget = json.len() * 3 / 4;
    let yaml = with_exporters(
        "  - type: blackhole\n",
        &format!("pipeline:\n  queue:\n    max_bytes: {budget}\n  batch:\n    max_items: 1\n    timeout: 10ms\n"),
    );
    // The throttle (which runs the queue check) on the HTTP server, idle.
    let yaml = yaml.replacen(
        r#"middlewares: ["logging", "content_decompressor"]"#,
        r#"middlewares: ["logging", "content_decompressor", "throttle"]"#,
        1,
    );
    let w = start_yaml(&yaml).await;
    let r = reqwest::Client::new()
        .post(format!("{}/v1/traces", w.http()))
        .header("content-type", "application/json")
        .body(json.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "a {}-byte JSON body into a {budget}-byte budget: {}", json.len(), r.text().await.unwrap_or_default());
    w.app.shutdown().await;
}
