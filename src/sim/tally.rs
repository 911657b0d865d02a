//! What a run measures, tick by tick, and the [`Outcome`] it comes to at the end.

use super::Outcome;
use crate::signal::Signal;
use crate::throttle::manager::Snapshot;
use crate::throttle::state::State;
use std::collections::BTreeMap;

/// The counts behind an [`Outcome`]; `out` holds the fields counted directly.
pub(super) struct Tally {
    pub(super) out: Outcome,
    latencies: Vec<f64>,
    steady: Vec<f64>,
    overload_done: u64,
    pub(super) overload_ticks: u64,
    under_done: u64,
    pub(super) under_offered: u64,
    last_state: State,
    changes: u64,
    /// When the last overload phase ended: refusals just after it are not held against
    /// low load, and recovery is timed from it.
    pub(super) last_overload_end: Option<u64>,
    pub(super) class_offered: [u64; 3],
    class_done: [u64; 3],
    normal_since: Option<u64>,
    /// Per second of steady overload: (offered, refused).
    pub(super) per_second: BTreeMap<u64, (u64, u64)>,
    pub(super) refusing_ticks: f64,
    pub(super) busy_ticks: f64,
}

impl Tally {
    pub(super) fn new() -> Self {
        Tally {
            out: Outcome::default(),
            latencies: Vec::new(),
            steady: Vec::new(),
            overload_done: 0,
            overload_ticks: 0,
            under_done: 0,
            under_offered: 0,
            last_state: State::Normal,
            changes: 0,
            last_overload_end: None,
            class_offered: [0; 3],
            class_done: [0; 3],
            normal_since: Some(0),
            per_second: BTreeMap::new(),
            refusing_ticks: 0.0,
            busy_ticks: 0.0,
        }
    }

    /// A job done at `now`, during a phase `overloaded` or not.
    pub(super) fn completed(&mut self, job: Done, now: u64, overloaded: bool) {
        if job.overload {
            self.class_done[job.class] += 1;
        }
        let ms = (now - job.arrived) as f64 / 1e6;
        self.latencies.push(ms);
        if job.steady_overload {
            self.steady.push(ms);
        }
        if overloaded {
            self.overload_done += 1;
        } else {
            self.under_done += 1;
        }
    }

    /// The states after a sample at `now`: opened, changed, back to Normal.
    pub(super) fn sampled(&mut self, snap: &Snapshot, now: u64) {
        let st = snap.states[Signal::Traces.index()];
        self.out.opened |= st == State::Open;
        if st != self.last_state {
            self.changes += 1;
            self.last_state = st;
        }
        let all_normal = snap.states.iter().all(|s| *s == State::Normal);
        self.normal_since = match (all_normal, self.normal_since) {
            (true, None) => Some(now),
            (true, s) => s,
            (false, _) => None,
        };
    }

    /// The outcome of a run that ended at `now`, on a plant of `cores` doing `per_tick`
    /// units of work per core per tick.
    pub(super) fn finish(mut self, now: u64, per_tick: f64, cores: f64) -> Outcome {
        let mut out = self.out;
        if let Some(end) = self.last_overload_end {
            out.secs_to_normal = self.normal_since.map(|t| t.saturating_sub(end) as f64 / 1e9);
        }
        out.goodput_under_overload =
            (self.overload_ticks > 0).then(|| self.overload_done as f64 / (self.overload_ticks as f64 * per_tick * cores));
        out.goodput_under_capacity = if self.under_offered > 0 { self.under_done as f64 / self.under_offered as f64 } else { 1.0 };
        out.p99_ms = p99(&mut self.latencies).unwrap_or(0.0);
        out.p99_steady_overload_ms = p99(&mut self.steady);
        out.state_changes_per_min = self.changes as f64 / (now as f64 / 60e9);
        let (offered, done) = (self.class_offered, self.class_done);
        out.kept_under_overload = std::array::from_fn(|c| (offered[c] > 0).then(|| done[c] as f64 / offered[c] as f64));
        out.refusal_cpu_share = if self.busy_ticks > 0.0 { self.refusing_ticks / self.busy_ticks } else { 0.0 };
        let ratios: Vec<f64> = self.per_second.values().filter(|(o, _)| *o > 0).map(|(o, r)| *r as f64 / *o as f64).collect();
        out.rejection_ratio_sd = (ratios.len() >= 2).then(|| {
            let mean = ratios.iter().sum::<f64>() / ratios.len() as f64;
            (ratios.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / ratios.len() as f64).sqrt()
        });
        out
    }
}

fn p99(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable_by(|a, b| a.total_cmp(b));
    Some(v[((v.len() as f64 * 0.99) as usize).min(v.len() - 1)])
}

/// What the tally needs of a finished job.
pub(super) struct Done {
    /// Its priority class.
    pub(super) class: usize,
    /// Sent during an overload phase.
    pub(super) overload: bool,
    /// When it arrived (ns).
    pub(super) arrived: u64,
    /// Sent during an overload phase, after its first seconds.
    pub(super) steady_overload: bool,
}
