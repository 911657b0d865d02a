//! The simulator proper: [`Sim`] holds the plant, the throttle and the admission layers
//! and moves them one 1 ms tick at a time, one method per step of a tick.

use super::tally::{Done, Tally};
use super::{sim_config, Layers, Outcome, Phase, Scenario};
use crate::admission::{Admission, Layer, Ticket};
use crate::config::{Priority, Rule, ThrottleConfig};
use crate::signal::Signal;
use crate::throttle::manager::{decide_with_priority, spare_shed, ClassMix, Decision, Snapshot};
use crate::throttle::sampler::{Readings, Stepper};
use crate::throttle::IdleRelease;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::{Duration, Instant};

const TICK_NS: u64 = 1_000_000;
/// weir's idle check for held refusals, in ticks (10 ms).
const IDLE_CHECK_TICKS: u64 = 10;
/// The priority of each class index, as `Scenario::mix` orders them.
const CLASSES: [Priority; 3] = [Priority::Critical, Priority::Normal, Priority::Sheddable];

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

/// An admitted request, from the plant's queue until its downstream wait is over.
pub(super) struct Job {
    /// The closed-loop client that sent it, if any.
    client: Option<usize>,
    pub(super) class: usize,
    pub(super) overload: bool,
    ticket: Ticket,
    pub(super) arrived: u64,
    work_left: f64,
    pub(super) steady_overload: bool,
    /// Let in through the calm line: holds its place there until its service is done.
    in_line: bool,
}

/// The phase being run and the tick it started at.
#[derive(Clone, Copy)]
struct Current {
    phase: Phase,
    start: u64,
}

impl Current {
    fn overloaded(&self) -> bool {
        self.phase.load > 1.0
    }

    /// Refusals at this load count against the throttle.
    fn low(&self) -> bool {
        self.phase.load <= 0.7
    }

    /// At least 10 s into an overload phase: the EWMAs have caught up.
    fn steady(&self, now: u64) -> bool {
        self.overloaded() && now - self.start >= 10_000 * TICK_NS
    }
}

/// One scenario's run: the plant's state, the layers under test and the tally.
pub(super) struct Sim<'a> {
    s: &'a Scenario,
    config: ThrottleConfig,
    rule: Rule,
    admission: Admission,
    stepper: Stepper,
    origin: Instant,
    interval_ticks: u64,
    rng: Rng,
    snap: Snapshot,
    /// Units of work one core does per tick.
    per_tick: f64,
    cores: f64,
    /// Jobs served side by side in one tick, one per core.
    slots: usize,
    queue: VecDeque<Job>,
    /// Served jobs by the time their downstream wait ends.
    downstream: VecDeque<(u64, Job)>,
    cpu_ns: f64,
    leaked: f64,
    mix: ClassMix,
    /// The closed loop: clients by the time they send next.
    clients: BinaryHeap<Reverse<(u64, usize)>>,
    /// Held refusals by release time.
    held: VecDeque<(u64, usize)>,
    /// This tick's arrivals (a closed-loop client each, or none); kept to reuse its buffer.
    arriving: Vec<Option<usize>>,
    last_admitted: u64,
    release: IdleRelease,
    /// Refusal work owed to the cores, in core-ticks.
    refusal_debt: f64,
    now: u64,
    tally: Tally,
}

