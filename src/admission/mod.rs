//! Admission layers, evaluated after the throttle's decision and before the
//! body is read, short-circuiting in this order:
//!
//! 0. queue delay ([`Admission::check_queue_delay`], called by the throttle layer with the
//!    request's wait in front of weir from `receiver::connection::stamp`): refuse a wait longer than
//!    `queue_delay.target` while busy and every core has an admitted request in flight;
//! 1. in-flight cap (`max_inflight_per_core`): by default the adaptive limit of
//!    [`limit`], enforced only while busy (a water level above its exit line, or the CPU
//!    right now); a number set by hand is a fixed cap, never gated;
//! 2. slow start: after a cold start, or when fewer than 30% of the pass window's
//!    buckets saw traffic, the admitted rate follows init + (target − init)(1 − e^(−4p));
//! 3. burst damping: when arrivals exceed `ratio` × the pass baseline, the rate is capped
//!    at the baseline and recovers along the same curve (only once slow start finished);
//!    both rate caps refuse only while every core has a request in flight;
//! 4. BBR: Little's law gives maxInFlight = maxPass × minRT × buckets/s / 1000; refuse
//!    when a water level is above its enter line and in-flight exceeds it, then keep
//!    checking for a 1 s cool-off.
//!
//! Principle, rather under-limit than mis-limit: layers 0 and 2-4 refuse only
//! while some water level is above its exit line (layer 0 also while this sample's CPU
//! is). On an idle machine nothing is refused, however odd the windows look or however
//! long a request waited. A property test holds the code to that.
//!
//! Time is injected (nanoseconds since an origin), so the simulator and tests are exact.

pub mod knee;
pub mod limit;
pub mod pid;
pub mod window;

use crate::config::ThrottleConfig;
use knee::KneeLearner;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;
use window::RollingWindow;

/// What weir works out by itself (see [`Admission::derived`]).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Derived {
    /// The in-flight cap is the adaptive limit (`max_inflight_per_core: auto`).
    pub adaptive: bool,
    /// The in-flight cap in force (0: none).
    pub inflight_cap: i64,
    /// The adaptive limit, whether or not it is the cap.
    pub adaptive_limit: i64,
    /// The limit is probing the calm service time at its floor.
    pub probing: bool,
    /// The calm service time (latency of an admitted request with a core to itself).
    pub calm_service_seconds: Option<f64>,
    /// How long a request may wait for a slot.
    pub inflight_wait_seconds: f64,
    /// Requests that may wait for a slot, per core.
    pub line_per_core: f64,
    /// The smallest declared body that may wait.
    pub wait_min_body_bytes: u64,
    /// The queue-delay target in force.
    pub queue_delay_target_seconds: f64,
}

/// Which layer refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layer {
    /// The in-flight hard cap.
    InflightCap,
    /// Slow start.
    SlowStart,
    /// Burst damping.
    BurstDamping,
    /// The BBR concurrency limit.
    Bbr,
    /// The request waited in front of weir longer than `queue_delay.target`.
    QueueDelay,
    /// Above the PID controller's allowed rate.
    Pid,
}

impl Layer {
    /// The `reason` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Layer::InflightCap => "inflight_cap",
            Layer::SlowStart => "slow_start",
            Layer::BurstDamping => "burst_damping",
            Layer::Bbr => "bbr",
            Layer::QueueDelay => "queue_delay",
            Layer::Pid => "pid",
        }
    }
}

/// What the layers need from the water levels (computed by the sampler).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Pressure {
    /// Some active slot's slow level is above its exit line.
    pub above_exit: bool,
    /// Some active slot's slow level is above its (effective) enter line.
    pub above_enter: bool,
    /// The CPU level now (for the knee learner).
    pub cpu: f64,
}

/// Proof of admission; hand it back to [`Admission::done`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ticket {
    /// When it was admitted.
    pub start: u64,
    /// The request's declared body length (0: unknown), for the hold's completed bytes.
    pub bytes: u64,
}

