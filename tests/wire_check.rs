//! The wire walk (`weir::otlp::wire::check`) against prost: on valid requests of every
//! walked signal it counts what prost's decoding counts, and on mutated bodies (bytes
//! flipped, inserted, removed, truncated) it accepts exactly what prost accepts.

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use proptest::prelude::*;
use prost::Message;
use weir::otlp::wire::check;
use weir::signal::{Payload, Signal};

/// prost's verdict: the item count, or an error.
fn prost_count(signal: Signal, body: &[u8]) -> Result<usize, ()> {
    let p = match signal {
        Signal::Traces => Payload::Traces(ExportTraceServiceRequest::decode(body).map_err(drop)?),
        Signal::Metrics => Payload::Metrics(ExportMetricsServiceRequest::decode(body).map_err(drop)?),
        Signal::Logs => Payload::Logs(ExportLogsServiceRequest::decode(body).map_err(drop)?),
        Signal::Profiles => unreachable!(),
    };
    Ok(p.item_count())
}

/// Requests with every field kind the schema has: the OTLP specification's examples
/// (JSON, decoded by weir's JSON decoder) plus synthetic traces.
fn samples() -> Vec<(Signal, Vec<u8>)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/otlp-examples");
    let mut out = Vec::new();
    for (file, signal) in [("trace.json", Signal::Traces), ("metrics.json", Signal::Metrics), ("logs.json", Signal::Logs)] {
        let json = std::fs::read(format!("{dir}/{file}")).unwrap_or_else(|e| panic!("{file}: {e}"));
        let payload = weir::otlp::json::decode(signal, &json).unwrap_or_else(|e| panic!("{file}: {e}"));
        out.push((signal, payload.encode_to_vec()));
    }
    out.push((Signal::Traces, weir::otlp::synth::traces_request(20, 4, 8, 7).encode_to_vec()));
    out
}

#[test]
fn valid_requests_count_like_prost() {
    for (signal, body) in samples() {
        let want = prost_count(signal, &body).expect("sample decodes");
        assert!(want > 0, "{signal:?} sample has items");
        assert_eq!(check(signal, &body).map_err(|e| e.to_string()), Ok(want), "{signal:?}");
    }
}

#[test]
fn metric_data_oneof_counts_like_prost() {
    // Two different data variants in one Metric: prost keeps the last one; the same
    // variant twice: prost merges them.
    let gauge = |points: usize| {
        let mut g = Vec::new();
        for _ in 0..points {
            // data_points (1): an empty NumberDataPoint.
            g.extend_from_slice(&[0x0a, 0x00]);
        }
        g
    };
    let field = |tag: u8, body: &[u8]| {
        let mut v = vec![(tag << 3) | 2, body.len() as u8];
        v.extend_from_slice(body);
        v
    };
    for metric in [
        [field(5, &gauge(3)), field(7, &gauge(2))].concat(), // gauge then sum: 2
        [field(5, &gauge(3)), field(5, &gauge(2))].concat(), // gauge twice: 5
        [field(7, &gauge(2)), field(5, &gauge(3)), field(1, b"m")].concat(),
    ] {
        let body = field(1, &field(2, &field(2, &metric)));
        assert_eq!(check(Signal::Metrics, &body).ok(), prost_count(Signal::Metrics, &body).ok(), "{metric:?}");
    }
}

#[test]
fn nesting_beyond_prosts_limit_is_refused_like_prost() {
    // AnyValue → ArrayValue → AnyValue … inside a log body, deeper and deeper.
    for levels in [30usize, 49, 50, 51, 60] {
        let mut value: Vec<u8> = vec![0x0a, 0x01, b'x']; // AnyValue{string_value: "x"}
        for _ in 0..levels {
            let array = [vec![0x0a, value.len() as u8], value.clone()].concat(); // ArrayValue{values}
            value = [vec![0x2a], varint(array.len()), array].concat(); // AnyValue{array_value}
        }
        let record = [vec![0x2a], varint(value.len()), value].concat(); // LogRecord{body}
        let scope = [vec![0x12], varint(record.len()), record].concat();
        let resource = [vec![0x12], varint(scope.len()), scope].concat();
        let body = [vec![0x0a], varint(resource.len()), resource].concat();
        assert_eq!(check(Signal::Logs, &body).is_ok(), prost_count(Signal::Logs, &body).is_ok(), "{levels} levels");
    }
}

fn varint(mut n: usize) -> Vec<u8> {
    let mut v = Vec::new();
    while n >= 0x80 {
        v.push((n as u8) | 0x80);
        n >>= 7;
    }
    v.push(n as u8);
    v
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Insert(usize, u8),
    Remove(usize),
    Truncate(usize),
}

fn apply(body: &mut Vec<u8>, m: &Mutation) {
    if body.is_empty() {
        return;
    }
    match *m {
        Mutation::Flip(at, x) => {
            let i = at % body.len();
            body[i] ^= x;
        }
        Mutation::Insert(at, x) => body.insert(at % (body.len() + 1), x),
        Mutation::Remove(at) => {
            body.remove(at % body.len());
        }
        Mutation::Truncate(at) => body.truncate(at % body.len()),
    }
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1u8..).prop_map(|(a, x)| Mutation::Flip(a, x)),
        (any::<usize>(), any::<u8>()).prop_map(|(a, x)| Mutation::Insert(a, x)),
        any::<usize>().prop_map(Mutation::Remove),
        any::<usize>().prop_map(Mutation::Truncate),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]
    #[test]
    fn mutated_bodies_get_prosts_verdict(sample in 0usize..4, mutations in prop::collection::vec(mutation(), 1..4)) {
        let (signal, mut body) = samples().swap_remove(sample);
        for m in &mutations {
            apply(&mut body, m);
        }
        let ours = check(signal, &body).map_err(drop);
        prop_assert_eq!(ours, prost_count(signal, &body), "{:?}", mutations);
    }

    #[test]
    fn random_bytes_get_prosts_verdict(signal in prop::sample::select(vec![Signal::Traces, Signal::Metrics, Signal::Logs]), body in prop::collection::vec(any::<u8>(), 0..64)) {
        prop_assert_eq!(check(signal, &body).map_err(drop), prost_count(signal, &body));
    }
}
