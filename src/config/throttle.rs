//! `receiver.throttle`: the adaptive throttle, with its defaults
//! (`docs/overload.md#overload-protection-receiverthrottle`).

use super::auto::Auto;
use super::ConfigError;
use crate::signal::Signal;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

/// The throttle block.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ThrottleConfig {
    /// Master switch. `false` keeps the middleware in the lists but admits everything and
    /// starts no sampler.
    pub enabled: bool,
    /// How often the cgroup is sampled and the state machines step.
    #[serde(with = "humantime_serde")]
    pub sample_interval: Duration,
    /// Signal processing.
    pub signal: SignalConfig,
    /// Threshold slots, shared by every record type.
    pub thresholds: ThresholdsConfig,
    /// Drop strength per record type.
    pub rules: RulesConfig,
    /// How the Retry-After / RetryInfo delay is chosen.
    pub retry_after: RetryAfterConfig,
    /// Filesystem root under which `proc/self/*` and `sys/fs/cgroup` are read (`/`).
    pub cgroup_root: PathBuf,
    /// In-flight cap per effective core. `auto` (the default): an adaptive limit that
    /// rises while admitted requests' latency stays near its calm minimum and falls when
    /// it grows (`admission::limit`); it refuses only while the CPU is busy. A number: a
    /// fixed cap that refuses whatever the water levels; 0 = no cap.
    pub max_inflight_per_core: Auto<f64>,
    /// How long a request that finds the in-flight cap full may wait for a slot before it
    /// is refused (0 = refuse at once). Absorbs arrivals in waves, e.g. clients that all
    /// honoured the same whole-second Retry-After, without letting the core idle. `auto`:
    /// four calm service times, within 5-100 ms.
    pub max_inflight_wait: Auto<Duration>,
    /// How many requests may wait for a slot at once, per effective core (0 = no bound).
    /// Bounds the wait of an admitted request to about this many service times, whatever
    /// `max_inflight_wait` allows; the rest are refused (and held, see `hold`) at once.
    pub max_inflight_queue_per_core: f64,
    /// Only requests whose declared body (`Content-Length`, as sent: compressed if it is)
    /// is at least this many bytes may wait for a slot; smaller ones are refused (and
    /// held) at once, as with no wait. A request without a declared length (gRPC) may
    /// wait. 0: every request may wait. A wait spares a client re-sending its body, which
    /// is worth a wait's latency for a large body and not for a small one. `auto`: twice
    /// the kernel's default socket receive buffer (`net.ipv4.tcp_rmem`, 256 KiB on stock
    /// Linux): a smaller body mostly sits in weir's socket already when its head is read.
    pub inflight_wait_min_body_bytes: Auto<u64>,
    /// Slow start.
    pub slow_start: super::admission::SlowStartConfig,
    /// Burst damping.
    pub burst_damping: super::admission::BurstDampingConfig,
    /// BBR concurrency limit.
    pub bbr: super::admission::BbrConfig,
    /// CPU knee learner.
    pub knee: super::admission::KneeConfig,
    /// Refuse requests that waited too long before weir saw them, while busy.
    pub queue_delay: super::admission::QueueDelayConfig,
    /// Connection surge + RTT degradation as an overload signal.
    pub connection_signal: super::admission::ConnectionSignalConfig,
    /// Refusals answered after a delay, body unread (see [`super::admission::HoldConfig`]).
    pub hold: super::admission::HoldConfig,
    /// The PID rate controller (off by default).
    pub pid: super::admission::PidConfig,
}

/// `throttle.signal`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SignalConfig {
    /// History weight of the slow CPU EWMA (drives Shedding).
    pub cpu_slow_beta: f64,
    /// History weight of the fast CPU EWMA (drives Open).
    pub cpu_fast_beta: f64,
    /// Cores to assume when no CPU quota is set; 0 = the CPUs this process may run on.
    pub fallback_cores: f64,
}

