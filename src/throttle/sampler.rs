//! The sampler: every `sample_interval` it reads the cgroup, turns the readings into
//! water levels (CPU over the interval divided by effective cores, fast and slow EWMA;
//! memory as a raw ratio), steps every record type's state machine, and publishes one
//! immutable snapshot atomically. The request path only reads that snapshot.

use super::cgroup::CgroupReader;
use super::manager::{Snapshot, ThrottleManager};
use super::slot::StateSlot;
use super::state::{RecordState, SlotInput};
use super::WaterLevel;
use crate::config::ThrottleConfig;
use crate::signal::Signal;
use std::sync::Arc;
use std::time::Instant;

/// CPU smoothing: s_t = (1 − β)·x_t + β·s_{t−1}, for a fast and a slow β.
#[derive(Debug, Clone)]
pub struct CpuSignal {
    slow_beta: f64,
    fast_beta: f64,
    prev: Option<(Instant, u64)>,
    slow: f64,
    fast: f64,
}

impl CpuSignal {
    /// New weights (hot reload); the smoothed values carry on.
    pub fn set_betas(&mut self, slow_beta: f64, fast_beta: f64) {
        self.slow_beta = slow_beta;
        self.fast_beta = fast_beta;
    }

    /// Both EWMAs start at 0 (an idle start).
    pub fn new(slow_beta: f64, fast_beta: f64) -> Self {
        CpuSignal { slow_beta, fast_beta, prev: None, slow: 0.0, fast: 0.0 }
    }

    /// Feeds a cumulative usage reading taken at `now`; returns (raw, slow, fast). The
    /// raw value is usage over the interval divided by wall time × cores, and may exceed 1.
    pub fn update(&mut self, now: Instant, usage_nanos: u64, cores: f64) -> (f64, f64, f64) {
        let raw = match self.prev {
            Some((t, u)) => {
                let wall = now.saturating_duration_since(t).as_nanos() as f64;
                if wall <= 0.0 || cores <= 0.0 {
                    0.0
                } else {
                    usage_nanos.saturating_sub(u) as f64 / (wall * cores)
                }
            }
            None => 0.0,
        };
        self.prev = Some((now, usage_nanos));
        self.slow = (1.0 - self.slow_beta) * raw + self.slow_beta * self.slow;
        self.fast = (1.0 - self.fast_beta) * raw + self.fast_beta * self.fast;
        (raw, self.slow, self.fast)
    }
}

/// Per-type state machines plus the signal state; pure apart from `now` and readings.
#[derive(Debug, Clone)]
pub struct Stepper {
    cpu: CpuSignal,
    machines: [RecordState; 4],
    config: ThrottleConfig,
    knee: Option<Arc<crate::admission::knee::KneeLearner>>,
    origin: Instant,
}

/// One sample's raw readings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Readings {
    /// Cumulative CPU ns, when readable.
    pub cpu_usage_nanos: Option<u64>,
    /// Effective cores.
    pub cores: f64,
    /// Whether a quota bounds the cores.
    pub quota_set: bool,
    /// Working set bytes, when readable.
    pub mem_working_set: Option<u64>,
    /// Memory limit, when there is one.
    pub mem_limit: Option<u64>,
    /// The disk queue's fill ratio, when there is a disk queue.
    pub disk_fill: Option<f64>,
}

impl Stepper {
    /// Fresh machines, all Normal.
    pub fn new(config: &ThrottleConfig) -> Self {
        Self::with_knee(config, None, Instant::now())
    }

    /// With a knee learner whose line lowers the CPU enter line; `origin` is the time
    /// base the learner's clock counts from.
    pub fn with_knee(config: &ThrottleConfig, knee: Option<Arc<crate::admission::knee::KneeLearner>>, origin: Instant) -> Self {
        let t = &config.thresholds;
        let slots = || vec![StateSlot::new(t.cpu), StateSlot::new(t.mem), StateSlot::new(t.disk)];
        Stepper {
            cpu: CpuSignal::new(config.signal.cpu_slow_beta, config.signal.cpu_fast_beta),
            machines: [RecordState::new(slots()), RecordState::new(slots()), RecordState::new(slots()), RecordState::new(slots())],
            config: config.clone(),
            knee,
            origin,
        }
    }

    /// Applies a reloaded configuration: thresholds, breach counts and betas change;
    /// EWMAs, counters and states carry on.
    pub fn reconfigure(&mut self, config: &ThrottleConfig) {
        self.cpu.set_betas(config.signal.cpu_slow_beta, config.signal.cpu_fast_beta);
        for m in &mut self.machines {
            m.set_slot_config(0, config.thresholds.cpu);
            m.set_slot_config(1, config.thresholds.mem);
            m.set_slot_config(2, config.thresholds.disk);
        }
        self.config = config.clone();
    }

