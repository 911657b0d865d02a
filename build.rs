//! Compiles the .proto files that opentelemetry-proto does not ship (google.rpc.Status,
//! RetryInfo, Prometheus remote write, Pyroscope push, pprof). protox is a pure-Rust protobuf compiler, so no `protoc` binary is needed.
//! Also records the commit the build comes from, for `weir --version`.

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
    commit();
    let fds = protox::compile(files, ["proto"])?;
    prost_build::Config::new().compile_well_known_types().extern_path(".google.protobuf", "::prost_types").compile_fds(fds)?;
    Ok(())
}

/// `WEIR_COMMIT` (short hash, or `unknown` outside a git checkout) and `WEIR_TREE`
/// (`clean`, or `modified` when tracked files differ from that commit).
fn commit() {
    for p in [".git/HEAD", ".git/index", ".git/refs", "src", "Cargo.toml", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={p}");
    }
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let tree = match git(&["status", "--porcelain", "--untracked-files=no"]) {
        Some(s) if s.is_empty() => "clean",
        Some(_) => "modified",
        None => "unknown",
    };
    println!("cargo:rustc-env=WEIR_COMMIT={commit}");
    println!("cargo:rustc-env=WEIR_TREE={tree}");
}
