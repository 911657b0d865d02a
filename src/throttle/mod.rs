//! The adaptive throttle: cgroup water levels, per-record-type state
//! machines, and a decision taken before a request body is read or decompressed.
//!
//! - [`cgroup`] reads capacity and usage (v1, v2, hybrid);
//! - [`sampler`] turns readings into water levels and steps the [`state`] machines
//!   (each a set of [`slot`]s), publishing an immutable [`manager::Snapshot`];
//! - [`manager::decide`] is the pure decision; its tower glue, shared by HTTP and
//!   gRPC, is `receiver::middleware::throttle`; [`classify`] maps routes to record types.

pub mod cgroup;
pub mod classify;
pub mod conns;
pub mod debug;
pub mod manager;
pub mod metrics;
pub mod retry;
pub mod sampler;
pub mod slot;
pub mod state;

use crate::admission::{Admission, Ticket};
use crate::config::ThrottleConfig;
use manager::ThrottleManager;
use std::cell::Cell;
use std::sync::Arc;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// One immutable set of water levels.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct WaterLevel {
    /// CPU use over the last interval / effective cores (may exceed 1).
    pub cpu: f64,
    /// Slow EWMA of `cpu` (drives Shedding).
    pub cpu_slow: f64,
    /// Fast EWMA of `cpu` (drives Open).
    pub cpu_fast: f64,
    /// Whether CPU usage could be read.
    pub cpu_valid: bool,
    /// Working set / limit, unsmoothed.
    pub mem: f64,
    /// False when there is no memory limit (or it cannot be read).
    pub mem_valid: bool,
    /// The CPU denominator.
    pub effective_cores: f64,
    /// Whether a CPU quota set `effective_cores`.
    pub quota_set: bool,
    /// Working set in bytes.
    pub mem_working_set_bytes: u64,
    /// The memory limit, if any.
    pub mem_limit_bytes: Option<u64>,
    /// The disk queue's fill ratio.
    pub disk: f64,
    /// False without a disk queue.
    pub disk_valid: bool,
}

thread_local! {
    static RNG: Cell<u64> = Cell::new({
        let addr = &RNG as *const _ as u64;
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        (addr ^ t) | 1
    });
}

/// A uniform draw in [0, 1) from a thread-local xorshift64*: no locks, no allocation.
pub fn uniform() -> f64 {
    RNG.with(|c| {
        let mut x = c.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        c.set(x);
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    })
}

/// The running throttle: its manager and (when enabled) its sampler.
pub struct Throttle {
    /// Shared by the adapters and the admin server.
    pub manager: Arc<ThrottleManager>,
    /// The admission layers, after the throttle's decision.
    pub admission: Arc<AdmissionClock>,
    /// The cgroup reader (for `/debug/throttle`).
    pub reader: Option<cgroup::CgroupReader>,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
    idle_task: Option<JoinHandle<()>>,
    reloads: watch::Sender<ThrottleConfig>,
}

impl Throttle {
    /// Builds the manager and, when enabled, starts the sampler.
    pub fn start(config: &ThrottleConfig, auth: &crate::config::AuthConfig, conns: Arc<dyn conns::ConnSource>) -> Throttle {
        let reader = config.enabled.then(|| cgroup::CgroupReader::discover(&config.cgroup_root, config.signal.fallback_cores));
        let config = &with_memory_lines(config, reader.as_ref().and_then(|r| r.memory()).and_then(|m| m.limit));
        let manager = Arc::new(ThrottleManager::new(config).with_tenants(auth));
        let (stop, stopped) = watch::channel(false);
        let Some(reader) = reader else {
            tracing::info!("throttle disabled: admitting everything, no sampler");
            let admission = Arc::new(AdmissionClock::new(Admission::new(config, 1.0), false));
            let (reloads, _) = watch::channel(config.clone());
            return Throttle { manager, admission, reader: None, stop, task: None, idle_task: None, reloads };
        };
        let cap = reader.cpu_capacity();
        let admission = Arc::new(AdmissionClock::new(Admission::new(config, cap.cores), true));
        let mem = reader.memory();
        tracing::info!(
            layout = ?reader.layout(),
            effective_cores = cap.cores,
            cpu_source = ?reader.cpu_source(),
            mem_limit_bytes = mem.and_then(|m| m.limit),
            "throttle sampler starting"
        );
        if mem.and_then(|m| m.limit).is_none() {
            tracing::info!("no cgroup memory limit found: the memory signal is invalid, CPU alone drives the throttle");
        }
        metrics::set_thresholds(config);
        let knee = admission.inner.knee.clone().map(|k| (k, admission.origin));
        let (reloads, reload_rx) = watch::channel(config.clone());
        let idle_task = tokio::spawn(release_when_idle(Arc::clone(&admission), stopped.clone()));
        let task =
            tokio::spawn(sampler::run(Arc::clone(&manager), reader.clone(), config.clone(), knee, Arc::clone(&conns), reload_rx, stopped));
        Throttle { manager, admission, reader: Some(reader), stop, task: Some(task), idle_task: Some(idle_task), reloads }
    }

