//! A threshold slot: one resource signal's lines and its consecutive-hit counters.
//! It keeps no signal values; `slow`, `fast` and `valid` arrive with each frame.

use crate::config::SlotConfig;

/// Counters for one slot.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StateSlot {
    cfg: SlotConfig,
    enter_hits: u32,
    exit_hits: u32,
    hard_hits: u32,
    hard_clear_hits: u32,
}

impl StateSlot {
    /// A slot with zeroed counters.
    pub fn new(cfg: SlotConfig) -> Self {
        StateSlot { cfg, enter_hits: 0, exit_hits: 0, hard_hits: 0, hard_clear_hits: 0 }
    }

    /// Whether this slot takes part this frame.
    fn active(&self, valid: bool) -> bool {
        self.cfg.enabled && valid
    }

    /// Feeds one frame. A disabled or invalid slot counts as safe: it never pushes
    /// toward Shedding or Open and never blocks recovery.
    pub fn tick(&mut self, slow: f64, fast: f64, valid: bool) {
        let bump = |hit: bool, n: &mut u32| *n = if hit { n.saturating_add(1) } else { 0 };
        if !self.active(valid) {
            self.enter_hits = 0;
            self.hard_hits = 0;
            self.exit_hits = self.cfg.breach_n;
            self.hard_clear_hits = self.cfg.breach_n;
            return;
        }
        bump(slow > self.cfg.enter, &mut self.enter_hits);
        bump(slow < self.cfg.exit, &mut self.exit_hits);
        bump(fast >= self.cfg.hard, &mut self.hard_hits);
        bump(fast < self.cfg.hard, &mut self.hard_clear_hits);
    }

    /// slow has been above enter for breach_n frames.
    pub fn enter_reached(&self) -> bool {
        self.enter_hits >= self.cfg.breach_n
    }
    /// slow has been below exit for breach_n frames.
    pub fn exit_reached(&self) -> bool {
        self.exit_hits >= self.cfg.breach_n
    }
    /// fast has been at or above hard for breach_n frames.
    pub fn hard_reached(&self) -> bool {
        self.hard_hits >= self.cfg.breach_n
    }
    /// fast has been below hard for breach_n frames.
    pub fn hard_cleared(&self) -> bool {
        self.hard_clear_hits >= self.cfg.breach_n
    }

    /// On the current frame: slow is above exit (still in the shedding band).
    pub fn above_exit_now(&self, slow: f64, valid: bool) -> bool {
        self.active(valid) && slow > self.cfg.exit
    }

    /// slow's position between enter (0) and hard (1), clamped; 0 when inactive.
    pub fn ratio(&self, slow: f64, valid: bool) -> f64 {
        if !self.active(valid) {
            return 0.0;
        }
        ((slow - self.cfg.enter) / (self.cfg.hard - self.cfg.enter)).clamp(0.0, 1.0)
    }

    /// Restarts the enter count (after a transition).
    pub fn reset_enter_hits(&mut self) {
        self.enter_hits = 0;
    }
    /// Restarts the exit count (after a transition).
    pub fn reset_exit_hits(&mut self) {
        self.exit_hits = 0;
    }

    /// Moves the enter and exit lines (the knee learner lowers the CPU enter line),
    /// keeping the counters.
    pub fn set_lines(&mut self, enter: f64, exit: f64) {
        self.cfg.enter = enter;
        self.cfg.exit = exit;
    }

    /// Replaces the whole configuration (hot reload), keeping the counters.
    pub fn set_config(&mut self, cfg: SlotConfig) {
        self.cfg = cfg;
    }

    /// The slot's configuration.
    pub fn config(&self) -> &SlotConfig {
        &self.cfg
    }
}
