//! OTLP/gRPC with tonic clients: all four signals, gzip, the receive limit, auth.

mod support;

use opentelemetry_proto::tonic::collector::logs::v1::logs_service_client::LogsServiceClient;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::collector::profiles::v1development::profiles_service_client::ProfilesServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use support::*;
use tonic::codec::CompressionEncoding;
use tonic::Code;

#[tokio::test]
async fn all_four_signals_with_and_without_gzip() {
    let w = start_default().await;
    let ch = tonic::transport::Channel::from_shared(w.grpc()).unwrap().connect().await.unwrap();
    TraceServiceClient::new(ch.clone()).export(traces("g", 3, 2)).await.expect("traces");
    TraceServiceClient::new(ch.clone()).send_compressed(CompressionEncoding::Gzip).export(traces("gz", 2, 2)).await.expect("gzip traces");
    MetricsServiceClient::new(ch.clone()).export(metrics("g", 4)).await.expect("metrics");
    LogsServiceClient::new(ch.clone()).send_compressed(CompressionEncoding::Gzip).export(logs("g", 5)).await.expect("logs");
    ProfilesServiceClient::new(ch.clone()).export(profiles(3)).await.expect("profiles");

    let spans = wait_items(&w.data_dir(), "traces", 5).await;
    let mut names: Vec<_> = spans.iter().map(|s| s["name"].as_str().unwrap().to_string()).collect();
    names.sort();
    assert_eq!(names, ["span-g-0", "span-g-1", "span-g-2", "span-gz-0", "span-gz-1"]);
    let m = wait_items(&w.data_dir(), "metrics", 4).await;
    assert_eq!(m[3]["gauge"]["dataPoints"][0]["asInt"], "3");
    let l = wait_items(&w.data_dir(), "logs", 5).await;
    assert_eq!(l.iter().filter(|r| r["severityNumber"] == 9).count(), 5);
    let p = wait_items(&w.data_dir(), "profiles", 3).await;
    assert_eq!(p[2]["samples"][0]["values"][0], "12");
    let line = &read_lines(&w.data_dir(), "profiles")[0];
    assert_eq!(line["dictionary"]["stringTable"][1], "cpu");
    w.app.shutdown().await;
}

#[tokio::test]
async fn oversized_message_is_resource_exhausted() {
    let yaml =
        base_yaml(std::path::Path::new("{dir}"), "").replace("  grpc_server:\n", "  grpc_server:\n    max_recv_msg_size_bytes: 50000\n");
    let w = start_yaml(&yaml).await;
    let ch = tonic::transport::Channel::from_shared(w.grpc()).unwrap().connect().await.unwrap();
    let err = TraceServiceClient::new(ch.clone()).export(traces("big", 400, 10)).await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    // Decompressed over the limit, small on the wire: also RESOURCE_EXHAUSTED.
    let err =
        TraceServiceClient::new(ch.clone()).send_compressed(CompressionEncoding::Gzip).export(traces("big", 400, 10)).await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    // No RetryInfo: an oversized message must not be retried.
    assert!(weir::exporter::retry_delay_of(&err).is_none());
    TraceServiceClient::new(ch).export(traces("small", 2, 1)).await.expect("small passes");
    w.app.shutdown().await;
}

