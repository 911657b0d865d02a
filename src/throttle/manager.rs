//! The decision: pure, allocation-free, reading one published snapshot.

use super::retry::{delay_for, Delays};
use super::state::State;
use super::WaterLevel;
use crate::config::{Priority, Rule, ThresholdsConfig, ThrottleConfig};
use crate::signal::Signal;
use arc_swap::ArcSwap;
use std::sync::Arc;
use std::time::Duration;

/// What the sampler publishes.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// Water levels.
    pub level: WaterLevel,
    /// State per record type, indexed by [`Signal::index`].
    pub states: [State; 4],
    /// t: the max over active slots of slow's position between enter and hard.
    pub intensity: f64,
    /// Base retry delays.
    pub delays: Delays,
    /// Where the levels stand against the lines, for the admission layers.
    pub pressure: crate::admission::Pressure,
    /// The CPU enter line in force: min(learned knee, configured).
    pub cpu_enter: f64,
    /// The CPU exit line in force (moved down with the enter line, same band width).
    pub cpu_exit: f64,
    /// The knee the learner found, if any.
    pub knee: Option<f64>,
    /// Share of recent classified arrivals per priority class (critical, normal,
    /// sheddable), for shedding lower classes first.
    pub class_share: [f64; 3],
    /// Connections and RTT of both receivers.
    pub conns: super::conns::ConnSample,
    /// The connection signal fired (surge plus RTT degradation) this sample.
    pub conn_surge: bool,
    /// Bytes of unread HTTP/1.1 bodies held refusals may leave in weir's sockets (see
    /// [`super::sampler::hold_room`]); `None`: no bound.
    pub hold_room: Option<u64>,
}

impl Snapshot {
    /// The idle snapshot before the first sample: everything Normal.
    pub fn idle() -> Snapshot {
        Snapshot {
            level: WaterLevel::default(),
            states: [State::Normal; 4],
            intensity: 0.0,
            delays: Delays::default(),
            pressure: crate::admission::Pressure::default(),
            cpu_enter: f64::NAN,
            cpu_exit: f64::NAN,
            knee: None,
            class_share: [0.0, 1.0, 0.0],
            conns: Default::default(),
            conn_surge: false,
            hold_room: None,
        }
    }
}

/// Why a request was admitted or refused (the `reason` metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// State Normal.
    Normal,
    /// Shedding, and the draw let it through.
    SheddingPass,
    /// The rule (or the whole throttle) is disabled.
    Disabled,
    /// Path not registered for any record type.
    Unclassified,
    /// Shed by probability.
    Shed,
    /// Breaker open.
    Open,
    /// Would have been shed, but a core was idle and only the CPU level is high (see
    /// [`spare_idle_core`]).
    IdleCore,
    /// Would have been shed or refused for the CPU alone, and left to the adaptive
    /// in-flight limit instead (see [`spare_shed`]).
    InflightLimit,
}

impl Reason {
    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Normal => "normal",
            Reason::SheddingPass => "shedding_pass",
            Reason::Disabled => "disabled",
            Reason::Unclassified => "unclassified",
            Reason::Shed => "shed",
            Reason::Open => "open",
            Reason::IdleCore => "idle_core",
            Reason::InflightLimit => "inflight_limit",
        }
    }
}

/// The outcome for one request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Decision {
    /// Let it through.
    Admit(Reason),
    /// Refuse it; come back after `retry_after`.
    Reject {
        /// Shed or Open.
        reason: Reason,
        /// Announced delay.
        retry_after: Duration,
    },
}

/// Per-class drop probabilities for an overall drop probability `p`: the
/// volume to drop, p × (sheddable + normal share), comes out of sheddable traffic first,
/// then normal; critical traffic is never shed (only refused when Open). With one class
/// only, that class drops with `p` exactly.
pub fn class_drop(p: f64, share: &[f64; 3], priority: Priority) -> f64 {
    let (s, n) = (share[Priority::Sheddable.index()], share[Priority::Normal.index()]);
    let volume = p * (s + n);
    match priority {
        Priority::Critical => 0.0,
        Priority::Sheddable if s > 0.0 => (volume / s).min(1.0),
        Priority::Normal if n > 0.0 => ((volume - s).max(0.0) / n).min(1.0),
        _ => p,
    }
}

