//! Decoding a 512-span ExportTraceServiceRequest (10 attributes per span) from protobuf,
//! through weir's decode module, in spans/s and MB/s.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use prost::Message;
use weir::receiver::decode::{decode, Format};
use weir::signal::Signal;

fn bench(c: &mut Criterion) {
    let body = weir::otlp::synth::traces_request(512, 10, 16, 42).encode_to_vec();
    let mut g = c.benchmark_group("decode_traces_512x10");
    g.throughput(Throughput::Elements(512));
    g.bench_function("protobuf/spans", |b| {
        b.iter(|| decode(Signal::Traces, Format::Protobuf, std::hint::black_box(&body)).map(|p| p.item_count()))
    });
    g.throughput(Throughput::Bytes(body.len() as u64));
    g.bench_function("protobuf/bytes", |b| {
        b.iter(|| decode(Signal::Traces, Format::Protobuf, std::hint::black_box(&body)).map(|p| p.item_count()))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