#[tokio::test]
async fn tokens_are_required_on_both_servers_and_name_the_tenant() {
    let extra = "  auth:\n    tenants: {alpha: {tokens: [\"alpha-token\"]}}\n    tokens: [\"beta-token\"]\n";
    let w = start_yaml(&base_yaml(std::path::Path::new("{dir}"), extra)).await;
    let ch = tonic::transport::Channel::from_shared(w.grpc()).unwrap().connect().await.unwrap();

    let err = TraceServiceClient::new(ch.clone()).export(traces("a", 1, 1)).await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    let mut req = tonic::Request::new(traces("a", 1, 1));
    req.metadata_mut().insert("authorization", "Bearer wrong".parse().unwrap());
    assert_eq!(TraceServiceClient::new(ch.clone()).export(req).await.unwrap_err().code(), Code::Unauthenticated);
    let mut req = tonic::Request::new(traces("a", 1, 1));
    req.metadata_mut().insert("authorization", "Bearer alpha-token".parse().unwrap());
    TraceServiceClient::new(ch.clone()).export(req).await.expect("bearer token accepted");
    let mut req = tonic::Request::new(traces("b", 1, 1));
    req.metadata_mut().insert("x-bk-token", "beta-token".parse().unwrap());
    TraceServiceClient::new(ch).export(req).await.expect("x-bk-token accepted");

    let c = reqwest::Client::new();
    let url = format!("{}/v1/traces", w.http());
    let body = prost::Message::encode_to_vec(&traces("h", 1, 1));
    let r = c.post(&url).header("content-type", "application/x-protobuf").body(body.clone()).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let r =
        c.post(&url).header("content-type", "application/x-protobuf").header("x-bk-token", "alpha-token").body(body).send().await.unwrap();
    assert_eq!(r.status(), 200);

    assert_eq!(wait_items(&w.data_dir(), "traces", 3).await.len(), 3);
    // The tenant's name, never its token; a token of no tenant counts as token-<hash>.
    let alpha =
        metric_value(&w.admin(), "weir_receiver_requests_total{protocol=\"grpc\",signal=\"traces\",outcome=\"accepted\",tenant=\"alpha\"}")
            .await;
    assert_eq!(alpha, Some(1.0));
    let beta = format!(
        "weir_receiver_requests_total{{protocol=\"grpc\",signal=\"traces\",outcome=\"accepted\",tenant=\"{}\"}}",
        weir::config::token_label("beta-token")
    );
    assert_eq!(metric_value(&w.admin(), &beta).await, Some(1.0));
    w.app.shutdown().await;
}

#[tokio::test]
async fn tenant_quota_refuses_with_the_exact_wait_before_the_body() {
    let extra = "  auth:\n    tenants:\n      limited: {tokens: [limited-token], rate: {requests_per_second: 2, burst: 2}}\n      free: {tokens: [free-token]}\n";
    let w = start_yaml(&base_yaml(std::path::Path::new("{dir}"), extra)).await;
    let c = reqwest::Client::new();
    let url = format!("{}/v1/traces", w.http());
    let body = prost::Message::encode_to_vec(&traces("q", 1, 1));
    let send = |token: &'static str| {
        c.post(&url).header("content-type", "application/x-protobuf").header("x-bk-token", token).body(body.clone()).send()
    };
    assert_eq!(send("limited-token").await.unwrap().status(), 200);
    assert_eq!(send("limited-token").await.unwrap().status(), 200);
    let r = send("limited-token").await.unwrap();
    assert_eq!(r.status(), 429, "third request inside the burst window");
    assert_eq!(r.headers()["retry-after"], "1", "0.5 s rounded up to whole seconds");
    for _ in 0..5 {
        assert_eq!(send("free-token").await.unwrap().status(), 200, "a tenant without a rate is not limited");
    }
    let ch = tonic::transport::Channel::from_shared(w.grpc()).unwrap().connect().await.unwrap();
    let mut req = tonic::Request::new(traces("g", 1, 1));
    req.metadata_mut().insert("x-bk-token", "limited-token".parse().unwrap());
    let err = TraceServiceClient::new(ch).export(req).await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    let wait = weir::exporter::retry_delay_of(&err).expect("RetryInfo carries the exact wait");
    assert!(wait > std::time::Duration::ZERO && wait <= std::time::Duration::from_millis(1000), "{wait:?}");
    let refused = metric_value(&w.admin(), "weir_quota_rejected_total{tenant=\"limited\"}").await;
    assert_eq!(refused, Some(2.0));
    // Counted as a quota refusal, not as the gateway shedding load.
    let mut by_reason = std::collections::HashMap::new();
    for reason in ["quota", "throttle_shed"] {
        let mut n = 0.0;
        for protocol in ["http", "grpc"] {
            let key = format!("weir_receiver_requests_rejected_total{{protocol=\"{protocol}\",signal=\"traces\",reason=\"{reason}\"}}");
            n += metric_value(&w.admin(), &key).await.unwrap_or(0.0);
        }
        by_reason.insert(reason, n);
    }
    // (Other tests in this process refuse by quota too: at least ours.)
    assert!(by_reason["quota"] >= 2.0, "{by_reason:?}");
    assert_eq!(by_reason["throttle_shed"], 0.0, "{by_reason:?}");
    w.app.shutdown().await;
}

