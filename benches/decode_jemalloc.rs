//! Decode-only baseline with jemalloc, the allocator the weir binary uses: see
//! `common/decode.rs`.

use criterion::{criterion_group, criterion_main, Criterion};

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[path = "common/decode.rs"]
mod common;

fn bench(c: &mut Criterion) {
    common::bench(c, "decode_traces_jemalloc");
}

criterion_group!(benches, bench);
criterion_main!(benches);
