//! A deterministic simulator (seed 000 §10): a virtual clock in 1 ms ticks, a model of a
//! service (the "plant") and the throttle plus every admission layer running unchanged
//! against it. Scenarios assert what a user would notice: goodput under overload, the tail
//! latency of admitted work, no refusals at moderate load, recovery time, no oscillation.
//!
//! The plant: one FIFO server with `capacity_rps` units of work per second; arrivals are
//! Poisson (seeded); each admitted request needs one unit of CPU work, then waits
//! `downstream` (no CPU) before it completes; a refusal costs `reject_cost` units. CPU
//! use is the busy fraction, reported through the same cumulative-usage reading the cgroup
//! gives; memory is a base plus bytes per request in flight plus whatever leaks.

use crate::admission::{Admission, Ticket};
use crate::config::Priority;
use crate::config::ThrottleConfig;
use crate::signal::Signal;
use crate::throttle::manager::{decide_with_priority, spare_shed, ClassMix, Decision, Snapshot};
use crate::throttle::sampler::{Readings, Stepper};
use crate::throttle::state::State;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

const TICK_NS: u64 = 1_000_000;
/// weir's idle check for held refusals, in ticks (10 ms).
const IDLE_CHECK_TICKS: u64 = 10;

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

/// splitmix64, seeded: the whole run is a function of the seed.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn uniform(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn poisson(&mut self, mean: f64) -> u32 {
        // Knuth; means here are at most ~10 per tick.
        let l = (-mean).exp();
        let (mut k, mut p) = (0u32, 1.0);
        loop {
            p *= self.uniform();
            if p <= l {
                return k;
            }
            k += 1;
        }
    }
}

struct Job {
    /// The closed-loop client that sent it, if any.
    client: Option<usize>,
    class: usize,
    overload: bool,
    ticket: Ticket,
    arrived: u64,
    work_left: f64,
    steady_overload: bool,
    /// Let in through the calm line: holds its place there until its service is done.
    in_line: bool,
}

fn p99(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable_by(|a, b| a.total_cmp(b));
    Some(v[((v.len() as f64 * 0.99) as usize).min(v.len() - 1)])
}