const SEC: u64 = 1_000_000_000;

/// How long the adaptive limit stays in force after weir was last seen busy.
pub const BUSY_HOLD: u64 = 5 * SEC;

/// A hold is [`Admission::hold_for`] times a random factor in 1 ± this, so that clients
/// refused together do not all come back together.
pub const HOLD_JITTER: f64 = 0.25;

#[derive(Debug)]
struct State {
    arrival: RollingWindow,
    pass: RollingWindow,
    /// Completions in the last second (10 buckets): how fast held clients may come back.
    recent_pass: RollingWindow,
    /// Their declared body bytes (requests of unknown length add nothing).
    recent_bytes: RollingWindow,
    rt: RollingWindow,
    /// The adaptive in-flight limit (kept up to date whether or not it is enforced).
    limit: limit::AdaptiveLimit,
    /// Slow start: start of the current ramp, if ramping.
    warmup_start: Option<u64>,
    warmup_done_once: bool,
    last_sparse_check: u64,
    /// Damping: (start, baseline rate) while active.
    damping: Option<(u64, f64)>,
    /// Admissions in the current second, for the rate caps.
    second: u64,
    admitted_this_second: f64,
    last_drop: Option<u64>,
    /// The PID controller, when it last updated, and its token bucket.
    pid: pid::Pid,
    pid_at: u64,
    pid_tokens: f64,
    pid_refill: u64,
}

/// The layers, one instance per server process.
#[derive(Debug)]
pub struct Admission {
    cfg: arc_swap::ArcSwap<ThrottleConfig>,
    cores: f64,
    /// In-flight cap; 0 = none.
    cap: std::sync::atomic::AtomicI64,
    /// The cap is the adaptive limit's (refuses only while busy).
    adaptive: std::sync::atomic::AtomicBool,
    /// Derived from the calm service time: the wait for a slot and the queue-delay target
    /// (ns), used where their keys are `auto`.
    derived_wait: std::sync::atomic::AtomicU64,
    derived_queue_delay: std::sync::atomic::AtomicU64,
    /// Until when (ns) the adaptive limit stays in force after the last busy sight.
    busy_until: std::sync::atomic::AtomicU64,
    inflight: AtomicI64,
    /// Requests waiting for an in-flight slot.
    waiting: AtomicI64,
    /// Requests admitted since start.
    admitted_total: std::sync::atomic::AtomicU64,
    /// Requests that joined the line since start.
    joined_total: std::sync::atomic::AtomicU64,
    state: Mutex<State>,
    /// `weir_admission_pid_rate`, registered once: the PID update runs on a request's path.
    pid_gauge: metrics::Gauge,
    /// The knee learner (shared with the sampler, which applies the learned line).
    pub knee: Option<std::sync::Arc<KneeLearner>>,
}

/// The fixed cap set by hand (0: none), or `None` for the adaptive limit.
fn fixed_cap(cfg: &ThrottleConfig, cores: f64) -> Option<i64> {
    match cfg.max_inflight_per_core.get() {
        None => None,
        Some(per_core) if per_core > 0.0 => Some((per_core * cores).ceil().max(1.0) as i64),
        Some(_) => Some(0),
    }
}

/// Whether a water level is above its exit line, or the CPU is this sample: what the
/// queue-delay layer and the adaptive limit call busy.
fn pressed(cfg: &ThrottleConfig, p: Pressure) -> bool {
    let cpu = &cfg.thresholds.cpu;
    p.above_exit || (cpu.enabled && p.cpu > cpu.exit)
}

/// `inflight_wait_min_body_bytes` in force.
fn wait_min_body_in(cfg: &ThrottleConfig) -> u64 {
    cfg.inflight_wait_min_body_bytes.get().unwrap_or_else(limit::wait_min_body_bytes)
}

/// The saturating ramp: init + (target − init)(1 − e^(−4p)).
pub fn ramp(init: f64, target: f64, progress: f64) -> f64 {
    init + (target - init).max(0.0) * (1.0 - (-4.0 * progress.clamp(0.0, 1.0)).exp())
}

