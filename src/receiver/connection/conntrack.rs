//! Connection and RTT signals from user space (an eBPF probe would see the same): each
//! receiver counts the connections it accepts and keeps the file descriptors of the ones
//! open; the throttle's sampler reads the kernel's smoothed RTT (`TCP_INFO`) from them.
//! No privileges needed: these are weir's own sockets.

use crate::throttle::conns::{ConnSample, ConnSource};
use std::collections::HashMap;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// The most connections whose RTT one sample reads.
pub const RTT_SAMPLE: usize = 64;

/// One server's open connections.
#[derive(Debug, Default)]
pub struct ConnTracker {
    open: Mutex<HashMap<u64, RawFd>>,
    next_id: AtomicU64,
    accepted: AtomicU64,
}

/// Smoothed RTT of a TCP socket in microseconds (`tcpi_rtt`), if the fd is one.
#[cfg(target_os = "linux")]
pub fn tcp_rtt_micros(fd: RawFd) -> Option<u32> {
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `info` is a properly sized, writable tcp_info and `len` holds its size; the
    // kernel writes at most `len` bytes. A closed or reused fd only makes the call fail.
    let rc = unsafe { libc::getsockopt(fd, libc::IPPROTO_TCP, libc::TCP_INFO, (&mut info as *mut libc::tcp_info).cast(), &mut len) };
    (rc == 0 && info.tcpi_rtt > 0).then_some(info.tcpi_rtt)
}

/// Smoothed RTT is Linux-only here.
#[cfg(not(target_os = "linux"))]
pub fn tcp_rtt_micros(_fd: RawFd) -> Option<u32> {
    None
}

impl ConnTracker {
    /// Records an accepted connection; returns its id for [`ConnTracker::close`].
    pub fn open(&self, fd: RawFd) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.accepted.fetch_add(1, Ordering::Relaxed);
        self.open.lock().unwrap_or_else(|e| e.into_inner()).insert(id, fd);
        id
    }

    /// Forgets a connection.
    pub fn close(&self, id: u64) {
        self.open.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
    }

    /// Counts and reads RTTs (the sampler calls it). The RTT is read from at most
    /// [`RTT_SAMPLE`] connections spread over the open ones: a `TCP_INFO` call per open
    /// connection would stall the runtime long enough to refuse the requests that arrive
    /// meanwhile for their queue delay (`docs/overload.md#measurements-behind-the-defaults`).
    pub fn sample(&self) -> ConnSample {
        let fds: Vec<RawFd> = self.open.lock().unwrap_or_else(|e| e.into_inner()).values().copied().collect();
        let step = fds.len().div_ceil(RTT_SAMPLE).max(1);
        let rtts: Vec<f64> = fds.iter().step_by(step).filter_map(|fd| tcp_rtt_micros(*fd)).map(|us| f64::from(us) / 1000.0).collect();
        ConnSample {
            open: fds.len(),
            accepted_total: self.accepted.load(Ordering::Relaxed),
            rtt_avg_ms: (!rtts.is_empty()).then(|| rtts.iter().sum::<f64>() / rtts.len() as f64),
            rtt_max_ms: rtts.iter().copied().reduce(f64::max),
        }
    }
}

/// Both receivers' trackers.
#[derive(Debug, Default)]
pub struct ConnRegistry {
    /// OTLP/HTTP (and remote write, Pyroscope).
    pub http: ConnTracker,
    /// OTLP/gRPC.
    pub grpc: ConnTracker,
    /// Memory is above its enter line (set by the throttle's sampler): each new
    /// connection asks the idlest open one to close.
    memory_short: std::sync::atomic::AtomicBool,
}

impl ConnSource for ConnRegistry {
    fn set_memory_short(&self, short: bool) {
        self.memory_short.store(short, Ordering::Relaxed);
    }

    fn sample(&self) -> (ConnSample, ConnSample, ConnSample) {
        ConnRegistry::sample(self)
    }
}

impl ConnRegistry {
    /// Whether memory is short.
    pub fn memory_short(&self) -> bool {
        self.memory_short.load(Ordering::Relaxed)
    }

    /// The tracker of a server by name.
    pub fn for_server(&self, name: &str) -> Option<&ConnTracker> {
        match name {
            "http" => Some(&self.http),
            "grpc" => Some(&self.grpc),
            _ => None,
        }
    }

    /// Both servers together: open connections summed, RTT averaged over all.
    pub fn sample(&self) -> (ConnSample, ConnSample, ConnSample) {
        let (h, g) = (self.http.sample(), self.grpc.sample());
        let n = |s: &ConnSample| s.rtt_avg_ms.map_or(0, |_| s.open);
        let total_rtt = match (h.rtt_avg_ms, g.rtt_avg_ms) {
            (Some(a), Some(b)) => Some((a * n(&h) as f64 + b * n(&g) as f64) / (n(&h) + n(&g)).max(1) as f64),
            (a, b) => a.or(b),
        };
        let all = ConnSample {
            open: h.open + g.open,
            accepted_total: h.accepted_total + g.accepted_total,
            rtt_avg_ms: total_rtt,
            rtt_max_ms: [h.rtt_max_ms, g.rtt_max_ms].into_iter().flatten().reduce(f64::max),
        };
        (h, g, all)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_rtt_of_a_real_loopback_connection() {
        use std::io::{Read, Write};
        use std::os::fd::AsRawFd;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        for _ in 0..20 {
            c.write_all(b"ping").unwrap();
            let mut b = [0u8; 4];
            s.read_exact(&mut b).unwrap();
            s.write_all(b"pong").unwrap();
            c.read_exact(&mut b).unwrap();
        }
        let t = ConnTracker::default();
        let id = t.open(s.as_raw_fd());
        let got = t.sample();
        assert_eq!((got.open, got.accepted_total), (1, 1));
        assert!(got.rtt_avg_ms.is_some_and(|r| r > 0.0 && r < 100.0), "{got:?}");
        t.close(id);
        assert_eq!(t.sample().open, 0);
    }
}