/// The throttle configuration the scenarios run with: the seed's converged CPU lines
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
    let config = sim_config(layers);
    let origin = Instant::now();
    let admission = Admission::new(&config, s.plant.cores);
    let mut stepper = Stepper::with_knee(&config, admission.knee.clone(), origin);
    let rule = config.rules.resolve(Signal::Traces);
    let interval_ticks = (config.sample_interval.as_nanos() as u64 / TICK_NS).max(1);
    let mut rng = Rng(seed);
    let mut snap = Snapshot::idle();
    let p = &s.plant;
    let per_tick = p.capacity_rps / 1000.0;
    let cores = p.cores.max(1.0);
    // Jobs served side by side in one tick, one per core.
    let slots = cores.ceil() as usize;

    let mut queue: VecDeque<Job> = VecDeque::new();
    let mut downstream: VecDeque<(u64, Job)> = VecDeque::new();
    let mut cpu_ns = 0.0f64;
    let mut leaked = 0.0f64;
    let mut latencies: Vec<f64> = Vec::new();
    let mut steady: Vec<f64> = Vec::new();
    let mut out = Outcome::default();
    let (mut overload_done, mut overload_ticks, mut under_done, mut under_offered) = (0u64, 0u64, 0u64, 0u64);
    let mut last_state = State::Normal;
    let mut changes = 0u64;
    let mut last_overload_end: Option<u64> = None;
    let mix = ClassMix::default();
    let (mut class_offered, mut class_done) = ([0u64; 3], [0u64; 3]);
    let classes = [Priority::Critical, Priority::Normal, Priority::Sheddable];
    let mut normal_since: Option<u64> = Some(0);
    // Per second of steady overload: (offered, refused).
    let mut per_second: std::collections::BTreeMap<u64, (u64, u64)> = std::collections::BTreeMap::new();

    // The closed loop: clients by the time they send next; held refusals by release time.
    let mut clients: std::collections::BinaryHeap<std::cmp::Reverse<(u64, usize)>> =
        (0..s.retry_at_once_clients.unwrap_or(0)).map(|c| std::cmp::Reverse((TICK_NS, c))).collect();
    let mut held: VecDeque<(u64, usize)> = VecDeque::new();
    let mut arriving: Vec<Option<usize>> = Vec::new();
    let (mut last_admitted, mut release) = (0u64, crate::throttle::IdleRelease::default());
    let (mut refusal_debt, mut refusing_ticks, mut busy_ticks) = (0.0f64, 0.0f64, 0.0f64);
    // A refusal: its CPU, and its client's return, at once or after the hold (kept in
    // release order: holds only grow with the number held, so a FIFO stays sorted
    // enough; a release found early waits for the one in front, never less than its hold).
    let refuse = |client: Option<usize>,
                  now: u64,
                  debt: &mut f64,
                  cpu: &mut f64,
                  clients: &mut std::collections::BinaryHeap<std::cmp::Reverse<(u64, usize)>>,
                  held: &mut VecDeque<(u64, usize)>| {
        // The answer goes out once the refusal work queued so far is done (at least
        // half of every tick goes to refusing while any is owed).
        let mut answered = now;
        if p.refusals_take_cpu {
            *debt += p.reject_cost / per_tick;
            answered += (*debt * 2.0 * TICK_NS as f64) as u64;
        } else {
            *cpu += p.reject_cost / per_tick * TICK_NS as f64;
        }
        let Some(c) = client else { return };
        let hold = admission.hold_for(now, held.len() + 1, None, None).as_nanos() as u64;
        if hold >= TICK_NS {
            let at = (answered + hold).max(held.back().map_or(0, |(t, _)| *t));
            held.push_back((at, c));
        } else {
            clients.push(std::cmp::Reverse((answered + TICK_NS, c)));
        }
    };

    let mut now = 0u64;
    for phase in &s.phases {
        let phase_start = now;
        let end = now + (phase.secs * 1000.0) as u64 * TICK_NS;
        let overloaded = phase.load > 1.0;
        let low = phase.load <= 0.7;
        while now < end {
            now += TICK_NS;
            // Arrivals: Poisson, or the closed loop's clients whose turn it is.
            arriving.clear();
            match s.retry_at_once_clients {
                None => arriving.extend(std::iter::repeat_n(None, rng.poisson(phase.load * per_tick * cores) as usize)),
                Some(_) => {
                    while clients.peek().is_some_and(|std::cmp::Reverse((t, _))| *t <= now) {
                        let Some(std::cmp::Reverse((_, c))) = clients.pop() else { break };
                        arriving.push(Some(c));
                    }
                }
            }
            let steady_second = (overloaded && now - phase_start >= 10_000 * TICK_NS).then_some(now / 1_000_000_000);
            for &client in &arriving {
                out.offered += 1;
                if let Some(sec) = steady_second {
                    per_second.entry(sec).or_default().0 += 1;
                }
                if !overloaded {
                    under_offered += 1;
                }
                let draw = rng.uniform();
                let class = if draw < s.mix[0] {
                    0
                } else if draw < s.mix[0] + s.mix[1] {
                    1
                } else {
                    2
                };
                mix.record(classes[class]);
                if overloaded {
                    class_offered[class] += 1;
                }
                // The plant's queue keeps its last 20% for critical work (as weir's pipeline
                // budget does with `critical_reserve`); a request it has no room for is
                // refused before the throttle decides, as weir's throttle layer checks the
                // pipeline's budget first.
                if queue.len() >= if class == 0 { p.queue_limit } else { p.queue_limit * 4 / 5 } {
                    out.queue_full += 1;
                    refuse(client, now, &mut refusal_debt, &mut cpu_ns, &mut clients, &mut held);
                    continue;
                }
                // A shed that would leave the core idle is admitted, as in the tower layer.
                let decision = decide_with_priority(&config, &rule, &snap, Signal::Traces, classes[class], rng.uniform());
                let decision = spare_shed(decision, &admission, &config.thresholds, &snap, Some(classes[class]));
                let mut in_line = false;
                let admitted = match decision {
                    // Critical skips the adaptive layers, as in the tower layer.
                    Decision::Admit(_) if class == 0 => Some(Ticket { start: now, bytes: 0 }),
                    // Over the adaptive limit while calm, weir lets it wait in the line for a
                    // slot and then in (`join_line_calm`); the sim lets it in at once and
                    // keeps its place in the line until its service is done.
                    Decision::Admit(_) => match admission.admit(now, snap.pressure) {
                        Ok(t) => Some(t),
                        Err(crate::admission::Layer::InflightCap) if admission.join_line_calm(now, snap.pressure) => {
                            let t = admission.admit_waited(now, snap.pressure).ok();
                            if t.is_none() {
                                admission.leave_line();
                            }
                            in_line = t.is_some();
                            t
                        }
                        Err(_) => None,
                    },
                    Decision::Reject { .. } => None,
                };
                match admitted {
                    Some(ticket) => {
                        leaked += p.leak_per_request;
                        let steady_overload = overloaded && now - phase_start >= 10_000 * TICK_NS;
                        queue.push_back(Job {
                            client,
                            class,
                            overload: overloaded,
                            ticket,
                            arrived: now,
                            work_left: 1.0,
                            steady_overload,
                            in_line,
                        });
                    }
                    None => {
                        out.refused += 1;
                        if let Some(sec) = steady_second {
                            per_second.entry(sec).or_default().1 += 1;
                        }
                        let grace = last_overload_end.is_some_and(|e| now.saturating_sub(e) < 20_000 * TICK_NS);
                        if low && !grace {
                            out.refusals_at_low_load += 1;
                        }
                        refuse(client, now, &mut refusal_debt, &mut cpu_ns, &mut clients, &mut held);
                    }
                }
            }
            // Service: `per_tick` units of work per core this tick, FIFO, the first
            // `slots` jobs side by side (a core each), after the refusals owed.
            let mut budget = cores;
            // Refusing and serving share the cores: refusals get half of them while any
            // is owed, all of them when nothing waits to be served.
            let share = if queue.is_empty() { cores } else { 0.5 * cores };
            let paid = refusal_debt.min(share);
            refusal_debt -= paid;
            budget -= paid;
            refusing_ticks += paid;
            let (mut i, mut partial) = (0, 0);
            while budget > 1e-12 && partial < slots {
                let Some(job) = queue.get_mut(i) else { break };
                let slice = budget.min(1.0);
                let need = job.work_left / per_tick;
                if need <= slice {
                    budget -= need;
                    let Some(job) = queue.remove(i) else { break };
                    if job.in_line {
                        admission.leave_line();
                    }
                    downstream.push_back((now + (phase.downstream_ms * 1e6) as u64, job));
                } else {
                    job.work_left -= slice * per_tick;
                    budget -= slice;
                    partial += 1;
                    i += 1;
                }
            }
            cpu_ns += (cores - budget) * TICK_NS as f64;
            busy_ticks += cores - budget;
            // Held clients whose hold is over are answered (and come back at once).
            while held.front().is_some_and(|(t, _)| *t <= now) {
                let Some((_, c)) = held.pop_front() else { break };
                clients.push(std::cmp::Reverse((now + TICK_NS, c)));
            }
            // As weir's idle check (`throttle::release_when_idle`): every 10 ms, when nothing
            // was admitted since the last check and nothing waits to be served, the
            // longest-held are answered early, one and then twice as many per idle check;
            // with a line configured (`max_inflight_wait`; no scenario sets one), one per
            // check while nobody waits in it.
            if (now / TICK_NS) % IDLE_CHECK_TICKS == 0 {
                let admitted = admission.admitted_total();
                let quiet = admitted == last_admitted;
                last_admitted = admitted;
                let n = release.step(queue.is_empty() && !held.is_empty(), !held.is_empty() && admission.line_empty(), quiet);
                for _ in 0..n.min(held.len()) {
                    let Some((_, c)) = held.pop_front() else { break };
                    clients.push(std::cmp::Reverse((now + TICK_NS, c)));
                }
            }
            while downstream.front().is_some_and(|(t, _)| *t <= now) {
                let Some((_, job)) = downstream.pop_front() else { break };
                if let Some(c) = job.client {
                    clients.push(std::cmp::Reverse((now + TICK_NS, c)));
                }
                if job.class != 0 {
                    admission.done(job.ticket, now, snap.level.cpu);
                }
                if job.overload {
                    class_done[job.class] += 1;
                }
                let ms = (now - job.arrived) as f64 / 1e6;
                latencies.push(ms);
                if job.steady_overload {
                    steady.push(ms);
                }
                if overloaded {
                    overload_done += 1;
                } else {
                    under_done += 1;
                }
            }
            if overloaded {
                overload_ticks += 1;
            }
            // Sampling.
            if (now / TICK_NS) % interval_ticks == 0 {
                let noise =
                    if p.cpu_noise > 0.0 { (rng.uniform() * 2.0 - 1.0) * p.cpu_noise * (interval_ticks * TICK_NS) as f64 } else { 0.0 };
                cpu_ns = (cpu_ns + noise).max(0.0);
                let mem = p.mem_base + p.bytes_per_request * (queue.len() + downstream.len()) as f64 + leaked;
                out.max_mem = out.max_mem.max(mem / p.mem_limit);
                let shares = mix.roll();
                snap = stepper.step(
                    origin + Duration::from_nanos(now),
                    Readings {
                        cpu_usage_nanos: Some(cpu_ns as u64),
                        cores,
                        quota_set: true,
                        mem_working_set: Some(mem as u64),
                        mem_limit: Some(p.mem_limit as u64),
                        disk_fill: None,
                    },
                );
                snap.class_share = shares;
                let st = snap.states[Signal::Traces.index()];
                out.opened |= st == State::Open;
                if st != last_state {
                    changes += 1;
                    last_state = st;
                }
                let all_normal = snap.states.iter().all(|s| *s == State::Normal);
                normal_since = match (all_normal, normal_since) {
                    (true, None) => Some(now),
                    (true, s) => s,
                    (false, _) => None,
                };
            }
        }
        if overloaded {
            last_overload_end = Some(now);
        }
    }
    if let Some(end) = last_overload_end {
        out.secs_to_normal = normal_since.map(|t| t.saturating_sub(end) as f64 / 1e9);
    }
    out.goodput_under_overload = (overload_ticks > 0).then(|| overload_done as f64 / (overload_ticks as f64 * per_tick * cores));
    out.goodput_under_capacity = if under_offered > 0 { under_done as f64 / under_offered as f64 } else { 1.0 };
    out.p99_ms = p99(&mut latencies).unwrap_or(0.0);
    out.p99_steady_overload_ms = p99(&mut steady);
    out.state_changes_per_min = changes as f64 / (now as f64 / 60e9);
    out.kept_under_overload = std::array::from_fn(|c| (class_offered[c] > 0).then(|| class_done[c] as f64 / class_offered[c] as f64));
    out.refusal_cpu_share = if busy_ticks > 0.0 { refusing_ticks / busy_ticks } else { 0.0 };
    let ratios: Vec<f64> = per_second.values().filter(|(o, _)| *o > 0).map(|(o, r)| *r as f64 / *o as f64).collect();
    out.rejection_ratio_sd = (ratios.len() >= 2).then(|| {
        let mean = ratios.iter().sum::<f64>() / ratios.len() as f64;
        (ratios.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / ratios.len() as f64).sqrt()
    });
    out
}

