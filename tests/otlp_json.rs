//! OTLP/JSON: the specification's examples, every decoding rule for every signal, the
//! encode/decode round trip (proptest), and JSON over HTTP end to end.

mod support;

use proptest::prelude::*;
use serde_json::json;
use support::gen::G;
use support::*;
use weir::otlp::json::{decode, encode};
use weir::signal::{Payload, Signal};

fn example(name: &str) -> Vec<u8> {
    std::fs::read(format!("{}/tests/data/otlp-examples/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

#[test]
fn spec_examples_are_decoded_field_by_field() {
    let Payload::Traces(t) = decode(Signal::Traces, &example("trace.json")).unwrap() else { panic!() };
    let rs = &t.resource_spans[0];
    assert_eq!(rs.resource.as_ref().unwrap().attributes[0].key, "service.name");
    let ss = &rs.scope_spans[0];
    let scope = ss.scope.as_ref().unwrap();
    assert_eq!((scope.name.as_str(), scope.version.as_str()), ("my.library", "1.0.0"));
    assert_eq!(scope.attributes[0].key, "my.scope.attribute");
    let s = &ss.spans[0];
    assert_eq!(s.trace_id, [0x5B, 0x8E, 0xFF, 0xF7, 0x98, 0x03, 0x81, 0x03, 0xD2, 0x69, 0xB6, 0x33, 0x81, 0x3F, 0xC6, 0x0C]);
    assert_eq!(s.span_id, [0xEE, 0xE1, 0x9B, 0x7E, 0xC3, 0xC1, 0xB1, 0x74]);
    assert_eq!(s.parent_span_id, [0xEE, 0xE1, 0x9B, 0x7E, 0xC3, 0xC1, 0xB1, 0x73]);
    assert_eq!(s.name, "I'm a server span");
    assert_eq!((s.start_time_unix_nano, s.end_time_unix_nano), (1544712660000000000, 1544712661000000000));
    assert_eq!(s.kind, 2);
    assert_eq!(s.attributes[0].key, "my.span.attr");

    let Payload::Metrics(m) = decode(Signal::Metrics, &example("metrics.json")).unwrap() else { panic!() };
    use opentelemetry_proto::tonic::metrics::v1::{metric::Data, number_data_point::Value};
    let metrics = &m.resource_metrics[0].scope_metrics[0].metrics;
    assert_eq!(metrics.len(), 4);
    let Some(Data::Sum(sum)) = &metrics[0].data else { panic!() };
    assert_eq!(
        (metrics[0].name.as_str(), metrics[0].unit.as_str(), metrics[0].description.as_str()),
        ("my.counter", "1", "I am a Counter")
    );
    assert_eq!((sum.aggregation_temporality, sum.is_monotonic), (1, true));
    assert_eq!(sum.data_points[0].value, Some(Value::AsDouble(5.0)));
    assert_eq!(sum.data_points[0].start_time_unix_nano, 1544712660300000000);
    let Some(Data::Gauge(g)) = &metrics[1].data else { panic!() };
    assert_eq!(g.data_points[0].value, Some(Value::AsDouble(10.0)));
    let Some(Data::Histogram(h)) = &metrics[2].data else { panic!() };
    let hp = &h.data_points[0];
    assert_eq!((hp.count, hp.sum, hp.min, hp.max), (2, Some(2.0), Some(0.0), Some(2.0)));
    assert_eq!((hp.bucket_counts.clone(), hp.explicit_bounds.clone()), (vec![1, 1], vec![1.0]));
    let Some(Data::ExponentialHistogram(e)) = &metrics[3].data else { panic!() };
    let ep = &e.data_points[0];
    assert_eq!((ep.count, ep.sum, ep.scale, ep.zero_count, ep.zero_threshold), (3, Some(10.0), 0, 1, 0.0));
    let pos = ep.positive.as_ref().unwrap();
    assert_eq!((pos.offset, pos.bucket_counts.clone()), (1, vec![0, 2]));
    assert_eq!((ep.min, ep.max), (Some(0.0), Some(5.0)));

    use opentelemetry_proto::tonic::common::v1::any_value::Value as V;
    let Payload::Logs(l) = decode(Signal::Logs, &example("logs.json")).unwrap() else { panic!() };
    let r = &l.resource_logs[0].scope_logs[0].log_records[0];
    assert_eq!((r.time_unix_nano, r.observed_time_unix_nano, r.severity_number), (1544712660300000000, 1544712660300000000, 10));
    assert_eq!(r.severity_text, "Information");
    assert_eq!(r.trace_id.len(), 16);
    assert_eq!(r.span_id.len(), 8);
    assert_eq!(r.body.as_ref().unwrap().value, Some(V::StringValue("Example log record".into())));
    let attr = |k: &str| r.attributes.iter().find(|a| a.key == k).unwrap().value.as_ref().unwrap().value.clone().unwrap();
    assert_eq!(attr("string.attribute"), V::StringValue("some string".into()));
    assert_eq!(attr("boolean.attribute"), V::BoolValue(true));
    assert_eq!(attr("int.attribute"), V::IntValue(10));
    assert_eq!(attr("double.attribute"), V::DoubleValue(637.704));
    let V::ArrayValue(a) = attr("array.attribute") else { panic!() };
    assert_eq!(a.values.len(), 2);
    let V::KvlistValue(kv) = attr("map.attribute") else { panic!() };
    assert_eq!(kv.values[0].key, "some.map.key");

    let Payload::Logs(ev) = decode(Signal::Logs, &example("events.json")).unwrap() else { panic!() };
    let e = &ev.resource_logs[0].scope_logs[0].log_records[0];
    assert_eq!(e.event_name, "browser.page_view");
    let V::KvlistValue(body) = e.body.as_ref().unwrap().value.clone().unwrap() else { panic!() };
    assert_eq!(body.values[0].value.as_ref().unwrap().value, Some(V::IntValue(0)));
    assert_eq!(body.values.len(), 4);
}

/// Wraps one item into a full request of `signal`.
fn wrap(signal: Signal, item: serde_json::Value) -> Vec<u8> {
    let doc = match signal {
        Signal::Traces => json!({"resourceSpans": [{"scopeSpans": [{"spans": [item]}]}]}),
        Signal::Metrics => json!({"resourceMetrics": [{"scopeMetrics": [{"metrics": [item]}]}]}),
        Signal::Logs => json!({"resourceLogs": [{"scopeLogs": [{"logRecords": [item]}]}]}),
        Signal::Profiles => json!({"resourceProfiles": [{"scopeProfiles": [{"profiles": [item]}]}]}),
    };
    serde_json::to_vec(&doc).unwrap()
}

/// Decodes and re-encodes the first item canonically.
fn canonical(signal: Signal, item: serde_json::Value) -> Result<serde_json::Value, String> {
    let p = decode(signal, &wrap(signal, item)).map_err(|e| e.to_string())?;
    let v: serde_json::Value = serde_json::from_str(&encode(&p)).unwrap();
    Ok(items_of(&[v], signal.as_str()).into_iter().next().unwrap_or(json!({})))
}

#[test]
fn rules_table_valid_and_invalid_per_signal() {
    use Signal::*;
    // (signal, input item, Ok(canonical item) or Err(substring of the error))
    let cases: Vec<(Signal, serde_json::Value, Result<serde_json::Value, &str>)> = vec![
        // IDs: hex in either case, exact length, or empty.
        (
            Traces,
            json!({"traceId": "5B8EFFF798038103D269B633813FC60C", "spanId": "eee19b7ec3c1b174"}),
            Ok(json!({"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174"})),
        ),
        (Traces, json!({"traceId": "", "spanId": ""}), Ok(json!({}))),
        (Traces, json!({"traceId": "5B8EFFF7"}), Err("resourceSpans[0].scopeSpans[0].spans[0].traceId: expected 32 hex characters, got 8")),
        (Traces, json!({"traceId": "W4739/eYA4PSabYzgT/GDA=="}), Err("traceId: expected 32 hex characters")),
        (Traces, json!({"spanId": "zz e19b7ec3c1b17"}), Err("spans[0].spanId: expected 16 hex characters, got a non-hex character")),
        (Logs, json!({"traceId": "5b8efff798038103d269b633813fc60c00"}), Err("logRecords[0].traceId: expected 32 hex characters")),
        (Profiles, json!({"profileId": "0102"}), Err("profiles[0].profileId: expected 32 hex characters")),
        // snake_case names accepted; unknown fields ignored.
        (
            Traces,
            json!({"trace_id": "0102030405060708090a0b0c0d0e0f10", "start_time_unix_nano": "5", "whatever": {"x": 1}}),
            Ok(json!({"traceId": "0102030405060708090a0b0c0d0e0f10", "startTimeUnixNano": "5"})),
        ),
        (
            Logs,
            json!({"severity_number": 9, "severity_text": "INFO", "unknownField": [1, 2]}),
            Ok(json!({"severityNumber": 9, "severityText": "INFO"})),
        ),
        // Enums: integers or names.
        (
            Traces,
            json!({"kind": "SPAN_KIND_CLIENT", "status": {"code": "STATUS_CODE_ERROR"}}),
            Ok(json!({"kind": 3, "status": {"code": 2}})),
        ),
        (Traces, json!({"kind": 2}), Ok(json!({"kind": 2}))),
        (Traces, json!({"kind": "CLIENT"}), Err("spans[0].kind: unknown SpanKind name \"CLIENT\"")),
        (Logs, json!({"severityNumber": "SEVERITY_NUMBER_WARN"}), Ok(json!({"severityNumber": 13}))),
        (
            Metrics,
            json!({"sum": {"aggregationTemporality": "AGGREGATION_TEMPORALITY_CUMULATIVE"}}),
            Ok(json!({"sum": {"aggregationTemporality": 2}})),
        ),
        (
            Metrics,
            json!({"sum": {"aggregationTemporality": "CUMULATIVE"}}),
            Err("metrics[0].sum.aggregationTemporality: unknown AggregationTemporality name"),
        ),
        // 64-bit integers: numbers or decimal strings.
        (
            Traces,
            json!({"startTimeUnixNano": 1544712660000000000u64, "endTimeUnixNano": "18446744073709551615"}),
            Ok(json!({"startTimeUnixNano": "1544712660000000000", "endTimeUnixNano": "18446744073709551615"})),
        ),
        (Traces, json!({"startTimeUnixNano": "12x"}), Err("spans[0].startTimeUnixNano: expected an unsigned 64-bit integer")),
        (Traces, json!({"startTimeUnixNano": -1}), Err("startTimeUnixNano: -1 is out of range")),
        (Traces, json!({"startTimeUnixNano": "18446744073709551616"}), Err("out of range")),
        (Logs, json!({"timeUnixNano": 1.5}), Err("logRecords[0].timeUnixNano: expected an unsigned 64-bit integer")),
        (Metrics, json!({"gauge": {"dataPoints": [{"timeUnixNano": "oops"}]}}), Err("metrics[0].gauge.dataPoints[0].timeUnixNano")),
        (
            Metrics,
            json!({"gauge": {"dataPoints": [{"asInt": "-9223372036854775808"}]}}),
            Ok(json!({"gauge": {"dataPoints": [{"asInt": "-9223372036854775808"}]}})),
        ),
        (Metrics, json!({"gauge": {"dataPoints": [{"asInt": 12}]}}), Ok(json!({"gauge": {"dataPoints": [{"asInt": "12"}]}}))),
        (Traces, json!({"droppedAttributesCount": 4294967296u64}), Err("droppedAttributesCount: 4294967296 is out of range")),
        // Doubles: numbers, numeric strings, NaN / Infinity / -Infinity.
        (
            Metrics,
            json!({"gauge": {"dataPoints": [{"asDouble": "Infinity"}]}}),
            Ok(json!({"gauge": {"dataPoints": [{"asDouble": "Infinity"}]}})),
        ),
        (
            Metrics,
            json!({"gauge": {"dataPoints": [{"asDouble": "-Infinity"}]}}),
            Ok(json!({"gauge": {"dataPoints": [{"asDouble": "-Infinity"}]}})),
        ),
        (Metrics, json!({"gauge": {"dataPoints": [{"asDouble": "NaN"}]}}), Ok(json!({"gauge": {"dataPoints": [{"asDouble": "NaN"}]}}))),
        (Metrics, json!({"gauge": {"dataPoints": [{"asDouble": "2.5"}]}}), Ok(json!({"gauge": {"dataPoints": [{"asDouble": 2.5}]}}))),
        (Metrics, json!({"gauge": {"dataPoints": [{"asDouble": "fast"}]}}), Err("dataPoints[0].asDouble: expected a double")),
        (
            Metrics,
            json!({"histogram": {"dataPoints": [{"explicitBounds": [1, "NaN", true]}]}}),
            Err("histogram.dataPoints[0].explicitBounds[2]: expected a double, got a boolean"),
        ),
        (Metrics, json!({"gauge": {"dataPoints": [{"asDouble": 1, "asInt": "1"}]}}), Err("both asDouble and asInt")),
        (Metrics, json!({"gauge": {}, "sum": {}}), Err("more than one of gauge")),
        // bytes: base64.
        (Logs, json!({"body": {"bytesValue": "aGVsbG8="}}), Ok(json!({"body": {"bytesValue": "aGVsbG8="}}))),
        (Logs, json!({"body": {"bytesValue": "aGVsbG8"}}), Ok(json!({"body": {"bytesValue": "aGVsbG8="}}))),
        (Logs, json!({"body": {"bytesValue": "!!"}}), Err("logRecords[0].body.bytesValue: invalid base64")),
        (Profiles, json!({"originalPayload": "AQID"}), Ok(json!({"originalPayload": "AQID"}))),
        // AnyValue in all its forms, empty ones too; null means default.
        (Logs, json!({"body": {}}), Ok(json!({"body": {}}))),
        (Logs, json!({"body": {"arrayValue": {}}}), Ok(json!({"body": {"arrayValue": {}}}))),
        (Logs, json!({"body": {"kvlistValue": {}}}), Ok(json!({"body": {"kvlistValue": {}}}))),
        (
            Logs,
            json!({"body": {"kvlistValue": {"values": [{"value": {"intValue": "3"}}]}}}),
            Ok(json!({"body": {"kvlistValue": {"values": [{"value": {"intValue": "3"}}]}}})),
        ),
        (Logs, json!({"body": {"boolValue": false}}), Ok(json!({"body": {"boolValue": false}}))),
        (Logs, json!({"body": {"intValue": 0}}), Ok(json!({"body": {"intValue": "0"}}))),
        (Logs, json!({"body": {"doubleValue": "NaN"}}), Ok(json!({"body": {"doubleValue": "NaN"}}))),
        (Logs, json!({"body": null, "attributes": null, "traceId": null}), Ok(json!({}))),
        (Logs, json!({"attributes": [{"key": "k", "value": null}]}), Ok(json!({"attributes": [{"key": "k"}]}))),
        (Logs, json!({"body": {"stringValue": "a", "intValue": "1"}}), Err("logRecords[0].body: more than one value set")),
        (Logs, json!({"body": {"boolValue": "true"}}), Err("body.boolValue: expected true or false, got a string")),
        (Logs, json!({"body": {"arrayValue": {"values": [{"intValue": "x"}]}}}), Err("body.arrayValue.values[0].intValue")),
        (Traces, json!({"attributes": [{"key": 5}]}), Err("spans[0].attributes[0].key: expected a string, got a number")),
        (Traces, json!({"events": {"name": "x"}}), Err("spans[0].events: expected an array, got an object")),
        (Traces, json!("span"), Err("resourceSpans[0].scopeSpans[0].spans[0]: expected an object, got a string")),
        // Profiles: samples and strindex values.
        (
            Profiles,
            json!({"samples": [{"values": ["1", 2], "timestampsUnixNano": ["3"]}], "attributeIndices": [1, "2"]}),
            Ok(json!({"samples": [{"values": ["1", "2"], "timestampsUnixNano": ["3"]}], "attributeIndices": [1, 2]})),
        ),
        (Profiles, json!({"samples": [{"values": ["x"]}]}), Err("profiles[0].samples[0].values[0]")),
        (
            Profiles,
            json!({"sampleType": {"typeStrindex": 1, "unitStrindex": "2"}, "period": "10"}),
            Ok(json!({"sampleType": {"typeStrindex": 1, "unitStrindex": 2}, "period": "10"})),
        ),
    ];
    for (signal, input, want) in cases {
        let got = canonical(signal, input.clone());
        match (&got, &want) {
            (Ok(g), Ok(w)) => assert_eq!(g, w, "{signal:?} {input}"),
            (Err(g), Err(w)) => assert!(g.contains(w), "{signal:?} {input}: error `{g}` should contain `{w}`"),
            _ => panic!("{signal:?} {input}: got {got:?}, want {want:?}"),
        }
    }
}

#[test]
fn whole_document_errors() {
    assert!(decode(Signal::Traces, b"{").unwrap_err().to_string().contains("invalid JSON"));
    assert!(decode(Signal::Traces, b"[]").unwrap_err().to_string().contains("$: expected an object"));
    assert!(decode(Signal::Traces, b"{\"resourceSpans\": 3}").unwrap_err().to_string().contains("resourceSpans: expected an array"));
    // Deep nesting is refused, not a stack overflow.
    let deep = format!(
        "{{\"resourceLogs\":[{{\"scopeLogs\":[{{\"logRecords\":[{{\"body\":{}1{}}}]}}]}}]}}",
        "{\"arrayValue\":{\"values\":[".repeat(200),
        "]}}".repeat(200)
    );
    assert!(decode(Signal::Logs, deep.as_bytes()).is_err());
    assert_eq!(decode(Signal::Traces, b"  ").unwrap(), Payload::Traces(Default::default()));
    let dict =
        br#"{"dictionary": {"stringTable": ["", "cpu"], "stackTable": [{"locationIndices": [1, 2]}], "linkTable": [{"traceId": "00"}]}}"#;
    assert!(decode(Signal::Profiles, dict).unwrap_err().to_string().contains("dictionary.linkTable[0].traceId"));
}

fn round_trip(p: Payload) -> Result<(), TestCaseError> {
    let text = encode(&p);
    let back = decode(p.signal(), text.as_bytes()).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
    prop_assert_eq!(&back, &p, "{}", text);
    // Canonical: encoding again gives the same text.
    prop_assert_eq!(encode(&back), text);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    #[test]
    fn traces_round_trip(seed in any::<u64>()) { round_trip(Payload::Traces(G::new(seed).traces()))?; }
    #[test]
    fn metrics_round_trip(seed in any::<u64>()) { round_trip(Payload::Metrics(G::new(seed).metrics()))?; }
    #[test]
    fn logs_round_trip(seed in any::<u64>()) { round_trip(Payload::Logs(G::new(seed).logs()))?; }
    #[test]
    fn profiles_round_trip(seed in any::<u64>()) { round_trip(Payload::Profiles(G::new(seed).profiles()))?; }
}

#[tokio::test]
async fn json_over_http_end_to_end() {
    let w = start_default().await;
    let c = reqwest::Client::new();
    let url = format!("{}/v1/logs", w.http());
    let r = c.post(&url).header("content-type", "application/json; charset=utf-8").body(example("logs.json")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/json");
    assert_eq!(r.text().await.unwrap(), "{}");
    // gzip applies to JSON too.
    let r = c
        .post(&url)
        .header("content-type", "application/json")
        .header("content-encoding", "gzip")
        .body(gzip(&example("events.json")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    for (path, file) in [("/v1/traces", "trace.json"), ("/v1/metrics", "metrics.json")] {
        let r = c.post(format!("{}{path}", w.http())).header("content-type", "application/json").body(example(file)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
    }
    let bad = br#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"name":"ok"},{"traceId":"abc"}]}]}]}"#;
    let r = c.post(format!("{}/v1/traces", w.http())).header("content-type", "application/json").body(bad.to_vec()).send().await.unwrap();
    assert_eq!(r.status(), 400);
    let status: serde_json::Value = r.json().await.unwrap();
    assert_eq!(status["code"], 3);
    assert!(
        status["message"].as_str().unwrap().contains("resourceSpans[0].scopeSpans[0].spans[1].traceId: expected 32 hex characters"),
        "{status}"
    );

    // The file exporter's output is the canonical form of what was sent.
    let logs = wait_items(&w.data_dir(), "logs", 2).await;
    assert_eq!(logs[0]["body"]["stringValue"], "Example log record");
    assert_eq!(logs[0]["traceId"], "5b8efff798038103d269b633813fc60c");
    assert_eq!(logs[1]["eventName"], "browser.page_view");
    let spans = wait_items(&w.data_dir(), "traces", 1).await;
    assert_eq!(spans.len(), 1, "the rejected request exported nothing");
    w.app.shutdown().await;
}

#[test]
fn partial_success_counts_are_strings() {
    let s = weir::otlp::json::encode_partial_success(Signal::Traces, 3, "bad spans");
    assert_eq!(s, r#"{"partialSuccess":{"rejectedSpans":"3","errorMessage":"bad spans"}}"#);
    let s = weir::otlp::json::encode_partial_success(Signal::Metrics, 1, "");
    assert_eq!(s, r#"{"partialSuccess":{"rejectedDataPoints":"1"}}"#);
}
