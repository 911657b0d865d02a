//! Prometheus remote write and Pyroscope receivers over real sockets: valid bodies are
//! converted and exported, invalid ones get the right status; the pprof path is fed a
//! real profile taken by a real profiler library (pprof-rs) from this test process.

mod support;

use prost::Message;
use support::*;
use weir::prompb::{Label, Sample, TimeSeries, WriteRequest};

fn l(n: &str, v: &str) -> Label {
    Label { name: n.into(), value: v.into() }
}

fn snappy(b: &[u8]) -> Vec<u8> {
    snap::raw::Encoder::new().compress_vec(b).unwrap()
}

async fn post_rw(url: &str, ct: &str, enc: Option<&str>, body: Vec<u8>) -> (u16, String) {
    let mut r = reqwest::Client::new().post(url).header("content-type", ct).header("x-prometheus-remote-write-version", "0.1.0").body(body);
    if let Some(e) = enc {
        r = r.header("content-encoding", e);
    }
    let resp = r.send().await.unwrap();
    let status = resp.status().as_u16();
    let bytes = resp.bytes().await.unwrap();
    let msg = weir::rpc::Status::decode(bytes.clone()).map(|s| s.message).unwrap_or_else(|_| String::from_utf8_lossy(&bytes).to_string());
    (status, msg)
}

#[tokio::test]
async fn remote_write_valid_and_invalid() {
    let w = start_default().await;
    for path in ["/api/v1/write", "/prometheus/write"] {
        let url = format!("{}{path}", w.http());
        let req = WriteRequest {
            timeseries: vec![
                TimeSeries {
                    labels: vec![l("__name__", "up"), l("instance", "a:9100"), l("job", "node")],
                    samples: vec![Sample { value: 1.0, timestamp: 1_700_000_000_000 }],
                    exemplars: vec![],
                },
                TimeSeries {
                    labels: vec![l("__name__", "temp_celsius"), l("room", "lab")],
                    samples: vec![
                        Sample { value: 21.5, timestamp: 1_700_000_001_000 },
                        Sample { value: 22.0, timestamp: 1_700_000_002_000 },
                    ],
                    exemplars: vec![],
                },
            ],
            metadata: vec![],
        };
        assert_eq!(post_rw(&url, "application/x-protobuf", Some("snappy"), snappy(&req.encode_to_vec())).await.0, 204, "{path}");
    }
    let url = format!("{}/api/v1/write", w.http());
    let series = |labels: Vec<Label>| {
        snappy(
            &WriteRequest {
                timeseries: vec![TimeSeries { labels, samples: vec![Sample { value: 1.0, timestamp: 1 }], exemplars: vec![] }],
                metadata: vec![],
            }
            .encode_to_vec(),
        )
    };
    type Case<'a> = (Vec<u8>, &'a str, Option<&'a str>, u16, &'a str);
    let cases: Vec<Case> = vec![
        (series(vec![l("__name__", "x"), l("", "v")]), "application/x-protobuf", Some("snappy"), 400, "empty label name"),
        (series(vec![l("__name__", "x"), l("b", "1"), l("a", "2")]), "application/x-protobuf", Some("snappy"), 400, "not sorted"),
        (series(vec![l("__name__", "x"), l("a", "1"), l("a", "2")]), "application/x-protobuf", Some("snappy"), 400, "duplicate label `a`"),
        (b"not snappy at all".to_vec(), "application/x-protobuf", Some("snappy"), 400, "snappy"),
        (snappy(b"\xff\xff garbage"), "application/x-protobuf", Some("snappy"), 400, "prometheus.WriteRequest"),
        (series(vec![l("__name__", "x")]), "application/json", Some("snappy"), 415, "Content-Type"),
    ];
    for (body, ct, enc, want, msg) in cases {
        let (status, text) = post_rw(&url, ct, enc, body).await;
        assert_eq!(status, want, "{msg}: {text}");
        assert!(text.contains(msg), "`{text}` should mention `{msg}`");
    }
    let metrics = wait_items(&w.data_dir(), "metrics", 4).await;
    let up: Vec<_> = metrics.iter().filter(|m| m["name"] == "up").collect();
    assert_eq!(up.len(), 2, "one per path");
    let p = &up[0]["gauge"]["dataPoints"][0];
    assert_eq!(p["timeUnixNano"], "1700000000000000000");
    assert_eq!(p["asDouble"], 1.0);
    let attrs: Vec<_> = p["attributes"].as_array().unwrap().iter().map(|a| a["key"].as_str().unwrap().to_string()).collect();
    assert_eq!(attrs, ["instance", "job"]);
    let temp = metrics.iter().find(|m| m["name"] == "temp_celsius").unwrap();
    assert_eq!(temp["gauge"]["dataPoints"].as_array().unwrap().len(), 2);
    w.app.shutdown().await;
}

/// A real CPU profile of this process, taken with pprof-rs, as pprof protobuf bytes.
fn real_pprof() -> Vec<u8> {
    use pprof::protos::Message as _;
    let guard = pprof::ProfilerGuardBuilder::default().frequency(997).blocklist(&["libc", "libgcc", "pthread", "vdso"]).build().unwrap();
    let start = std::time::Instant::now();
    let mut x = 0u64;
    while start.elapsed() < std::time::Duration::from_millis(300) {
        for i in 0..10_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
        }
    }
    std::hint::black_box(x);
    let report = guard.report().build().unwrap();
    report.pprof().unwrap().write_to_bytes().unwrap()
}