/// Decides for one request. Pure: the snapshot, the rule, the priority and the random
/// draw `u` (uniform in [0, 1)) are all inputs.
pub fn decide(config: &ThrottleConfig, rule: &Rule, snap: &Snapshot, signal: Signal, u: f64) -> Decision {
    decide_with_priority(config, rule, snap, signal, rule.priority, u)
}

/// [`decide`] for a request whose priority may differ from its rule's (a tenant's).
pub fn decide_with_priority(config: &ThrottleConfig, rule: &Rule, snap: &Snapshot, signal: Signal, priority: Priority, u: f64) -> Decision {
    if !rule.enabled {
        return Decision::Admit(Reason::Disabled);
    }
    match snap.states[signal.index()] {
        State::Normal => Decision::Admit(Reason::Normal),
        State::Open => Decision::Reject { reason: Reason::Open, retry_after: delay_for(config, snap.delays.open, u) },
        State::Shedding => {
            let p = class_drop(rule.drop_min + (rule.drop_max - rule.drop_min) * snap.intensity, &snap.class_share, priority);
            if u < p {
                // Reuse the draw for jitter, rescaled to [0, 1).
                let j = if p > 0.0 { u / p } else { 0.0 };
                Decision::Reject { reason: Reason::Shed, retry_after: delay_for(config, snap.delays.shed, j) }
            } else {
                Decision::Admit(Reason::SheddingPass)
            }
        }
    }
}

/// Whether the only water levels above their enter lines are CPU's: memory and the disk
/// queue are not (a slot that is off or cannot measure counts as not above).
pub fn only_cpu_pressed(config: &ThresholdsConfig, level: &WaterLevel) -> bool {
    let mem = config.mem.enabled && level.mem_valid && level.mem > config.mem.enter;
    let disk = config.disk.enabled && level.disk_valid && level.disk > config.disk.enter;
    !mem && !disk
}

/// Whether no class more important than `priority` (critical aside: it is never shed)
/// arrived in the last sample (`share`, per class): then a shed of this class that is let
/// into the core's line takes that place from nobody the throttle would rather serve.
pub fn leads_mix(share: &[f64; 3], priority: Priority) -> bool {
    match priority {
        Priority::Sheddable => share[Priority::Normal.index()] <= 0.0,
        Priority::Normal | Priority::Critical => true,
    }
}

/// Whether a shed would leave a core without work (what [`spare_idle_core`] takes as
/// `core_idle`): a core is idle, or, with a line for the core, nobody waits in it and
/// `leads` (no more important class is arriving, [`leads_mix`]; asked only then).
pub fn core_free(admission: &crate::admission::Admission, leads: impl FnOnce() -> bool) -> bool {
    admission.core_idle() || (admission.line_empty() && leads())
}

/// The rule for a shed, shared by the tower layer and the simulator: [`spare_idle_core`]
/// with [`core_free`] as its idle core, judged on one snapshot. Other decisions pass
/// unchanged; `priority` `None` (a request of no known class) leads any mix.
pub fn spare_shed(
    decision: Decision,
    admission: &crate::admission::Admission,
    thresholds: &ThresholdsConfig,
    snap: &Snapshot,
    priority: Option<Priority>,
) -> Decision {
    if !matches!(decision, Decision::Reject { reason: Reason::Shed | Reason::Open, .. }) {
        return decision;
    }
    let leads = || priority.is_none_or(|p| leads_mix(&snap.class_share, p));
    // With the adaptive in-flight limit, a CPU past its lines says only that the cores are
    // busy, which is what they are for: how much work they take is the limit's call, made
    // from latency, and refusing on top of it would refuse work the limit would take. A
    // more important class arriving still takes precedence: the shed stands.
    if admission.adaptive() && only_cpu_pressed(thresholds, &snap.level) && leads() {
        return Decision::Admit(Reason::InflightLimit);
    }
    let free = core_free(admission, leads);
    spare_idle_core(decision, free, free && only_cpu_pressed(thresholds, &snap.level))
}

