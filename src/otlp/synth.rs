//! Deterministic synthetic OTLP requests, shared by benchmarks, loadgen and tests.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

/// A tiny deterministic PRNG (splitmix64) so generated bodies are identical run to run.
#[derive(Debug, Clone)]
pub struct SplitMix(u64);

impl SplitMix {
    /// Seeded generator.
    pub fn new(seed: u64) -> Self {
        SplitMix(seed)
    }
    /// Next value.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
    fn text(&mut self, n: usize) -> String {
        const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
        (0..n).map(|_| ALPHABET[(self.next_u64() % ALPHABET.len() as u64) as usize] as char).collect()
    }
}

/// A trace export request: `spans` spans with `attrs` string attributes whose values
/// are `attr_len` bytes long, in one resource and scope.
pub fn traces_request(spans: usize, attrs: usize, attr_len: usize, seed: u64) -> ExportTraceServiceRequest {
    let mut rng = SplitMix::new(seed);
    let trace_id = rng.bytes(16);
    let spans = (0..spans)
        .map(|i| Span {
            trace_id: trace_id.clone(),
            span_id: rng.bytes(8),
            parent_span_id: if i == 0 { Vec::new() } else { rng.bytes(8) },
            name: format!("operation-{}", i % 16),
            kind: 2,
            start_time_unix_nano: 1_700_000_000_000_000_000 + i as u64 * 1000,
            end_time_unix_nano: 1_700_000_000_000_500_000 + i as u64 * 1000,
            attributes: (0..attrs)
                .map(|a| KeyValue {
                    key: format!("attribute.key.{a}"),
                    value: Some(AnyValue { value: Some(any_value::Value::StringValue(rng.text(attr_len))) }),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
        .collect();
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![KeyValue {
                    key: "service.name".into(),
                    value: Some(AnyValue { value: Some(any_value::Value::StringValue("loadgen".into())) }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope { name: "weir.synth".into(), version: "1".into(), ..Default::default() }),
                spans,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    }
}
