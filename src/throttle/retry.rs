//! The retry delay announced with a refusal.
//!
//! `derived` (the default) estimates how long the signals need to come back: the slow
//! CPU EWMA decays by β per sample once load stops, so falling from s to the exit line e
//! takes ln(e/s)/ln(β) samples, plus breach_n samples of confirmation; Open waits for the
//! fast EWMA to fall under hard the same way. Memory has no EWMA and falls as the
//! pipeline drains, so it gets breach_n + 4 samples. The estimate is a lower bound on
//! when there will be room; the request path adds up to 50% jitter so refused clients do
//! not come back in one wave. `random` is a uniform delay in [min, max].

use super::WaterLevel;
use crate::config::ThrottleConfig;
use std::time::Duration;

/// Base delays (before jitter and clamping) for a shed and an open refusal.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Delays {
    /// For a request shed in Shedding.
    pub shed: Duration,
    /// For a request refused in Open.
    pub open: Duration,
}

fn samples_to_fall(from: f64, to: f64, beta: f64) -> f64 {
    if from <= to || to <= 0.0 || beta <= 0.0 {
        return 0.0;
    }
    ((to / from).ln() / beta.ln()).max(0.0)
}

/// Computes the base delays for the current water level.
pub fn derive_delays(config: &ThrottleConfig, level: &WaterLevel) -> Delays {
    let interval = config.sample_interval.as_secs_f64();
    let cpu = &config.thresholds.cpu;
    let mem = &config.thresholds.mem;
    let mut shed: f64 = 0.0;
    let mut open: f64 = 0.0;
    if cpu.enabled && level.cpu_valid {
        let n = f64::from(cpu.breach_n);
        shed = shed.max(samples_to_fall(level.cpu_slow, cpu.exit, config.signal.cpu_slow_beta) + n);
        open = open.max(samples_to_fall(level.cpu_fast, cpu.hard, config.signal.cpu_fast_beta) + n);
    }
    // Memory is not smoothed, and the disk drains at the exporters' pace, which the
    // throttle does not know: a few samples past the breach count for both.
    for (slot, valid, value) in [(mem, level.mem_valid, level.mem), (&config.thresholds.disk, level.disk_valid, level.disk)] {
        if slot.enabled && valid {
            let n = f64::from(slot.breach_n) + 4.0;
            if value > slot.exit {
                shed = shed.max(n);
            }
            if value >= slot.hard {
                open = open.max(n);
            }
        }
    }
    Delays { shed: Duration::from_secs_f64(shed * interval), open: Duration::from_secs_f64(open.max(shed) * interval) }
}

/// The delay for one refusal: `base` with jitter in [1, 1.5) (derived) or uniform in
/// [min, max] (random), clamped to [min, max]. `u` is uniform in [0, 1).
pub fn delay_for(config: &ThrottleConfig, base: Duration, u: f64) -> Duration {
    let (min, max) = (config.retry_after.min, config.retry_after.max);
    let d = if config.retry_after.mode == "random" { min + (max - min).mul_f64(u) } else { base.mul_f64(1.0 + 0.5 * u) };
    d.clamp(min, max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn level(cpu_slow: f64, cpu_fast: f64, mem: f64) -> WaterLevel {
        WaterLevel {
            cpu: cpu_fast,
            cpu_slow,
            cpu_fast,
            cpu_valid: true,
            mem,
            mem_valid: true,
            effective_cores: 1.0,
            quota_set: true,
            mem_working_set_bytes: 0,
            mem_limit_bytes: Some(1),
            disk: 0.0,
            disk_valid: false,
        }
    }

    #[test]
    fn derived_delay_follows_the_ewma_decay() {
        let c = ThrottleConfig::default();
        // slow 0.9 → exit 0.7 with β 0.95: ln(0.7/0.9)/ln(0.95) ≈ 4.9 samples, + 3.
        let d = derive_delays(&c, &level(0.9, 0.5, 0.1));
        let want = (((0.7f64 / 0.9).ln() / 0.95f64.ln()) + 3.0) * 0.25;
        assert!((d.shed.as_secs_f64() - want).abs() < 1e-6, "{d:?}");
        // A much higher level takes longer.
        assert!(derive_delays(&c, &level(2.0, 0.5, 0.1)).shed > d.shed);
        // Open waits at least as long as shedding.
        let d = derive_delays(&c, &level(1.5, 1.8, 0.1));
        assert!(d.open >= d.shed);
    }

    #[test]
    fn clamped_and_jittered() {
        let c = ThrottleConfig::default();
        assert_eq!(delay_for(&c, Duration::from_millis(10), 0.0), Duration::from_secs(1), "min");
        assert_eq!(delay_for(&c, Duration::from_secs(100), 0.0), Duration::from_secs(30), "max");
        assert_eq!(delay_for(&c, Duration::from_secs(4), 0.5), Duration::from_secs(5));
        let mut r = c.clone();
        r.retry_after.mode = "random".into();
        r.retry_after.min = Duration::ZERO;
        assert_eq!(delay_for(&r, Duration::ZERO, 0.5), Duration::from_secs(15));
    }
}
