//! Per-phase counters and latency histograms, plus a per-second time series for the report.

use hdrhistogram::Histogram;
use serde::Serialize;
use std::sync::Mutex;
use std::time::Duration;

/// How one request ended.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Outcome {
    /// HTTP 200 / gRPC OK.
    Ok,
    /// HTTP 429 / gRPC RESOURCE_EXHAUSTED.
    TooMany,
    /// HTTP 503 / gRPC UNAVAILABLE.
    Unavailable,
    /// Any other status.
    Other,
    /// Connection refused, reset, timed out.
    Transport,
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct Counts {
    pub ok: u64,
    pub status_429: u64,
    pub status_503: u64,
    pub other: u64,
    pub transport_errors: u64,
}

impl Counts {
    pub fn add(&mut self, o: Outcome) {
        match o {
            Outcome::Ok => self.ok += 1,
            Outcome::TooMany => self.status_429 += 1,
            Outcome::Unavailable => self.status_503 += 1,
            Outcome::Other => self.other += 1,
            Outcome::Transport => self.transport_errors += 1,
        }
    }
    pub fn total(&self) -> u64 {
        self.ok + self.status_429 + self.status_503 + self.other + self.transport_errors
    }
}

/// One second of the run.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Second {
    pub t: u64,
    pub phase: String,
    pub counts: Counts,
    pub p99_ms: Option<f64>,
}

/// Live state of a phase, shared by its workers.
pub struct PhaseStats {
    inner: Mutex<Inner>,
}

struct Inner {
    counts: Counts,
    hist: Histogram<u64>,
    second_hist: Histogram<u64>,
    /// Requests sent after the phase's first [`SETTLE`]: the P99 without the wave of new
    /// connections every phase starts with.
    settled_hist: Histogram<u64>,
    started: std::time::Instant,
    current_second: u64,
    seconds: Vec<Second>,
    phase: String,
    spans_per_request: u64,
}

/// The finished phase, as printed and written.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseResult {
    pub phase: String,
    pub concurrency: usize,
    pub spans_per_request: u64,
    pub duration_s: f64,
    pub counts: Counts,
    pub spans_sent: u64,
    pub spans_accepted: u64,
    pub requests_per_s: f64,
    pub spans_per_s: f64,
    pub accepted_spans_per_s: f64,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub max_ms: Option<f64>,
    /// P99 of requests sent after the phase's first two seconds.
    pub p99_settled_ms: Option<f64>,
}

/// How long a phase's opening wave is left out of `p99_settled_ms`.
pub const SETTLE: Duration = Duration::from_secs(2);

fn hist() -> Histogram<u64> {
    // 1 µs .. 10 min, 3 significant digits.
    Histogram::new_with_bounds(1, 600_000_000, 3).unwrap_or_else(|_| Histogram::new(3).unwrap_or_else(|_| unreachable!()))
}

impl PhaseStats {
    pub fn new(phase: &str, spans_per_request: u64, start_second: u64) -> Self {
        PhaseStats {
            inner: Mutex::new(Inner {
                counts: Counts::default(),
                hist: hist(),
                second_hist: hist(),
                settled_hist: hist(),
                started: std::time::Instant::now(),
                current_second: start_second,
                seconds: Vec::new(),
                phase: phase.to_string(),
                spans_per_request,
            }),
        }
    }

    /// Records one request finished during run-second `second`; latency counts for successes only.
    pub fn record(&self, second: u64, outcome: Outcome, latency: Duration) {
        let mut s = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        s.roll(second);
        s.counts.add(outcome);
        if let Some(last) = s.seconds.last_mut() {
            last.counts.add(outcome);
        }
        if outcome == Outcome::Ok {
            let us = (latency.as_micros() as u64).clamp(1, 600_000_000);
            let _ = s.hist.record(us);
            let _ = s.second_hist.record(us);
            if s.started.elapsed().saturating_sub(latency) >= SETTLE {
                let _ = s.settled_hist.record(us);
            }
        }
    }

    pub fn finish(&self, concurrency: usize, elapsed: Duration) -> (PhaseResult, Vec<Second>) {
        let mut s = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let next = s.current_second + 1;
        s.roll(next);
        let secs = elapsed.as_secs_f64().max(1e-9);
        let q = |h: &Histogram<u64>, p: f64| (!h.is_empty()).then(|| h.value_at_quantile(p) as f64 / 1000.0);
        let sent = s.counts.total() * s.spans_per_request;
        let accepted = s.counts.ok * s.spans_per_request;
        let r = PhaseResult {
            phase: s.phase.clone(),
            concurrency,
            spans_per_request: s.spans_per_request,
            duration_s: secs,
            counts: s.counts.clone(),
            spans_sent: sent,
            spans_accepted: accepted,
            requests_per_s: s.counts.total() as f64 / secs,
            spans_per_s: sent as f64 / secs,
            accepted_spans_per_s: accepted as f64 / secs,
            p50_ms: q(&s.hist, 0.5),
            p99_ms: q(&s.hist, 0.99),
            max_ms: (!s.hist.is_empty()).then(|| s.hist.max() as f64 / 1000.0),
            p99_settled_ms: q(&s.settled_hist, 0.99),
        };
        (r, std::mem::take(&mut s.seconds))
    }
}

impl Inner {
    fn roll(&mut self, second: u64) {
        if self.seconds.is_empty() {
            self.seconds.push(Second { t: self.current_second, phase: self.phase.clone(), ..Default::default() });
        }
        while self.current_second < second {
            if let Some(last) = self.seconds.last_mut() {
                last.p99_ms = (!self.second_hist.is_empty()).then(|| self.second_hist.value_at_quantile(0.99) as f64 / 1000.0);
            }
            self.second_hist.reset();
            self.current_second += 1;
            self.seconds.push(Second { t: self.current_second, phase: self.phase.clone(), ..Default::default() });
        }
    }
}

impl PhaseResult {
    pub fn print(&self) {
        let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}ms"));
        println!(
            "phase={} c={} spans/req={} duration={:.1}s | 200={} 429={} 503={} other={} transport_errors={} | spans sent={} accepted={} | {:.1} req/s {:.0} spans/s ({:.0} accepted/s) | p50={} p99={} max={} p99_after_2s={}",
            self.phase,
            self.concurrency,
            self.spans_per_request,
            self.duration_s,
            self.counts.ok,
            self.counts.status_429,
            self.counts.status_503,
            self.counts.other,
            self.counts.transport_errors,
            self.spans_sent,
            self.spans_accepted,
            self.requests_per_s,
            self.spans_per_s,
            self.accepted_spans_per_s,
            ms(self.p50_ms),
            ms(self.p99_ms),
            ms(self.max_ms),
            ms(self.p99_settled_ms),
        );
    }
}