/// A shed that would leave a core idle is admitted instead (`Reason::IdleCore`), when
/// only the CPU level is high. The CPU level is a smoothed share of the last seconds, so
/// it stays above its line for a while after the load has stopped being the CPU's: the
/// admission layers may have emptied the core by then, and a shed of a request that finds
/// the core idle refuses work that costs nothing to do (clients that retry at once make
/// this common). The admission layers still judge the request (in-flight cap, BBR, queue
/// delay), so a burst of arrivals finding one idle core does not all get in. Memory and
/// disk pressure are not about idle cores: their sheds stand.
///
/// The same holds for Open when only the CPU put it there: refusing is itself work for
/// the core, so with clients that retry at once the CPU stays at its hard line on
/// refusals alone and Open would refuse everything for as long as the storm lasts. A
/// request that finds a core free is admitted instead and still meets the in-flight
/// limit; Open from memory or the disk stands.
///
/// [`core_free`] counts as idle also a core that is busy while nobody waits in its line
/// (an in-flight cap with `max_inflight_wait`; see [`crate::admission::Admission::line_empty`])
/// if no more important class is arriving ([`leads_mix`]): with a line the in-flight cap
/// already holds the work to what the cores serve, and a shed then only takes away the
/// request that was to be ready behind the one being served, often one whose body is
/// already on its way and would be received only to be thrown away. (Measurements:
/// `docs/overload.md#measurements-behind-the-defaults`.)
pub fn spare_idle_core(decision: Decision, core_idle: bool, only_cpu_pressed: bool) -> Decision {
    match decision {
        Decision::Reject { reason: Reason::Shed | Reason::Open, .. } if core_idle && only_cpu_pressed => Decision::Admit(Reason::IdleCore),
        d => d,
    }
}

/// Counts classified arrivals per priority class between samples.
#[derive(Debug, Default)]
pub struct ClassMix {
    counts: [std::sync::atomic::AtomicU64; 3],
    last: std::sync::Mutex<Option<[f64; 3]>>,
}

impl ClassMix {
    /// Counts one arrival.
    pub fn record(&self, p: Priority) {
        self.counts[p.index()].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// The shares since the last call (the previous shares when nothing arrived).
    pub fn roll(&self) -> [f64; 3] {
        let c = self.counts.each_ref().map(|a| a.swap(0, std::sync::atomic::Ordering::Relaxed) as f64);
        let total: f64 = c.iter().sum();
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if total > 0.0 {
            *last = Some(c.map(|x| x / total));
        }
        last.unwrap_or([0.0, 1.0, 0.0])
    }
}

/// The reloadable part: configuration, resolved rules, tenant priorities.
#[derive(Debug, Clone)]
pub struct Policy {
    /// The throttle block.
    pub config: Arc<ThrottleConfig>,
    /// Resolved rule per record type.
    pub rules: [Rule; 4],
    /// Priority per tenant token.
    pub tenants: std::collections::HashMap<String, Priority>,
}

impl Policy {
    /// Resolves `config` and the tenants' priorities.
    pub fn new(config: &ThrottleConfig, auth: Option<&crate::config::AuthConfig>) -> Self {
        Policy {
            config: Arc::new(config.clone()),
            rules: Signal::ALL.map(|s| config.rules.resolve(s)),
            tenants: auth.map(|a| a.tenants.iter().filter_map(|(t, c)| c.priority.map(|p| (t.clone(), p))).collect()).unwrap_or_default(),
        }
    }
}

/// Holds the policy and the latest snapshot; shared by every adapter. The policy is
/// swapped atomically on reload: each request reads it once, so a request in flight
/// finishes under the settings it started with.
#[derive(Debug)]
pub struct ThrottleManager {
    policy: ArcSwap<Policy>,
    config_hash: std::sync::atomic::AtomicU64,
    snapshot: ArcSwap<Snapshot>,
    /// Arrivals per priority class, rolled into each snapshot by the sampler.
    pub mix: ClassMix,
    /// The disk queue, whose fill is a water level.
    disk: std::sync::OnceLock<Arc<crate::pipeline::disk::DiskQueue>>,
}

impl ThrottleManager {
    /// A manager; `config.enabled == false` gives one that always admits.
    pub fn new(config: &ThrottleConfig) -> Self {
        ThrottleManager {
            policy: ArcSwap::from_pointee(Policy::new(config, None)),
            config_hash: Default::default(),
            snapshot: ArcSwap::from_pointee(Snapshot::idle()),
            mix: ClassMix::default(),
            disk: std::sync::OnceLock::new(),
        }
    }

