//! What the throttle knows of connections: a sample of both servers' open connections and
//! their smoothed RTT, and the optional surge signal judged from it. The servers keep
//! the connections; the throttle sees them only through [`ConnSource`].

/// The servers' connections as the throttle's sampler sees them.
pub trait ConnSource: Send + Sync {
    /// HTTP, gRPC, and both together.
    fn sample(&self) -> (ConnSample, ConnSample, ConnSample);
    /// Memory is above its enter line: each new connection asks the idlest open one to close.
    fn set_memory_short(&self, short: bool);
}

/// No connections to watch (a throttle without receivers, as in tests).
#[derive(Debug, Default)]
pub struct NoConns;

impl ConnSource for NoConns {
    fn sample(&self) -> (ConnSample, ConnSample, ConnSample) {
        Default::default()
    }

    fn set_memory_short(&self, _short: bool) {}
}

/// What a sample saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct ConnSample {
    /// Connections open now.
    pub open: usize,
    /// Connections accepted since start.
    pub accepted_total: u64,
    /// Mean smoothed RTT over open connections (ms), when any was readable.
    pub rtt_avg_ms: Option<f64>,
    /// Largest smoothed RTT (ms).
    pub rtt_max_ms: Option<f64>,
}

/// The optional overload signal: a connection surge together with RTT degradation,
/// each judged against its own slow baseline (EWMA).
#[derive(Debug, Clone)]
pub struct SurgeDetector {
    beta: f64,
    surge_ratio: f64,
    rtt_ratio: f64,
    base_open: Option<f64>,
    base_rtt: Option<f64>,
}

impl SurgeDetector {
    /// Baselines decay with `beta` per sample.
    pub fn new(beta: f64, surge_ratio: f64, rtt_ratio: f64) -> Self {
        SurgeDetector { beta, surge_ratio, rtt_ratio, base_open: None, base_rtt: None }
    }

    /// Feeds one sample; true when connections surge AND RTT degrades at once. The
    /// baselines only learn from samples that are not a surge, so an overload does not
    /// become the new normal.
    pub fn step(&mut self, s: &ConnSample) -> bool {
        let open = s.open as f64;
        let surge = self.base_open.is_some_and(|b| open >= 8.0 && open > self.surge_ratio * b.max(1.0));
        let degraded = match (s.rtt_avg_ms, self.base_rtt) {
            (Some(r), Some(b)) => r > 1.0 && r > self.rtt_ratio * b,
            _ => false,
        };
        let hit = surge && degraded;
        if !hit {
            let ewma = |base: Option<f64>, x: f64| Some(base.map_or(x, |b| self.beta * b + (1.0 - self.beta) * x));
            self.base_open = ewma(self.base_open, open);
            if let Some(r) = s.rtt_avg_ms {
                self.base_rtt = ewma(self.base_rtt, r);
            }
        }
        hit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(open: usize, rtt: f64) -> ConnSample {
        ConnSample { open, accepted_total: 0, rtt_avg_ms: Some(rtt), rtt_max_ms: Some(rtt) }
    }

    #[test]
    fn surge_needs_both_connections_and_rtt() {
        let mut d = SurgeDetector::new(0.9, 2.0, 2.0);
        for _ in 0..50 {
            assert!(!d.step(&sample(10, 2.0)));
        }
        assert!(!d.step(&sample(40, 2.1)), "more connections alone is no signal");
        assert!(!d.step(&sample(10, 9.0)), "slower RTT alone is no signal");
        assert!(d.step(&sample(40, 9.0)), "surge plus degradation");
        assert!(d.step(&sample(40, 9.0)), "the overload does not become the baseline");
        assert!(!d.step(&sample(3, 0.5)));
    }
}
