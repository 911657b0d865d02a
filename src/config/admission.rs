//! The admission layers under `receiver.throttle`: in-flight hard cap, slow start, burst
//! damping, BBR concurrency limit and the CPU knee learner
//! (`docs/overload.md#admission-layers`).

use super::ConfigError;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Slow start: after a cold start or a long idle gap, the admitted rate follows
/// init + (target − init)·(1 − e^(−4·progress)) over `duration`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SlowStartConfig {
    /// On or off.
    pub enabled: bool,
    /// Length of the ramp.
    #[serde(with = "humantime_serde")]
    pub duration: Duration,
    /// Requests per second admitted at the start of the ramp.
    pub initial_rate: f64,
}

/// Burst damping: when arrivals exceed `ratio` × the pass baseline, cap the rate and
/// recover along the slow-start curve over half the slow-start duration (at least 5 s).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BurstDampingConfig {
    /// On or off.
    pub enabled: bool,
    /// Arrival / baseline ratio that triggers damping.
    pub ratio: f64,
}

/// BBR: maxInFlight = maxPass × minRT × buckets per second / 1000 (Little's law).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BbrConfig {
    /// On or off.
    pub enabled: bool,
    /// Length of the pass and RT windows.
    #[serde(with = "humantime_serde")]
    pub window: Duration,
    /// Buckets in those windows.
    pub buckets: usize,
    /// After a rejection, keep checking in-flight for this long (while above exit).
    #[serde(with = "humantime_serde")]
    pub cool_off: Duration,
    /// Multiplier on the Little's-law estimate. 1.0, the plain formula, leaves so little
    /// queue that gaps between Poisson arrivals idle the server; 1.5 keeps goodput up
    /// while still cutting the tail (`docs/overload.md#measurements-behind-the-defaults`).
    pub headroom: f64,
}

/// Queue delay: how long a request waited between arriving in the kernel and reaching the
/// throttle (see `receiver::connection::stamp`). On a busy core that wait is the queue in front of
/// weir, which no in-flight count can see; a request that waited longer than `target` is
/// refused while the CPU is above its exit line (now or on the slow level) or another
/// water level is. Its client backs off for Retry-After, which shortens the line, and
/// the requests weir does accept are not the ones that waited.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QueueDelayConfig {
    /// On or off.
    pub enabled: bool,
    /// The longest wait admitted while busy. `auto`: four calm service times, within
    /// 5-10 ms (see `admission::limit`).
    pub target: super::auto::Auto<Duration>,
}

/// Held refusals: a refused request is answered after a delay instead of at once, its
/// body never decoded (over HTTP/1.1 read away during the hold up to 1 MiB, or left unread
/// in the socket). A client that retries as soon as it is refused (a naive retry loop,
/// custom exporters, agents restarting together) then waits on a timer instead of
/// making weir receive and refuse the same request thousands of times a second: refusing
/// stops being the load. The delay spreads the held clients' returns
/// over time so that they come back at about `return_ratio` × the rate weir completes
/// admitted requests (enough arrivals to keep the core busy, few enough that refusing
/// stays cheap): delay = held ÷ (return_ratio × completions per second), at most `max`,
/// with ±25% jitter. Clients that honour Retry-After lose little: few of them are held at
/// once, so their holds are short.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HoldConfig {
    /// On or off (off: every refusal is answered at once).
    pub enabled: bool,
    /// The longest a refusal is held when its request does not say how long its client
    /// waits (HTTP; gRPC without `grpc-timeout`).
    #[serde(with = "humantime_serde")]
    pub max: Duration,
    /// A request that says how long its client waits (gRPC's `grpc-timeout`, sent from
    /// the call's deadline) is held at most this share of it, jitter included, and `max`
    /// does not bound it: `max` stands in for a deadline weir cannot see. At most 60 s.
    /// 0: stated deadlines are ignored and `max` bounds every hold.
    pub deadline_share: f64,
    /// Held clients come back at about this multiple of the admitted completion rate.
    pub return_ratio: f64,
    /// The same for requests that state their deadline (gRPC's `grpc-timeout`, while
    /// `deadline_share` is above 0); unset, `return_ratio`. Such a hold is bounded by the
    /// client's own deadline instead of `max`, so it can be longer without outlasting the
    /// client: a lower ratio here spaces out the returns that `max` would otherwise cut
    /// short. Over one shared gRPC connection every return that finds the core taken is a
    /// refused body received whole, so fewer returns there free the core; over HTTP/1.1 a
    /// held body stays in its socket and a return costs little, which is why the two are
    /// set apart.
    pub deadline_return_ratio: Option<f64>,
    /// Refusals held at once, process-wide; past it a refusal is answered at once. A held
    /// HTTP/1.1 refusal keeps its connection and hyper's buffers, so this bounds what
    /// holding costs in memory. Refusals are also answered at once while memory is above
    /// its enter line.
    pub max_held: usize,
    /// Bytes of unread HTTP/1.1 bodies that held refusals may leave in weir's socket
    /// buffers at once; a refusal that would pass it is answered at once. Only bodies a
    /// refusal does not read count: over 1 MiB, or without a declared length (counted as
    /// much as a socket can buffer, `net.ipv4.tcp_rmem`'s maximum). Smaller ones are read
    /// away during the hold, and HTTP/2 keeps a refused body with its client.
    ///
    /// 0, the default, means: under cgroup v2, which charges socket buffers to the
    /// container (`sock` in `memory.stat`), the room between the memory enter line and
    /// what the container uses apart from socket buffers, re-read every sample; under
    /// cgroup v1, which does not charge them, or without a memory limit, no bound. Unread
    /// bodies of hundreds of held clients can outgrow a small container, and the memory
    /// level (read once per sample) sees them only after they arrived
    /// (`docs/overload.md#measurements-behind-the-defaults`).
    pub max_held_bytes: u64,
}

