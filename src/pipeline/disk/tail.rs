//! The records just written, kept in memory for the readers that are caught up: such a
//! reader takes its next record from here instead of reading it back from the segment
//! (no read, no copy, no CRC pass), and reads the disk only when it has fallen behind.
//! Bounded in bytes: a record leaves once every reader has taken it, or when newer
//! records need the room. See docs/durable-queue.md#reading-from-memory.

use super::record::Record;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// What one record costs here beyond its bytes.
const ENTRY_OVERHEAD: usize = 96;

/// The tail of the queue in memory.
#[derive(Debug, Default)]
pub(crate) struct Tail {
    inner: Mutex<Inner>,
    /// Bytes it may hold; 0 turns it off.
    limit: AtomicUsize,
    /// Records taken from here.
    hits: std::sync::atomic::AtomicU64,
}

#[derive(Debug, Default)]
struct Inner {
    /// Oldest first, in (segment, offset) order.
    entries: VecDeque<Entry>,
    bytes: usize,
}

#[derive(Debug)]
struct Entry {
    /// The first id of its segment.
    seg: u64,
    /// Where it starts in the segment, and where the next record starts.
    at: u64,
    next: u64,
    record: Record,
}

impl Entry {
    fn cost(&self) -> usize {
        self.record.payload.len() + self.record.tenant.len() + ENTRY_OVERHEAD
    }
}

impl Tail {
    /// Holds at most `limit` bytes (0: off).
    pub(crate) fn set_limit(&self, limit: usize) {
        self.limit.store(limit, Ordering::Relaxed);
    }

    /// Whether records are kept at all.
    pub(crate) fn enabled(&self) -> bool {
        self.limit.load(Ordering::Relaxed) > 0
    }

    /// Adds the records of a group just written, as (segment, offset, next offset,
    /// record), then drops those every reader has taken (ids up to `taken`) and the
    /// oldest beyond the limit.
    pub(crate) fn push(&self, records: impl IntoIterator<Item = (u64, u64, u64, Record)>, taken: u64) {
        let limit = self.limit.load(Ordering::Relaxed);
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        for (seg, at, next, record) in records {
            let e = Entry { seg, at, next, record };
            inner.bytes += e.cost();
            inner.entries.push_back(e);
        }
        while let Some(front) = inner.entries.front() {
            if front.record.meta.id > taken && inner.bytes <= limit {
                break;
            }
            let cost = front.cost();
            inner.entries.pop_front();
            inner.bytes -= cost;
        }
    }

    /// The record at offset `at` of segment `seg` and the offset after it, if it is here.
    pub(crate) fn take(&self, seg: u64, at: u64) -> Option<(Record, u64)> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let i = inner.entries.partition_point(|e| (e.seg, e.at) < (seg, at));
        let e = inner.entries.get(i).filter(|e| e.seg == seg && e.at == at)?;
        self.hits.fetch_add(1, Ordering::Relaxed);
        Some((e.record.clone(), e.next))
    }

    /// Records taken from here so far.
    #[cfg(test)]
    pub(crate) fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    /// Bytes held now.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).bytes
    }
}

#[cfg(test)]
mod tests {
    use super::super::record::Meta;
    use super::*;
    use crate::signal::Signal;
    use bytes::Bytes;

    fn rec(id: u64, len: usize) -> Record {
        let meta = Meta { id, ts_ms: 0, items: 1, signal: Signal::Traces, priority: 1 };
        Record { meta, tenant: Bytes::new(), payload: Bytes::from(vec![id as u8; len]) }
    }

    #[test]
    fn a_caught_up_reader_finds_each_record_by_its_offset() {
        let t = Tail::default();
        t.set_limit(1 << 20);
        t.push([(1, 0, 100, rec(1, 60)), (1, 100, 250, rec(2, 110))], 0);
        t.push([(3, 0, 80, rec(3, 40))], 0);
        let (r, next) = t.take(1, 100).unwrap();
        assert_eq!((r.meta.id, next, r.payload.len()), (2, 250, 110));
        assert_eq!(t.take(3, 0).unwrap().0.meta.id, 3);
        assert!(t.take(1, 50).is_none(), "not a record's start");
        assert!(t.take(2, 0).is_none(), "no such segment");
    }

    #[test]
    fn records_leave_once_taken_by_all_or_when_room_is_needed() {
        let t = Tail::default();
        t.set_limit(3 * (1000 + ENTRY_OVERHEAD));
        t.push((1..=3).map(|i| (1, i * 2000, i * 2000 + 1100, rec(i, 1000))), 0);
        assert_eq!(t.bytes(), 3 * (1000 + ENTRY_OVERHEAD));
        t.push([(1, 8000, 9100, rec(4, 1000))], 0);
        assert!(t.take(1, 2000).is_none(), "the oldest made room");
        assert!(t.take(1, 8000).is_some());
        t.push([(1, 10000, 11100, rec(5, 1000))], 4);
        assert!(t.take(1, 8000).is_none() && t.take(1, 10000).is_some(), "taken by every reader: gone");
        assert_eq!(t.bytes(), 1000 + ENTRY_OVERHEAD);
    }

    #[test]
    fn off_keeps_nothing() {
        let t = Tail::default();
        t.push([(1, 0, 100, rec(1, 60))], 0);
        assert!(!t.enabled() && t.take(1, 0).is_none());
    }
}