    /// Turns readings into a snapshot and steps every machine.
    pub fn step(&mut self, now: Instant, r: Readings) -> Snapshot {
        let (cpu, cpu_slow, cpu_fast, cpu_valid) = match r.cpu_usage_nanos {
            Some(u) => {
                let (raw, s, f) = self.cpu.update(now, u, r.cores);
                (raw, s, f, true)
            }
            None => (0.0, 0.0, 0.0, false),
        };
        let (mem, mem_valid) = match (r.mem_working_set, r.mem_limit) {
            (Some(ws), Some(limit)) if limit > 0 => (ws as f64 / limit as f64, true),
            _ => (0.0, false),
        };
        let level = WaterLevel {
            cpu,
            cpu_slow,
            cpu_fast,
            cpu_valid,
            mem,
            mem_valid,
            effective_cores: r.cores,
            quota_set: r.quota_set,
            mem_working_set_bytes: r.mem_working_set.unwrap_or(0),
            mem_limit_bytes: r.mem_limit,
            disk: r.disk_fill.unwrap_or(0.0),
            disk_valid: r.disk_fill.is_some(),
        };
        // The knee learner may pull the CPU enter line down (never up); the exit line
        // follows so the hysteresis band keeps its width.
        let c = self.config.thresholds.cpu;
        let knee = self.knee.as_ref().and_then(|k| k.knee(now.saturating_duration_since(self.origin).as_nanos() as u64));
        let cpu_enter = knee.map_or(c.enter, |k| k.min(c.enter));
        let cpu_exit = c.exit.min(cpu_enter - (c.enter - c.exit)).max(0.0);
        for m in &mut self.machines {
            m.set_lines(0, cpu_enter, cpu_exit);
        }
        let (disk, disk_valid) = (level.disk, level.disk_valid);
        let inputs = [
            SlotInput { slow: cpu_slow, fast: cpu_fast, valid: cpu_valid },
            SlotInput { slow: mem, fast: mem, valid: mem_valid },
            SlotInput { slow: disk, fast: disk, valid: disk_valid },
        ];
        let states = Signal::ALL.map(|s| self.machines[s.index()].step(&inputs));
        let intensity = self.machines[0].intensity(&inputs);
        let m = self.config.thresholds.mem;
        let cpu_on = c.enabled && cpu_valid;
        let mem_on = m.enabled && mem_valid;
        let pressure = crate::admission::Pressure {
            above_exit: (cpu_on && cpu_slow > cpu_exit) || (mem_on && mem > m.exit),
            above_enter: (cpu_on && cpu_slow > cpu_enter) || (mem_on && mem > m.enter),
            cpu,
        };
        Snapshot {
            level,
            states,
            intensity,
            delays: super::retry::derive_delays(&self.config, &level),
            pressure,
            cpu_enter,
            cpu_exit,
            knee,
            class_share: [0.0, 1.0, 0.0],
            conns: Default::default(),
            conn_surge: false,
            hold_room: None,
        }
    }
}

/// Bytes of unread HTTP/1.1 bodies that held refusals may leave in weir's socket buffers
/// (`hold.max_held_bytes`): the configured figure; or, at 0, the room between the memory
/// enter line and what the container uses apart from its socket buffers, where the
/// cgroup charges them (v2 says how much in `sock`); `None`, no bound: cgroup v1 does not
/// charge socket buffers to the container, and without a limit there is no line.
/// Socket buffers are left out of the use because the held bodies are among them, and
/// each held refusal already counts its own.
pub fn hold_room(config: &ThrottleConfig, mem: Option<super::cgroup::MemoryReading>) -> Option<u64> {
    if config.hold.max_held_bytes > 0 {
        return Some(config.hold.max_held_bytes);
    }
    let m = mem?;
    let (limit, sock) = (m.limit?, m.sock?);
    let line = (config.thresholds.mem.enter * limit as f64) as u64;
    Some(line.saturating_sub(m.working_set.saturating_sub(sock)))
}