    /// Watches `queue`'s fill as the `disk` water level.
    pub fn set_disk(&self, queue: Arc<crate::pipeline::disk::DiskQueue>) {
        let _ = self.disk.set(queue);
    }

    /// The disk queue's fill ratio, when there is one.
    pub fn disk_fill(&self) -> Option<f64> {
        self.disk.get().map(|q| q.fill())
    }

    /// With per-tenant priorities (from `receiver.auth.tenants`).
    pub fn with_tenants(self, auth: &crate::config::AuthConfig) -> Self {
        let config = Arc::clone(&self.policy.load().config);
        self.policy.store(Arc::new(Policy::new(&config, Some(auth))));
        self
    }

    /// Replaces the policy (hot reload). The snapshot, state machines and windows live
    /// elsewhere and keep their state.
    pub fn reload(&self, config: &ThrottleConfig, auth: &crate::config::AuthConfig) {
        self.policy.store(Arc::new(Policy::new(config, Some(auth))));
    }

    /// Records the hash of the configuration in force (for /debug/throttle).
    pub fn set_config_hash(&self, h: u64) {
        self.config_hash.store(h, std::sync::atomic::Ordering::Relaxed);
    }

    /// The hash of the configuration in force.
    pub fn config_hash(&self) -> u64 {
        self.config_hash.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A request's priority: its tenant's, else its record type's rule.
    pub fn priority(&self, signal: Signal, tenant: Option<&str>) -> Priority {
        let p = self.policy.load();
        tenant.and_then(|t| p.tenants.get(t).copied()).unwrap_or(p.rules[signal.index()].priority)
    }

    /// Whether the throttle is on.
    pub fn enabled(&self) -> bool {
        self.policy.load().config.enabled
    }

    /// The configuration in force.
    pub fn config(&self) -> Arc<ThrottleConfig> {
        Arc::clone(&self.policy.load().config)
    }

    /// The rule of a record type.
    pub fn rule(&self, signal: Signal) -> Rule {
        self.policy.load().rules[signal.index()]
    }

    /// Replaces the snapshot (sampler only).
    pub fn publish(&self, snapshot: Snapshot) {
        self.snapshot.store(Arc::new(snapshot));
    }

    /// The latest snapshot.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.load_full()
    }

    /// The CPU level of the latest snapshot (for the knee learner).
    pub fn snapshot_level_cpu(&self) -> f64 {
        self.snapshot.load().level.cpu
    }

    /// Whether the memory level of the latest snapshot is above its enter line (false
    /// when the memory slot is off or has no limit to measure against).
    pub fn memory_above_enter(&self) -> bool {
        let level = &self.snapshot.load().level;
        let mem = &self.policy.load().config.thresholds.mem;
        mem.enabled && level.mem_valid && level.mem > mem.enter
    }

    /// [`spare_shed`] on the latest snapshot, loaded once.
    pub fn spare_shed(&self, decision: Decision, admission: &crate::admission::Admission, priority: Option<Priority>) -> Decision {
        // Most decisions are not sheds: they pass before the policy and snapshot are loaded.
        if !matches!(decision, Decision::Reject { reason: Reason::Shed | Reason::Open, .. }) {
            return decision;
        }
        spare_shed(decision, admission, &self.policy.load().config.thresholds, &self.snapshot.load(), priority)
    }

    /// The room for held refusals' unread bodies in the latest snapshot (`None`: no bound).
    pub fn hold_room(&self) -> Option<u64> {
        self.snapshot.load().hold_room
    }

    /// The admission pressure of the latest snapshot.
    pub fn pressure(&self) -> crate::admission::Pressure {
        self.snapshot.load().pressure
    }

    /// Decides for a request of `signal` (None: unclassified path) at its rule's priority.
    pub fn decide(&self, signal: Option<Signal>) -> Decision {
        self.decide_as(signal, None)
    }