impl Admission {
    /// Layers for `cores` effective cores, from the throttle config.
    pub fn new(cfg: &ThrottleConfig, cores: f64) -> Self {
        let b = &cfg.bbr;
        let bucket = (b.window.as_nanos() as u64 / b.buckets as u64).max(1);
        let knee = cfg.knee.enabled.then(|| {
            std::sync::Arc::new(KneeLearner::new(
                cfg.knee.knee_ratio,
                cfg.knee.min_delta_ms,
                cfg.knee.min_cpu,
                cfg.knee.recompute.as_nanos() as u64,
            ))
        });
        let adaptive = limit::AdaptiveLimit::new(cores);
        let fixed = fixed_cap(cfg, cores);
        Admission {
            cap: std::sync::atomic::AtomicI64::new(fixed.unwrap_or(adaptive.limit())),
            adaptive: std::sync::atomic::AtomicBool::new(fixed.is_none()),
            derived_wait: std::sync::atomic::AtomicU64::new(limit::inflight_wait(None).as_nanos() as u64),
            derived_queue_delay: std::sync::atomic::AtomicU64::new(limit::queue_delay_target(None).as_nanos() as u64),
            busy_until: std::sync::atomic::AtomicU64::new(0),
            cores,
            inflight: AtomicI64::new(0),
            waiting: AtomicI64::new(0),
            admitted_total: std::sync::atomic::AtomicU64::new(0),
            joined_total: std::sync::atomic::AtomicU64::new(0),
            pid_gauge: metrics::gauge!(crate::telemetry::names::PID_RATE),
            state: Mutex::new(State {
                // Arrivals: 5 s in 50 buckets; pass and RT: the BBR window.
                arrival: RollingWindow::new(50, SEC / 10),
                pass: RollingWindow::new(b.buckets, bucket),
                recent_pass: RollingWindow::new(10, SEC / 10),
                recent_bytes: RollingWindow::new(10, SEC / 10),
                rt: RollingWindow::new(b.buckets, bucket),
                limit: adaptive,
                warmup_start: cfg.slow_start.enabled.then_some(0),
                warmup_done_once: !cfg.slow_start.enabled,
                last_sparse_check: 0,
                damping: None,
                second: 0,
                admitted_this_second: 0.0,
                last_drop: None,
                pid: pid::Pid::default(),
                pid_at: 0,
                pid_tokens: 0.0,
                pid_refill: 0,
            }),
            knee,
            cfg: arc_swap::ArcSwap::from_pointee(cfg.clone()),
        }
    }

    /// Applies a reloaded configuration: parameters change at once; the windows keep
    /// their data unless their shape (BBR window or buckets) changed.
    pub fn reconfigure(&self, cfg: &ThrottleConfig) {
        let old = self.cfg.load_full();
        let fixed = fixed_cap(cfg, self.cores);
        self.adaptive.store(fixed.is_none(), Ordering::Relaxed);
        let cap = fixed.unwrap_or_else(|| self.state.lock().unwrap_or_else(|e| e.into_inner()).limit.limit());
        self.cap.store(cap, Ordering::Relaxed);
        if old.bbr.window != cfg.bbr.window || old.bbr.buckets != cfg.bbr.buckets {
            let bucket = (cfg.bbr.window.as_nanos() as u64 / cfg.bbr.buckets as u64).max(1);
            let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
            st.pass = RollingWindow::new(cfg.bbr.buckets, bucket);
            st.rt = RollingWindow::new(cfg.bbr.buckets, bucket);
        }
        if let Some(k) = &self.knee {
            k.set_params(knee::KneeParams {
                knee_ratio: cfg.knee.knee_ratio,
                min_delta_ms: cfg.knee.min_delta_ms,
                min_cpu: cfg.knee.min_cpu,
                recompute_nanos: cfg.knee.recompute.as_nanos() as u64,
            });
        }
        self.cfg.store(std::sync::Arc::new(cfg.clone()));
    }