    /// Applies a reloaded `receiver.throttle` and tenants: the policy swaps atomically,
    /// the sampler and admission layers take the new parameters and keep their state.
    /// Turning the throttle on when it started disabled needs a restart (no sampler runs).
    pub fn reload(&self, config: &ThrottleConfig, auth: &crate::config::AuthConfig) {
        let config = &with_memory_lines(config, self.reader.as_ref().and_then(|r| r.memory()).and_then(|m| m.limit));
        self.manager.reload(config, auth);
        self.admission.inner.reconfigure(config);
        let _ = self.reloads.send(config.clone());
    }

    /// Stops the sampler.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for t in [self.task, self.idle_task].into_iter().flatten() {
            let _ = t.await;
        }
    }
}

/// `config` with its memory lines for a container of `limit` bytes
/// (`thresholds.mem_headroom_bytes`), logged when they move.
fn with_memory_lines(config: &ThrottleConfig, limit: Option<u64>) -> ThrottleConfig {
    let mut c = config.clone();
    let mem = config.thresholds.mem_for(limit);
    if mem != config.thresholds.mem {
        tracing::info!(
            enter = mem.enter,
            exit = mem.exit,
            hard = mem.hard,
            headroom_bytes = config.thresholds.mem_headroom_bytes,
            "memory lines lowered to keep room above the hard line"
        );
    }
    c.thresholds.mem = mem;
    c
}

/// The admission layers with their real-time clock: nanoseconds since `origin`.
#[derive(Debug)]
pub struct AdmissionClock {
    /// The layers.
    pub inner: Admission,
    /// Time zero.
    pub origin: std::time::Instant,
    /// False when the throttle is disabled (then the layers are skipped).
    pub enabled: bool,
    /// Woken once per finished request, for requests waiting on the in-flight cap.
    pub freed: tokio::sync::Notify,
    /// Wakes the longest-held refusal early: a core went idle (see [`release_when_idle`]).
    pub idle: tokio::sync::Notify,
    /// Refusals being held right now (`hold`).
    held: std::sync::atomic::AtomicUsize,
    /// Unread HTTP/1.1 body bytes the held refusals leave in weir's sockets, as reckoned
    /// for `hold.max_held_bytes`.
    held_bytes: std::sync::atomic::AtomicU64,
    /// `weir_throttle_refusals_held`, `weir_throttle_held_bytes`,
    /// `weir_throttle_hold_seconds` and `weir_throttle_holds_skipped_total`, registered once.
    held_gauge: ::metrics::Gauge,
    held_bytes_gauge: ::metrics::Gauge,
    hold_seconds: ::metrics::Histogram,
    skipped: [::metrics::Counter; 3],
}

/// A refusal to hold (see [`AdmissionClock::hold`]).
pub struct Hold {
    /// How long.
    pub duration: std::time::Duration,
    /// Counts it as held until dropped.
    pub guard: HeldGuard,
}

/// Why a refusal that could have been held was answered at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldSkip {
    /// `hold.max_held` refusals are held already.
    MaxHeld,
    /// Its body, too large to read away first, would take the unread bytes past
    /// `hold.max_held_bytes` (or the automatic room).
    HeldBytes,
    /// Memory is above its enter line.
    Memory,
}

