//! Every refusal reaches the log with its reason, whatever the middleware order: the
//! shipped config puts `logging` innermost, where it never sees what the outer
//! middlewares refuse (authentication, the decompressor, the throttle).

mod support;

use support::process::Proc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_by_outer_middlewares_are_logged_with_their_reason() {
    let dir = tempfile::tempdir().unwrap();
    // The shipped middleware order, with authentication on.
    let yaml = r#"
receiver:
  http_server:
    endpoint: "{http}"
    middlewares: ["logging", "cors;allowedOrigins=*", "content_decompressor", "throttle", "maxconns"]
  grpc_server: {endpoint: "{grpc}"}
  auth: {tenants: {acme: {tokens: [tok-s3cret]}}}
exporters: [{type: blackhole}]
admin: {endpoint: "{admin}"}
log: {level: info}
"#;
    let mut w = Proc::new(dir.path(), "weir", yaml);
    w.start().await;
    let client = reqwest::Client::new();
    let url = format!("{}/v1/logs", w.url());
    let body = r#"{"resourceLogs":[]}"#;
    // No token: 401 from authentication, which runs before the whole list.
    let r = client.post(&url).header("content-type", "application/json").body(body).send().await.unwrap();
    assert_eq!(r.status(), 401);
    // An encoding weir does not know: 400 from the decompressor, outside `logging`.
    let r = client
        .post(&url)
        .bearer_auth("tok-s3cret")
        .header("content-type", "application/json")
        .header("content-encoding", "br")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    // An accepted one is not a refusal.
    let r = client.post(&url).bearer_auth("tok-s3cret").header("content-type", "application/json").body(body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    w.stop().await;
    let log = w.log_text();
    let refused: Vec<&str> = log.lines().filter(|l| l.contains("request refused")).collect();
    assert_eq!(refused.len(), 2, "one line per refusal:\n{log}");
    assert!(refused[0].contains("reason=\"unauthenticated\"") || refused[0].contains("reason=unauthenticated"), "{}", refused[0]);
    assert!(refused[1].contains("tenant=\"acme\"") || refused[1].contains("tenant=acme"), "{}", refused[1]);
    assert!(refused[1].contains("bad_request") && refused[1].contains("Content-Encoding `br`"), "{}", refused[1]);
    assert!(!log.contains("tok-s3cret"), "no token in the log");
    assert!(!log.contains("request failed"), "logged once, not again by `logging`:\n{log}");
}