/// `throttle.thresholds`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ThresholdsConfig {
    /// CPU: slow = slow EWMA, fast = fast EWMA.
    pub cpu: SlotConfig,
    /// Memory: slow = fast = the raw working-set ratio.
    pub mem: SlotConfig,
    /// The disk queue's fill (bytes on disk / `pipeline.queue.disk.max_bytes`); takes no
    /// part without a disk queue.
    pub disk: SlotConfig,
    /// Room kept free above the memory hard line, in bytes: with a memory limit, the
    /// memory lines are lowered (keeping their distances) until hard ≤ 1 − this ÷ limit.
    /// Memory is read once a sample, and a flood brings tens of MiB between two samples:
    /// a fraction of a small container leaves too little room (150 MiB at 0.92 leaves
    /// 12 MiB, less than one flood brings). 0: the lines as written.
    #[serde(default = "default_mem_headroom")]
    pub mem_headroom_bytes: u64,
}

fn default_mem_headroom() -> u64 {
    48 << 20
}

impl ThresholdsConfig {
    /// The memory lines for a container of `limit` bytes (see `mem_headroom_bytes`).
    pub fn mem_for(&self, limit: Option<u64>) -> SlotConfig {
        let mut m = self.mem;
        let Some(limit) = limit.filter(|l| *l > 0 && self.mem_headroom_bytes > 0) else { return m };
        let most = (1.0 - self.mem_headroom_bytes as f64 / limit as f64).max(0.5);
        if m.hard > most {
            let down = m.hard - most;
            m.hard -= down;
            m.enter = (m.enter - down).max(0.05);
            m.exit = (m.exit - down).max(0.0).min(m.enter - 0.01);
        }
        m
    }
}

/// One threshold slot.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SlotConfig {
    /// A disabled slot takes no part in entering, exiting, opening or the drop probability.
    pub enabled: bool,
    /// slow above this `breach_n` times in a row: Normal → Shedding.
    pub enter: f64,
    /// slow below this `breach_n` times in a row (every slot): Shedding → Normal.
    pub exit: f64,
    /// fast at or above this `breach_n` times in a row: → Open.
    pub hard: f64,
    /// Consecutive frames required for every transition of this slot.
    pub breach_n: u32,
}

/// `throttle.rules`: `default` plus overrides per record type.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RulesConfig {
    /// Applies to every type, field by field, unless the type overrides it.
    pub default: RuleConfig,
    /// Traces.
    pub traces: Option<RuleConfig>,
    /// Metrics.
    pub metrics: Option<RuleConfig>,
    /// Logs.
    pub logs: Option<RuleConfig>,
    /// Profiles.
    pub profiles: Option<RuleConfig>,
}

/// A request's priority class: in Shedding, lower classes go first
/// (`docs/overload.md#admission-layers`, "Priority classes").
#[derive(Debug, Clone, Copy, Serialize, Deserialize, Default, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    /// Refused only when Open; skips the adaptive admission layers.
    Critical,
    /// Shed after `sheddable` traffic is shed completely.
    #[default]
    Normal,
    /// Shed first.
    Sheddable,
}

impl Priority {
    /// Index for per-class arrays.
    pub fn index(self) -> usize {
        self as usize
    }
    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Critical => "critical",
            Priority::Normal => "normal",
            Priority::Sheddable => "sheddable",
        }
    }
}

/// One rule; unset fields come from `default`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    /// `false`: never throttled, not even when Open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Drop probability when t = 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drop_min: Option<f64>,
    /// Drop probability when t = 1; 0 = never shed (still refused when Open).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drop_max: Option<f64>,
    /// Priority class of this record type (a tenant's own priority wins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<Priority>,
}

/// A resolved rule.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Rule {
    /// Throttled at all.
    pub enabled: bool,
    /// Lower drop probability.
    pub drop_min: f64,
    /// Upper drop probability.
    pub drop_max: f64,
    /// Priority class.
    pub priority: Priority,
}