impl HoldSkip {
    const ALL: [HoldSkip; 3] = [HoldSkip::MaxHeld, HoldSkip::HeldBytes, HoldSkip::Memory];

    /// The `reason` label.
    pub fn as_str(self) -> &'static str {
        match self {
            HoldSkip::MaxHeld => "max_held",
            HoldSkip::HeldBytes => "held_bytes",
            HoldSkip::Memory => "memory",
        }
    }
}

impl AdmissionClock {
    /// Wraps layers with a clock starting now.
    pub fn new(inner: Admission, enabled: bool) -> Self {
        AdmissionClock {
            inner,
            origin: std::time::Instant::now(),
            enabled,
            freed: tokio::sync::Notify::new(),
            idle: tokio::sync::Notify::new(),
            held: std::sync::atomic::AtomicUsize::new(0),
            held_bytes: std::sync::atomic::AtomicU64::new(0),
            held_gauge: ::metrics::gauge!(metrics::HELD),
            held_bytes_gauge: ::metrics::gauge!(metrics::HELD_BYTES),
            hold_seconds: ::metrics::histogram!(metrics::HOLD_SECONDS),
            skipped: HoldSkip::ALL.map(|r| ::metrics::counter!(metrics::HOLDS_SKIPPED, "reason" => r.as_str())),
        }
    }

    /// Counts a refusal answered at once that could have been held.
    pub fn skipped(&self, why: HoldSkip) {
        self.skipped[why as usize].increment(1);
    }

    /// Refusals held right now and the unread body bytes they leave in weir's sockets.
    pub fn held_now(&self) -> (usize, u64) {
        use std::sync::atomic::Ordering;
        (self.held.load(Ordering::Acquire), self.held_bytes.load(Ordering::Acquire))
    }

    /// Starts holding a refusal: how long, and the guard that counts it as held until
    /// dropped. `None`: answer at once (holding off, too many held, no room for its
    /// unread body, or a hold under a millisecond, the timer's resolution). The hold is
    /// [`Admission::hold_for`] with ±25% jitter, so that clients refused together do not
    /// all come back together; `declared` is the refused request's body length, when
    /// known, and `deadline` how long its client waits, when the request says. `unread`
    /// is what the held request leaves unread in weir's socket (an HTTP/1.1 body too
    /// large to read away first; 0 otherwise), counted against `room`
    /// (`hold.max_held_bytes`; `None`, no bound) until the guard drops.
    pub fn hold(
        self: &Arc<Self>,
        declared: Option<u64>,
        deadline: Option<std::time::Duration>,
        unread: u64,
        room: Option<u64>,
    ) -> Option<Hold> {
        use std::sync::atomic::Ordering;
        // Most holds leave nothing unread (HTTP/2, bodies read during the hold): no byte
        // accounting for them.
        if unread > 0 {
            let before = self.held_bytes.fetch_add(unread, Ordering::AcqRel);
            if room.is_some_and(|room| before.saturating_add(unread) > room) {
                self.held_bytes.fetch_sub(unread, Ordering::AcqRel);
                self.skipped(HoldSkip::HeldBytes);
                return None;
            }
        }
        let held = self.held.fetch_add(1, Ordering::AcqRel) + 1;
        let jitter = 1.0 + crate::admission::HOLD_JITTER * (2.0 * rand::random::<f64>() - 1.0);
        let d = self.inner.hold_for(self.now(), held, declared, deadline).mul_f64(jitter);
        if d < std::time::Duration::from_millis(1) {
            self.held.fetch_sub(1, Ordering::AcqRel);
            self.release_bytes(unread);
            if held > self.inner.max_held() {
                self.skipped(HoldSkip::MaxHeld);
            }
            return None;
        }
        self.held_gauge.increment(1.0);
        if unread > 0 {
            self.held_bytes_gauge.increment(unread as f64);
        }
        self.hold_seconds.record(d.as_secs_f64());
        Some(Hold { duration: d, guard: HeldGuard { clock: Arc::clone(self), unread } })
    }

