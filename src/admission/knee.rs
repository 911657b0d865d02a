//! The CPU-vs-P99 knee learner: per 5% CPU bucket a ring of recent request latencies;
//! P99 per bucket with enough samples; the first bucket whose P99 rises more than
//! `knee_ratio` over the previous valid one is the knee. The throttle's effective CPU
//! enter line becomes min(learned, configured).
//!
//! Guard rails (rather under-limit than mis-limit): a rise must also exceed
//! `min_delta_ms` in absolute terms (sub-millisecond noise is no knee), and the learned
//! line never goes below `min_cpu`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// CPU buckets of 5%: 0-5%, …, 95-100% (and above, clamped into the last).
pub const BUCKETS: usize = 20;
/// Latencies kept per bucket.
pub const RING: usize = 64;
/// Samples a bucket needs before its P99 counts.
pub const MIN_SAMPLES: usize = 8;

#[derive(Debug, Clone, Copy)]
struct Ring {
    values: [f32; RING],
    /// When each value was recorded (seconds since the origin).
    at: [u32; RING],
    len: usize,
    next: usize,
}

impl Default for Ring {
    fn default() -> Self {
        Ring { values: [0.0; RING], at: [0; RING], len: 0, next: 0 }
    }
}

/// Samples older than this are ignored: a bucket compared with its neighbour must
/// describe the same period, or a change downstream (slower exporter) that raised every
/// latency would look like a CPU knee between an old bucket and a fresh one.
pub const MAX_SAMPLE_AGE_SECS: u32 = 10;

/// One bucket's learned figure, for `/debug/throttle` and metrics.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct BucketProfile {
    /// Lower CPU bound of the bucket.
    pub cpu: f64,
    /// P99 latency (ms).
    pub p99_ms: f64,
    /// Samples held.
    pub samples: usize,
}

/// The learner's rules (reloadable; the samples stay).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KneeParams {
    /// Relative P99 rise that marks the knee.
    pub knee_ratio: f64,
    /// Absolute rise (ms) it must also exceed.
    pub min_delta_ms: f64,
    /// Floor of the learned line.
    pub min_cpu: f64,
    /// Minimum time between computations (ns).
    pub recompute_nanos: u64,
}

/// The learner.
#[derive(Debug)]
pub struct KneeLearner {
    rings: Mutex<[Ring; BUCKETS]>,
    params: Mutex<KneeParams>,
    /// f64 bits of the learned knee; NaN = none yet.
    learned: AtomicU64,
    /// f64 bits of the last computation's candidate: a knee is applied only when two
    /// computations in a row agree, so a transient (e.g. a downstream slowdown seen
    /// first in one bucket) does not move the line.
    candidate: AtomicU64,
    last_compute: AtomicU64,
}

impl KneeLearner {
    /// A learner with the given rules.
    pub fn new(knee_ratio: f64, min_delta_ms: f64, min_cpu: f64, recompute_nanos: u64) -> Self {
        KneeLearner {
            rings: Mutex::new([Ring::default(); BUCKETS]),
            params: Mutex::new(KneeParams { knee_ratio, min_delta_ms, min_cpu, recompute_nanos }),
            learned: AtomicU64::new(f64::NAN.to_bits()),
            candidate: AtomicU64::new(f64::NAN.to_bits()),
            last_compute: AtomicU64::new(0),
        }
    }