/// The PID rate controller (`receiver.throttle.pid`, see `admission::pid`): off by
/// default; the README's overload page says where it wins and where it loses.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PidConfig {
    /// On or off.
    pub enabled: bool,
    /// The CPU level it steers to (a fraction of the effective cores).
    pub setpoint: f64,
    /// Proportional gain: fraction of the reference rate per unit of error.
    pub kp: f64,
    /// Integral gain: the same per unit of error and second.
    pub ki: f64,
    /// Derivative gain, on the measured level (per unit per second).
    pub kd: f64,
    /// The allowed rate never goes below this (requests per second).
    pub min_rate: f64,
    /// …nor above this.
    pub max_rate: f64,
}

impl Default for PidConfig {
    fn default() -> Self {
        // Tuned in the simulator (`tests/simulator.rs`, `SIM_PID`): see docs/overload.md.
        PidConfig { enabled: false, setpoint: 0.95, kp: 1.0, ki: 2.0, kd: 0.05, min_rate: 1.0, max_rate: 1e6 }
    }
}

impl PidConfig {
    /// Checks the values, naming the key.
    pub fn validate(&self, prefix: &str) -> Result<(), ConfigError> {
        let key = |k: &str| format!("{prefix}.pid.{k}");
        if !(self.setpoint > 0.0 && self.setpoint <= 2.0) {
            return Err(ConfigError::invalid(key("setpoint"), format!("must be in (0, 2] (a CPU level), got {}", self.setpoint)));
        }
        for (name, v) in [("kp", self.kp), ("ki", self.ki), ("kd", self.kd)] {
            if !(v >= 0.0 && v.is_finite()) {
                return Err(ConfigError::invalid(key(name), format!("must be >= 0, got {v}")));
            }
        }
        if !(self.min_rate > 0.0 && self.min_rate.is_finite()) {
            return Err(ConfigError::invalid(key("min_rate"), format!("must be > 0 requests per second, got {}", self.min_rate)));
        }
        if !(self.max_rate >= self.min_rate && self.max_rate.is_finite()) {
            return Err(ConfigError::invalid(key("max_rate"), format!("must be >= min_rate ({}), got {}", self.min_rate, self.max_rate)));
        }
        Ok(())
    }
}

/// The CPU-vs-P99 knee learner.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KneeConfig {
    /// On or off.
    pub enabled: bool,
    /// A P99 rise over the previous CPU bucket above this ratio is the knee.
    pub knee_ratio: f64,
    /// …and above this many milliseconds (noise guard).
    pub min_delta_ms: f64,
    /// The learned line never goes below this CPU level.
    pub min_cpu: f64,
    /// Recompute at most this often.
    #[serde(with = "humantime_serde")]
    pub recompute: Duration,
}

impl Default for SlowStartConfig {
    fn default() -> Self {
        SlowStartConfig { enabled: true, duration: Duration::from_secs(30), initial_rate: 200.0 }
    }
}
impl Default for BurstDampingConfig {
    fn default() -> Self {
        BurstDampingConfig { enabled: true, ratio: 3.0 }
    }
}
impl Default for BbrConfig {
    fn default() -> Self {
        BbrConfig { enabled: true, window: Duration::from_secs(10), buckets: 100, cool_off: Duration::from_secs(1), headroom: 1.5 }
    }
}
impl Default for QueueDelayConfig {
    fn default() -> Self {
        QueueDelayConfig { enabled: true, target: super::auto::Auto::Auto }
    }
}
impl HoldConfig {
    /// Validates `hold` under `prefix` (`receiver.throttle`).
    pub fn validate(&self, prefix: &str) -> Result<(), ConfigError> {
        if self.max > Duration::from_secs(60) {
            return Err(ConfigError::invalid(
                format!("{prefix}.hold.max"),
                "must be at most 60s (a held client waits that long for its answer)",
            ));
        }
        if !(0.0..=0.95).contains(&self.deadline_share) {
            return Err(ConfigError::invalid(
                format!("{prefix}.hold.deadline_share"),
                "must be in [0, 0.95] (the rest of the deadline carries the answer back)",
            ));
        }
        if !(self.return_ratio >= 0.01 && self.return_ratio <= 100.0) {
            return Err(ConfigError::invalid(format!("{prefix}.hold.return_ratio"), "must be in [0.01, 100]"));
        }
        if self.deadline_return_ratio.is_some_and(|r| !(0.01..=100.0).contains(&r)) {
            return Err(ConfigError::invalid(format!("{prefix}.hold.deadline_return_ratio"), "must be in [0.01, 100]"));
        }
        Ok(())
    }
}