    /// Gives back `unread` bytes counted by [`AdmissionClock::hold`].
    fn release_bytes(&self, unread: u64) {
        if unread > 0 {
            self.held_bytes.fetch_sub(unread, std::sync::atomic::Ordering::AcqRel);
        }
    }

    /// Nanoseconds since `origin`.
    pub fn now(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }
}

/// How often [`release_when_idle`] looks: the longest a core stays idle while refusals
/// are held.
const IDLE_CHECK: std::time::Duration = std::time::Duration::from_millis(10);

/// Answers the longest-held refusal early when a core is free at a check (every
/// [`IDLE_CHECK`]), or when every core is busy and nobody waits in the line for the next
/// slot (see [`IdleRelease::step`]); while weir admits nothing between checks, twice as
/// many on each next check (at most 64). A hold is sized from the recent completion rate,
/// so when the clients being served are refused in turn or go away, too few held clients
/// come back and the core would idle. One release per check is at most 100 early answers
/// a second; the doubling runs only while weir is wholly idle, since releasing at every
/// free instant of a busy core turns the released clients into a stream of refusals.
/// Released, a client that retries at once finds the core free; one that honours
/// Retry-After is told what is left of its delay. (Measurements:
/// `docs/overload.md#measurements-behind-the-defaults`.)
async fn release_when_idle(admission: Arc<AdmissionClock>, mut stop: watch::Receiver<bool>) {
    let mut release = IdleRelease::default();
    let mut last_admitted = admission.inner.admitted_total();
    let mut last_joined = admission.inner.joined_total();
    let mut tick = tokio::time::interval(IDLE_CHECK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut checks = 0u32;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        // The derived values' gauges, about once a sample interval.
        checks = checks.wrapping_add(1);
        if checks % 25 == 1 {
            metrics::derived(&admission.inner.derived());
        }
        // Quiet: nothing admitted since the last check.
        let admitted = admission.inner.admitted_total();
        let quiet = admitted == last_admitted;
        last_admitted = admitted;
        let held = admission.held.load(std::sync::atomic::Ordering::Acquire);
        // The line counts as empty only if nobody joined it since the last check: the
        // clients being served come back to it on their own, and one let back ahead of
        // them would take their place and refuse one whose body is already on its way.
        let joined = admission.inner.joined_total();
        let line_empty = joined == last_joined && admission.inner.line_empty();
        last_joined = joined;
        let idle = held > 0 && admission.inner.core_idle();
        let n = release.step(idle, held > 0 && line_empty, quiet).min(held);
        for _ in 0..n {
            admission.idle.notify_one();
        }
        if n > 0 {
            ::metrics::counter!(metrics::HOLDS_RELEASED, "why" => if idle { "idle_core" } else { "empty_line" }).increment(n as u64);
        }
    }
}

/// The idle release's rule, one check at a time (shared with the simulator): answer one
/// held refusal at a check that finds a core free, and twice as many at each next one
/// while nothing is admitted in between, at most [`IdleRelease::MAX`]. The longest-held
/// are often clients that have gone away (they are answered first): while nothing is
/// admitted, more are released until one takes the core.
#[derive(Debug, Clone, Copy)]
pub struct IdleRelease {
    next: usize,
}

impl Default for IdleRelease {
    fn default() -> Self {
        IdleRelease { next: 1 }
    }
}

impl IdleRelease {
    /// The most released at one check.
    pub const MAX: usize = 64;

    /// How many held refusals to answer at this check: `idle`, a core is free;
    /// `line_empty`, every core is busy but a request may wait for the next slot, none
    /// does and none joined since the last check; `quiet`, nothing was admitted since the
    /// last check. A busy core with an empty line gets one: a client that retries at once
    /// waits in the line and the core goes straight on to it, as a calm mix of clients
    /// keeps a request ready behind the one being served; otherwise the line empties each
    /// time its waiting request is refused in turn and the core idles until a hold runs
    /// out. A line someone joined since the last check counts as busy, so a released
    /// client does not take the place of one being served (measurements:
    /// `docs/overload.md#measurements-behind-the-defaults`).
    pub fn step(&mut self, idle: bool, line_empty: bool, quiet: bool) -> usize {
        let n = if idle { self.next } else { usize::from(line_empty) };
        self.next = if idle && quiet { (self.next * 2).min(Self::MAX) } else { 1 };
        n
    }
}

