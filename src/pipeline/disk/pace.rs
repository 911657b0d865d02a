//! How long the writer may wait for more appends before it commits a group (`sync:
//! on_ack`).
//!
//! Every group costs one fsync, one disk interrupt and the wake-ups around them,
//! whatever its size, so while requests are still on their way to the queue a group is
//! worth growing. The writer waits only while admitted requests have not reached it yet
//! (it stops as soon as they have: a lone client, or a few that all wait on the same
//! fsync, are not held), and never longer than twice the recent commit time (its write
//! and fsync; at most [`WAIT_MAX`]). See docs/durable-queue.md#group-commit.

use std::time::Duration;

/// The longest the writer waits for a group to grow.
pub(super) const WAIT_MAX: Duration = Duration::from_millis(2);

/// Weight of the newest sample in the moving average.
const ALPHA: f64 = 0.2;

/// The writer's recent commit time.
#[derive(Debug, Default)]
pub(super) struct Pace {
    /// Moving average of a group's write and fsync time, seconds (0: none yet).
    commit_s: f64,
}

impl Pace {
    /// The longest a group may wait for more appends now.
    pub(super) fn window(&self) -> Duration {
        Duration::from_secs_f64((2.0 * self.commit_s).min(WAIT_MAX.as_secs_f64()))
    }

    /// A group's write and fsync took `d`.
    pub(super) fn committed(&mut self, d: Duration) {
        let s = d.as_secs_f64();
        self.commit_s = if self.commit_s == 0.0 { s } else { self.commit_s + ALPHA * (s - self.commit_s) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_is_twice_the_recent_commit_and_capped() {
        let mut p = Pace::default();
        assert_eq!(p.window(), Duration::ZERO, "no commit yet: no wait");
        for _ in 0..50 {
            p.committed(Duration::from_micros(400));
        }
        assert_eq!(p.window(), Duration::from_micros(800));
        // A slow disk: the wait is capped.
        for _ in 0..50 {
            p.committed(Duration::from_millis(30));
        }
        assert_eq!(p.window(), WAIT_MAX);
        // The disk is fast again: the window follows within a few dozen groups.
        for _ in 0..40 {
            p.committed(Duration::from_micros(100));
        }
        assert!(p.window() < Duration::from_micros(250), "{:?}", p.window());
    }
}
