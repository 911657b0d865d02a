//! docs/metrics.md matches what `/metrics` exports: after traffic (accepted requests of
//! every signal, refusals, a reload of nothing), every `weir_*` family in a scrape of a
//! real weir process is documented on the page, and every name the page documents is
//! one the code registers.

mod support;

use support::process::Proc;

const CONFIG: &str = r#"
receiver:
  http_server: {endpoint: "{http}", middlewares: ["logging", "cors;allowedOrigins=*", "content_decompressor", "throttle", "maxconns"]}
  grpc_server: {endpoint: "{grpc}", middlewares: ["logging", "content_decompressor", "throttle", "maxconns"]}
  auth: {tenants: {acme: {tokens: [tok-acme], rate: {requests_per_second: 1000, burst: 100}}}}
exporters: [{type: blackhole}]
admin: {endpoint: "{admin}"}
log: {level: warn}
"#;

/// The metric family of one exposition line: its name less a histogram's or summary's
/// suffix.
fn family(line: &str) -> Option<String> {
    if line.starts_with('#') || line.trim().is_empty() {
        return None;
    }
    let name = line.split(['{', ' ']).next()?;
    let name = ["_bucket", "_sum", "_count"].iter().find_map(|s| name.strip_suffix(s)).unwrap_or(name);
    name.starts_with("weir_").then(|| name.to_string())
}

fn sources(dir: &std::path::Path, out: &mut String) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push_str(&std::fs::read_to_string(&p).unwrap());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_page_documents_every_exported_family_and_no_other() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = Proc::new(dir.path(), "weir", CONFIG);
    w.start().await;
    let client = reqwest::Client::new();
    let bodies = [
        (
            "traces",
            r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174","name":"s","startTimeUnixNano":"1","endTimeUnixNano":"2"}]}]}]}"#,
        ),
        (
            "metrics",
            r#"{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"m","gauge":{"dataPoints":[{"asDouble":1,"timeUnixNano":"1"}]}}]}]}]}"#,
        ),
        ("logs", r#"{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"body":{"stringValue":"l"}}]}]}]}"#),
    ];
    for (signal, body) in bodies {
        let r = client
            .post(format!("{}/v1/{signal}", w.url()))
            .bearer_auth("tok-acme")
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{signal}");
    }
    // Refusals: no token, and a body that is not JSON.
    let r = client.post(format!("{}/v1/logs", w.url())).header("content-type", "application/json").body("{}").send().await.unwrap();
    assert_eq!(r.status(), 401);
    let r = client
        .post(format!("{}/v1/logs", w.url()))
        .bearer_auth("tok-acme")
        .header("content-type", "application/json")
        .body("not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    // Let the throttle sample and the batch go out.
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    let scrape = reqwest::get(format!("{}/metrics", w.admin())).await.unwrap().text().await.unwrap();
    w.stop().await;

    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/metrics.md")).unwrap();
    let exported: std::collections::BTreeSet<String> = scrape.lines().filter_map(family).collect();
    assert!(exported.len() > 20, "a scrape after traffic has the usual families: {exported:?}");
    let undocumented: Vec<&String> = exported.iter().filter(|n| !page.contains(&format!("`{n}`"))).collect();
    assert!(undocumented.is_empty(), "exported but not in docs/metrics.md: {undocumented:?}");

    let mut code = String::new();
    sources(std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src")), &mut code);
    let documented: std::collections::BTreeSet<String> = page
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| s.starts_with("weir_") && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .map(str::to_string)
        .collect();
    let unknown: Vec<&String> = documented.iter().filter(|n| !code.contains(&format!("\"{n}\""))).collect();
    assert!(unknown.is_empty(), "documented but registered nowhere in src/: {unknown:?}");
}
