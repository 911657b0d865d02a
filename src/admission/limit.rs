//! The adaptive in-flight limit (`max_inflight_per_core: auto`) and the values weir
//! derives from its calm service time (see docs/overload.md, "What weir works out by
//! itself").
//!
//! A delay-based limit in the family of Netflix's Gradient2 and Envoy's adaptive
//! concurrency filter: admitted requests' latency is averaged over short windows and
//! compared with the calm service time. While a window's average stays within
//! [`TOLERANCE`] of it, the limit rises by a quarter; above it, the limit is multiplied by
//! calm × tolerance / average (at most halved per window). Work on a core is shared, so
//! past the cores' count each request more only stretches every request's latency and
//! the limit settles between one and three requests per core.
//!
//! The calm service time is measured at the floor, the cores' count, where no request
//! shares a core: the first window after start is such a probe, and so is one window in
//! every [`PROBE_EVERY`] (requests admitted before a probe are left out of it). A limit
//! that a stale (too low) calm time pushes down reaches the floor, where every window is
//! a calm sample; a calm time too high (the bodies got smaller) is replaced by the first
//! lower window average. For CPU-bound work a probe costs nothing: the cores stay busy.

/// A window average within this multiple of the calm service time counts as calm.
pub const TOLERANCE: f64 = 1.5;
/// A window closes after this long once it has [`WINDOW_SAMPLES`] samples (more than two
/// sample intervals, so that CFS's 100 ms quota periods average out)…
const WINDOW_MIN: u64 = 250_000_000;
/// …or after this long with any sample at all.
const WINDOW_MAX: u64 = 1_000_000_000;
const WINDOW_SAMPLES: u32 = 8;
/// The limit starts at this many times its floor: before the first windows close, the
/// CPU has not been busy long enough for the limit to be enforced anyway.
const INITIAL_PER_FLOOR: f64 = 2.0;
/// The ceiling, per core: a bound on what the limit can grow to while latency holds.
const CEILING_PER_CORE: f64 = 64.0;
/// A calm window raises the limit by this share of itself.
const GROWTH: f64 = 0.25;
/// One window in this many is a probe at the floor, while the limit is above it.
pub const PROBE_EVERY: u32 = 120;

/// The limit's state (under the admission layers' lock).
#[derive(Debug, Clone)]
pub struct AdaptiveLimit {
    floor: f64,
    ceiling: f64,
    limit: f64,
    /// Calm service time in ns (0: not measured yet).
    calm: f64,
    win_start: u64,
    win_sum: f64,
    win_n: u32,
    win_max_inflight: i64,
    /// This window is a probe at the floor; samples of requests admitted before
    /// `probe_from` are left out of it.
    probing: bool,
    probe_from: u64,
    windows_since_probe: u32,
}

impl AdaptiveLimit {
    /// A limit for `cores` effective cores.
    pub fn new(cores: f64) -> Self {
        let floor = cores.ceil().max(1.0);
        AdaptiveLimit {
            floor,
            ceiling: (cores * CEILING_PER_CORE).max(floor),
            limit: floor * INITIAL_PER_FLOOR,
            calm: 0.0,
            win_start: 0,
            win_sum: 0.0,
            win_n: 0,
            win_max_inflight: 0,
            probing: true,
            probe_from: 0,
            windows_since_probe: 0,
        }
    }

    /// The limit now, in requests (at least the floor).
    pub fn limit(&self) -> i64 {
        if self.probing {
            return self.floor as i64;
        }
        // Rounded down: between two sizes, the smaller (less sharing of a core).
        self.limit.floor().max(self.floor) as i64
    }

    /// Whether this window is a probe at the floor.
    pub fn probing(&self) -> bool {
        self.probing
    }

    /// The calm service time, once measured.
    pub fn calm_nanos(&self) -> Option<u64> {
        (self.calm > 0.0).then_some(self.calm as u64)
    }

    /// A request was admitted and `inflight` are in flight now, itself included.
    pub fn admitted(&mut self, inflight: i64) {
        self.win_max_inflight = self.win_max_inflight.max(inflight);
    }