/// The PID controller's comparison (issue: 1.2x, 3x and 10x overload, a step from 0.5x
/// to 3x, a slow ramp to 3x), each with a calm phase after it.
pub fn pid_scenarios() -> Vec<Scenario> {
    let plant = Plant::default();
    let calm = phase(30.0, 0.3);
    let mk = |name: &'static str, phases: Vec<Phase>| Scenario {
        name,
        phases,
        plant: plant.clone(),
        mix: NORMAL_ONLY,
        retry_at_once_clients: None,
    };
    let ramp: Vec<Phase> = (0..=10).map(|i| phase(6.0, 0.5 + 0.25 * f64::from(i))).chain([calm]).collect();
    vec![
        mk("steady 1.2x", vec![phase(10.0, 0.5), phase(60.0, 1.2), calm]),
        mk("steady 3x", vec![phase(10.0, 0.5), phase(60.0, 3.0), calm]),
        mk("steady 10x", vec![phase(10.0, 0.5), phase(60.0, 10.0), calm]),
        mk("step 0.5x to 3x", vec![phase(30.0, 0.5), phase(60.0, 3.0), calm]),
        mk("slow ramp 0.5x to 3x", ramp),
        mk("noisy CPU at 0.6x", vec![phase(90.0, 0.6)]).with_plant(Plant { cpu_noise: 0.15, ..plant.clone() }),
    ]
}