/// Refusals close the connection's stream window (weir sends SETTINGS_INITIAL_WINDOW_SIZE
/// 0 while it refuses); when the quota has room again, a large message on the same tonic
/// channel must still get through whole.
#[tokio::test]
async fn a_connection_refused_many_times_still_carries_the_next_admitted_request() {
    // Its own tenant name: metrics are process-wide, and another test counts "limited".
    let extra = "  auth:\n    tenants:\n      flooded: {rate: {requests_per_second: 4, burst: 1}}\n";
    let w = start_yaml(&base_yaml(std::path::Path::new("{dir}"), extra)).await;
    let ch = tonic::transport::Channel::from_shared(w.grpc()).unwrap().connect().await.unwrap();
    let export = |spans: usize| {
        let mut req = tonic::Request::new(traces("w", spans, 10));
        req.metadata_mut().insert("x-bk-token", "flooded".parse().unwrap());
        let mut client = TraceServiceClient::new(ch.clone());
        async move { client.export(req).await }
    };
    let mut refused = 0;
    for _ in 0..20 {
        match export(200).await {
            Err(e) if e.code() == Code::ResourceExhausted => refused += 1,
            other => assert!(other.is_ok(), "{other:?}"),
        }
    }
    assert!(refused >= 15, "only {refused} of 20 refused");
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    // 2000 spans x 10 attributes: several hundred KB, far more than a closed window lets
    // through, so this only completes if the window is opened again.
    let ok = tokio::time::timeout(std::time::Duration::from_secs(10), export(2000)).await.expect("no stall");
    assert!(ok.is_ok(), "{ok:?}");
    // Both changes are counted: the window closed for the refusals and opened again.
    for to in ["closed", "open"] {
        let n = metric_value(&w.admin(), &format!("weir_receiver_h2_window_changes_total{{to=\"{to}\"}}")).await;
        assert!(n.unwrap_or(0.0) >= 1.0, "window changes to {to}: {n:?}");
    }
    w.app.shutdown().await;
}

