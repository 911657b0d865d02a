//! How long the writer waits for more appends before it commits a group (`sync: on_ack`).
//!
//! Every group costs one fsync, one disk interrupt and the wake-ups around them,
//! whatever its size, so under load fewer, larger groups cost less CPU per request. The
//! writer waits only while appends arrive fast enough that at least one more is expected
//! within the wait, and never longer than twice the recent commit time (its write and
//! fsync; at most [`WAIT_MAX`]): a lone client is answered as soon as its fsync ends,
//! and a busy one waits no more than about one commit longer. See docs/durable-queue.md#group-commit.

use std::time::{Duration, Instant};

/// The longest the writer waits for a group to grow.
pub(super) const WAIT_MAX: Duration = Duration::from_millis(2);

/// Weight of the newest sample in the moving averages.
const ALPHA: f64 = 0.2;

/// The writer's recent commit time and append rate.
#[derive(Debug)]
pub(super) struct Pace {
    /// Moving average of a group's write and fsync time, seconds.
    commit_s: f64,
    /// Moving average of appends per second.
    rate: f64,
    /// When the previous group was closed.
    last: Option<Instant>,
}

impl Pace {
    pub(super) fn new() -> Self {
        Pace { commit_s: 0.0, rate: 0.0, last: None }
    }

    /// How long to wait for more appends after the first one of a group, taken at `now`.
    pub(super) fn wait(&self, now: Instant) -> Duration {
        let w = (2.0 * self.commit_s).min(WAIT_MAX.as_secs_f64());
        // The gap before this append counts too: the first one after a pause is not held.
        let gap = self.last.map_or(f64::INFINITY, |l| now.saturating_duration_since(l).as_secs_f64());
        if self.rate.min(1.0 / gap) * w >= 1.0 {
            Duration::from_secs_f64(w)
        } else {
            Duration::ZERO
        }
    }

    /// A group of `n` appends was closed at `now`: they arrived since the previous one.
    pub(super) fn closed(&mut self, now: Instant, n: usize) {
        if let Some(last) = self.last {
            let gap = now.saturating_duration_since(last).as_secs_f64().max(1e-6);
            self.rate += ALPHA * (n as f64 / gap - self.rate);
        }
        self.last = Some(now);
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

    fn busy(p: &mut Pace, t0: Instant, every: Duration, groups: u32) -> Instant {
        let mut t = t0;
        for _ in 0..groups {
            t += every;
            p.committed(Duration::from_micros(400));
            p.closed(t, 1);
        }
        t
    }

    #[test]
    fn a_lone_client_is_never_held() {
        let mut p = Pace::new();
        // One request every 5 ms with 0.4 ms commits: nothing else is expected in 0.8 ms.
        let t = busy(&mut p, Instant::now(), Duration::from_millis(5), 50);
        assert_eq!(p.wait(t + Duration::from_millis(5)), Duration::ZERO);
    }

    #[test]
    fn a_busy_stream_waits_twice_the_commit_and_an_idle_gap_ends_it() {
        let mut p = Pace::new();
        // One request every 0.5 ms (2,000 a second): 1.6 expected in 0.8 ms.
        let t = busy(&mut p, Instant::now(), Duration::from_micros(500), 50);
        let soon = t + Duration::from_micros(100);
        assert_eq!(p.wait(soon), Duration::from_micros(800));
        // A slow disk: the wait is capped.
        for _ in 0..50 {
            p.committed(Duration::from_millis(30));
        }
        assert_eq!(p.wait(soon), WAIT_MAX);
        // The first append after a second of silence is not held, though the average
        // still remembers the busy stream.
        assert_eq!(p.wait(t + Duration::from_secs(1)), Duration::ZERO);
        // One a second from then on: the average follows, and nothing is held.
        for i in 1..=20 {
            p.closed(t + Duration::from_secs(i), 1);
        }
        let next = t + Duration::from_millis(20_001);
        assert_eq!(p.wait(next), Duration::ZERO);
        assert!(p.rate < 1.0 / WAIT_MAX.as_secs_f64(), "rate {}", p.rate);
    }

    #[test]
    fn before_any_commit_nothing_waits() {
        let mut p = Pace::new();
        let t = Instant::now();
        p.closed(t, 1);
        p.closed(t + Duration::from_micros(10), 5);
        assert_eq!(p.wait(t + Duration::from_micros(20)), Duration::ZERO, "no commit time known yet");
    }
}