impl<'a> Sim<'a> {
    /// A run of `s` with `layers`, its randomness drawn from `seed`.
    pub(super) fn new(s: &'a Scenario, layers: Layers, seed: u64) -> Self {
        let config = sim_config(layers);
        let origin = Instant::now();
        let admission = Admission::new(&config, s.plant.cores);
        let stepper = Stepper::with_knee(&config, admission.knee.clone(), origin);
        let rule = config.rules.resolve(Signal::Traces);
        let interval_ticks = (config.sample_interval.as_nanos() as u64 / TICK_NS).max(1);
        let cores = s.plant.cores.max(1.0);
        Sim {
            s,
            config,
            rule,
            admission,
            stepper,
            origin,
            interval_ticks,
            rng: Rng(seed),
            snap: Snapshot::idle(),
            per_tick: s.plant.capacity_rps / 1000.0,
            cores,
            slots: cores.ceil() as usize,
            queue: VecDeque::new(),
            downstream: VecDeque::new(),
            cpu_ns: 0.0,
            leaked: 0.0,
            mix: ClassMix::default(),
            clients: (0..s.retry_at_once_clients.unwrap_or(0)).map(|c| Reverse((TICK_NS, c))).collect(),
            held: VecDeque::new(),
            arriving: Vec::new(),
            last_admitted: 0,
            release: IdleRelease::default(),
            refusal_debt: 0.0,
            now: 0,
            tally: Tally::new(),
        }
    }

    /// Runs every phase in order and returns what was measured.
    pub(super) fn run(mut self) -> Outcome {
        let s = self.s;
        for &phase in &s.phases {
            let current = Current { phase, start: self.now };
            let end = self.now + (phase.secs * 1000.0) as u64 * TICK_NS;
            while self.now < end {
                self.tick(current);
            }
            if current.overloaded() {
                self.tally.last_overload_end = Some(self.now);
            }
        }
        self.tally.finish(self.now, self.per_tick, self.cores)
    }

    /// One millisecond: arrivals, service, returning clients, completions, a sample.
    fn tick(&mut self, current: Current) {
        self.now += TICK_NS;
        self.collect_arrivals(current.phase.load);
        let arriving = std::mem::take(&mut self.arriving);
        for &client in &arriving {
            self.arrive(client, current);
        }
        self.arriving = arriving;
        self.serve(current.phase.downstream_ms);
        self.release_held();
        if (self.now / TICK_NS) % IDLE_CHECK_TICKS == 0 {
            self.idle_check();
        }
        self.complete(current.overloaded());
        if current.overloaded() {
            self.tally.overload_ticks += 1;
        }
        if (self.now / TICK_NS) % self.interval_ticks == 0 {
            self.sample();
        }
    }

    /// Arrivals: Poisson at `load`, or the closed loop's clients whose turn it is.
    fn collect_arrivals(&mut self, load: f64) {
        self.arriving.clear();
        match self.s.retry_at_once_clients {
            None => self.arriving.extend(std::iter::repeat_n(None, self.rng.poisson(load * self.per_tick * self.cores) as usize)),
            Some(_) => {
                while self.clients.peek().is_some_and(|Reverse((t, _))| *t <= self.now) {
                    let Some(Reverse((_, c))) = self.clients.pop() else { break };
                    self.arriving.push(Some(c));
                }
            }
        }
    }

