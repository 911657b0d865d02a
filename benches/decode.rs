//! Decode-only baseline with the system allocator: see `common/decode.rs`.

use criterion::{criterion_group, criterion_main, Criterion};

#[path = "common/decode.rs"]
mod common;

fn bench(c: &mut Criterion) {
    common::bench(c, "decode_traces");
}

criterion_group!(benches, bench);
criterion_main!(benches);
