//! Writes the fixed request bodies `scripts/bench-throughput.sh` sends: every shape as
//! protobuf, gzipped and zstd-compressed protobuf, a gRPC message frame and gzip- and
//! zstd-compressed gRPC frames (gzip level 6, zstd level 3 with the content size in the
//! frame, as the OpenTelemetry SDKs' and Collector's one-shot encoders write them).
//! The same seed gives the same bytes on every run and machine. `512x10-64traces.pb` has
//! the same spans in 64 traces, for the routing benchmark.
//!
//! `cargo run --release --example throughput_bodies -- OUTDIR`

use flate2::write::GzEncoder;
use prost::Message;
use std::io::Write;
use std::path::Path;

/// (file stem, spans per request, attributes per span).
const SHAPES: [(&str, usize, usize); 3] = [("512x10", 512, 10), ("512x2", 512, 2), ("100x10", 100, 10)];
const SEED: u64 = 42;
const ATTR_LEN: usize = 16;

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(data).expect("in-memory write");
    enc.finish().expect("in-memory write")
}

/// The gRPC length-prefixed message: compressed flag, big-endian length, message.
fn grpc_frame(compressed: bool, message: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(message.len() + 5);
    out.push(u8::from(compressed));
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    out
}

fn main() {
    let Some(dir) = std::env::args().nth(1) else {
        eprintln!("usage: throughput_bodies OUTDIR");
        std::process::exit(64);
    };
    let dir = Path::new(&dir);
    std::fs::create_dir_all(dir).expect("create output directory");
    let write = |name: String, bytes: &[u8]| std::fs::write(dir.join(&name), bytes).unwrap_or_else(|e| panic!("write {name}: {e}"));
    for (stem, spans, attrs) in SHAPES {
        let pb = weir::otlp::synth::traces_request(spans, attrs, ATTR_LEN, SEED).encode_to_vec();
        let gz = gzip(&pb);
        write(format!("{stem}.pb"), &pb);
        write(format!("{stem}.pb.gz"), &gz);
        write(format!("{stem}.grpc"), &grpc_frame(false, &pb));
        write(format!("{stem}.grpc.gz"), &grpc_frame(true, &gz));
        let zst = zstd::bulk::compress(&pb, 3).expect("in-memory compression");
        write(format!("{stem}.pb.zst"), &zst);
        write(format!("{stem}.grpc.zst"), &grpc_frame(true, &zst));
        println!(
            "{stem}: {spans} spans x {attrs} attributes, protobuf {} bytes, gzip {} bytes, zstd {} bytes",
            pb.len(),
            gz.len(),
            zst.len()
        );
    }
    // 512x10 again, its spans in 64 traces (8 spans each, interleaved), as a batching SDK
    // sends them: the body `scripts/bench-routing.sh` splits by trace ID.
    let mut req = weir::otlp::synth::traces_request(512, 10, ATTR_LEN, SEED);
    for (i, span) in req.resource_spans[0].scope_spans[0].spans.iter_mut().enumerate() {
        let t = (i % 64) as u64 + 1;
        span.trace_id = [t.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_le_bytes(), (t ^ 0x5bd1_e995).to_le_bytes()].concat();
    }
    write("512x10-64traces.pb".into(), &req.encode_to_vec());
}
