//! A deterministic simulator (docs/overload.md#admission-layers): a virtual clock in 1 ms ticks, a model of a
//! service (the "plant") and the throttle plus every admission layer running unchanged
//! against it. Scenarios assert what a user would notice: goodput under overload, the tail
//! latency of admitted work, no refusals at moderate load, recovery time, no oscillation.
//!
//! The plant: one FIFO server with `capacity_rps` units of work per second; arrivals are
//! Poisson (seeded); each admitted request needs one unit of CPU work, then waits
//! `downstream` (no CPU) before it completes; a refusal costs `reject_cost` units. CPU
//! use is the busy fraction, reported through the same cumulative-usage reading the cgroup
//! gives; memory is a base plus bytes per request in flight plus whatever leaks.
//!
//! `engine` runs a scenario tick by tick, `tally` turns what it counted into an
//! [`Outcome`], `scenarios` holds the scenario tables.

mod engine;
mod scenarios;
mod tally;

pub use scenarios::{core_scenarios, pid_scenarios, scenarios};

use crate::config::ThrottleConfig;

/// The service model.
#[derive(Debug, Clone)]
pub struct Plant {
    /// Cores, each serving one request at a time.
    pub cores: f64,
    /// Units of work per second at 100% of one core.
    pub capacity_rps: f64,
    /// Memory limit in bytes.
    pub mem_limit: f64,
    /// Memory used at idle.
    pub mem_base: f64,
    /// Memory per request queued or in flight.
    pub bytes_per_request: f64,
    /// CPU units a refusal costs (fraction of a request).
    pub reject_cost: f64,
    /// Memory leaked per admitted request.
    pub leak_per_request: f64,
    /// Uniform noise (± this much of the interval) added to each CPU reading.
    pub cpu_noise: f64,
    /// The service's own bounded queue (like weir's pipeline budget): arrivals beyond it
    /// are refused by the plant, not the throttle (counted apart).
    pub queue_limit: usize,
    /// Refusals are work for the same server, done before the queue's next unit (as weir
    /// answers them on the connection's task): refusing competes with serving. Off, a
    /// refusal's cost is only seen by the CPU reading.
    pub refusals_take_cpu: bool,
}

impl Default for Plant {
    fn default() -> Self {
        Plant {
            cores: 1.0,
            capacity_rps: 1000.0,
            mem_limit: 300.0 * 1048576.0,
            mem_base: 60.0 * 1048576.0,
            bytes_per_request: 256.0 * 1024.0,
            reject_cost: 0.02,
            leak_per_request: 0.0,
            cpu_noise: 0.0,
            queue_limit: 256,
            refusals_take_cpu: false,
        }
    }
}

/// One phase of a scenario.
#[derive(Debug, Clone, Copy)]
pub struct Phase {
    /// How long.
    pub secs: f64,
    /// Offered load as a multiple of capacity.
    pub load: f64,
    /// Downstream wait per request.
    pub downstream_ms: f64,
}

/// A scenario.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Name in the table.
    pub name: &'static str,
    /// Phases in order.
    pub phases: Vec<Phase>,
    /// The plant.
    pub plant: Plant,
    /// Share of arrivals per priority class: critical, normal, sheddable.
    pub mix: [f64; 3],
    /// A closed loop of this many clients that ignore Retry-After instead of Poisson
    /// arrivals (the phases' `load` is then unused): each sends its next request as soon
    /// as the previous one is answered, admitted or refused (after a 1 ms round trip).
    pub retry_at_once_clients: Option<usize>,
}

/// Which layers run (the throttle itself always does).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Layers {
    /// Slow start.
    pub slow_start: bool,
    /// Burst damping.
    pub damping: bool,
    /// BBR.
    pub bbr: bool,
    /// Knee learner.
    pub knee: bool,
    /// Held refusals (`hold`).
    pub hold: bool,
    /// The PID rate controller.
    pub pid: bool,
    /// The adaptive in-flight limit (`max_inflight_per_core: auto`); off: no cap.
    pub inflight_limit: bool,
}

impl Layers {
    /// Everything on.
    pub const ALL: Layers = Layers { slow_start: true, damping: true, bbr: true, knee: true, hold: true, pid: false, inflight_limit: true };
    /// Everything, the PID controller too.
    pub const WITH_PID: Layers = Layers { pid: true, ..Layers::ALL };
}