impl Scenario {
    fn with_plant(mut self, plant: Plant) -> Scenario {
        self.plant = plant;
        self
    }
}

/// Every request of the `normal` class.
const NORMAL_ONLY: [f64; 3] = [0.0, 1.0, 0.0];

fn phase(secs: f64, load: f64) -> Phase {
    Phase { secs, load, downstream_ms: 5.0 }
}

/// The scenarios of issue 6.
pub fn scenarios() -> Vec<Scenario> {
    let plant = Plant::default();
    vec![
        Scenario {
            name: "cold start, full load",
            phases: vec![phase(60.0, 1.2), phase(30.0, 0.3)],
            plant: plant.clone(),
            mix: NORMAL_ONLY,
            retry_at_once_clients: None,
        },
        Scenario {
            name: "idle gap then burst",
            phases: vec![phase(30.0, 0.5), phase(60.0, 0.0), phase(30.0, 2.0), phase(30.0, 0.3)],
            plant: plant.clone(),
            mix: NORMAL_ONLY,
            retry_at_once_clients: None,
        },
        Scenario {
            name: "step to 3x",
            phases: vec![phase(30.0, 0.6), phase(60.0, 3.0), phase(30.0, 0.3)],
            plant: plant.clone(),
            mix: NORMAL_ONLY,
            retry_at_once_clients: None,
        },
        Scenario {
            name: "sustained 10x",
            phases: vec![phase(10.0, 0.5), phase(60.0, 10.0), phase(30.0, 0.3)],
            plant: plant.clone(),
            mix: NORMAL_ONLY,
            retry_at_once_clients: None,
        },
        Scenario {
            name: "slow downstream",
            phases: vec![phase(20.0, 0.6), Phase { secs: 60.0, load: 0.6, downstream_ms: 400.0 }, phase(20.0, 0.6)],
            plant: Plant { bytes_per_request: 512.0 * 1024.0, ..plant.clone() },
            mix: NORMAL_ONLY,
            retry_at_once_clients: None,
        },
        Scenario {
            name: "memory leak",
            phases: vec![phase(120.0, 0.5)],
            plant: Plant { leak_per_request: 8.0 * 1024.0, ..plant.clone() },
            mix: NORMAL_ONLY,
            retry_at_once_clients: None,
        },
        Scenario {
            name: "noisy CPU",
            phases: vec![phase(90.0, 0.6)],
            plant: Plant { cpu_noise: 0.15, ..plant.clone() },
            mix: NORMAL_ONLY,
            retry_at_once_clients: None,
        },
        Scenario {
            name: "priorities at 3x",
            phases: vec![phase(20.0, 0.6), phase(60.0, 3.0), phase(20.0, 0.3)],
            plant: plant.clone(),
            mix: [0.2, 0.4, 0.4],
            retry_at_once_clients: None,
        },
        // The seed's loadgen loop: 500 clients that send again as soon as they are
        // answered, refused or not; each refusal costs the server 5% (a small body) or
        // 30% (an HTTP/1.1 body that must be received) of an admitted request.
        Scenario {
            name: "retry storm, cheap refusals",
            phases: vec![phase(60.0, 2.0)],
            plant: Plant { refusals_take_cpu: true, reject_cost: 0.05, ..plant.clone() },
            mix: NORMAL_ONLY,
            retry_at_once_clients: Some(500),
        },
        Scenario {
            name: "retry storm, costly refusals",
            phases: vec![phase(60.0, 2.0)],
            plant: Plant { refusals_take_cpu: true, reject_cost: 0.3, ..plant },
            mix: NORMAL_ONLY,
            retry_at_once_clients: Some(500),
        },
    ]
}

