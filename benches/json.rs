//! OTLP/JSON decode of a 512-span request (10 attributes per span), in spans/s and MB/s,
//! next to the prost decode of the same request in protobuf and weir's wire check of it
//! (what the receiver does with protobuf traces, metrics and logs).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use prost::Message;
use weir::receiver::format::Format;
use weir::receiver::otlp::decode::decode;
use weir::receiver::otlp::decode::decode_protobuf;
use weir::signal::{Payload, Signal};

fn bench(c: &mut Criterion) {
    let req = weir::otlp::synth::traces_request(512, 10, 16, 42);
    let json = bytes::Bytes::from(weir::otlp::json::encode(&Payload::Traces(req.clone())).into_bytes());
    let proto = req.encode_to_vec();
    let mut g = c.benchmark_group("decode_512x10");
    g.throughput(Throughput::Elements(512));
    g.bench_function("json/spans", |b| {
        b.iter(|| decode(Signal::Traces, Format::Json, std::hint::black_box(json.clone())).map(|p| p.item_count()))
    });
    g.bench_function("protobuf/spans", |b| {
        b.iter(|| decode_protobuf(Signal::Traces, std::hint::black_box(&proto)).map(|p| p.item_count()))
    });
    g.bench_function("protobuf_wire_check/spans", |b| b.iter(|| weir::otlp::wire::check(Signal::Traces, std::hint::black_box(&proto))));
    g.throughput(Throughput::Bytes(json.len() as u64));
    g.bench_function("json/bytes", |b| {
        b.iter(|| decode(Signal::Traces, Format::Json, std::hint::black_box(json.clone())).map(|p| p.item_count()))
    });
    g.finish();
    let mut g = c.benchmark_group("encode_512x10");
    g.throughput(Throughput::Elements(512));
    let payload = Payload::Traces(req);
    g.bench_function("json/spans", |b| b.iter(|| weir::otlp::json::encode(std::hint::black_box(&payload)).len()));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