    /// A request admitted `rtt` ns ago finished at `now`. True when the limit changed.
    pub fn sample(&mut self, now: u64, rtt: u64) -> bool {
        if self.probing && now.saturating_sub(rtt) < self.probe_from {
            return false;
        }
        if self.win_n == 0 {
            self.win_start = now;
        }
        self.win_sum += rtt as f64;
        self.win_n += 1;
        let age = now.saturating_sub(self.win_start);
        if !((age >= WINDOW_MIN && self.win_n >= WINDOW_SAMPLES) || age >= WINDOW_MAX) {
            return false;
        }
        let avg = self.win_sum / f64::from(self.win_n);
        let max_inflight = self.win_max_inflight;
        self.win_sum = 0.0;
        self.win_n = 0;
        // Requests still in flight carry over into the next window.
        self.win_max_inflight = 0;
        self.close_window(now, avg, max_inflight)
    }

    fn close_window(&mut self, now: u64, avg: f64, max_inflight: i64) -> bool {
        if avg <= 0.0 {
            return false;
        }
        let before = self.limit();
        if self.probing {
            self.probing = false;
            self.windows_since_probe = 0;
            if self.calm <= 0.0 || avg < self.calm || max_inflight as f64 <= self.floor {
                self.calm = avg;
            }
            return self.limit() != before;
        }
        self.windows_since_probe += 1;
        if self.windows_since_probe >= PROBE_EVERY && self.limit > self.floor {
            self.probing = true;
            self.probe_from = now;
            return true;
        }
        if self.calm <= 0.0 || avg < self.calm || max_inflight as f64 <= self.floor {
            // At the floor no request shared a core: this window is the calm service time
            // of today's mix, even when the mix got heavier.
            self.calm = avg;
        }
        // App-limited: too few requests in flight to say anything about the limit.
        if (max_inflight as f64) < self.limit / 2.0 {
            return false;
        }
        let gradient = (TOLERANCE * self.calm / avg).clamp(0.5, 1.0);
        // Up by a quarter per calm window: on one core the limit spends most windows at one
        // request, where CPU-bound work is served best, and tries a second now and then;
        // work that waits on I/O climbs to the limit it needs in a few seconds.
        self.limit = if gradient >= 1.0 { self.limit + GROWTH * self.limit.max(self.floor) } else { self.limit * gradient };
        self.limit = self.limit.clamp(self.floor, self.ceiling);
        self.limit() != before
    }
}

/// The values derived from the calm service time (`auto` keys), with the bounds that
/// keep them sane before anything was measured.
pub fn inflight_wait(calm: Option<u64>) -> std::time::Duration {
    let ms = |n: u64| std::time::Duration::from_millis(n);
    calm.map_or(ms(20), |c| std::time::Duration::from_nanos(c.saturating_mul(4)).clamp(ms(5), ms(100)))
}

/// The queue-delay target: four calm service times within 5-10 ms. A request that
/// waited that long in front of weir would have been served several times over.
pub fn queue_delay_target(calm: Option<u64>) -> std::time::Duration {
    let ms = |n: u64| std::time::Duration::from_millis(n);
    calm.map_or(ms(10), |c| std::time::Duration::from_nanos(c.saturating_mul(4)).clamp(ms(5), ms(10)))
}