/// `throttle.retry_after`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetryAfterConfig {
    /// `derived`: from the state, how long the signals need to fall back, with jitter;
    /// `random`: uniform in [min, max] (`min: 0s, max: 30s` gives 0–30 s).
    pub mode: String,
    /// Lower bound.
    #[serde(with = "humantime_serde")]
    pub min: Duration,
    /// Upper bound.
    #[serde(with = "humantime_serde")]
    pub max: Duration,
}

impl Default for ThrottleConfig {
    fn default() -> Self {
        ThrottleConfig {
            enabled: true,
            sample_interval: Duration::from_millis(250),
            signal: SignalConfig::default(),
            thresholds: ThresholdsConfig::default(),
            rules: RulesConfig::default(),
            retry_after: RetryAfterConfig::default(),
            cgroup_root: PathBuf::from("/"),
            max_inflight_per_core: Auto::Auto,
            max_inflight_wait: Auto::Auto,
            // One request waiting per core: the next one is ready when a core frees, and
            // an admitted request waits about one service time at most.
            max_inflight_queue_per_core: 1.0,
            inflight_wait_min_body_bytes: Auto::Auto,
            slow_start: Default::default(),
            burst_damping: Default::default(),
            bbr: Default::default(),
            knee: Default::default(),
            queue_delay: Default::default(),
            connection_signal: Default::default(),
            hold: Default::default(),
            pid: Default::default(),
        }
    }
}

impl Default for SignalConfig {
    fn default() -> Self {
        SignalConfig { cpu_slow_beta: 0.95, cpu_fast_beta: 0.7, fallback_cores: 0.0 }
    }
}

impl Default for ThresholdsConfig {
    fn default() -> Self {
        ThresholdsConfig {
            cpu: SlotConfig { enabled: true, enter: 0.80, exit: 0.70, hard: 0.90, breach_n: 3 },
            mem: SlotConfig { enabled: true, enter: 0.85, exit: 0.78, hard: 0.92, breach_n: 1 },
            disk: SlotConfig { enabled: true, enter: 0.80, exit: 0.70, hard: 0.95, breach_n: 1 },
            mem_headroom_bytes: default_mem_headroom(),
        }
    }
}

impl Default for RulesConfig {
    fn default() -> Self {
        RulesConfig {
            default: RuleConfig { enabled: Some(true), drop_min: Some(0.0), drop_max: Some(1.0), priority: None },
            traces: None,
            metrics: None,
            logs: None,
            profiles: None,
        }
    }
}

impl Default for RetryAfterConfig {
    fn default() -> Self {
        RetryAfterConfig { mode: "derived".into(), min: Duration::from_secs(1), max: Duration::from_secs(30) }
    }
}

impl RulesConfig {
    /// The effective rule for `signal`.
    pub fn resolve(&self, signal: Signal) -> Rule {
        let own = match signal {
            Signal::Traces => self.traces,
            Signal::Metrics => self.metrics,
            Signal::Logs => self.logs,
            Signal::Profiles => self.profiles,
        }
        .unwrap_or_default();
        Rule {
            enabled: own.enabled.or(self.default.enabled).unwrap_or(true),
            drop_min: own.drop_min.or(self.default.drop_min).unwrap_or(0.0),
            drop_max: own.drop_max.or(self.default.drop_max).unwrap_or(1.0),
            priority: own.priority.or(self.default.priority).unwrap_or_default(),
        }
    }
}

