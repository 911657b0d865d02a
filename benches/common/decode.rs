//! The decode-only benchmark body, shared by `decode` (system allocator) and
//! `decode_jemalloc` (weir's allocator): prost decoding of the fixed throughput bodies
//! (`examples/throughput_bodies.rs`: same seed, same shapes) through weir's decode
//! module, in spans/s; and, for comparison, the wire check weir's receiver runs instead.

use criterion::{Criterion, Throughput};
use prost::Message;
use weir::receiver::otlp::decode::decode_protobuf;
use weir::signal::Signal;

/// (shape, spans, attributes), as in `examples/throughput_bodies.rs`.
pub const SHAPES: [(&str, usize, usize); 3] = [("512x10", 512, 10), ("512x2", 512, 2), ("100x10", 100, 10)];

/// One group per shape, named `{prefix}_{shape}`, function `spans`.
pub fn bench(c: &mut Criterion, prefix: &str) {
    for (shape, spans, attrs) in SHAPES {
        let body = weir::otlp::synth::traces_request(spans, attrs, 16, 42).encode_to_vec();
        let mut g = c.benchmark_group(format!("{prefix}_{shape}"));
        g.throughput(Throughput::Elements(spans as u64));
        g.bench_function("spans", |b| b.iter(|| decode_protobuf(Signal::Traces, std::hint::black_box(&body)).map(|p| p.item_count())));
        // What weir's receiver does instead of decoding: check and count on the wire.
        g.bench_function("wire_check", |b| b.iter(|| weir::otlp::wire::check(Signal::Traces, std::hint::black_box(&body))));
        g.finish();
    }
}