/// The derived limits beyond one core: 1, 2, 4 and 8 cores, at 2x and 10x (arrivals
/// that do not come back when refused, as clients that honour Retry-After) and under a
/// retry-at-once storm (64 clients per core); memory and the plant's own queue (weir's
/// pipeline budget) grow with the cores. `calm clients` is the comparison: two clients per core
/// that never overload it (A in the benchmark).
pub fn core_scenarios() -> Vec<(f64, Scenario)> {
    let mut out = Vec::new();
    for cores in [1.0, 2.0, 4.0, 8.0] {
        // A container that grows with its cores; refusals cost the server CPU only where
        // their clients come straight back (the storm), as in the 1-core scenarios.
        // The plant's own queue (weir's pipeline budget) grows with the container too.
        let plant = Plant { cores, queue_limit: 256 * cores as usize, mem_limit: 300.0 * 1048576.0 * cores, ..Plant::default() };
        let storm = Plant { refusals_take_cpu: true, reject_cost: 0.05, ..plant.clone() };
        let mk = |name: &'static str, phases: Vec<Phase>, clients: Option<usize>| Scenario {
            name,
            phases,
            plant: if clients.is_some_and(|c| c > 2 * cores as usize) { storm.clone() } else { plant.clone() },
            mix: NORMAL_ONLY,
            retry_at_once_clients: clients,
        };
        out.push((cores, mk("calm clients", vec![phase(30.0, 0.5)], Some(2 * cores as usize))));
        out.push((cores, mk("2x", vec![phase(10.0, 0.5), phase(40.0, 2.0)], None)));
        out.push((cores, mk("10x", vec![phase(10.0, 0.5), phase(40.0, 10.0)], None)));
        out.push((cores, mk("retry storm", vec![phase(40.0, 2.0)], Some(64 * cores as usize))));
    }
    out
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