impl ThrottleConfig {
    /// Checks every rule of the block.
    pub fn validate(&self, prefix: &str) -> Result<(), ConfigError> {
        let key = |k: &str| format!("{prefix}.{k}");
        if self.sample_interval < Duration::from_millis(10) {
            return Err(ConfigError::invalid(key("sample_interval"), "must be at least 10ms"));
        }
        for (name, beta) in [("cpu_slow_beta", self.signal.cpu_slow_beta), ("cpu_fast_beta", self.signal.cpu_fast_beta)] {
            if !(0.0..1.0).contains(&beta) {
                return Err(ConfigError::invalid(key(&format!("signal.{name}")), format!("{beta} must be in [0, 1)")));
            }
        }
        let fallback_ok = self.signal.fallback_cores >= 0.0 && self.signal.fallback_cores.is_finite();
        if !fallback_ok {
            return Err(ConfigError::invalid(key("signal.fallback_cores"), "must be >= 0 (0 = the CPUs weir may run on)"));
        }
        for (name, s) in [("cpu", &self.thresholds.cpu), ("mem", &self.thresholds.mem), ("disk", &self.thresholds.disk)] {
            let k = key(&format!("thresholds.{name}"));
            if s.breach_n < 1 {
                return Err(ConfigError::invalid(format!("{k}.breach_n"), "must be >= 1"));
            }
            let ordered = s.exit >= 0.0 && s.exit < s.enter && s.enter < s.hard && s.hard.is_finite();
            if !ordered {
                return Err(ConfigError::invalid(
                    k,
                    format!("need 0 <= exit < enter < hard, got exit={} enter={} hard={}", s.exit, s.enter, s.hard),
                ));
            }
        }
        for (name, r) in [
            ("default", Some(self.rules.default)),
            ("traces", self.rules.traces),
            ("metrics", self.rules.metrics),
            ("logs", self.rules.logs),
            ("profiles", self.rules.profiles),
        ] {
            let Some(r) = r else { continue };
            for (f, v) in [("drop_min", r.drop_min), ("drop_max", r.drop_max)] {
                if let Some(v) = v {
                    if !(0.0..=1.0).contains(&v) {
                        return Err(ConfigError::invalid(key(&format!("rules.{name}.{f}")), format!("{v} must be in [0, 1]")));
                    }
                }
            }
        }
        for signal in Signal::ALL {
            let r = self.rules.resolve(signal);
            if r.drop_min > r.drop_max {
                return Err(ConfigError::invalid(
                    key(&format!("rules.{}", signal.as_str())),
                    format!("drop_min {} > drop_max {}", r.drop_min, r.drop_max),
                ));
            }
        }
        match self.retry_after.mode.as_str() {
            "derived" | "random" => {}
            other => return Err(ConfigError::invalid(key("retry_after.mode"), format!("`{other}`: must be `derived` or `random`"))),
        }
        if !(self.max_inflight_queue_per_core >= 0.0 && self.max_inflight_queue_per_core.is_finite()) {
            return Err(ConfigError::invalid(key("max_inflight_queue_per_core"), "must be >= 0 (0 = no bound)"));
        }
        if self.max_inflight_wait.get().is_some_and(|w| w > Duration::from_secs(10)) {
            return Err(ConfigError::invalid(key("max_inflight_wait"), "must be at most 10s (a wait is time the client sees)"));
        }
        super::admission::validate(
            prefix,
            &self.slow_start,
            &self.burst_damping,
            &self.bbr,
            &self.knee,
            &self.queue_delay,
            self.max_inflight_per_core.get().unwrap_or(0.0),
        )?;
        self.hold.validate(prefix)?;
        self.pid.validate(prefix)?;
        let cs = &self.connection_signal;
        let cs_ok = cs.surge_ratio > 1.0 && cs.rtt_ratio > 1.0 && (0.0..1.0).contains(&cs.baseline_beta);
        if !cs_ok {
            return Err(ConfigError::invalid(key("connection_signal"), "need surge_ratio > 1, rtt_ratio > 1, baseline_beta in [0, 1)"));
        }
        if self.retry_after.min > self.retry_after.max || self.retry_after.max > Duration::from_secs(3600) {
            return Err(ConfigError::invalid(key("retry_after"), "need min <= max <= 1h"));
        }
        Ok(())
    }
}
