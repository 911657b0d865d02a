//! The three-state machine of one record type. Going worse takes ANY
//! slot (OR); recovering takes EVERY slot (AND); Open leaves by the exit line of the
//! current frame.

use super::slot::StateSlot;

/// Throttle state; the numbers are the `weir_throttle_state` gauge values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
#[repr(u8)]
pub enum State {
    /// Admit everything.
    Normal = 0,
    /// Drop with a probability.
    Shedding = 1,
    /// Refuse everything.
    Open = 2,
}

/// Input of one slot for one frame.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SlotInput {
    /// Drives enter / exit.
    pub slow: f64,
    /// Drives hard.
    pub fast: f64,
    /// False when the signal could not be read (e.g. no memory limit).
    pub valid: bool,
}

/// One record type's state and its slots (cpu, mem).
#[derive(Debug, Clone, PartialEq)]
pub struct RecordState {
    state: State,
    slots: Vec<StateSlot>,
}

impl RecordState {
    /// Starts Normal.
    pub fn new(slots: Vec<StateSlot>) -> Self {
        RecordState { state: State::Normal, slots }
    }

    /// The current state.
    pub fn state(&self) -> State {
        self.state
    }

    /// Feeds a frame (one input per slot, same order) and steps the machine.
    pub fn step(&mut self, inputs: &[SlotInput]) -> State {
        for (slot, i) in self.slots.iter_mut().zip(inputs) {
            slot.tick(i.slow, i.fast, i.valid);
        }
        let any_hard = self.slots.iter().any(StateSlot::hard_reached);
        let next = match self.state {
            State::Normal if any_hard => State::Open,
            State::Normal if self.slots.iter().any(StateSlot::enter_reached) => State::Shedding,
            State::Shedding if any_hard => State::Open,
            State::Shedding if self.slots.iter().all(StateSlot::exit_reached) => State::Normal,
            State::Open if self.slots.iter().all(StateSlot::hard_cleared) => {
                let in_band = self.slots.iter().zip(inputs).any(|(s, i)| s.above_exit_now(i.slow, i.valid));
                if in_band {
                    State::Shedding
                } else {
                    State::Normal
                }
            }
            s => s,
        };
        if next != self.state {
            // A new state needs fresh evidence to leave it again.
            for s in &mut self.slots {
                match next {
                    State::Shedding => s.reset_exit_hits(),
                    State::Normal => s.reset_enter_hits(),
                    State::Open => {
                        s.reset_enter_hits();
                        s.reset_exit_hits();
                    }
                }
            }
            self.state = next;
        }
        self.state
    }

    /// Replaces slot `idx`'s configuration, keeping its counters and the state.
    pub fn set_slot_config(&mut self, idx: usize, cfg: crate::config::SlotConfig) {
        if let Some(s) = self.slots.get_mut(idx) {
            s.set_config(cfg);
        }
    }

    /// Moves slot `idx`'s enter and exit lines.
    pub fn set_lines(&mut self, idx: usize, enter: f64, exit: f64) {
        if let Some(s) = self.slots.get_mut(idx) {
            s.set_lines(enter, exit);
        }
    }