/// What a run measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    /// Completed / capacity during overload phases (load > 1), as a fraction.
    pub goodput_under_overload: Option<f64>,
    /// Completed / offered during phases at or under capacity.
    pub goodput_under_capacity: f64,
    /// P99 latency of admitted requests (ms), whole run.
    pub p99_ms: f64,
    /// P99 latency (ms) of requests that arrived at least 10 s into an overload phase:
    /// what admission control holds once the EWMAs have caught up.
    pub p99_steady_overload_ms: Option<f64>,
    /// Refusals during phases at ≤ 70% load (excluding 20 s after an overload phase).
    pub refusals_at_low_load: u64,
    /// Seconds from the end of the last overload phase until every state is Normal.
    pub secs_to_normal: Option<f64>,
    /// State changes of the traces machine per simulated minute.
    pub state_changes_per_min: f64,
    /// Highest memory level seen.
    pub max_mem: f64,
    /// Whether the state machine ever reached Open.
    pub opened: bool,
    /// Refused requests, total.
    pub refused: u64,
    /// Offered requests, total.
    pub offered: u64,
    /// Refused by the plant's own full queue (not the throttle).
    pub queue_full: u64,
    /// Per class (critical, normal, sheddable): completed / offered during overload.
    pub kept_under_overload: [Option<f64>; 3],
    /// Share of the server's CPU spent refusing (when refusals take CPU).
    pub refusal_cpu_share: f64,
    /// Standard deviation of the per-second refusal ratio (refused / offered) from 10 s
    /// into each overload phase: how steady the shedding is.
    pub rejection_ratio_sd: Option<f64>,
}

/// The throttle configuration the scenarios run with: CPU lines that converge
/// (enter 0.85, hard 1.20: CPU sheds and never opens, since a saturated cgroup reads
/// about 1.0) and exit 0.75; memory as shipped.
pub fn sim_config(layers: Layers) -> ThrottleConfig {
    let mut c = ThrottleConfig::default();
    c.thresholds.cpu.enter = 0.85;
    c.thresholds.cpu.exit = 0.75;
    c.thresholds.cpu.hard = 1.20;
    c.slow_start.enabled = layers.slow_start;
    c.burst_damping.enabled = layers.damping;
    c.bbr.enabled = layers.bbr;
    c.knee.enabled = layers.knee;
    c.hold.enabled = layers.hold;
    c.pid.enabled = layers.pid;
    if !layers.inflight_limit {
        c.max_inflight_per_core = crate::config::auto::Auto::Set(0.0);
    }
    // For tuning: SIM_HOLD="max_seconds,return_ratio" holds refusals otherwise.
    if let Ok(v) = std::env::var("SIM_HOLD") {
        let v: Vec<f64> = v.split(',').filter_map(|x| x.parse().ok()).collect();
        if v.len() == 2 {
            c.hold.max = std::time::Duration::from_secs_f64(v[0]);
            c.hold.return_ratio = v[1];
        }
    }
    // For tuning: SIM_PID="setpoint,kp,ki,kd" runs the simulator with other gains.
    if let Ok(v) = std::env::var("SIM_PID") {
        let v: Vec<f64> = v.split(',').filter_map(|x| x.parse().ok()).collect();
        if v.len() == 4 {
            (c.pid.setpoint, c.pid.kp, c.pid.ki, c.pid.kd) = (v[0], v[1], v[2], v[3]);
        }
    }
    c
}

/// Runs one scenario with the given layers.
pub fn run(s: &Scenario, layers: Layers, seed: u64) -> Outcome {
    engine::Sim::new(s, layers, seed).run()
}

/// Renders outcomes as a Markdown table.
pub fn table(rows: &[(String, &'static str, Outcome)]) -> String {
    let mut t = String::from(
        "| scenario | layers | goodput (overload) | goodput (≤ capacity) | P99 ms | P99 ms, steady overload | refusals ≤70% load | queue full | s to Normal | state changes/min | max mem | kept in overload: critical / normal / sheddable | CPU spent refusing | refusal ratio SD |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for (layers, name, o) in rows {
        t.push_str(&format!(
            "| {name} | {layers} | {} | {:.1}% | {:.0} | {} | {} | {} | {} | {:.1} | {:.2} | {} | {:.1}% | {} |\n",
            o.goodput_under_overload.map_or("-".into(), |g| format!("{:.1}%", g * 100.0)),
            o.goodput_under_capacity * 100.0,
            o.p99_ms,
            o.p99_steady_overload_ms.map_or("-".into(), |p| format!("{p:.0}")),
            o.refusals_at_low_load,
            o.queue_full,
            o.secs_to_normal.map_or("-".into(), |s| format!("{s:.1}")),
            o.state_changes_per_min,
            o.max_mem,
            o.kept_under_overload.map(|k| k.map_or("-".into(), |k| format!("{:.0}%", k * 100.0))).join(" / "),
            o.refusal_cpu_share * 100.0,
            o.rejection_ratio_sd.map_or("-".into(), |s| format!("{s:.3}")),
        ));
    }
    t
}