/// Runs the sampler until `stop` fires.
pub async fn run(
    manager: Arc<ThrottleManager>,
    reader: CgroupReader,
    config: ThrottleConfig,
    knee: Option<(Arc<crate::admission::knee::KneeLearner>, Instant)>,
    conns: Arc<dyn super::conns::ConnSource>,
    mut reloads: tokio::sync::watch::Receiver<ThrottleConfig>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut config = config;
    let detector = |c: &ThrottleConfig| {
        let cs = &c.connection_signal;
        cs.enabled.then(|| super::conns::SurgeDetector::new(cs.baseline_beta, cs.surge_ratio, cs.rtt_ratio))
    };
    let mut surge = detector(&config);
    let mut stepper = match knee {
        Some((k, origin)) => Stepper::with_knee(&config, Some(k), origin),
        None => Stepper::new(&config),
    };
    let mut ticker = tokio::time::interval(config.sample_interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last: Option<Instant> = None;
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            changed = reloads.changed() => {
                if changed.is_err() {
                    continue;
                }
                let new = reloads.borrow_and_update().clone();
                if new.sample_interval != config.sample_interval {
                    ticker = tokio::time::interval(new.sample_interval);
                    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                }
                if new.connection_signal.enabled != config.connection_signal.enabled
                    || new.connection_signal.surge_ratio != config.connection_signal.surge_ratio
                    || new.connection_signal.rtt_ratio != config.connection_signal.rtt_ratio
                    || new.connection_signal.baseline_beta != config.connection_signal.baseline_beta
                {
                    surge = detector(&new);
                }
                stepper.reconfigure(&new);
                super::metrics::set_thresholds(&new);
                config = new;
                continue;
            }
            _ = stop.changed() => break,
        }
        let started = Instant::now();
        if let Some(prev) = last {
            super::metrics::sampler_interval(started.duration_since(prev));
        }
        last = Some(started);
        let (cap, cpu_usage_nanos) = reader.cpu_sample();
        let mem = reader.memory();
        let readings = Readings {
            cpu_usage_nanos,
            cores: cap.cores,
            quota_set: cap.quota_set,
            mem_working_set: mem.map(|m| m.working_set),
            mem_limit: mem.and_then(|m| m.limit),
            disk_fill: manager.disk_fill(),
        };
        let mut snapshot = stepper.step(Instant::now(), readings);
        snapshot.hold_room = hold_room(&config, mem);
        snapshot.class_share = manager.mix.roll();
        let (http, grpc, all) = conns.sample();
        super::metrics::connections(&http, &grpc);
        snapshot.conns = all;
        if let Some(d) = surge.as_mut() {
            snapshot.conn_surge = d.step(&all);
            if snapshot.conn_surge {
                // Overloaded for the admission layers, ahead of CPU and memory.
                snapshot.pressure.above_exit = true;
                snapshot.pressure.above_enter = true;
            }
        }
        let mem_cfg = &config.thresholds.mem;
        conns.set_memory_short(mem_cfg.enabled && snapshot.level.mem_valid && snapshot.level.mem > mem_cfg.enter);
        super::metrics::publish(&snapshot);
        manager.publish(snapshot);
        super::metrics::sampler_duration(started.elapsed());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn cpu_is_usage_over_wall_times_cores_with_two_ewmas() {
        let t0 = Instant::now();
        let mut s = CpuSignal::new(0.95, 0.7);
        assert_eq!(s.update(t0, 0, 2.0), (0.0, 0.0, 0.0));
        // 250 ms wall, 400 ms CPU on 2 cores = 0.8.
        let (raw, slow, fast) = s.update(t0 + Duration::from_millis(250), 400_000_000, 2.0);
        assert!((raw - 0.8).abs() < 1e-9);
        assert!((slow - 0.05 * 0.8).abs() < 1e-9);
        assert!((fast - 0.3 * 0.8).abs() < 1e-9);
        // Over the quota: 0.5 cores fully used plus more = above 1.0.
        let (raw, _, _) = s.update(t0 + Duration::from_millis(500), 400_000_000 + 150_000_000, 0.5);
        assert!((raw - 1.2).abs() < 1e-9, "{raw}");
    }

    #[test]
    fn the_hold_room_is_the_enter_line_less_what_is_not_socket_buffers_and_only_where_they_are_charged() {
        use crate::throttle::cgroup::MemoryReading;
        let c = ThrottleConfig::default();
        let v2 = |working_set, sock| Some(MemoryReading { working_set, limit: Some(300 << 20), sock: Some(sock) });
        // 0.85 x 300 MiB = 255 MiB, less 100 MiB of weir's own: 155 MiB, whatever the sockets hold.
        assert_eq!(hold_room(&c, v2(100 << 20, 0)), Some(155 << 20));
        assert_eq!(hold_room(&c, v2(400 << 20, 300 << 20)), Some(155 << 20));
        // weir's own memory past the line: no room.
        assert_eq!(hold_room(&c, v2(280 << 20, 10 << 20)), Some(0));
        // v1 does not charge socket buffers to the container; no limit, no line.
        assert_eq!(hold_room(&c, Some(MemoryReading { working_set: 100 << 20, limit: Some(300 << 20), sock: None })), None);
        assert_eq!(hold_room(&c, Some(MemoryReading { working_set: 100 << 20, limit: None, sock: Some(0) })), None);
        assert_eq!(hold_room(&c, None), None);
        // A configured bound holds everywhere.
        let mut fixed = c.clone();
        fixed.hold.max_held_bytes = 64 << 20;
        assert_eq!(hold_room(&fixed, None), Some(64 << 20));
        assert_eq!(hold_room(&fixed, v2(100 << 20, 0)), Some(64 << 20));
    }

    #[test]
    fn memory_without_limit_is_invalid_not_a_ratio() {
        let mut st = Stepper::new(&ThrottleConfig::default());
        let r = Readings {
            cpu_usage_nanos: Some(0),
            cores: 1.0,
            quota_set: true,
            mem_working_set: Some(10 << 30),
            mem_limit: None,
            disk_fill: None,
        };
        let snap = st.step(Instant::now(), r);
        assert!(!snap.level.mem_valid);
        assert_eq!(snap.level.mem, 0.0);
        let snap = st.step(Instant::now(), Readings { mem_limit: Some(20 << 30), ..r });
        assert!(snap.level.mem_valid);
        assert!((snap.level.mem - 0.5).abs() < 1e-9);
    }

    #[test]
    fn the_disk_queue_fill_is_a_water_level() {
        use crate::throttle::state::State;
        let mut st = Stepper::new(&ThrottleConfig::default());
        let t = Instant::now();
        let r = |fill: Option<f64>| Readings {
            cpu_usage_nanos: Some(0),
            cores: 1.0,
            quota_set: true,
            mem_working_set: None,
            mem_limit: None,
            disk_fill: fill,
        };
        assert_eq!(st.step(t, r(Some(0.5))).states[0], State::Normal);
        let snap = st.step(t + Duration::from_millis(250), r(Some(0.85)));
        assert_eq!(snap.states[0], State::Shedding, "past the disk enter line (0.80)");
        assert!(snap.intensity > 0.0, "shedding by priority follows the fill");
        assert!(snap.delays.shed > Duration::ZERO, "refusals carry a retry delay");
        let snap = st.step(t + Duration::from_millis(500), r(Some(0.96)));
        assert_eq!(snap.states[0], State::Open, "past the hard line (0.95) everything is refused");
        let snap = st.step(t + Duration::from_millis(750), r(Some(0.5)));
        assert_ne!(snap.states[0], State::Open);
        // Without a disk queue the slot takes no part.
        let mut st = Stepper::new(&ThrottleConfig::default());
        let snap = st.step(t, r(None));
        assert!(!snap.level.disk_valid);
        assert_eq!(snap.states[0], State::Normal);
    }
}

