//! The `weir` binary: parse flags, load config, run, map errors to exit codes.

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;

// The memory signal is what the kernel charges the cgroup, so freed memory must go back
// to the kernel after a burst or the throttle stays Open. jemalloc's background thread
// purges dirty pages on a timer for every arena, whichever thread freed them; glibc
// malloc keeps freed memory (dynamic mmap threshold), and mimalloc only purges a
// thread's pages when that thread runs again, so memory freed by the exporter but
// allocated by a now-idle receiver thread stays charged (docs/overload.md, "Memory must
// come back"). dirty_decay_ms: freed pages go back within ~1 s; muzzy_decay_ms 0:
// returned with MADV_DONTNEED (uncharged at once), not MADV_FREE.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's compile-time options (read by jemalloc at start-up; a NUL-terminated C string).
#[allow(non_upper_case_globals)]
#[export_name = "_rjem_malloc_conf"]
pub static malloc_conf: &[u8] = b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0\0";

/// `weir --version`: the crate version, the commit built and whether the tree was clean.
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("WEIR_COMMIT"), ", ", env!("WEIR_TREE"), " tree)");

/// sysexits.h EX_USAGE / EX_CONFIG-style code for a bad config.
const EXIT_CONFIG: u8 = 64;

#[derive(Parser)]
#[command(name = "weir", version = VERSION, about = "OTLP ingestion gateway with adaptive overload protection")]
struct Args {
    /// Path to the YAML config.
    #[arg(long, short = 'c', default_value = "config/weir.yaml")]
    config: PathBuf,
    /// Validate the config, print the effective config with defaults, and exit.
    #[arg(long)]
    check: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let config = match weir::config::Config::load(&args.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("weir: invalid config {}: {e}", args.config.display());
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    if args.check {
        for w in &config.receiver.auth.warnings {
            eprintln!("weir: warning: {w}");
        }
        for name in weir::config::Config::ignored_env() {
            eprintln!("weir: ignoring environment variable {name}: it names no config section");
        }
        // The effective config without its secrets: `--check` output ends up in CI logs.
        let mut shown = config.clone();
        shown.receiver.auth.redact();
        print!("{}", shown.to_yaml());
        return ExitCode::SUCCESS;
    }
    init_logging(&config.log);
    for w in &config.receiver.auth.warnings {
        tracing::warn!("{w}");
    }
    for name in weir::config::Config::ignored_env() {
        tracing::warn!(variable = %name, "ignoring an environment variable that names no config section (WEIR_RECEIVER__…, WEIR_PIPELINE__…, …)");
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("weir: cannot start runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(weir::app::run(config, args.config.clone())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "weir failed to start");
            eprintln!("weir: {e}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(log: &weir::config::LogConfig) {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    // The HTTP/2 and HTTP/1 libraries log a line per broken connection at warn: weir
    // counts those (`weir_receiver_connections_*`) and a flood of them would flood the
    // log. The Kafka client logs every connection and leader it finds at info; weir logs
    // what matters of those itself. RUST_LOG still reaches them.
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(format!("{},h2=error,hyper=error,rskafka=warn", log.level)));
    // Colour only for a person at a terminal, never in a file or a pipe.
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(std::io::stderr().is_terminal());
    if log.format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}