impl Default for HoldConfig {
    fn default() -> Self {
        // A refused large HTTP/1.1 body must still be read away, so held clients come back
        // at a tenth of the completion rate; weir answers held refusals early when a core
        // is free (see `throttle::release_when_idle`), so a low ratio does not leave a core
        // idle. Higher ratios and shorter holds let refusing become the load again
        // (`docs/overload.md#measurements-behind-the-defaults`); below about 0.1 `max` is
        // what binds with hundreds of clients. 5 s stays under the OpenTelemetry
        // exporters' 10 s timeout.
        // 1024 held: a crowd of 512 clients plus the refusals of the crowd before it,
        // still held after their clients left.
        // 0.8 of a stated deadline: 8 s for the OpenTelemetry exporters' 10 s, 4 s for the
        // Collector's 5 s (which a 5 s `max` with jitter would cross).
        HoldConfig {
            enabled: true,
            max: Duration::from_secs(5),
            deadline_share: 0.8,
            return_ratio: 0.1,
            deadline_return_ratio: Some(0.05),
            max_held: 1024,
            max_held_bytes: 0,
        }
    }
}
impl Default for KneeConfig {
    fn default() -> Self {
        KneeConfig { enabled: true, knee_ratio: 0.5, min_delta_ms: 10.0, min_cpu: 0.5, recompute: Duration::from_secs(5) }
    }
}

/// Validates the admission keys under `prefix` (`receiver.throttle`).
pub fn validate(
    prefix: &str,
    s: &SlowStartConfig,
    d: &BurstDampingConfig,
    b: &BbrConfig,
    k: &KneeConfig,
    q: &QueueDelayConfig,
    cap: f64,
) -> Result<(), ConfigError> {
    let key = |k: &str| format!("{prefix}.{k}");
    if q.enabled && q.target.get().is_some_and(|t| t.is_zero()) {
        return Err(ConfigError::invalid(key("queue_delay.target"), "must be > 0 (or set queue_delay.enabled: false)"));
    }
    if !(cap >= 0.0 && cap.is_finite()) {
        return Err(ConfigError::invalid(key("max_inflight_per_core"), "must be >= 0 (0 = off)"));
    }
    if s.duration.is_zero() {
        return Err(ConfigError::invalid(key("slow_start.duration"), "must be > 0"));
    }
    if !(s.initial_rate > 0.0 && s.initial_rate.is_finite()) {
        return Err(ConfigError::invalid(key("slow_start.initial_rate"), "must be > 0"));
    }
    if !(d.ratio > 1.0 && d.ratio.is_finite()) {
        return Err(ConfigError::invalid(key("burst_damping.ratio"), "must be > 1"));
    }
    if b.buckets < 2 || b.buckets > 10_000 {
        return Err(ConfigError::invalid(key("bbr.buckets"), "must be in [2, 10000]"));
    }
    if !(b.headroom >= 1.0 && b.headroom <= 100.0) {
        return Err(ConfigError::invalid(key("bbr.headroom"), "must be in [1, 100]"));
    }
    if b.window < Duration::from_millis(b.buckets as u64) {
        return Err(ConfigError::invalid(key("bbr.window"), "must give buckets of at least 1ms"));
    }
    let knee_ok = k.knee_ratio > 0.0 && k.min_delta_ms >= 0.0 && (0.0..=2.0).contains(&k.min_cpu) && !k.recompute.is_zero();
    if !knee_ok {
        return Err(ConfigError::invalid(key("knee"), "need knee_ratio > 0, min_delta_ms >= 0, 0 <= min_cpu <= 2, recompute > 0"));
    }
    Ok(())
}

/// The connection and RTT signal as an optional overload input: when the open
/// connections surge past `surge_ratio` × their baseline AND the smoothed RTT of weir's
/// sockets rises past `rtt_ratio` × its baseline, the admission layers treat the system
/// as overloaded even if CPU and memory have not caught up yet.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConnectionSignalConfig {
    /// Off by default: a surge of idle keep-alive connections is no overload.
    pub enabled: bool,
    /// Open connections / baseline that counts as a surge.
    pub surge_ratio: f64,
    /// Mean smoothed RTT / baseline that counts as degradation.
    pub rtt_ratio: f64,
    /// History weight of the baselines per sample.
    pub baseline_beta: f64,
}

impl Default for ConnectionSignalConfig {
    fn default() -> Self {
        ConnectionSignalConfig { enabled: false, surge_ratio: 2.0, rtt_ratio: 2.0, baseline_beta: 0.98 }
    }
}