#[tokio::test]
async fn item_quota_is_reported_as_partial_success() {
    let extra = "  auth:\n    tenants:\n      metered: {items: {traces: 10}}\n";
    let w = start_yaml(&base_yaml(std::path::Path::new("{dir}"), extra)).await;
    let c = reqwest::Client::new();
    let url = format!("{}/v1/traces", w.http());
    let send = |n: usize, json: bool| {
        let req = traces("iq", n, 1);
        let (ct, body) = if json {
            ("application/json", weir::otlp::json::encode(&weir::signal::Payload::Traces(req)).into_bytes())
        } else {
            ("application/x-protobuf", prost::Message::encode_to_vec(&req))
        };
        c.post(&url).header("content-type", ct).header("x-bk-token", "metered").body(body).send()
    };
    let r = send(8, false).await.unwrap();
    assert_eq!(r.status(), 200);
    let full =
        <opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse as prost::Message>::decode(r.bytes().await.unwrap())
            .unwrap();
    assert!(full.partial_success.is_none(), "8 of 10 fit");
    let r = send(8, true).await.unwrap();
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = r.json().await.unwrap();
    let rejected: u64 = v["partialSuccess"]["rejectedSpans"].as_str().unwrap().parse().unwrap();
    assert!((5..=6).contains(&rejected), "2 (or 3 after refill) of 8 fit: {v}");
    assert!(v["partialSuccess"]["errorMessage"].as_str().unwrap().contains("quota"));

    let ch = tonic::transport::Channel::from_shared(w.grpc()).unwrap().connect().await.unwrap();
    let mut req = tonic::Request::new(traces("iqg", 30, 1));
    req.metadata_mut().insert("x-bk-token", "metered".parse().unwrap());
    let resp = TraceServiceClient::new(ch).export(req).await.unwrap().into_inner();
    let ps = resp.partial_success.expect("partial success over gRPC");
    assert!(ps.rejected_spans >= 20, "{ps:?}");
    // Exported = accepted: 8 + the granted part of the others.
    let total_rejected = rejected as usize + ps.rejected_spans as usize;
    let exported = wait_items(&w.data_dir(), "traces", 8 + 8 + 30 - total_rejected).await.len();
    assert_eq!(exported, 8 + 8 + 30 - total_rejected, "nothing silently lost: exported + rejected = sent");
    let counted = metric_value(&w.admin(), "weir_items_rejected_total{signal=\"traces\",reason=\"quota\"}").await;
    assert_eq!(counted, Some(total_rejected as f64));
    w.app.shutdown().await;
}

/// A held refusal ends inside the deadline its gRPC client states (`grpc-timeout`), even
/// where `hold.max` is longer: the client is told RESOURCE_EXHAUSTED with its retry
/// delay instead of running into DEADLINE_EXCEEDED (the Collector's exporters time out
/// after 5 s, as long as the default `hold.max`).
#[tokio::test]
async fn a_held_refusal_is_answered_inside_the_deadline_the_client_states() {
    use tokio::io::AsyncWriteExt;
    // One core and one in flight, and no line for the slot: with the slot taken no core
    // is free, so nothing answers the held refusal early.
    let extra = "  throttle:\n    enabled: true\n    signal: {fallback_cores: 1}\n    max_inflight_per_core: 1\n    max_inflight_wait: 0s\n    slow_start: {enabled: false}\n    hold: {max: 30s}\n";
    let yaml = base_yaml(std::path::Path::new("{dir}"), extra)
        .replace(r#"middlewares: ["logging", "content_decompressor"]"#, r#"middlewares: ["logging", "content_decompressor", "throttle"]"#);
    let w = start_yaml(&yaml).await;
    // An HTTP/1.1 request that sends one byte of its body keeps the slot taken.
    let (mut slot, rest) = take_a_slot(w.app.http_addr.unwrap(), &prost::Message::encode_to_vec(&traces("slot", 3, 1))).await;

    let ch = tonic::transport::Channel::from_shared(w.grpc()).unwrap().connect().await.unwrap();
    let mut req = tonic::Request::new(traces("late", 2, 1));
    req.set_timeout(std::time::Duration::from_secs(2));
    let started = std::time::Instant::now();
    // tonic sends the deadline as `grpc-timeout` and gives up when it passes: held for
    // the 30 s `hold.max`, the client would see its own "Timeout expired" (CANCELLED),
    // never the retry delay.
    let answer = tokio::time::timeout(std::time::Duration::from_secs(5), TraceServiceClient::new(ch).export(req)).await;
    let took = started.elapsed();
    let err = answer.expect("answered inside the deadline, not after hold.max").unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    // Held, with nothing completed, for 0.8 x 2 s less the jitter's quarter (1.28 s), ±25%.
    let ms = took.as_millis();
    assert!((900..=1700).contains(&ms), "answered after {ms} ms, not within 0.8 of the 2 s deadline: {err:?}");

    slot.write_all(&rest).await.unwrap();
    assert_eq!(wait_items(&w.data_dir(), "traces", 3).await.len(), 3, "the slot's request exported");
    w.app.shutdown().await;
}