    /// How long a request may wait for an in-flight slot (`max_inflight_wait`, or
    /// derived from the calm service time).
    pub fn inflight_wait(&self) -> std::time::Duration {
        self.inflight_wait_in(&self.cfg.load())
    }

    fn inflight_wait_in(&self, cfg: &ThrottleConfig) -> std::time::Duration {
        cfg.max_inflight_wait.get().unwrap_or_else(|| std::time::Duration::from_nanos(self.derived_wait.load(Ordering::Relaxed)))
    }

    /// The queue-delay target in force (`queue_delay.target`, or derived).
    pub fn queue_delay_target(&self) -> std::time::Duration {
        self.queue_delay_target_in(&self.cfg.load())
    }

    fn queue_delay_target_in(&self, cfg: &ThrottleConfig) -> std::time::Duration {
        cfg.queue_delay.target.get().unwrap_or_else(|| std::time::Duration::from_nanos(self.derived_queue_delay.load(Ordering::Relaxed)))
    }

    /// The smallest declared body that may wait for a slot (`inflight_wait_min_body_bytes`,
    /// or derived).
    pub fn wait_min_body_bytes(&self) -> u64 {
        wait_min_body_in(&self.cfg.load())
    }

    /// What weir works out by itself, for `/debug/throttle` and the gauges.
    pub fn derived(&self) -> Derived {
        let (limit, calm, probing) = {
            let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
            (st.limit.limit(), st.limit.calm_nanos(), st.limit.probing())
        };
        Derived {
            adaptive: self.adaptive.load(Ordering::Relaxed),
            inflight_cap: self.cap.load(Ordering::Relaxed),
            adaptive_limit: limit,
            probing,
            calm_service_seconds: calm.map(|c| c as f64 / 1e9),
            inflight_wait_seconds: self.inflight_wait().as_secs_f64(),
            line_per_core: self.cfg.load().max_inflight_queue_per_core,
            wait_min_body_bytes: self.wait_min_body_bytes(),
            queue_delay_target_seconds: self.queue_delay_target().as_secs_f64(),
        }
    }