    /// One arrival: counted, given a class, then queued or refused.
    fn arrive(&mut self, client: Option<usize>, current: Current) {
        let (now, overloaded) = (self.now, current.overloaded());
        let steady_second = current.steady(now).then_some(now / 1_000_000_000);
        self.tally.out.offered += 1;
        if let Some(sec) = steady_second {
            self.tally.per_second.entry(sec).or_default().0 += 1;
        }
        if !overloaded {
            self.tally.under_offered += 1;
        }
        let class = self.draw_class();
        if overloaded {
            self.tally.class_offered[class] += 1;
        }
        // The plant's queue keeps its last 20% for critical work (as weir's pipeline
        // budget does with `critical_reserve`); a request it has no room for is
        // refused before the throttle decides, as weir's throttle layer checks the
        // pipeline's budget first.
        let s = self.s;
        let p = &s.plant;
        if self.queue.len() >= if class == 0 { p.queue_limit } else { p.queue_limit * 4 / 5 } {
            self.tally.out.queue_full += 1;
            self.refuse(client);
            return;
        }
        match self.admit(class) {
            Some((ticket, in_line)) => {
                self.leaked += p.leak_per_request;
                let steady_overload = current.steady(now);
                self.queue.push_back(Job {
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
                self.tally.out.refused += 1;
                if let Some(sec) = steady_second {
                    self.tally.per_second.entry(sec).or_default().1 += 1;
                }
                let grace = self.tally.last_overload_end.is_some_and(|e| now.saturating_sub(e) < 20_000 * TICK_NS);
                if current.low() && !grace {
                    self.tally.out.refusals_at_low_load += 1;
                }
                self.refuse(client);
            }
        }
    }

    /// The arrival's class (an index into `CLASSES`), drawn from the scenario's mix.
    fn draw_class(&mut self) -> usize {
        let mix = self.s.mix;
        let draw = self.rng.uniform();
        let class = if draw < mix[0] {
            0
        } else if draw < mix[0] + mix[1] {
            1
        } else {
            2
        };
        self.mix.record(CLASSES[class]);
        class
    }

    /// The throttle's decision, then the adaptive layers'; an admitted request's ticket
    /// and whether it holds a place in the calm line.
    fn admit(&mut self, class: usize) -> Option<(Ticket, bool)> {
        let (now, priority) = (self.now, CLASSES[class]);
        // A shed that would leave the core idle is admitted, as in the tower layer.
        let decision = decide_with_priority(&self.config, &self.rule, &self.snap, Signal::Traces, priority, self.rng.uniform());
        let decision = spare_shed(decision, &self.admission, &self.config.thresholds, &self.snap, Some(priority));
        let pressure = self.snap.pressure;
        match decision {
            // Critical skips the adaptive layers, as in the tower layer.
            Decision::Admit(_) if class == 0 => Some((Ticket { start: now, bytes: 0 }, false)),
            // Over the adaptive limit while calm, weir lets it wait in the line for a
            // slot and then in (`join_line_calm`); the sim lets it in at once and
            // keeps its place in the line until its service is done.
            Decision::Admit(_) => match self.admission.admit(now, pressure) {
                Ok(t) => Some((t, false)),
                Err(Layer::InflightCap) if self.admission.join_line_calm(now, pressure) => {
                    let t = self.admission.admit_waited(now, pressure).ok();
                    if t.is_none() {
                        self.admission.leave_line();
                    }
                    t.map(|t| (t, true))
                }
                Err(_) => None,
            },
            Decision::Reject { .. } => None,
        }
    }

    /// A refusal: its CPU, and its client's return, at once or after the hold (kept in
    /// release order: holds only grow with the number held, so a FIFO stays sorted
    /// enough; a release found early waits for the one in front, never less than its hold).
    fn refuse(&mut self, client: Option<usize>) {
        let s = self.s;
        let p = &s.plant;
        // The answer goes out once the refusal work queued so far is done (at least
        // half of every tick goes to refusing while any is owed).
        let mut answered = self.now;
        if p.refusals_take_cpu {
            self.refusal_debt += p.reject_cost / self.per_tick;
            answered += (self.refusal_debt * 2.0 * TICK_NS as f64) as u64;
        } else {
            self.cpu_ns += p.reject_cost / self.per_tick * TICK_NS as f64;
        }
        let Some(c) = client else { return };
        let hold = self.admission.hold_for(self.now, self.held.len() + 1, None, None).as_nanos() as u64;
        if hold >= TICK_NS {
            let at = (answered + hold).max(self.held.back().map_or(0, |(t, _)| *t));
            self.held.push_back((at, c));
        } else {
            self.clients.push(Reverse((answered + TICK_NS, c)));
        }
    }

    /// Service: `per_tick` units of work per core this tick, FIFO, the first `slots`
    /// jobs side by side (a core each), after the refusals owed; a job served in full
    /// goes on to wait `downstream_ms`.
    fn serve(&mut self, downstream_ms: f64) {
        let cores = self.cores;
        let mut budget = cores;
        // Refusing and serving share the cores: refusals get half of them while any
        // is owed, all of them when nothing waits to be served.
        let share = if self.queue.is_empty() { cores } else { 0.5 * cores };
        let paid = self.refusal_debt.min(share);
        self.refusal_debt -= paid;
        budget -= paid;
        self.tally.refusing_ticks += paid;
        let (mut i, mut partial) = (0, 0);
        while budget > 1e-12 && partial < self.slots {
            let Some(job) = self.queue.get_mut(i) else { break };
            let slice = budget.min(1.0);
            let need = job.work_left / self.per_tick;
            if need <= slice {
                budget -= need;
                let Some(job) = self.queue.remove(i) else { break };
                if job.in_line {
                    self.admission.leave_line();
                }
                self.downstream.push_back((self.now + (downstream_ms * 1e6) as u64, job));
            } else {
                job.work_left -= slice * self.per_tick;
                budget -= slice;
                partial += 1;
                i += 1;
            }
        }
        self.cpu_ns += (cores - budget) * TICK_NS as f64;
        self.tally.busy_ticks += cores - budget;
    }

    /// Held clients whose hold is over are answered (and come back at once).
    fn release_held(&mut self) {
        while self.held.front().is_some_and(|(t, _)| *t <= self.now) {
            let Some((_, c)) = self.held.pop_front() else { break };
            self.clients.push(Reverse((self.now + TICK_NS, c)));
        }
    }

    /// As weir's idle check (`throttle::release_when_idle`): when nothing was admitted
    /// since the last check and nothing waits to be served, the longest-held are
    /// answered early, one and then twice as many per idle check; with a line
    /// configured (`max_inflight_wait`; no scenario sets one), one per check while
    /// nobody waits in it.
    fn idle_check(&mut self) {
        let admitted = self.admission.admitted_total();
        let quiet = admitted == self.last_admitted;
        self.last_admitted = admitted;
        let held = !self.held.is_empty();
        let n = self.release.step(self.queue.is_empty() && held, held && self.admission.line_empty(), quiet);
        for _ in 0..n.min(self.held.len()) {
            let Some((_, c)) = self.held.pop_front() else { break };
            self.clients.push(Reverse((self.now + TICK_NS, c)));
        }
    }

    /// Jobs whose downstream wait is over complete: their clients come back and their
    /// tickets go back to the adaptive layers.
    fn complete(&mut self, overloaded: bool) {
        let now = self.now;
        while self.downstream.front().is_some_and(|(t, _)| *t <= now) {
            let Some((_, job)) = self.downstream.pop_front() else { break };
            if let Some(c) = job.client {
                self.clients.push(Reverse((now + TICK_NS, c)));
            }
            if job.class != 0 {
                self.admission.done(job.ticket, now, self.snap.level.cpu);
            }
            self.tally.completed(
                Done { class: job.class, overload: job.overload, arrived: job.arrived, steady_overload: job.steady_overload },
                now,
                overloaded,
            );
        }
    }

    /// A sampling interval's end: the plant's CPU and memory go through the sampler as
    /// the cgroup's readings would, and the new snapshot drives the next decisions.
    fn sample(&mut self) {
        let s = self.s;
        let p = &s.plant;
        let window_ns = (self.interval_ticks * TICK_NS) as f64;
        let noise = if p.cpu_noise > 0.0 { (self.rng.uniform() * 2.0 - 1.0) * p.cpu_noise * window_ns } else { 0.0 };
        self.cpu_ns = (self.cpu_ns + noise).max(0.0);
        let mem = p.mem_base + p.bytes_per_request * (self.queue.len() + self.downstream.len()) as f64 + self.leaked;
        self.tally.out.max_mem = self.tally.out.max_mem.max(mem / p.mem_limit);
        let shares = self.mix.roll();
        let readings = Readings {
            cpu_usage_nanos: Some(self.cpu_ns as u64),
            cores: self.cores,
            quota_set: true,
            mem_working_set: Some(mem as u64),
            mem_limit: Some(p.mem_limit as u64),
            disk_fill: None,
        };
        self.snap = self.stepper.step(self.origin + Duration::from_nanos(self.now), readings);
        self.snap.class_share = shares;
        self.tally.sampled(&self.snap, self.now);
    }
}