/// The smallest body that may wait for a slot: twice the kernel's default socket
/// receive buffer (`net.ipv4.tcp_rmem`'s middle value, read once). A body that fits is
/// mostly in weir's socket when its head is read, so refusing it costs one read; a
/// larger one would be sent again across several round trips.
pub fn wait_min_body_bytes() -> u64 {
    static BYTES: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *BYTES.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/net/ipv4/tcp_rmem")
            .ok()
            .and_then(|t| t.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok()))
            .unwrap_or(128 * 1024)
            .saturating_mul(2)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// Runs `seconds` of closed-loop load on `cores` cores of CPU-bound work whose
    /// service time alone is `service` ns, with the limit as the only bound (as many
    /// clients as it lets in): each request's latency is its service time stretched by
    /// the cores' sharing. Returns the limit at the end.
    fn drive(l: &mut AdaptiveLimit, now: &mut u64, cores: f64, service: u64, seconds: u64) -> i64 {
        let end = *now + seconds * 1_000 * MS;
        while *now < end {
            let n = l.limit();
            l.admitted(n);
            let rtt = (service as f64 * (n as f64 / cores).max(1.0)) as u64;
            *now += rtt / n as u64;
            l.sample(*now, rtt);
        }
        l.limit()
    }

    #[test]
    fn the_limit_falls_while_latency_grows_and_settles_near_the_cores() {
        for cores in [1.0, 2.0, 4.0, 8.0] {
            let mut l = AdaptiveLimit::new(cores);
            let mut now = 0;
            assert_eq!(l.limit(), cores as i64, "the first window is a probe at the floor");
            let settled = drive(&mut l, &mut now, cores, 2 * MS, 30);
            let per_core = settled as f64 / cores;
            assert!((1.0..=3.0).contains(&per_core), "{cores} cores: settled at {settled}");
            assert!(l.calm_nanos().is_some_and(|c| (c as f64 - 2e6).abs() < 0.3e6), "calm {:?}", l.calm_nanos());
        }
    }

    #[test]
    fn the_limit_rises_while_latency_holds() {
        // Work that does not share the cores (waiting on I/O): latency is flat whatever
        // the concurrency, so the limit climbs one per window up to its ceiling.
        let mut l = AdaptiveLimit::new(1.0);
        let mut now = 0;
        let mut last = l.limit();
        for _ in 0..40 {
            for _ in 0..10 {
                l.admitted(l.limit());
                now += 30 * MS;
                l.sample(now, 2 * MS);
            }
            assert!(l.limit() >= last, "fell with flat latency");
            last = l.limit();
        }
        assert!(last >= 64, "rose to {last} in 40 windows (its ceiling)");
    }

    #[test]
    fn an_app_limited_window_moves_nothing() {
        let mut l = AdaptiveLimit::new(2.0);
        let mut now = 0;
        for _ in 0..100 {
            l.admitted(1);
            now += 50 * MS;
            // Slow, but only one in flight against a limit of 4: not the limit's doing.
            l.sample(now, 40 * MS);
        }
        assert_eq!(l.limit(), 4);
    }

    #[test]
    fn after_a_storm_the_limit_recovers_and_a_heavier_mix_is_learned() {
        let mut l = AdaptiveLimit::new(1.0);
        let mut now = 0;
        drive(&mut l, &mut now, 1.0, MS, 20);
        // Bodies ten times larger: latency jumps, the limit falls to the floor, and the
        // floor's windows teach the new calm time instead of holding the limit there.
        let low = drive(&mut l, &mut now, 1.0, 10 * MS, 20);
        assert!(low <= 3, "limit {low} with 10x heavier requests");
        assert!(l.calm_nanos().is_some_and(|c| c > 8 * MS), "calm {:?} not relearned", l.calm_nanos());
        // The storm ends: the work stops sharing a core (say the exporter waits on I/O),
        // latency holds at the calm time and the limit climbs again.
        let mut highest = 0;
        for _ in 0..30 {
            for _ in 0..10 {
                l.admitted(l.limit());
                now += 30 * MS;
                l.sample(now, 10 * MS);
            }
            highest = highest.max(l.limit());
        }
        assert!(highest >= 20, "recovered only to {highest}");
    }

    #[test]
    fn a_probe_leaves_out_requests_admitted_before_it_and_relearns_the_calm_time() {
        let mut l = AdaptiveLimit::new(1.0);
        let mut now = 0;
        drive(&mut l, &mut now, 1.0, 2 * MS, 5);
        // Latency holds (I/O-bound work): the limit climbs until the next probe.
        let mut probed = false;
        'windows: for _ in 0..(PROBE_EVERY + 5) {
            for _ in 0..10 {
                l.admitted(l.limit());
                now += 30 * MS;
                l.sample(now, 2 * MS);
                if l.probing() {
                    probed = true;
                    // A slow request admitted before the probe does not count in it.
                    l.sample(now + MS, 500 * MS);
                    for _ in 0..10 {
                        l.admitted(1);
                        now += 30 * MS;
                        l.sample(now, 3 * MS);
                    }
                    assert!(!l.probing(), "the probe window closed");
                    assert_eq!(l.calm_nanos(), Some(3 * MS), "the probe measured only its own requests");
                    break 'windows;
                }
            }
        }
        assert!(probed, "no probe within {} windows", PROBE_EVERY + 5);
    }

    #[test]
    fn derived_values_stay_in_their_bounds() {
        assert_eq!(inflight_wait(None), std::time::Duration::from_millis(20));
        assert_eq!(inflight_wait(Some(3 * MS)), std::time::Duration::from_millis(12));
        assert_eq!(inflight_wait(Some(100)), std::time::Duration::from_millis(5));
        assert_eq!(inflight_wait(Some(1_000 * MS)), std::time::Duration::from_millis(100));
        assert_eq!(queue_delay_target(Some(2 * MS)), std::time::Duration::from_millis(8));
        assert_eq!(queue_delay_target(Some(MS / 2)), std::time::Duration::from_millis(5));
        assert!(wait_min_body_bytes() >= 8 * 1024);
    }
}