    /// The rules in force.
    pub fn params(&self) -> KneeParams {
        *self.params.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// New rules (hot reload); the samples stay.
    pub fn set_params(&self, p: KneeParams) {
        *self.params.lock().unwrap_or_else(|e| e.into_inner()) = p;
    }

    /// Records one completed request at `now`: the CPU level when it ran and its latency.
    pub fn record(&self, now: u64, cpu: f64, latency_ms: f64) {
        if !(cpu.is_finite() && latency_ms.is_finite()) {
            return;
        }
        // The epsilon keeps 0.6 in the 60% bucket despite 0.6 / 0.05 = 11.999….
        let idx = ((cpu.max(0.0) / 0.05 + 1e-9) as usize).min(BUCKETS - 1);
        let mut rings = self.rings.lock().unwrap_or_else(|e| e.into_inner());
        let r = &mut rings[idx];
        r.values[r.next] = latency_ms as f32;
        r.at[r.next] = (now / 1_000_000_000) as u32;
        r.next = (r.next + 1) % RING;
        r.len = (r.len + 1).min(RING);
    }

    /// The learned knee, recomputed when `recompute` has passed since the last time.
    pub fn knee(&self, now: u64) -> Option<f64> {
        let last = self.last_compute.load(Ordering::Relaxed);
        let recompute = self.params().recompute_nanos;
        if now.saturating_sub(last) >= recompute || last == 0 {
            self.last_compute.store(now.max(1), Ordering::Relaxed);
            let k = self.compute_at(now).0.unwrap_or(f64::NAN);
            let previous = f64::from_bits(self.candidate.swap(k.to_bits(), Ordering::Relaxed));
            // Confirmed when this and the previous computation agree (both none clears it).
            let confirmed = if k.is_nan() || previous.is_nan() { f64::NAN } else { k.max(previous) };
            self.learned.store(confirmed.to_bits(), Ordering::Relaxed);
        }
        let v = f64::from_bits(self.learned.load(Ordering::Relaxed));
        (!v.is_nan()).then_some(v)
    }

    /// Recomputes from every sample held: (knee, profile of valid buckets).
    pub fn compute(&self) -> (Option<f64>, Vec<BucketProfile>) {
        self.compute_at(u64::MAX)
    }

    /// Recomputes at `now`, ignoring samples older than [`MAX_SAMPLE_AGE_SECS`]
    /// (`u64::MAX`: keep all). Allocation-free apart from the returned profile.
    pub fn compute_at(&self, now: u64) -> (Option<f64>, Vec<BucketProfile>) {
        let rings = *self.rings.lock().unwrap_or_else(|e| e.into_inner());
        let oldest = if now == u64::MAX { 0 } else { ((now / 1_000_000_000) as u32).saturating_sub(MAX_SAMPLE_AGE_SECS) };
        let mut profile = Vec::new();
        for (i, r) in rings.iter().enumerate() {
            let mut v = [0f32; RING];
            let mut n = 0;
            for j in 0..r.len {
                if r.at[j] >= oldest {
                    v[n] = r.values[j];
                    n += 1;
                }
            }
            if n < MIN_SAMPLES {
                continue;
            }
            let s = &mut v[..n];
            s.sort_unstable_by(|a, b| a.total_cmp(b));
            let rank = ((0.99 * n as f64).ceil() as usize).clamp(1, n) - 1;
            profile.push(BucketProfile { cpu: i as f64 / 20.0, p99_ms: f64::from(s[rank]), samples: n });
        }
        let prm = self.params();
        let mut knee = None;
        for w in profile.windows(2) {
            let (prev, curr) = (w[0], w[1]);
            let rise = curr.p99_ms - prev.p99_ms;
            if prev.p99_ms > 0.0 && rise / prev.p99_ms > prm.knee_ratio && rise >= prm.min_delta_ms {
                knee = Some(curr.cpu.max(prm.min_cpu));
                break;
            }
        }
        (knee, profile)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fill(k: &KneeLearner, cpu: f64, ms: f64) {
        for i in 0..RING {
            k.record(1, cpu, ms + (i % 4) as f64 * 0.1);
        }
    }

    #[test]
    fn finds_the_first_nonlinear_rise() {
        // P99 8 ms at 30%, 19 ms at 50% (+137%) → knee 50%.
        let k = KneeLearner::new(0.5, 1.0, 0.3, 5_000_000_000);
        fill(&k, 0.31, 8.0);
        fill(&k, 0.52, 19.0);
        fill(&k, 0.71, 39.0);
        fill(&k, 0.86, 273.0);
        let (knee, profile) = k.compute();
        assert_eq!(profile.len(), 4);
        assert!((knee.unwrap() - 0.5).abs() < 1e-9, "{knee:?}");
    }

    #[test]
    fn noise_and_floor_guard_rails() {
        // Sub-millisecond jitter is not a knee even when the ratio is large.
        let k = KneeLearner::new(0.5, 1.0, 0.5, 0);
        fill(&k, 0.1, 0.2);
        fill(&k, 0.2, 0.5);
        assert_eq!(k.compute().0, None);
        // A real rise at 20% is clamped to the 50% floor.
        fill(&k, 0.25, 30.0);
        assert_eq!(k.compute().0, Some(0.5));
        // Too few samples: the bucket does not count.
        let k = KneeLearner::new(0.5, 1.0, 0.5, 0);
        fill(&k, 0.6, 5.0);
        for _ in 0..MIN_SAMPLES - 1 {
            k.record(1, 0.8, 500.0);
        }
        assert_eq!(k.compute().0, None);
    }

    #[test]
    fn old_samples_age_out() {
        let k = KneeLearner::new(0.5, 1.0, 0.3, 0);
        for _ in 0..RING {
            k.record(0, 0.5, 5.0);
        }
        for _ in 0..RING {
            k.record(60_000_000_000, 0.6, 400.0);
        }
        assert_eq!(k.compute().0, Some(0.6), "all samples: looks like a knee");
        assert_eq!(k.compute_at(60_000_000_000).0, None, "the 5 ms samples are a minute old");
    }

    #[test]
    fn recomputes_at_most_every_interval() {
        let k = KneeLearner::new(0.5, 1.0, 0.3, 5_000_000_000);
        assert_eq!(k.knee(1), None);
        for i in 0..RING {
            k.record(6_000_000_000, 0.4, 5.0 + (i % 4) as f64 * 0.1);
            k.record(6_000_000_000, 0.6, 50.0);
        }
        assert_eq!(k.knee(1_000_000_000), None, "cached until 5 s passed");
        assert_eq!(k.knee(5_000_000_001), None, "a first sighting is only a candidate");
        assert_eq!(k.knee(9_000_000_000), None, "still cached");
        assert_eq!(k.knee(10_000_000_002), Some(0.6), "confirmed by a second computation");
    }
}