fn profiles_of(w: &Weir) -> Vec<serde_json::Value> {
    read_lines(&w.data_dir(), "profiles")
}

async fn wait_profiles(w: &Weir, n: usize) -> Vec<serde_json::Value> {
    for _ in 0..500 {
        let lines = profiles_of(w);
        if lines.len() >= n {
            return lines;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    profiles_of(w)
}

#[tokio::test]
async fn pyroscope_ingest_and_push() {
    let w = start_default().await;
    let c = reqwest::Client::new();
    // Legacy ingest, folded.
    let r = c
        .post(format!("{}/pyroscope/ingest?name=checkout.cpu%7Benv%3Dprod%7D&from=1700000000&until=1700000010&sampleRate=100&spyName=gospy&units=samples&aggregationType=sum", w.http()))
        .body("main;handle;hash 7\nmain;handle 3\nmain;idle 1\n")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // Legacy ingest, pprof (gzipped, as agents send it), from a real profiler.
    let pprof_bytes = real_pprof();
    let decoded = weir::pprof::Profile::decode(pprof_bytes.as_slice()).unwrap();
    assert!(!decoded.sample.is_empty(), "the profiler took samples");
    let r = c.post(format!("{}/ingest?name=billing.cpu&format=pprof", w.http())).body(gzip(&pprof_bytes)).send().await.unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    // Push API, binary protobuf and JSON.
    use weir::pyroscope_push::{LabelPair, PushRequest, RawProfileSeries, RawSample};
    let push = PushRequest {
        series: vec![RawProfileSeries {
            labels: vec![
                LabelPair { name: "__name__".into(), value: "process_cpu".into() },
                LabelPair { name: "service_name".into(), value: "ledger".into() },
            ],
            samples: vec![RawSample { raw_profile: gzip(&pprof_bytes), id: "s1".into() }],
        }],
    };
    let r = c
        .post(format!("{}/push.v1.PusherService/Push", w.http()))
        .header("content-type", "application/proto")
        .body(push.encode_to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    use base64::Engine;
    let json = serde_json::json!({"series": [{"labels": [{"name": "service_name", "value": "jsonsvc"}], "samples": [{"rawProfile": base64::engine::general_purpose::STANDARD.encode(&pprof_bytes), "ID": "j1"}]}]});
    let r = c
        .post(format!("{}/push.v1.PusherService/Push", w.http()))
        .header("content-type", "application/json")
        .body(json.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "{}");

    // Invalid: unknown format, bad folded line, garbage pprof, bad connect content type.
    let bad = [
        (format!("{}/pyroscope/ingest?name=a.cpu&format=jfr", w.http()), "x".to_string(), "text/plain", 400u16),
        (format!("{}/pyroscope/ingest?name=a.cpu", w.http()), "main;work seven".to_string(), "text/plain", 400),
        (format!("{}/pyroscope/ingest?format=folded", w.http()), "main 1".to_string(), "text/plain", 400),
        (format!("{}/ingest?name=a.cpu&format=pprof", w.http()), "garbage!".to_string(), "application/octet-stream", 400),
        (format!("{}/push.v1.PusherService/Push", w.http()), "x".to_string(), "text/plain", 415),
    ];
    for (url, body, ct, want) in bad {
        let r = c.post(&url).header("content-type", ct).body(body).send().await.unwrap();
        assert_eq!(r.status().as_u16(), want, "{url}");
    }

    let lines = wait_profiles(&w, 4).await;
    assert_eq!(lines.len(), 4);
    let service =
        |l: &serde_json::Value| l["resourceProfiles"][0]["resource"]["attributes"][0]["value"]["stringValue"].as_str().unwrap().to_string();
    let mut services: Vec<_> = lines.iter().map(service).collect();
    services.sort();
    assert_eq!(services, ["billing", "checkout", "jsonsvc", "ledger"]);
    // The folded profile: 3 samples with counts 7, 3, 1 and a leaf named `hash`.
    let folded = lines.iter().find(|l| service(l) == "checkout").unwrap();
    let p = &folded["resourceProfiles"][0]["scopeProfiles"][0]["profiles"][0];
    let values: Vec<_> = p["samples"].as_array().unwrap().iter().map(|s| s["values"][0].as_str().unwrap().to_string()).collect();
    assert_eq!(values, ["7", "3", "1"]);
    let dict = &folded["dictionary"];
    assert!(dict["stringTable"].as_array().unwrap().iter().any(|s| s == "hash"));
    // The pprof profile keeps its samples: the total equals pprof's own total.
    let billing = lines.iter().find(|l| service(l) == "billing").unwrap();
    let total_otlp: i64 = billing["resourceProfiles"][0]["scopeProfiles"][0]["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .take(1)
        .flat_map(|p| p["samples"].as_array().unwrap().iter())
        .map(|s| s["values"][0].as_str().unwrap().parse::<i64>().unwrap())
        .sum();
    let total_pprof: i64 = decoded.sample.iter().map(|s| s.value[0]).sum();
    assert_eq!(total_otlp, total_pprof);
    let fnames = billing["dictionary"]["stringTable"].as_array().unwrap();
    assert!(fnames.iter().any(|s| s.as_str().unwrap_or("").contains("real_pprof")), "the profiled function is in the dictionary");
    w.app.shutdown().await;
}