    /// Joins the line of requests waiting for an in-flight slot; false when there is no
    /// line for a body of `declared` bytes (no `max_inflight_wait`, or a declared length
    /// under `inflight_wait_min_body_bytes`; a body without one may wait) or the line is
    /// full (`max_inflight_queue_per_core` × effective cores, at least one). Pair a true
    /// with [`Admission::leave_line`].
    pub fn join_line(&self, declared: Option<u64>) -> bool {
        let cfg = self.cfg.load();
        if self.inflight_wait_in(&cfg).is_zero() || declared.is_some_and(|d| d < wait_min_body_in(&cfg)) {
            return false;
        }
        let per_core = cfg.max_inflight_queue_per_core;
        let bound = if per_core > 0.0 { (per_core * self.cores).ceil().max(1.0) as i64 } else { i64::MAX };
        let joined = self.waiting.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < bound).then_some(n + 1)).is_ok();
        if joined {
            self.joined_total.fetch_add(1, Ordering::Relaxed);
        }
        joined
    }

    /// Joins the line while weir is not busy and the cap is the adaptive limit: any body
    /// may wait, with no bound, and after the wait it is let in whatever the limit
    /// ([`Admission::admit_waited`]). A calm machine thus refuses nothing for concurrency
    /// (a bound here would refuse work that waits on I/O, where more requests are in
    /// flight than the limit has learnt yet), while a crowd arriving at once (a storm's first
    /// moments, before the CPU level shows it) is served a few at a time for one wait
    /// instead of all sharing the cores at once. Pair a true with [`Admission::leave_line`].
    pub fn join_line_calm(&self, now: u64, p: Pressure) -> bool {
        if !self.adaptive.load(Ordering::Relaxed) || self.busy(p, now) {
            return false;
        }
        self.waiting.fetch_add(1, Ordering::AcqRel);
        self.joined_total.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// The effective cores the layers were made for.
    pub fn cores(&self) -> f64 {
        self.cores
    }

    /// Whether the in-flight cap is the adaptive limit.
    pub fn adaptive(&self) -> bool {
        self.adaptive.load(Ordering::Relaxed)
    }

    /// Requests that joined the line since start.
    pub fn joined_total(&self) -> u64 {
        self.joined_total.load(Ordering::Relaxed)
    }

    /// Leaves the line joined with [`Admission::join_line`].
    pub fn leave_line(&self) {
        self.waiting.fetch_sub(1, Ordering::AcqRel);
    }

    /// Whether there is a line for the core (an in-flight cap, and `max_inflight_wait` to
    /// wait for it) and nobody waits in it: a request admitted now, or one that waits, is
    /// next on the core.
    pub fn line_empty(&self) -> bool {
        self.waiting.load(Ordering::Acquire) <= 0 && self.cap.load(Ordering::Relaxed) > 0 && !self.inflight_wait().is_zero()
    }

    /// Whether a core has nothing to do: fewer requests in flight than effective cores
    /// (rounded up) and none waiting for a slot.
    pub fn core_idle(&self) -> bool {
        self.waiting.load(Ordering::Acquire) <= 0 && (self.inflight.load(Ordering::Acquire) as f64) < self.cores.ceil().max(1.0)
    }

    /// Requests admitted since start.
    pub fn admitted_total(&self) -> u64 {
        self.admitted_total.load(Ordering::Relaxed)
    }

    /// Requests admitted and not yet done.
    pub fn inflight(&self) -> i64 {
        self.inflight.load(Ordering::Relaxed)
    }

    /// Layer 0: a wait in front of weir longer than `queue_delay.target` is refused while
    /// busy and every core has an admitted request in flight. Else it is a stall, or a
    /// flood where every request waited: refusing it would leave a core with no goodput
    /// (`docs/overload.md#admission-layers`).
    pub fn check_queue_delay(&self, waited_nanos: u64, p: Pressure) -> Result<(), Layer> {
        let cfg = self.cfg.load();
        if !cfg.queue_delay.enabled || waited_nanos <= self.queue_delay_target_in(&cfg).as_nanos() as u64 {
            return Ok(());
        }
        let cores_busy = self.inflight.load(Ordering::Relaxed) as f64 >= self.cores.ceil().max(1.0);
        if pressed(&cfg, p) && cores_busy {
            return Err(Layer::QueueDelay);
        }
        Ok(())
    }

    /// Decides for one request at `now`.
    pub fn admit(&self, now: u64, p: Pressure) -> Result<Ticket, Layer> {
        self.admit_inner(now, p, false)
    }

    /// [`Admission::admit`] for a request whose wait in the line ran out: the adaptive
    /// limit holds it back only while busy (see [`Admission::join_line_calm`]).
    pub fn admit_waited(&self, now: u64, p: Pressure) -> Result<Ticket, Layer> {
        self.admit_inner(now, p, true)
    }

    fn admit_inner(&self, now: u64, p: Pressure, waited: bool) -> Result<Ticket, Layer> {
        let inflight = self.inflight.load(Ordering::Relaxed);
        let cap = self.cap.load(Ordering::Relaxed);
        // The adaptive limit: refuses while busy; while calm, a request over it waits its
        // turn in the line (`join_line_calm`) and is let in when the wait ends.
        let adaptive = self.adaptive.load(Ordering::Relaxed);
        let capped = cap > 0 && (!adaptive || !waited || self.busy(p, now));
        if capped && inflight >= cap {
            // Arrivals over the limit while it is in force keep it in force: when the
            // limit itself is what holds the load back, the CPU may well look idle.
            if adaptive && now < self.busy_until.load(Ordering::Relaxed) {
                self.extend_busy(now);
            }
            return Err(Layer::InflightCap);
        }
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        // Read again and counted under the lock: requests admitted at the same moment on
        // other threads must see each other, or all of them would find the core idle.
        let inflight = self.inflight.load(Ordering::Relaxed);
        if capped && inflight >= cap {
            return Err(Layer::InflightCap);
        }
        st.arrival.add(now, 1.0);
        let sec = now / SEC;
        if sec != st.second {
            st.second = sec;
            st.admitted_this_second = 0.0;
        }
        let verdict = self.layers(&mut st, now, p, inflight);
        if verdict.is_ok() {
            st.admitted_this_second += 1.0;
            st.limit.admitted(inflight + 1);
            self.inflight.fetch_add(1, Ordering::Relaxed);
            drop(st);
            self.admitted_total.fetch_add(1, Ordering::Relaxed);
        }
        verdict.map(|()| Ticket { start: now, bytes: 0 })
    }

    /// Whether the adaptive limit is enforced: some water level is above its exit line,
    /// or the CPU is right now, or was in the last [`BUSY_HOLD`] (extended by every
    /// arrival over the limit while it is in force). On a calm machine
    /// nothing is refused for concurrency. The hold keeps the limit in force through the
    /// dips it causes itself: a limit too low for the moment (work that waits on I/O)
    /// leaves the CPU idle, and dropping it then would let in a flood that the next sample
    /// refuses again, so the limit would never see the calm windows it needs to rise.
    fn busy(&self, p: Pressure, now: u64) -> bool {
        if pressed(&self.cfg.load(), p) {
            self.extend_busy(now);
            return true;
        }
        now < self.busy_until.load(Ordering::Relaxed)
    }

    /// Keeps the limit in force for [`BUSY_HOLD`] from `now`. Written at most every
    /// 100 ms: every request of a busy weir passes here, and one shared cache line
    /// written by all of them would cost more than the hold is worth.
    fn extend_busy(&self, now: u64) {
        let until = now.saturating_add(BUSY_HOLD);
        if self.busy_until.load(Ordering::Relaxed) + SEC / 10 < until {
            self.busy_until.store(until, Ordering::Relaxed);
        }
    }

    fn layers(&self, st: &mut State, now: u64, p: Pressure, inflight: i64) -> Result<(), Layer> {
        let cfg = self.cfg.load();
        let arrival_rate = st.arrival.max_sum(now) * st.arrival.buckets_per_second();
        // The rate caps (slow start, burst damping) count admissions per second, so once a
        // second's share is spent everything is refused until the next one, and with the
        // in-flight cap a core would idle out the rest of the second, goodput lost. A
        // request that finds a core with nothing in flight costs no other request any
        // latency, so the caps refuse only while every core has one
        // (docs/overload.md#admission-layers).
        let cores_busy = inflight as f64 >= self.cores.ceil().max(1.0);
        // 2. Slow start, re-entered when the pass window has gone sparse.
        let ss = &cfg.slow_start;
        if ss.enabled {
            if st.warmup_start.is_none() && now.saturating_sub(st.last_sparse_check) >= SEC / 10 {
                st.last_sparse_check = now;
                let active = st.pass.active_buckets(now) as f64 / st.pass.size() as f64;
                if active < 0.3 {
                    st.warmup_start = Some(now);
                }
            }
            if let Some(start) = st.warmup_start {
                let progress = (now - start) as f64 / ss.duration.as_nanos() as f64;
                if progress >= 1.0 {
                    st.warmup_start = None;
                    st.warmup_done_once = true;
                } else {
                    let allowed = ramp(ss.initial_rate, arrival_rate.max(ss.initial_rate), progress);
                    if p.above_exit && cores_busy && st.admitted_this_second >= allowed {
                        return Err(Layer::SlowStart);
                    }
                }
            }
        }
        // 3. Burst damping, only once slow start has finished (it needs a baseline).
        let bd = &cfg.burst_damping;
        if bd.enabled && st.warmup_done_once && st.warmup_start.is_none() {
            let baseline = st.pass.max_sum(now) * st.pass.buckets_per_second();
            let duration = (ss.duration / 2).max(std::time::Duration::from_secs(5)).as_nanos() as f64;
            if st.damping.is_none() && baseline > 0.0 && arrival_rate > bd.ratio * baseline {
                st.damping = Some((now, baseline));
            }
            if let Some((start, base)) = st.damping {
                let progress = (now - start) as f64 / duration;
                if progress >= 1.0 {
                    st.damping = None;
                } else if p.above_exit && cores_busy && st.admitted_this_second >= ramp(base, base * bd.ratio, progress) {
                    return Err(Layer::BurstDamping);
                }
            }
        }
        // 4. BBR.
        if cfg.bbr.enabled {
            let max_pass = st.pass.max_sum(now);
            if let Some(min_rt_ms) = st.rt.min_avg(now) {
                let max_inflight =
                    (cfg.bbr.headroom * max_pass * min_rt_ms.max(1e-3) * st.pass.buckets_per_second() / 1000.0).ceil() as i64;
                let over = inflight > max_inflight.max(1);
                if p.above_enter && over {
                    st.last_drop = Some(now);
                    return Err(Layer::Bbr);
                }
                let cooling = st.last_drop.is_some_and(|d| now.saturating_sub(d) <= cfg.bbr.cool_off.as_nanos() as u64);
                if cooling && p.above_exit && inflight > 1 && over {
                    return Err(Layer::Bbr);
                }
            }
        }
        // 5. The PID rate: updated once per sample interval from the CPU level, enforced
        //    as a token bucket of a tenth of a second's worth.
        if cfg.pid.enabled {
            let period = (cfg.sample_interval.as_nanos() as u64).max(1);
            if now.saturating_sub(st.pid_at) >= period {
                let dt = now.saturating_sub(st.pid_at) as f64 / 1e9;
                st.pid_at = now;
                let passing = st.recent_pass.max_sum(now) * st.recent_pass.buckets_per_second();
                let rate = st.pid.update(&cfg.pid, p.cpu, dt, passing);
                self.pid_gauge.set(rate.unwrap_or(0.0));
            }
            if let Some(rate) = st.pid.rate() {
                let elapsed = now.saturating_sub(st.pid_refill) as f64 / 1e9;
                st.pid_refill = now;
                st.pid_tokens = (st.pid_tokens + rate * elapsed).min((rate / 10.0).max(1.0));
                if st.pid_tokens >= 1.0 {
                    st.pid_tokens -= 1.0;
                } else if p.above_exit {
                    return Err(Layer::Pid);
                }
            }
        }
        Ok(())
    }

    /// The PID controller's allowed rate (while it limits) and its last error.
    pub fn pid_state(&self) -> (Option<f64>, f64) {
        let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        (st.pid.rate(), st.pid.last_error)
    }

    /// Records a finished request: in-flight down, pass and RT windows, knee sample.
    pub fn done(&self, ticket: Ticket, now: u64, cpu: f64) {
        self.inflight.fetch_sub(1, Ordering::Relaxed);
        let rt_ms = now.saturating_sub(ticket.start) as f64 / 1e6;
        {
            let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
            st.pass.add(now, 1.0);
            st.recent_pass.add(now, 1.0);
            if ticket.bytes > 0 {
                st.recent_bytes.add(now, ticket.bytes as f64);
            }
            st.rt.add(now, rt_ms);
            // The in-flight count as the request leaves counts for its window too: a window
            // that drains a long queue is not a calm one, however few it admitted.
            st.limit.admitted(self.inflight.load(Ordering::Relaxed) + 1);
            if st.limit.sample(now, now.saturating_sub(ticket.start)) {
                if self.adaptive.load(Ordering::Relaxed) {
                    self.cap.store(st.limit.limit(), Ordering::Relaxed);
                }
                let calm = st.limit.calm_nanos();
                self.derived_wait.store(limit::inflight_wait(calm).as_nanos() as u64, Ordering::Relaxed);
                self.derived_queue_delay.store(limit::queue_delay_target(calm).as_nanos() as u64, Ordering::Relaxed);
            }
        }
        if let Some(k) = &self.knee {
            k.record(now, cpu, rt_ms);
        }
    }

    /// How long to hold a refusal (`hold`, see [`crate::config::admission::HoldConfig`])
    /// when `held` refusals are held right now, this one included: held ÷ (return_ratio
    /// × completions per second), so that the held clients come back at about
    /// return_ratio × the rate weir completes work; at most `hold.max`. The completion
    /// rate is BBR's max-pass estimate over the last second only (its busiest 100 ms
    /// bucket): the rate changes at once when the requests change size, and a 10 s window
    /// would remember a faster past and hold too briefly. With nothing completed in that
    /// second there is no rate to keep busy and the hold is the longest allowed. Zero
    /// (answer at once) when holding is off or `held` is past `hold.max_held`.
    ///
    /// `deadline` is how long the client waits for its answer, when the request says
    /// (`grpc-timeout`): then the bound is `hold.deadline_share` of it (at most 60 s)
    /// instead of `hold.max`, less the jitter [`HOLD_JITTER`] can add, so that the jittered
    /// hold still ends inside that, and the returns are reckoned at
    /// `hold.deadline_return_ratio` when it is set.
    ///
    /// `declared` is the refused request's body length, when its headers state one. Then
    /// the rate is also reckoned for requests of that size, completed bytes per second ÷
    /// `declared`, and the lower of the two counts. A second of completions still
    /// remembers the requests before a change, so when the bodies grow the first herd
    /// would be held for the small bodies' rate and come straight back. Completed bytes over the same second are the small bodies'
    /// bytes too, but divided by the large size they give a rate at most that low. A hold
    /// too long costs little while the admitted clients come straight back (they keep
    /// the core busy), and a core left idle answers held refusals early.
    pub fn hold_for(&self, now: u64, held: usize, declared: Option<u64>, deadline: Option<std::time::Duration>) -> std::time::Duration {
        let cfg = self.cfg.load();
        let h = &cfg.hold;
        if !h.enabled || held > h.max_held {
            return std::time::Duration::ZERO;
        }
        let (max, return_ratio) = match deadline {
            Some(d) if h.deadline_share > 0.0 => (
                d.mul_f64(h.deadline_share).min(std::time::Duration::from_secs(60)).div_f64(1.0 + HOLD_JITTER),
                h.deadline_return_ratio.unwrap_or(h.return_ratio),
            ),
            _ => (h.max, h.return_ratio),
        };
        let rate = {
            let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
            let per_second = st.recent_pass.buckets_per_second();
            let requests = st.recent_pass.max_sum(now) * per_second;
            match declared {
                Some(len) if len > 0 => {
                    let bytes = st.recent_bytes.max_sum(now) * per_second;
                    if bytes > 0.0 {
                        requests.min(bytes / len as f64)
                    } else {
                        requests
                    }
                }
                _ => requests,
            }
        };
        if rate <= 0.0 {
            return max;
        }
        std::time::Duration::try_from_secs_f64(held as f64 / (return_ratio * rate)).map_or(max, |d| d.min(max))
    }

    /// `hold.max_held`: past this many held at once, a refusal is answered at once.
    pub fn max_held(&self) -> usize {
        self.cfg.load().hold.max_held
    }

    /// Current BBR estimate (for /debug/throttle): (max in-flight, in-flight).
    pub fn bbr_estimate(&self, now: u64) -> (Option<i64>, i64) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let max_pass = st.pass.max_sum(now);
        let bps = st.pass.buckets_per_second();
        let headroom = self.cfg.load().bbr.headroom;
        let est = st.rt.min_avg(now).map(|rt| (headroom * max_pass * rt.max(1e-3) * bps / 1000.0).ceil() as i64);
        (est, self.inflight())
    }

    /// Whether slow start is ramping / damping is active (for /debug/throttle).
    pub fn phases(&self) -> (bool, bool) {
        let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        (st.warmup_start.is_some(), st.damping.is_some())
    }
}

#[cfg(test)]
mod tests;
