//! The `weir` binary: parse flags, load config, run, map errors to exit codes.

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;

// mimalloc returns freed memory to the OS promptly (glibc malloc tends to keep it), so
// the cgroup's memory charge falls after a burst.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// sysexits.h EX_USAGE / EX_CONFIG-style code for a bad config.
const EXIT_CONFIG: u8 = 64;

#[derive(Parser)]
#[command(name = "weir", version, about = "OTLP ingestion gateway with adaptive overload protection")]
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
        print!("{}", config.to_yaml());
        return ExitCode::SUCCESS;
    }
    init_logging(&config.log);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("weir: cannot start runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(weir::app::run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "weir failed to start");
            eprintln!("weir: {e}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(log: &weir::config::LogConfig) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&log.level));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    if log.format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}
