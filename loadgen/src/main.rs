//! loadgen: replays warmup / burst / bigpayload phases against weir.
//!
//! The real load work arrives with its own issue; for now it prints usage so the
//! workspace builds and the binary is in place.

const USAGE: &str = "usage: loadgen [-url URL] [-token T] [-c N] [-d DURATION] \
[-warmup-spans N] [-burst-spans N] [-bigpayload-spans N]\n\
\n\
Sends OTLP load to weir in three phases: warmup, burst and bigpayload.";

fn main() -> anyhow::Result<()> {
    println!("{USAGE}");
    Ok(())
}