#[cfg(test)]
mod reload_tests {
    use super::*;
    use crate::throttle::state::State;

    #[test]
    fn reconfigure_keeps_ewma_and_state() {
        let mut c = ThrottleConfig::default();
        c.thresholds.mem.breach_n = 1;
        let mut st = Stepper::new(&c);
        let t0 = Instant::now();
        let r = |mem: u64| Readings {
            cpu_usage_nanos: Some(0),
            cores: 1.0,
            quota_set: true,
            mem_working_set: Some(mem),
            mem_limit: Some(100),
            disk_fill: None,
        };
        let snap = st.step(t0, r(88));
        assert_eq!(snap.states[0], State::Shedding, "mem 0.88 > enter 0.85");
        // Raise the mem lines: still in the band (0.88 > new exit 0.80), so the state and
        // counters carry on; it leaves Shedding only by the new exit line.
        c.thresholds.mem = crate::config::SlotConfig { enabled: true, enter: 0.90, exit: 0.80, hard: 0.95, breach_n: 1 };
        st.reconfigure(&c);
        let snap = st.step(t0 + std::time::Duration::from_millis(250), r(88));
        assert_eq!(snap.states[0], State::Shedding, "state kept across the reload");
        // Recovery takes every slot below exit for its breach_n (cpu: 3 frames).
        let mut snap = snap;
        for i in 0..3u64 {
            snap = st.step(t0 + std::time::Duration::from_millis(500 + 250 * i), r(79));
        }
        assert_eq!(snap.states[0], State::Normal, "the new exit line (0.80) applies");
    }
}
