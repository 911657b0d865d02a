//! Log lines that a flood of bad requests cannot multiply.
//!
//! A failed request is worth a log line to whoever debugs one client, and worth nothing
//! when a broken or hostile client sends thousands a second: one line each would turn
//! seconds of flood into a log of a hundred megabytes or more
//! (`docs/overload.md#measurements-behind-the-defaults`). A [`LineBudget`] lets
//! `per_second` lines through in each wall-clock second and counts the rest; the first
//! line let through in a later second says how many were left out before it, and
//! `weir_log_lines_suppressed_total{kind}` counts them all.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Counts suppressed lines, by `kind`.
pub const SUPPRESSED: &str = "weir_log_lines_suppressed_total";

/// A per-second budget of log lines of one kind.
#[derive(Debug)]
pub struct LineBudget {
    kind: &'static str,
    per_second: u32,
    /// The current second (high 32 bits) and the lines let through in it (low 32 bits).
    window: AtomicU64,
    /// Lines suppressed since the last line let through.
    pending: AtomicU64,
}

impl LineBudget {
    /// A budget of `per_second` lines of `kind`.
    pub const fn new(kind: &'static str, per_second: u32) -> Self {
        LineBudget { kind, per_second, window: AtomicU64::new(0), pending: AtomicU64::new(0) }
    }

    /// Whether a line may be written now, with the number suppressed since the last one
    /// written (to say so on this line); `None` when this one is suppressed (counted).
    pub fn admit(&self) -> Option<u64> {
        self.admit_at(SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()))
    }

    fn admit_at(&self, second: u64) -> Option<u64> {
        let second = second & 0xffff_ffff;
        let mut cur = self.window.load(Ordering::Relaxed);
        loop {
            let (sec, used) = (cur >> 32, cur & 0xffff_ffff);
            let next = if sec == second { (used < u64::from(self.per_second)).then_some(cur + 1) } else { Some(second << 32 | 1) };
            let Some(next) = next else {
                self.pending.fetch_add(1, Ordering::Relaxed);
                if crate::telemetry::installed() {
                    ::metrics::counter!(SUPPRESSED, "kind" => self.kind).increment(1);
                }
                return None;
            };
            match self.window.compare_exchange_weak(cur, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return Some(self.pending.swap(0, Ordering::Relaxed)),
                Err(now) => cur = now,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lets_n_per_second_through_and_reports_the_rest() {
        let b = LineBudget::new("test", 3);
        assert_eq!(b.admit_at(100), Some(0));
        assert_eq!(b.admit_at(100), Some(0));
        assert_eq!(b.admit_at(100), Some(0));
        for _ in 0..10 {
            assert_eq!(b.admit_at(100), None);
        }
        // The next second: the first line carries the ten left out.
        assert_eq!(b.admit_at(101), Some(10));
        assert_eq!(b.admit_at(101), Some(0));
        assert_eq!(b.admit_at(105), Some(0));
    }
}
