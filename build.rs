//! Compiles the .proto files that opentelemetry-proto does not ship (google.rpc.Status,
//! RetryInfo, Prometheus remote write, Pyroscope push, pprof). protox is a pure-Rust protobuf compiler, so no `protoc` binary is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "proto/google/rpc/status.proto",
        "proto/google/rpc/error_details.proto",
        "proto/prometheus/types.proto",
        "proto/prometheus/remote.proto",
        "proto/push/v1/push.proto",
        "proto/perftools/profile.proto",
    ];
    for f in files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(files, ["proto"])?;
    prost_build::Config::new().compile_well_known_types().extern_path(".google.protobuf", "::prost_types").compile_fds(fds)?;
    Ok(())
}