    /// Decides for a request of `signal` at `priority` (None: the rule's).
    pub fn decide_as(&self, signal: Option<Signal>, priority: Option<Priority>) -> Decision {
        let Some(signal) = signal else { return Decision::Admit(Reason::Unclassified) };
        let policy = self.policy.load();
        if !policy.config.enabled {
            return Decision::Admit(Reason::Disabled);
        }
        let rule = &policy.rules[signal.index()];
        let priority = priority.unwrap_or(rule.priority);
        self.mix.record(priority);
        let snap = self.snapshot.load();
        // Fast path: Normal needs no random draw.
        if snap.states[signal.index()] == State::Normal && rule.enabled {
            return Decision::Admit(Reason::Normal);
        }
        decide_with_priority(&policy.config, rule, &snap, signal, priority, super::uniform())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(state: State, t: f64) -> Snapshot {
        Snapshot {
            states: [state; 4],
            intensity: t,
            delays: Delays { shed: Duration::from_secs(2), open: Duration::from_secs(4) },
            ..Snapshot::idle()
        }
    }
    fn rule(min: f64, max: f64) -> Rule {
        Rule { enabled: true, drop_min: min, drop_max: max, priority: Priority::Normal }
    }

    #[test]
    fn lower_classes_are_shed_first() {
        let mix = [0.2, 0.4, 0.4];
        // p = 0.3 of 0.8 non-critical = 0.24 volume: all from sheddable (0.4 share).
        assert!((class_drop(0.3, &mix, Priority::Sheddable) - 0.6).abs() < 1e-9);
        assert_eq!(class_drop(0.3, &mix, Priority::Normal), 0.0);
        assert_eq!(class_drop(0.3, &mix, Priority::Critical), 0.0);
        // p = 0.75: volume 0.6 > 0.4 sheddable: sheddable all, normal (0.2 / 0.4).
        assert_eq!(class_drop(0.75, &mix, Priority::Sheddable), 1.0);
        assert!((class_drop(0.75, &mix, Priority::Normal) - 0.5).abs() < 1e-9);
        assert_eq!(class_drop(1.0, &mix, Priority::Critical), 0.0);
        // One class only: exactly p.
        assert!((class_drop(0.3, &[0.0, 1.0, 0.0], Priority::Normal) - 0.3).abs() < 1e-9);
        assert!((class_drop(0.3, &[0.0, 0.0, 1.0], Priority::Sheddable) - 0.3).abs() < 1e-9);
        // Critical is refused only when Open.
        let c = ThrottleConfig::default();
        let s = snap(State::Shedding, 1.0);
        assert_eq!(
            decide_with_priority(&c, &rule(1.0, 1.0), &s, Signal::Logs, Priority::Critical, 0.0),
            Decision::Admit(Reason::SheddingPass)
        );
        assert!(matches!(
            decide_with_priority(&c, &rule(1.0, 1.0), &snap(State::Open, 1.0), Signal::Logs, Priority::Critical, 0.5),
            Decision::Reject { .. }
        ));
    }

    #[test]
    fn only_the_most_important_class_arriving_leads_the_mix() {
        let normal_too = [0.0, 0.5, 0.5];
        let sheddable_only = [0.2, 0.0, 0.8];
        assert!(leads_mix(&normal_too, Priority::Normal));
        assert!(!leads_mix(&normal_too, Priority::Sheddable), "normal traffic arrives: sheddable must not take its place");
        assert!(leads_mix(&sheddable_only, Priority::Sheddable), "critical aside, sheddable is all there is");
        assert!(leads_mix(&sheddable_only, Priority::Critical));
    }

    #[test]
    fn a_shed_is_spared_for_an_empty_line_only_when_its_class_leads_the_mix() {
        use crate::admission::{Admission, Pressure};
        let config = ThrottleConfig {
            max_inflight_per_core: crate::config::auto::Auto::Set(1.0),
            max_inflight_wait: crate::config::auto::Auto::Set(Duration::from_millis(20)),
            max_inflight_queue_per_core: 1.0,
            ..ThrottleConfig::default()
        };
        let admission = Admission::new(&config, 1.0);
        let shed = Decision::Reject { reason: Reason::Shed, retry_after: Duration::from_secs(1) };
        let spare = |snap: &Snapshot, p| spare_shed(shed, &admission, &config.thresholds, snap, Some(p));
        let normal_too = Snapshot { class_share: [0.0, 0.5, 0.5], ..Snapshot::idle() };
        let sheddable_only = Snapshot { class_share: [0.0, 0.0, 1.0], ..Snapshot::idle() };

        // The core is idle: any shed is spared.
        assert_eq!(spare(&normal_too, Priority::Sheddable), Decision::Admit(Reason::IdleCore));
        // Busy, nobody in the line: spared if no more important class arrives.
        let _serving = admission.admit(0, Pressure::default()).expect("the one slot");
        assert_eq!(spare(&normal_too, Priority::Normal), Decision::Admit(Reason::IdleCore));
        assert_eq!(spare(&normal_too, Priority::Sheddable), shed, "normal traffic arrives: the sheddable shed stands");
        assert_eq!(spare(&sheddable_only, Priority::Sheddable), Decision::Admit(Reason::IdleCore));
        assert_eq!(spare_shed(shed, &admission, &config.thresholds, &normal_too, None), Decision::Admit(Reason::IdleCore));
        // Someone waits in the line: the shed stands.
        assert!(admission.join_line(None));
        assert_eq!(spare(&sheddable_only, Priority::Sheddable), shed, "a request is ready behind the one served");
        admission.leave_line();
        // Other decisions pass unchanged.
        let pass = Decision::Admit(Reason::SheddingPass);
        assert_eq!(spare_shed(pass, &admission, &config.thresholds, &normal_too, None), pass);
    }

    #[test]
    fn a_shed_is_spared_only_for_an_idle_core_under_cpu_pressure_alone() {
        let shed = Decision::Reject { reason: Reason::Shed, retry_after: Duration::from_secs(1) };
        let open = Decision::Reject { reason: Reason::Open, retry_after: Duration::from_secs(1) };
        assert_eq!(spare_idle_core(shed, true, true), Decision::Admit(Reason::IdleCore));
        assert_eq!(spare_idle_core(shed, false, true), shed, "busy core");
        assert_eq!(spare_idle_core(shed, true, false), shed, "memory or disk pressed");
        assert_eq!(spare_idle_core(open, true, true), Decision::Admit(Reason::IdleCore), "CPU alone: a free core is used");
        assert_eq!(spare_idle_core(open, true, false), open, "memory or disk: open stands");
        assert_eq!(spare_idle_core(open, false, true), open, "busy core: open stands");
        let pass = Decision::Admit(Reason::SheddingPass);
        assert_eq!(spare_idle_core(pass, true, true), pass);

        let t = ThrottleConfig::default().thresholds;
        let mut level = WaterLevel { cpu: 1.0, cpu_slow: 1.0, cpu_fast: 1.0, cpu_valid: true, ..WaterLevel::default() };
        assert!(only_cpu_pressed(&t, &level));
        level.mem_valid = true;
        level.mem = t.mem.enter + 0.01;
        assert!(!only_cpu_pressed(&t, &level), "memory above its line");
        level.mem = t.mem.enter - 0.01;
        level.disk_valid = true;
        level.disk = t.disk.enter + 0.01;
        assert!(!only_cpu_pressed(&t, &level), "disk above its line");
        level.disk_valid = false;
        assert!(only_cpu_pressed(&t, &level), "no disk queue: its level takes no part");
    }

    #[test]
    fn with_the_adaptive_limit_cpu_alone_leaves_the_call_to_the_limit() {
        use crate::admission::{Admission, Pressure};
        let config = ThrottleConfig::default();
        let admission = Admission::new(&config, 1.0);
        assert!(admission.adaptive());
        let shed = Decision::Reject { reason: Reason::Shed, retry_after: Duration::from_secs(1) };
        let open = Decision::Reject { reason: Reason::Open, retry_after: Duration::from_secs(4) };
        let cpu = WaterLevel { cpu: 1.0, cpu_slow: 1.0, cpu_fast: 1.0, cpu_valid: true, ..WaterLevel::default() };
        let one_class = Snapshot { level: cpu, class_share: [0.0, 1.0, 0.0], ..Snapshot::idle() };
        // Busy core, someone in the line: still the limit's call, not the CPU level's.
        let _serving = admission.admit(0, Pressure::default()).expect("a slot");
        assert!(admission.join_line(None));
        for d in [shed, open] {
            assert_eq!(
                spare_shed(d, &admission, &config.thresholds, &one_class, Some(Priority::Normal)),
                Decision::Admit(Reason::InflightLimit)
            );
        }
        // A more important class arriving: the sheddable shed stands.
        let mixed = Snapshot { class_share: [0.0, 0.5, 0.5], ..one_class.clone() };
        assert_eq!(spare_shed(shed, &admission, &config.thresholds, &mixed, Some(Priority::Sheddable)), shed);
        // Memory above its enter line: Open stands.
        let mut mem = one_class.clone();
        mem.level.mem_valid = true;
        mem.level.mem = config.thresholds.mem.enter + 0.01;
        assert_eq!(spare_shed(open, &admission, &config.thresholds, &mem, Some(Priority::Normal)), open);
        admission.leave_line();
    }

    #[test]
    fn normal_admits_open_rejects() {
        let c = ThrottleConfig::default();
        assert_eq!(decide(&c, &rule(0.0, 1.0), &snap(State::Normal, 1.0), Signal::Traces, 0.0), Decision::Admit(Reason::Normal));
        let d = decide(&c, &rule(0.0, 1.0), &snap(State::Open, 0.0), Signal::Traces, 0.99);
        assert!(matches!(d, Decision::Reject { reason: Reason::Open, retry_after } if retry_after >= Duration::from_secs(4)));
    }

    #[test]
    fn shedding_probability_is_linear_in_t() {
        let c = ThrottleConfig::default();
        let r = rule(0.1, 0.5);
        // t = 0.5: p = 0.1 + 0.4 * 0.5 = 0.3
        let s = snap(State::Shedding, 0.5);
        assert!(matches!(decide(&c, &r, &s, Signal::Logs, 0.29), Decision::Reject { reason: Reason::Shed, .. }));
        assert_eq!(decide(&c, &r, &s, Signal::Logs, 0.31), Decision::Admit(Reason::SheddingPass));
        // Over many draws the rejected share matches p.
        let n = 10_000;
        let rejected = (0..n).filter(|i| matches!(decide(&c, &r, &s, Signal::Logs, *i as f64 / n as f64), Decision::Reject { .. })).count();
        assert!((2999..=3001).contains(&rejected), "{rejected}");
        // t = 0 gives drop_min; t = 1 gives drop_max.
        assert!(matches!(decide(&c, &r, &snap(State::Shedding, 0.0), Signal::Logs, 0.099), Decision::Reject { .. }));
        assert_eq!(decide(&c, &r, &snap(State::Shedding, 0.0), Signal::Logs, 0.1), Decision::Admit(Reason::SheddingPass));
        assert!(matches!(decide(&c, &r, &snap(State::Shedding, 1.0), Signal::Logs, 0.499), Decision::Reject { .. }));
    }

    #[test]
    fn disabled_rule_admits_even_when_open_and_drop_max_zero_never_sheds_but_opens() {
        let c = ThrottleConfig::default();
        let off = Rule { enabled: false, drop_min: 0.0, drop_max: 1.0, priority: Priority::Normal };
        assert_eq!(decide(&c, &off, &snap(State::Open, 1.0), Signal::Metrics, 0.0), Decision::Admit(Reason::Disabled));
        let never = rule(0.0, 0.0);
        for u in [0.0, 0.5, 0.999] {
            assert_eq!(decide(&c, &never, &snap(State::Shedding, 1.0), Signal::Metrics, u), Decision::Admit(Reason::SheddingPass));
        }
        assert!(matches!(decide(&c, &never, &snap(State::Open, 1.0), Signal::Metrics, 0.5), Decision::Reject { reason: Reason::Open, .. }));
    }

    #[test]
    fn manager_disabled_admits_and_unclassified_admits() {
        let c = ThrottleConfig { enabled: false, ..Default::default() };
        let m = ThrottleManager::new(&c);
        m.publish(snap(State::Open, 1.0));
        assert_eq!(m.decide(Some(Signal::Traces)), Decision::Admit(Reason::Disabled));
        let m = ThrottleManager::new(&ThrottleConfig::default());
        m.publish(snap(State::Open, 1.0));
        assert_eq!(m.decide(None), Decision::Admit(Reason::Unclassified));
        assert!(matches!(m.decide(Some(Signal::Traces)), Decision::Reject { reason: Reason::Open, .. }));
    }
}
