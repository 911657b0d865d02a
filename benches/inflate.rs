//! Inflating request bodies: each candidate inflater on the fixed throughput bodies
//! (`examples/throughput_bodies.rs`: same seed and shapes) and on a small body, in
//! bytes of output per second. `weir` is what the receiver runs (one shot into a buffer
//! of the stated size: libdeflate for gzip, a per-thread context for zstd); `streaming`
//! is its fallback (flate2 on zlib-rs, zstd's streaming decoder); `zlib-rs one shot` is
//! the other whole-buffer candidate for gzip, measured to justify the choice.
//!
//! `cargo bench --bench inflate`

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use prost::Message;
use std::hint::black_box;
use std::io::Write;
use weir::compression::{decompress, decompress_streaming, Encoding};

/// (name, spans, attributes): the throughput shapes and one small request.
const SHAPES: [(&str, usize, usize); 3] = [("512x10", 512, 10), ("100x10", 100, 10), ("small_4x4", 4, 4)];
const LIMIT: usize = 64 << 20;

/// flate2 on zlib-rs, one call into a buffer of the stated size (gzip header parsed by
/// zlib-rs itself, window bits 15).
fn zlib_rs_one_shot(gz: &[u8], size: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(size);
    let mut d = flate2::Decompress::new_gzip(15);
    d.decompress_vec(gz, &mut out, flate2::FlushDecompress::Finish).expect("valid gzip");
    out
}

fn bench(c: &mut Criterion) {
    for (shape, spans, attrs) in SHAPES {
        let pb = weir::otlp::synth::traces_request(spans, attrs, 16, 42).encode_to_vec();
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(&pb).unwrap();
        let gz = e.finish().unwrap();
        let zs = zstd::bulk::compress(&pb, 3).unwrap();
        assert_eq!(zlib_rs_one_shot(&gz, pb.len()), pb);
        let mut g = c.benchmark_group(format!("inflate_gzip_{shape}"));
        g.throughput(Throughput::Bytes(pb.len() as u64));
        g.bench_function("weir", |b| b.iter(|| decompress(Encoding::Gzip, black_box(&gz), LIMIT).unwrap()));
        g.bench_function("streaming", |b| b.iter(|| decompress_streaming(Encoding::Gzip, black_box(&gz), LIMIT).unwrap()));
        g.bench_function("zlib-rs one shot", |b| b.iter(|| zlib_rs_one_shot(black_box(&gz), pb.len())));
        g.finish();
        let mut g = c.benchmark_group(format!("inflate_zstd_{shape}"));
        g.throughput(Throughput::Bytes(pb.len() as u64));
        g.bench_function("weir", |b| b.iter(|| decompress(Encoding::Zstd, black_box(&zs), LIMIT).unwrap()));
        g.bench_function("streaming", |b| b.iter(|| decompress_streaming(Encoding::Zstd, black_box(&zs), LIMIT).unwrap()));
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
