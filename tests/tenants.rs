//! Tenants are names, tokens are secrets: after traffic with every kind of token (a named
//! tenant's, one from a tokens file, the older token-keyed shape, a tenant-less token,
//! an unknown one, a quota refusal), no admin endpoint and no log line shows a token,
//! and the metrics name the tenants.

mod support;

use prost::Message;
use support::*;

const SECRETS: [&str; 5] = ["s3cr3t-team-a", "s3cr3t-team-b-file", "s3cr3t-legacy", "s3cr3t-plain", "s3cr3t-unknown"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_token_appears_in_metrics_debug_or_logs() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("team-b");
    std::fs::write(&file, format!("{}\n", SECRETS[1])).unwrap();
    let yaml = format!(
        r#"
receiver:
  http_server: {{endpoint: "{{http}}", middlewares: ["logging", "content_decompressor", "throttle"]}}
  grpc_server: {{endpoint: "{{grpc}}", middlewares: ["logging", "content_decompressor", "throttle"]}}
  auth:
    tokens: [{plain}]
    tenants:
      team-a: {{tokens: [{a}], rate: {{requests_per_second: 1, burst: 2}}}}
      team-b: {{tokens_file: "{file}", priority: critical}}
      {legacy}: {{priority: sheddable}}
pipeline: {{shutdown_delay: 0s}}
exporters: [{{type: blackhole}}]
admin: {{endpoint: "{{admin}}"}}
log: {{level: debug}}
"#,
        plain = SECRETS[3],
        a = SECRETS[0],
        legacy = SECRETS[2],
        file = file.display()
    );
    let weir = start_weir_plain(&yaml, 30, None).await;
    let client = reqwest::Client::new();
    let body = traces("t", 5, 2).encode_to_vec();
    let mut statuses = Vec::new();
    for token in SECRETS {
        for _ in 0..4 {
            let r = client
                .post(format!("{}/v1/traces", weir.http))
                .header("content-type", "application/x-protobuf")
                .header("authorization", format!("Bearer {token}"))
                .body(body.clone())
                .send()
                .await
                .unwrap();
            statuses.push((token, r.status().as_u16()));
        }
        let mut grpc =
            opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient::connect(weir.grpc.clone())
                .await
                .unwrap();
        let mut req = tonic::Request::new(traces("g", 3, 1));
        req.metadata_mut().insert("x-bk-token", token.parse().unwrap());
        let _ = grpc.export(req).await;
    }
    assert!(statuses.contains(&(SECRETS[0], 429)), "team-a's quota refuses: {statuses:?}");
    assert!(statuses.contains(&(SECRETS[1], 200)), "the tokens file's token is accepted: {statuses:?}");
    assert!(statuses.contains(&(SECRETS[2], 200)) && statuses.contains(&(SECRETS[3], 200)), "{statuses:?}");
    assert!(statuses.iter().filter(|(t, _)| *t == SECRETS[4]).all(|(_, s)| *s == 401), "{statuses:?}");

    let mut seen = String::new();
    for path in ["/metrics", "/debug/throttle", "/debug/queue", "/healthz", "/readyz"] {
        let text = reqwest::get(format!("{}{path}", weir.admin)).await.unwrap().text().await.unwrap();
        for s in SECRETS {
            assert!(!text.contains(s), "{path} shows a token ({s})");
        }
        seen.push_str(&text);
    }
    let log = std::fs::read_to_string(&weir.log).unwrap();
    assert!(log.contains("middleware::logging: request"), "the log has request lines to check: {log}");
    for s in SECRETS {
        assert!(!log.contains(s), "the log shows a token ({s})");
    }
    assert!(seen.contains("tenant=\"team-a\""), "metrics name the tenant");
    assert!(seen.contains("tenant=\"team-b\""), "metrics name the tenant of the tokens file");
    let legacy = weir::config::token_label(SECRETS[2]);
    assert!(seen.contains(&format!("tenant=\"{legacy}\"")), "the older shape is labelled {legacy}");
}
