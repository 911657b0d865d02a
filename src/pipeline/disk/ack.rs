//! The acknowledgement window: batches handed out and not yet finished, turned into the
//! cursor (the last id of the longest finished prefix).

use std::collections::VecDeque;
use std::sync::Mutex;

/// Batches handed out and not yet finished, in reading order. The cursor is the last id
/// of the longest finished prefix.
#[derive(Debug, Default)]
pub struct AckWindow {
    inner: Mutex<Window>,
}

#[derive(Debug, Default)]
struct Window {
    /// The sequence number of `entries[0]`.
    base: u64,
    /// (last id, append time of its oldest record, finished).
    entries: VecDeque<(u64, u64, bool)>,
    acked: u64,
}

impl AckWindow {
    fn lock(&self) -> std::sync::MutexGuard<'_, Window> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts at `acked`.
    pub fn starting_at(acked: u64) -> Self {
        AckWindow { inner: Mutex::new(Window { acked, ..Window::default() }) }
    }

    /// Adds a batch (or, `finished`, records skipped without one) ending at `last_id`;
    /// returns its sequence number.
    pub fn push(&self, last_id: u64, oldest_ts_ms: u64, finished: bool) -> u64 {
        let mut w = self.lock();
        w.entries.push_back((last_id, oldest_ts_ms, finished));
        let seq = w.base + w.entries.len() as u64 - 1;
        w.advance();
        seq
    }

    /// Marks batch `seq` finished.
    pub fn finish(&self, seq: u64) {
        let mut w = self.lock();
        if let Some(i) = seq.checked_sub(w.base) {
            if let Some(e) = w.entries.get_mut(i as usize) {
                e.2 = true;
            }
        }
        w.advance();
    }

    /// Every record up to this id is finished.
    pub fn acked(&self) -> u64 {
        self.lock().acked
    }

    /// Batches handed out and not finished.
    pub fn pending(&self) -> usize {
        self.lock().entries.iter().filter(|e| !e.2).count()
    }

    /// Append time of the oldest record not finished, if any is out.
    pub fn oldest_ts_ms(&self) -> Option<u64> {
        self.lock().entries.front().map(|e| e.1)
    }
}

impl Window {
    fn advance(&mut self) {
        while let Some(&(last, _, true)) = self.entries.front() {
            self.acked = self.acked.max(last);
            self.entries.pop_front();
            self.base += 1;
        }
    }
}
