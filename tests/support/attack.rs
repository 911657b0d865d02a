//! Raw protocol pieces for attack tests and the attack benchmark
//! (`examples/attacks.rs` includes this file): HTTP/2 frames by hand, HPACK without
//! Huffman, bulk connections, and a process's CPU time and peak memory from /proc.
#![allow(dead_code)]

use std::io::{ErrorKind, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// The HTTP/2 client preface and an empty SETTINGS frame.
pub fn h2_preface() -> Vec<u8> {
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(frame(0x4, 0, 0, &[]));
    out
}

/// An HTTP/2 frame header plus payload.
pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// Reads HTTP/2 frames from `s` until EOF or `secs`: (type, flags, stream, payload).
pub fn read_frames(s: &mut TcpStream, secs: u64) -> Vec<(u8, u8, u32, Vec<u8>)> {
    use std::io::Read;
    s.set_nonblocking(false).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let until = Instant::now() + Duration::from_secs(secs);
    let mut buf = Vec::new();
    let mut chunk = [0u8; 65536];
    while Instant::now() < until {
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    let mut frames = Vec::new();
    let mut at = 0;
    while buf.len() >= at + 9 {
        let len = (buf[at] as usize) << 16 | (buf[at + 1] as usize) << 8 | buf[at + 2] as usize;
        if buf.len() < at + 9 + len {
            break;
        }
        let stream = u32::from_be_bytes(buf[at + 5..at + 9].try_into().unwrap()) & 0x7fff_ffff;
        frames.push((buf[at + 3], buf[at + 4], stream, buf[at + 9..at + 9 + len].to_vec()));
        at += 9 + len;
    }
    frames
}

/// A request head in HPACK without Huffman or indexing: POST `path`, plus `extra`
/// (name, value) fields.
pub fn hpack_post(path: &str, extra: &[(&str, &str)]) -> Vec<u8> {
    let mut h = vec![0x83, 0x86]; // :method POST, :scheme http (static table)
    h.push(0x04); // :path, literal value
    h.push(path.len() as u8);
    h.extend_from_slice(path.as_bytes());
    h.extend_from_slice(&[0x01, 9]); // :authority
    h.extend_from_slice(b"127.0.0.1");
    for (name, value) in extra {
        h.push(0x00);
        h.push(name.len() as u8);
        h.extend_from_slice(name.as_bytes());
        h.push(value.len() as u8);
        h.extend_from_slice(value.as_bytes());
    }
    h
}

/// Opens `n` connections to `addr` and sends `first` on each; connections the kernel
/// does not complete within a second are left out, and after ten of those in a row (a
/// full backlog) no more are tried.
pub fn open_conns(addr: &str, n: usize, first: &[u8]) -> Vec<TcpStream> {
    let addr: std::net::SocketAddr = addr.parse().unwrap();
    let mut out = Vec::new();
    let mut misses = 0;
    for _ in 0..n {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(1)).and_then(|mut s| s.write_all(first).map(|()| s)) {
            Ok(s) => {
                out.push(s);
                misses = 0;
            }
            Err(_) => {
                misses += 1;
                if misses == 10 {
                    break;
                }
            }
        }
    }
    out
}

/// Peak resident memory of a process so far (VmHWM), in bytes.
pub fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap().split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

/// CPU time (user + system) a process has used so far, from `/proc/<pid>/stat`.
pub fn process_cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("process alive");
    // Fields after the command name (which may hold spaces) start at field 3.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Duration::from_millis(ticks * 1000 / hz.max(1))
}
