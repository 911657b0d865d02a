//! Per-tenant export headers: `headers: {X-Scope-OrgID: "${tenant}"}` on an exporter
//! makes every batch one tenant's and sends that tenant's name in the header (Grafana
//! Mimir, Loki and Tempo read their tenant from it). Two tenants send interleaved
//! requests; a sink records each request's header and span names: no request mixes
//! tenants, and every one carries the right name. With the memory queue and the disk
//! queue.

mod support;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::*;

type Seen = Arc<Mutex<Vec<(Option<String>, Vec<String>)>>>;

/// An OTLP/HTTP sink recording (X-Scope-OrgID, span names) per request.
async fn sink() -> (String, Seen) {
    let seen: Seen = Arc::default();
    let s = seen.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
            let s = s.clone();
            async move {
                let org = headers.get("x-scope-orgid").and_then(|v| v.to_str().ok()).map(str::to_string);
                let req = ExportTraceServiceRequest::decode(body).unwrap();
                let names = req.resource_spans.iter().flat_map(|r| &r.scope_spans).flat_map(|s| &s.spans).map(|s| s.name.clone()).collect();
                s.lock().unwrap().push((org, names));
                ""
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), seen)
}

async fn run(disk: bool) {
    let (sink_url, seen) = sink().await;
    let queue = if disk { "  queue:\n    disk: {path: \"{dir}/queue\"}\n" } else { "" };
    let yaml = format!(
        r#"
receiver:
  http_server: {{endpoint: "127.0.0.1:0"}}
  grpc_server: {{endpoint: "127.0.0.1:0"}}
  auth:
    tenants:
      team-a: {{tokens: [token-a]}}
      team-b: {{tokens: [token-b]}}
pipeline:
  shutdown_delay: 0s
  batch: {{max_items: 100000, timeout: 100ms}}
{queue}exporters:
  - type: otlphttp
    endpoint: "{sink_url}"
    compression: none
    headers: {{X-Scope-OrgID: "${{tenant}}", X-Fixed: "yes"}}
admin: {{endpoint: "127.0.0.1:0"}}
"#
    );
    let w = start_yaml(&yaml).await;
    let client = reqwest::Client::new();
    for i in 0..20 {
        for (tenant, token) in [("team-a", "token-a"), ("team-b", "token-b")] {
            let mut req = traces("x", 3, 1);
            for (j, s) in req.resource_spans[0].scope_spans[0].spans.iter_mut().enumerate() {
                s.name = format!("{tenant}/{i}/{j}");
            }
            let r = client
                .post(format!("{}/v1/traces", w.http()))
                .header("content-type", "application/x-protobuf")
                .header("authorization", format!("Bearer {token}"))
                .body(req.encode_to_vec())
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
        }
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let n: usize = seen.lock().unwrap().iter().map(|(_, names)| names.len()).sum();
        if n >= 120 || std::time::Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let seen = seen.lock().unwrap().clone();
    let n: usize = seen.iter().map(|(_, names)| names.len()).sum();
    assert_eq!(n, 120, "every span arrived once (disk: {disk})");
    let mut orgs = std::collections::BTreeSet::new();
    for (org, names) in &seen {
        let org = org.as_deref().expect("every export names its tenant");
        assert!(names.iter().all(|name| name.starts_with(&format!("{org}/"))), "a batch mixes tenants under {org}: {names:?}");
        orgs.insert(org.to_string());
    }
    assert_eq!(orgs.into_iter().collect::<Vec<_>>(), ["team-a", "team-b"]);
    w.app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_never_mix_tenants_when_a_header_names_the_tenant() {
    run(false).await;
    run(true).await;
}
