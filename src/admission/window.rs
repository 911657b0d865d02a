//! A lazily advanced rolling window of time buckets: no background timer; buckets are
//! rotated when written or read, aligned to whole bucket durations so they never drift.
//! Time is passed in (nanoseconds since an origin), so tests and the simulator drive it
//! deterministically.

/// One bucket: a sum and a count.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Bucket {
    /// Sum of values added.
    pub sum: f64,
    /// Number of adds.
    pub count: u64,
}

/// The window.
#[derive(Debug, Clone)]
pub struct RollingWindow {
    buckets: Vec<Bucket>,
    bucket_nanos: u64,
    /// Index of the bucket that covers `head_start`.
    head: usize,
    /// Start time of the head bucket (multiple of `bucket_nanos`).
    head_start: u64,
    /// Aggregates over every bucket but the head, recomputed only when buckets rotate
    /// (at most once per bucket duration), so queries are O(1) on the request path.
    tail_max_sum: f64,
    tail_min_avg: Option<f64>,
    tail_active: usize,
}

impl RollingWindow {
    /// `size` buckets of `bucket_nanos` each.
    pub fn new(size: usize, bucket_nanos: u64) -> Self {
        let size = size.max(1);
        RollingWindow {
            buckets: vec![Bucket::default(); size],
            bucket_nanos: bucket_nanos.max(1),
            head: 0,
            head_start: 0,
            tail_max_sum: 0.0,
            tail_min_avg: None,
            tail_active: 0,
        }
    }

    /// Buckets per second.
    pub fn buckets_per_second(&self) -> f64 {
        1e9 / self.bucket_nanos as f64
    }

    /// Number of buckets.
    pub fn size(&self) -> usize {
        self.buckets.len()
    }

    fn advance(&mut self, now: u64) {
        let aligned = now - now % self.bucket_nanos;
        if aligned <= self.head_start {
            return;
        }
        let span = ((aligned - self.head_start) / self.bucket_nanos) as usize;
        let size = self.buckets.len();
        for i in 1..=span.min(size) {
            self.buckets[(self.head + i) % size] = Bucket::default();
        }
        self.head = (self.head + span) % size;
        self.head_start = aligned;
        let head = self.head;
        let tail = self.buckets.iter().enumerate().filter(|(i, _)| *i != head).map(|(_, b)| b);
        let (mut max, mut min, mut active) = (0.0f64, None::<f64>, 0usize);
        for b in tail {
            max = max.max(b.sum);
            if b.count > 0 {
                active += 1;
                let avg = b.sum / b.count as f64;
                min = Some(min.map_or(avg, |m| m.min(avg)));
            }
        }
        self.tail_max_sum = max;
        self.tail_min_avg = min;
        self.tail_active = active;
    }

    /// Adds `value` at `now`.
    pub fn add(&mut self, now: u64, value: f64) {
        self.advance(now);
        let b = &mut self.buckets[self.head];
        b.sum += value;
        b.count += 1;
    }

    /// The largest bucket sum in the window (e.g. most passes in one bucket).
    pub fn max_sum(&mut self, now: u64) -> f64 {
        self.advance(now);
        self.tail_max_sum.max(self.buckets[self.head].sum)
    }

    /// The smallest per-bucket average among buckets with data (e.g. best RT).
    pub fn min_avg(&mut self, now: u64) -> Option<f64> {
        self.advance(now);
        let h = self.buckets[self.head];
        let head = (h.count > 0).then(|| h.sum / h.count as f64);
        match (self.tail_min_avg, head) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Buckets that saw any data.
    pub fn active_buckets(&mut self, now: u64) -> usize {
        self.advance(now);
        self.tail_active + usize::from(self.buckets[self.head].count > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    const MS: u64 = 1_000_000;

    #[test]
    fn lazily_rotates_and_forgets() {
        let mut w = RollingWindow::new(10, 100 * MS);
        w.add(0, 1.0);
        w.add(50 * MS, 1.0);
        w.add(150 * MS, 5.0);
        assert_eq!(w.max_sum(199 * MS), 5.0);
        assert_eq!(w.active_buckets(199 * MS), 2);
        // 1 s later the first bucket has rotated out.
        assert_eq!(w.active_buckets(1_050 * MS), 1);
        assert_eq!(w.max_sum(1_050 * MS), 5.0);
        // Long gap: everything is gone.
        assert_eq!(w.active_buckets(60_000 * MS), 0);
        assert_eq!(w.max_sum(60_000 * MS), 0.0);
        assert_eq!(w.min_avg(60_000 * MS), None);
    }

    proptest::proptest! {
        /// The cached aggregates equal a full scan, whatever the sequence of adds.
        #[test]
        fn cached_aggregates_match_a_scan(steps in proptest::collection::vec((0u64..400, 0.0f64..50.0), 1..300)) {
            let mut w = RollingWindow::new(10, 100 * MS);
            let mut now = 0;
            for (gap, v) in steps {
                now += gap * MS;
                w.add(now, v);
                let scan_max = w.buckets.iter().map(|b| b.sum).fold(0.0, f64::max);
                let scan_min = w.buckets.iter().filter(|b| b.count > 0).map(|b| b.sum / b.count as f64).reduce(f64::min);
                let scan_active = w.buckets.iter().filter(|b| b.count > 0).count();
                proptest::prop_assert_eq!(w.max_sum(now), scan_max);
                proptest::prop_assert_eq!(w.min_avg(now), scan_min);
                proptest::prop_assert_eq!(w.active_buckets(now), scan_active);
            }
        }
    }

    #[test]
    fn min_avg_over_buckets_with_data() {
        let mut w = RollingWindow::new(10, 100 * MS);
        w.add(0, 10.0);
        w.add(10 * MS, 20.0);
        w.add(120 * MS, 4.0);
        assert_eq!(w.min_avg(150 * MS), Some(4.0));
        assert_eq!(w.buckets_per_second(), 10.0);
    }
}