/// Counts one refusal, and the body bytes it leaves unread, as held until dropped.
pub struct HeldGuard {
    clock: Arc<AdmissionClock>,
    unread: u64,
}

impl HeldGuard {
    /// Resolves when a core went idle and this refusal is the one to answer now.
    pub async fn released_early(&self) {
        self.clock.idle.notified().await;
    }
}

impl Drop for HeldGuard {
    fn drop(&mut self) {
        self.clock.held.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        self.clock.held_gauge.decrement(1.0);
        if self.unread > 0 {
            self.clock.release_bytes(self.unread);
            self.clock.held_bytes_gauge.decrement(self.unread as f64);
        }
    }
}

/// Calls [`Admission::done`] when dropped: when the response is ready, or when the
/// request is cancelled, so in-flight never leaks.
pub struct DoneGuard {
    admission: Arc<AdmissionClock>,
    ticket: Ticket,
    manager: Arc<ThrottleManager>,
}

impl DoneGuard {
    /// Guards an admitted request.
    pub fn new(admission: Arc<AdmissionClock>, ticket: Ticket, manager: Arc<ThrottleManager>) -> Self {
        DoneGuard { admission, ticket, manager }
    }
}

impl Drop for DoneGuard {
    fn drop(&mut self) {
        let cpu = self.manager.snapshot_level_cpu();
        self.admission.inner.done(self.ticket, self.admission.now(), cpu);
        // One slot freed: one waiter (if any) tries again.
        self.admission.freed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn clock() -> Arc<AdmissionClock> {
        // No in-flight cap, so no line: only an idle core releases early here.
        let mut c = ThrottleConfig { max_inflight_per_core: crate::config::auto::Auto::Set(0.0), ..ThrottleConfig::default() };
        c.hold.max = Duration::from_secs(30);
        Arc::new(AdmissionClock::new(Admission::new(&c, 1.0), true))
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_refusal_is_answered_early_when_the_core_is_idle_and_not_while_it_is_busy() {
        let adm = clock();
        let (_stop, stop_rx) = watch::channel(false);
        tokio::spawn(release_when_idle(Arc::clone(&adm), stop_rx));

        // Busy: one request in flight on the one core. The refusal stays held.
        let ticket = adm.inner.admit(adm.now(), crate::admission::Pressure::default()).expect("an idle weir admits");
        let (hold, guard) = adm.hold(None, None, 0, None).map(|h| (h.duration, h.guard)).expect("held");
        assert!(hold >= Duration::from_secs(20), "nothing completed yet: the longest hold, jittered: {hold:?}");
        assert!(tokio::time::timeout(Duration::from_secs(1), guard.released_early()).await.is_err(), "released while busy");

        // The request ends: within a check or two the refusal is answered.
        adm.inner.done(ticket, adm.now(), 0.5);
        let started = tokio::time::Instant::now();
        tokio::time::timeout(Duration::from_secs(1), guard.released_early()).await.expect("released once idle");
        assert!(started.elapsed() <= 2 * IDLE_CHECK, "released after {:?}", started.elapsed());
    }

    #[tokio::test(start_paused = true)]
    async fn with_a_line_a_held_refusal_is_answered_early_while_nobody_waits_in_it() {
        let mut c = ThrottleConfig::default();
        c.hold.max = Duration::from_secs(30);
        c.max_inflight_per_core = crate::config::auto::Auto::Set(1.0);
        c.max_inflight_wait = crate::config::auto::Auto::Set(Duration::from_millis(20));
        c.max_inflight_queue_per_core = 1.0;
        let adm = Arc::new(AdmissionClock::new(Admission::new(&c, 1.0), true));
        let (_stop, stop_rx) = watch::channel(false);
        tokio::spawn(release_when_idle(Arc::clone(&adm), stop_rx));

        // The core is busy and a request waits for it: the refusal stays held.
        let _ticket = adm.inner.admit(adm.now(), crate::admission::Pressure::default()).expect("an idle weir admits");
        assert!(adm.inner.join_line(None), "room in the line");
        let guard = adm.hold(None, None, 0, None).expect("held").guard;
        assert!(tokio::time::timeout(Duration::from_secs(1), guard.released_early()).await.is_err(), "released with the line full");

        // Midway between two checks the waiting request leaves the line (refused in turn,
        // or served): the core is still busy, but nothing is ready behind it. Someone
        // joins and leaves again before the next check, so that one lets nobody back; the
        // one after, with nobody having joined, lets one held client back.
        tokio::time::sleep(IDLE_CHECK / 2).await;
        adm.inner.leave_line();
        assert!(adm.inner.join_line(None), "room in the line");
        adm.inner.leave_line();
        let started = tokio::time::Instant::now();
        tokio::time::timeout(Duration::from_secs(1), guard.released_early()).await.expect("released once the line is empty");
        assert!(started.elapsed() > IDLE_CHECK && started.elapsed() <= 2 * IDLE_CHECK, "released after {:?}", started.elapsed());
    }

    #[test]
    fn a_busy_core_with_an_empty_line_lets_one_back_per_check_and_never_doubles() {
        let mut r = IdleRelease::default();
        // Busy, line empty, nothing admitted for a while (one long request): one per check.
        assert_eq!((0..5).map(|_| r.step(false, true, true)).collect::<Vec<_>>(), [1; 5]);
        // Line full: none.
        assert_eq!(r.step(false, false, true), 0);
        // Wholly idle and quiet: 1, 2, 4.
        assert_eq!((0..3).map(|_| r.step(true, true, true)).collect::<Vec<_>>(), [1, 2, 4]);
        // Busy again: back to one, and the doubling starts over.
        assert_eq!(r.step(false, true, true), 1);
        assert_eq!(r.step(true, true, true), 1);
    }

    #[test]
    fn unread_bodies_count_against_their_room_until_their_guards_drop() {
        let adm = clock();
        // Room for two 3 MB bodies: the third is answered at once.
        let room = Some(7_000_000);
        let hold = |unread, room| adm.hold(Some(3_000_000), None, unread, room);
        let a = hold(3_000_000, room).expect("room for the first");
        let b = hold(3_000_000, room).expect("room for the second");
        assert!(hold(3_000_000, room).is_none(), "6 MB held, 3 MB more would pass 7 MB");
        assert_eq!(adm.held_now(), (2, 6_000_000), "the refused one leaves nothing counted");
        // A body read away first, or an HTTP/2 one, leaves nothing: held whatever the room.
        let r = hold(0, Some(0)).expect("nothing unread takes no room");
        assert_eq!(adm.held_now(), (3, 6_000_000));
        drop(a);
        assert_eq!(adm.held_now(), (2, 3_000_000));
        let c = hold(3_000_000, room).expect("room again once one was answered");
        // Without a bound, counted all the same.
        let d = adm.hold(None, None, 5_000_000, None).expect("no bound");
        assert_eq!(adm.held_now(), (4, 11_000_000));
        drop((b, c, d, r));
        assert_eq!(adm.held_now(), (0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn while_nothing_is_admitted_each_check_releases_twice_as_many() {
        let adm = clock();
        let guards: Vec<_> = (0..100).map(|_| adm.hold(None, None, 0, None).expect("held").guard).collect();
        let (_stop, stop_rx) = watch::channel(false);
        tokio::spawn(release_when_idle(Arc::clone(&adm), stop_rx));
        let released = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        for g in guards {
            let released = Arc::clone(&released);
            tokio::spawn(async move {
                g.released_early().await;
                released.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            });
        }
        // Checks at 0, 10, 20, ... ms release 1, 2, 4, 8, 16, 32, 64 (then 64 each).
        tokio::time::sleep(IDLE_CHECK * 5 + IDLE_CHECK / 2).await;
        let n = released.load(std::sync::atomic::Ordering::Relaxed);
        assert!((31..=63).contains(&n), "{n} released after six checks");
        tokio::time::sleep(IDLE_CHECK * 2).await;
        assert_eq!(released.load(std::sync::atomic::Ordering::Relaxed), 100);
    }
}
