//! The floor under the durable queue's writer: what appending a gigabyte and syncing it
//! costs this machine's kernel in CPU, with nothing of weir around it. Groups of
//! 512x10 records (237,824 bytes each, as `scripts/bench-throughput.sh` sends) are
//! written with `pwrite` and synced with `fdatasync` into 64 MiB segment files, three
//! ways:
//!
//! - `fresh`: each segment a new file, the oldest deleted (the queue before spare files);
//! - `spare`: each segment written over an exported one renamed aside (the queue now);
//! - `direct`: the same over spare files with `O_DIRECT`, from one aligned buffer the
//!   records are copied into (the page cache skipped; not what the queue does).
//!
//! It prints CPU seconds (user + system, this process) per GB written. Run it pinned to
//! one core, in a directory on the disk the queue would use:
//!
//! `cargo run --release --example write_floor -- target/write-floor [records per group] [GB]`

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

const RECORD: usize = 237_824;
const SEGMENT: u64 = 64 << 20;
const ALIGN: usize = 4096;

fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut r) };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    t(r.ru_utime) + t(r.ru_stime)
}

fn open(path: &Path, direct: bool, truncate: bool) -> File {
    let mut o = OpenOptions::new();
    o.write(true).create(true).truncate(truncate);
    if direct {
        o.custom_flags(libc::O_DIRECT);
    }
    o.open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Writes `total` bytes in groups of `group` records; returns CPU seconds per GB.
fn run(dir: &Path, mode: &str, group: usize, total: u64) -> f64 {
    let record: Vec<u8> = (0..RECORD).map(|i| (i * 7) as u8).collect();
    let mut staging = vec![0u8; RECORD * group + 2 * ALIGN];
    let off = staging.as_ptr().align_offset(ALIGN);
    let (mut live, mut spare): (Vec<PathBuf>, Vec<PathBuf>) = (Vec::new(), Vec::new());
    let (mut file, mut at, mut written, mut n) = (None::<File>, 0u64, 0u64, 0u64);
    let c0 = cpu_seconds();
    while written < total {
        if file.is_none() || at >= SEGMENT {
            let path = dir.join(format!("{mode}-{n:08}.wq"));
            n += 1;
            if live.len() >= 2 {
                let old = live.remove(0);
                if mode == "fresh" {
                    std::fs::remove_file(&old).unwrap();
                } else {
                    let s = old.with_extension("spare");
                    std::fs::rename(&old, &s).unwrap();
                    spare.push(s);
                }
            }
            file = Some(match spare.pop() {
                Some(s) => {
                    std::fs::rename(&s, &path).unwrap();
                    open(&path, mode == "direct", false)
                }
                None => open(&path, mode == "direct", true),
            });
            live.push(path);
            at = 0;
        }
        let Some(f) = file.as_ref() else { unreachable!() };
        if mode == "direct" {
            let len = (RECORD * group).div_ceil(ALIGN) * ALIGN;
            let buf = &mut staging[off..off + len];
            for g in 0..group {
                buf[g * RECORD..(g + 1) * RECORD].copy_from_slice(&record);
            }
            f.write_all_at(buf, at).unwrap();
            at += len as u64;
            written += len as u64;
        } else {
            for _ in 0..group {
                f.write_all_at(&record, at).unwrap();
                at += RECORD as u64;
                written += RECORD as u64;
            }
        }
        f.sync_data().unwrap();
    }
    let cpu = cpu_seconds() - c0;
    for p in live.iter().chain(&spare) {
        let _ = std::fs::remove_file(p);
    }
    cpu / (written as f64 / 1e9)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = PathBuf::from(args.get(1).map_or("target/write-floor", |s| s.as_str()));
    let group: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(2);
    let gb: f64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(1.5);
    std::fs::create_dir_all(&dir).unwrap();
    let total = (gb * 1e9) as u64;
    // A short first pass of each warms up; in every pass the first two segments are new files.
    for mode in ["fresh", "spare", "direct"] {
        let t = Instant::now();
        run(&dir, mode, group, total / 4);
        let mut v: Vec<f64> = (0..3).map(|_| run(&dir, mode, group, total)).collect();
        v.sort_by(f64::total_cmp);
        println!(
            "{mode:6} {group} records per group: CPU per GB written {:.3} s (median of 3; {:.3}-{:.3}), {:.0} s",
            v[1],
            v[0],
            v[2],
            t.elapsed().as_secs_f64()
        );
    }
}
