//! The PID rate controller, `receiver.throttle.pid`: it turns a CPU setpoint into an
//! allowed admission rate, and the admission layers refuse what is above that rate with
//! the same answer as the other layers (`docs/overload.md#the-pid-rate-controller`).
//!
//! - **One controller, shared by every record type.** It steers one quantity, the
//!   process's CPU, so one rate is what it can set. Which record types give way first
//!   is the throttle's priorities' job; critical work skips the admission layers
//!   anyway.
//! - **Relative output.** It starts when the CPU's smoothed level first crosses the
//!   setpoint. The rate passing at that moment becomes its reference, and the output is
//!   that reference times `1 + kp·e + ki·∫e − kd·dm/dt`. The error `e` is the setpoint
//!   minus the level; the derivative is taken on the measurement, so a setpoint change
//!   gives no kick. Gains are thus fractions of the current throughput per unit of CPU
//!   level, and the same gains fit a small and a large machine.
//! - **Anti-windup.** The integral grows only while the output is not clamped (or while
//!   the error pulls it back from the clamp), and it is bounded.
//! - **Clamp.** The output stays within `[min_rate, max_rate]`.
//! - **Stop.** It stops, and stops limiting, when the level has stayed `RELEASE_MARGIN`
//!   below the setpoint for `RELEASE_AFTER` updates while the allowed rate is well above
//!   what passes. It never refuses unless some water level is above its exit line (the
//!   principle every admission layer keeps), so an idle machine is never refused.

use crate::config::PidConfig;

/// Smoothing of the CPU level the controller sees (per update).
const ALPHA: f64 = 0.5;
/// How far below the setpoint the level must stay to release the limit.
pub const RELEASE_MARGIN: f64 = 0.1;
/// For this many updates in a row.
pub const RELEASE_AFTER: u32 = 20;

/// The controller's state.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pid {
    active: bool,
    level: Option<f64>,
    integral: f64,
    reference: f64,
    rate: f64,
    below: u32,
    /// The last error, for /debug/throttle.
    pub last_error: f64,
}

impl Pid {
    /// Whether it is limiting.
    pub fn active(&self) -> bool {
        self.active
    }

    /// The allowed rate (requests per second) while active.
    pub fn rate(&self) -> Option<f64> {
        self.active.then_some(self.rate)
    }

    /// One update: the CPU level now, seconds since the last update, and the rate of
    /// requests passing now (admitted per second). Returns the allowed rate, or `None`
    /// when not limiting.
    pub fn update(&mut self, cfg: &PidConfig, cpu: f64, dt: f64, passing: f64) -> Option<f64> {
        let dt = dt.clamp(1e-3, 1.0);
        let previous = self.level;
        let level = previous.map_or(cpu, |l| l + ALPHA * (cpu - l));
        self.level = Some(level);
        if !self.active {
            if level <= cfg.setpoint {
                return None;
            }
            // Bumpless start: the output begins at what passes now.
            self.active = true;
            self.reference = passing.clamp(cfg.min_rate, cfg.max_rate);
            self.integral = 0.0;
            self.below = 0;
        }
        let error = cfg.setpoint - level;
        self.last_error = error;
        let slope = previous.map_or(0.0, |p| (level - p) / dt);
        let integral = self.integral + error * dt;
        let unclamped = self.reference * (1.0 + cfg.kp * error + cfg.ki * integral - cfg.kd * slope);
        let rate = unclamped.clamp(cfg.min_rate, cfg.max_rate);
        let saturated_high = unclamped > cfg.max_rate;
        let saturated_low = unclamped < cfg.min_rate;
        if (!saturated_high && !saturated_low) || (saturated_high && error < 0.0) || (saturated_low && error > 0.0) {
            // Bounded: the integral alone may at most double or zero the reference.
            let bound = if cfg.ki > 0.0 { 1.0 / cfg.ki } else { 0.0 };
            self.integral = integral.clamp(-bound, bound);
        }
        self.rate = rate;
        if level < cfg.setpoint - RELEASE_MARGIN && rate > 1.5 * passing {
            self.below += 1;
        } else {
            self.below = 0;
        }
        if self.below >= RELEASE_AFTER {
            self.active = false;
            return None;
        }
        Some(rate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> PidConfig {
        PidConfig { enabled: true, setpoint: 0.75, kp: 1.0, ki: 2.0, kd: 0.0, min_rate: 1.0, max_rate: 1e6 }
    }

    #[test]
    fn idle_below_the_setpoint() {
        let mut p = Pid::default();
        for _ in 0..100 {
            assert_eq!(p.update(&cfg(), 0.7, 0.1, 500.0), None);
        }
        assert!(!p.active());
    }

    #[test]
    fn starts_bumpless_and_cuts_the_rate_while_above() {
        let mut p = Pid::default();
        p.update(&cfg(), 0.95, 0.1, 1000.0);
        // The first update starts it at what passes, less the proportional share.
        let first = p.rate().unwrap();
        assert!(first < 1000.0 && first > 700.0, "{first}");
        let mut last = first;
        for _ in 0..10 {
            let r = p.update(&cfg(), 0.95, 0.1, last).unwrap();
            assert!(r < last, "the integral keeps cutting while the level stays above: {r} !< {last}");
            last = r;
        }
    }

    #[test]
    fn derivative_acts_on_the_measurement_not_a_setpoint_change() {
        let mut c = cfg();
        c.kd = 0.5;
        c.ki = 0.0;
        let mut p = Pid::default();
        p.update(&c, 0.9, 0.1, 1000.0);
        p.update(&c, 0.9, 0.1, 1000.0);
        let steady = p.rate().unwrap();
        c.setpoint = 0.8;
        let after = p.update(&c, 0.9, 0.1, 1000.0).unwrap();
        // Only the proportional term moved: kp × 0.05 of the reference up, no derivative kick.
        assert!((after - steady - 50.0).abs() < 1e-6, "{steady} -> {after}");
    }

    #[test]
    fn clamped_and_no_windup() {
        let mut c = cfg();
        c.min_rate = 100.0;
        let mut p = Pid::default();
        for _ in 0..200 {
            let r = p.update(&c, 1.0, 0.1, 1000.0).unwrap();
            assert!(r >= 100.0);
        }
        // Long saturated low: once the level falls, the rate recovers within a few updates
        // instead of unwinding a huge integral.
        let mut r = 0.0;
        for _ in 0..10 {
            r = p.update(&c, 0.6, 0.1, 100.0).unwrap_or(f64::MAX);
        }
        assert!(r > 500.0, "recovered to {r}");
    }

    #[test]
    fn releases_after_staying_well_below() {
        let mut p = Pid::default();
        p.update(&cfg(), 0.9, 0.1, 1000.0);
        let mut released_at = None;
        for i in 0..200 {
            if p.update(&cfg(), 0.3, 0.1, 100.0).is_none() {
                released_at = Some(i);
                break;
            }
        }
        let at = released_at.expect("releases");
        assert!(at >= RELEASE_AFTER as usize - 1, "released after {at} updates");
    }
}