    /// t = max over active slots of slow's position between enter and hard.
    pub fn intensity(&self, inputs: &[SlotInput]) -> f64 {
        self.slots.iter().zip(inputs).map(|(s, i)| s.ratio(i.slow, i.valid)).fold(0.0, f64::max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SlotConfig;

    fn cpu() -> StateSlot {
        StateSlot::new(SlotConfig { enabled: true, enter: 0.8, exit: 0.7, hard: 0.9, breach_n: 3 })
    }
    fn mem() -> StateSlot {
        StateSlot::new(SlotConfig { enabled: true, enter: 0.85, exit: 0.78, hard: 0.92, breach_n: 1 })
    }
    fn frame(cpu_slow: f64, cpu_fast: f64, mem: f64, mem_valid: bool) -> [SlotInput; 2] {
        [SlotInput { slow: cpu_slow, fast: cpu_fast, valid: true }, SlotInput { slow: mem, fast: mem, valid: mem_valid }]
    }
    fn machine() -> RecordState {
        RecordState::new(vec![cpu(), mem()])
    }

    #[test]
    fn normal_to_shedding_needs_breach_n_consecutive_frames() {
        let mut m = machine();
        assert_eq!(m.step(&frame(0.85, 0.85, 0.1, true)), State::Normal);
        assert_eq!(m.step(&frame(0.85, 0.85, 0.1, true)), State::Normal);
        // A dip resets the count.
        assert_eq!(m.step(&frame(0.75, 0.75, 0.1, true)), State::Normal);
        assert_eq!(m.step(&frame(0.85, 0.85, 0.1, true)), State::Normal);
        assert_eq!(m.step(&frame(0.85, 0.85, 0.1, true)), State::Normal);
        assert_eq!(m.step(&frame(0.85, 0.85, 0.1, true)), State::Shedding);
    }

    #[test]
    fn memory_alone_enters_at_once_with_breach_1() {
        let mut m = machine();
        assert_eq!(m.step(&frame(0.1, 0.1, 0.86, true)), State::Shedding, "OR: one slot is enough");
        assert_eq!(m.step(&frame(0.1, 0.1, 0.93, true)), State::Open, "mem hard, breach 1");
    }

    #[test]
    fn shedding_recovers_only_when_every_slot_is_below_exit() {
        let mut m = machine();
        for _ in 0..3 {
            m.step(&frame(0.85, 0.85, 0.1, true));
        }
        assert_eq!(m.state(), State::Shedding);
        // cpu below exit but mem in its band: stay (AND to recover).
        for _ in 0..5 {
            assert_eq!(m.step(&frame(0.5, 0.5, 0.80, true)), State::Shedding);
        }
        assert_eq!(m.step(&frame(0.5, 0.5, 0.5, true)), State::Normal, "cpu had 5 frames below exit, mem 1 (breach 1)");
    }

    #[test]
    fn hard_line_opens_from_normal_and_from_shedding() {
        let mut m = machine();
        m.step(&frame(0.5, 0.95, 0.1, true));
        m.step(&frame(0.5, 0.95, 0.1, true));
        assert_eq!(m.step(&frame(0.5, 0.95, 0.1, true)), State::Open);

        let mut m = machine();
        for _ in 0..3 {
            m.step(&frame(0.85, 0.85, 0.1, true));
        }
        assert_eq!(m.state(), State::Shedding);
        m.step(&frame(0.85, 0.91, 0.1, true));
        m.step(&frame(0.85, 0.91, 0.1, true));
        assert_eq!(m.step(&frame(0.85, 0.91, 0.1, true)), State::Open);
    }

    #[test]
    fn open_exits_by_the_current_frames_exit_line() {
        let mut m = machine();
        for _ in 0..3 {
            m.step(&frame(0.95, 0.95, 0.1, true));
        }
        assert_eq!(m.state(), State::Open);
        // fast below hard for 3 frames, slow still above exit: → Shedding.
        m.step(&frame(0.8, 0.85, 0.1, true));
        m.step(&frame(0.8, 0.85, 0.1, true));
        assert_eq!(m.step(&frame(0.8, 0.85, 0.1, true)), State::Shedding);

        let mut m = machine();
        for _ in 0..3 {
            m.step(&frame(0.95, 0.95, 0.1, true));
        }
        m.step(&frame(0.6, 0.5, 0.1, true));
        m.step(&frame(0.6, 0.5, 0.1, true));
        assert_eq!(m.step(&frame(0.6, 0.5, 0.1, true)), State::Normal, "slow <= exit on the current frame");
    }

    #[test]
    fn open_waits_while_any_slot_is_still_hard() {
        let mut m = machine();
        m.step(&frame(0.1, 0.1, 0.95, true));
        assert_eq!(m.state(), State::Open);
        for _ in 0..10 {
            assert_eq!(m.step(&frame(0.1, 0.1, 0.95, true)), State::Open);
        }
        assert_eq!(m.step(&frame(0.1, 0.1, 0.5, true)), State::Normal);
    }

    #[test]
    fn invalid_or_disabled_slots_count_as_safe() {
        let mut m = machine();
        // Memory invalid (no limit): a huge bogus value must not matter.
        for _ in 0..5 {
            assert_eq!(m.step(&frame(0.1, 0.1, 5.0, false)), State::Normal);
        }
        let mut off =
            RecordState::new(vec![cpu(), StateSlot::new(SlotConfig { enabled: false, enter: 0.85, exit: 0.78, hard: 0.92, breach_n: 1 })]);
        assert_eq!(off.step(&frame(0.1, 0.1, 0.99, true)), State::Normal);
        // And an invalid slot does not block recovery from Open.
        let mut m = machine();
        for _ in 0..3 {
            m.step(&frame(0.95, 0.95, 0.1, true));
        }
        for _ in 0..3 {
            m.step(&frame(0.1, 0.1, 0.0, false));
        }
        assert_eq!(m.state(), State::Normal);
    }

    #[test]
    fn intensity_is_the_max_position_between_enter_and_hard() {
        let m = machine();
        let f = frame(0.85, 0.85, 0.885, true);
        // cpu: (0.85-0.8)/0.1 = 0.5; mem: (0.885-0.85)/0.07 = 0.5
        assert!((m.intensity(&f) - 0.5).abs() < 1e-9);
        assert_eq!(m.intensity(&frame(0.5, 0.5, 0.5, true)), 0.0);
        assert_eq!(m.intensity(&frame(2.0, 2.0, 0.5, true)), 1.0);
        assert_eq!(m.intensity(&frame(0.5, 0.5, 0.99, false)), 0.0, "invalid slot ignored");
    }
}
