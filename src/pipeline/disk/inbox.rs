//! The hand-off from request tasks to the writer thread.
//!
//! An append wakes the writer only when the writer has nothing to do, or, while it holds
//! a group open for requests still on their way (see [`super::pace`]), when the last of
//! them arrives or the group is full. Appends that come while it writes or syncs wait
//! for the next group without a wake-up. A channel would wake the writer once per
//! append: on a busy core every wake is a switch away from the request threads and back.
//! See docs/durable-queue.md#group-commit.

use super::Append;
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A group stops growing past this many bytes.
pub(super) const GROUP_BYTES: u64 = 16 << 20;

/// Appends waiting for the writer.
#[derive(Default)]
pub(super) struct Inbox {
    state: Mutex<State>,
    wake: Condvar,
}

#[derive(Default)]
struct State {
    waiting: VecDeque<Append>,
    /// Bytes of `waiting`.
    bytes: u64,
    writer: Writer,
    /// While gathering: the waiting bytes that fill the open group.
    room: u64,
    closed: bool,
}

/// What the writer is doing, which decides whether an append wakes it.
#[derive(Default, Clone, Copy, PartialEq, Debug)]
enum Writer {
    /// Writing or syncing: it looks again when it is done.
    #[default]
    Busy,
    /// Waiting for a first append.
    Idle,
    /// Holding a group open for requests on their way.
    Gathering,
}

/// What the writer's wait for a first append ended with.
#[derive(Debug, PartialEq)]
pub(super) enum First {
    /// Appends are waiting.
    Got,
    /// Nothing came within the timeout.
    TimedOut,
    /// Closed, and nothing is left.
    Closed,
}

impl Inbox {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hands `a` to the writer and tells whether it woke it; `None` when the queue is
    /// closed (`a` is dropped, so its caller hears `Closed`). `on_the_way` counts the
    /// admitted requests that have not appended yet, this one excluded.
    pub(super) fn send(&self, a: Append, on_the_way: impl FnOnce() -> u64) -> Option<bool> {
        let mut s = self.lock();
        if s.closed {
            return None;
        }
        s.bytes += a.prepared.size();
        s.waiting.push_back(a);
        let wake = match s.writer {
            Writer::Busy => false,
            Writer::Idle => true,
            Writer::Gathering => s.bytes >= s.room || on_the_way() == 0,
        };
        drop(s);
        if wake {
            self.wake.notify_one();
        }
        Some(wake)
    }

    /// Refuses further appends; the writer takes what is waiting, then sees
    /// [`First::Closed`].
    pub(super) fn close(&self) {
        self.lock().closed = true;
        self.wake.notify_one();
    }

    /// The writer is gone (it ended, or panicked): closes, and drops what waits, whose
    /// callers then hear `Closed` instead of waiting for ever.
    pub(super) fn abandon(&self) {
        let mut s = self.lock();
        s.closed = true;
        s.bytes = 0;
        let waiting = std::mem::take(&mut s.waiting);
        drop(s);
        drop(waiting);
    }

    /// The writer waits up to `timeout` for an append.
    pub(super) fn wait_first(&self, timeout: Duration) -> First {
        let deadline = Instant::now() + timeout;
        let mut s = self.lock();
        loop {
            if !s.waiting.is_empty() {
                s.writer = Writer::Busy;
                return First::Got;
            }
            if s.closed {
                return First::Closed;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                s.writer = Writer::Busy;
                return First::TimedOut;
            }
            s.writer = Writer::Idle;
            s = self.wake.wait_timeout(s, left).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    /// Starts a group: moves waiting appends into the empty `group` up to
    /// [`GROUP_BYTES`]; returns the group's bytes.
    pub(super) fn take(&self, group: &mut Vec<Append>) -> u64 {
        let mut bytes = 0;
        Self::take_locked(&mut self.lock(), group, &mut bytes);
        bytes
    }

    fn take_locked(s: &mut State, group: &mut Vec<Append>, bytes: &mut u64) {
        while *bytes < GROUP_BYTES {
            let Some(a) = s.waiting.pop_front() else { break };
            let size = a.prepared.size();
            s.bytes -= size;
            *bytes += size;
            group.push(a);
        }
    }

    /// Holds the group open until `deadline`, or until it is full or `on_the_way` says
    /// nobody else is coming, then takes what came; returns the group's bytes.
    pub(super) fn gather_until(&self, deadline: Instant, group: &mut Vec<Append>, mut bytes: u64, on_the_way: impl Fn() -> u64) -> u64 {
        let mut s = self.lock();
        s.writer = Writer::Gathering;
        s.room = GROUP_BYTES.saturating_sub(bytes);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || s.bytes >= s.room || on_the_way() == 0 {
                break;
            }
            s = self.wake.wait_timeout(s, left).unwrap_or_else(|e| e.into_inner()).0;
        }
        s.writer = Writer::Busy;
        Self::take_locked(&mut s, group, &mut bytes);
        bytes
    }
}

/// The writer thread's hold on the inbox: however the thread ends (a panic included),
/// dropping it abandons the inbox, so no append is left waiting for a writer that is gone.
pub(super) struct WriterEnd(pub(super) Arc<Inbox>);

impl Drop for WriterEnd {
    fn drop(&mut self) {
        self.0.abandon();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::disk::record::Prepared;
    use crate::signal::Signal;
    use std::sync::atomic::{AtomicU64, Ordering};

    fn append(len: usize) -> Append {
        let prepared = Prepared::new(0, 1, Signal::Traces, 1, bytes::Bytes::new(), bytes::Bytes::from(vec![0u8; len]));
        Append { prepared, done: tokio::sync::oneshot::channel().0 }
    }

    #[test]
    fn appends_to_a_busy_writer_wait_for_it_and_come_in_order() {
        let inbox = Inbox::default();
        for len in [10, 20, 30] {
            assert_eq!(inbox.send(append(len), || 0), Some(false), "a busy writer is not woken");
        }
        assert_eq!(inbox.wait_first(Duration::ZERO), First::Got);
        let mut group = Vec::new();
        let bytes = inbox.take(&mut group);
        let sizes: Vec<u64> = group.iter().map(|a| a.prepared.size()).collect();
        assert_eq!(bytes, sizes.iter().sum::<u64>());
        assert!(sizes.windows(2).all(|w| w[0] < w[1]), "in order: {sizes:?}");
        assert_eq!(inbox.wait_first(Duration::from_millis(1)), First::TimedOut);
    }

    #[test]
    fn a_group_stops_at_its_byte_cap() {
        let inbox = Inbox::default();
        let big = (GROUP_BYTES / 2) as usize;
        for _ in 0..3 {
            assert!(inbox.send(append(big), || 0).is_some());
        }
        let mut group = Vec::new();
        inbox.take(&mut group);
        assert_eq!(group.len(), 2, "the third waits for the next group");
        group.clear();
        inbox.take(&mut group);
        assert_eq!(group.len(), 1);
    }

    #[test]
    fn closing_refuses_new_appends_and_ends_the_writer_after_what_waits() {
        let inbox = Inbox::default();
        assert!(inbox.send(append(1), || 0).is_some());
        inbox.close();
        assert_eq!(inbox.send(append(1), || 0), None, "closed");
        assert_eq!(inbox.wait_first(Duration::from_secs(5)), First::Got, "what came before still goes");
        inbox.take(&mut Vec::new());
        assert_eq!(inbox.wait_first(Duration::from_secs(5)), First::Closed);
    }

    #[test]
    fn an_idle_writer_is_woken_by_an_append() {
        let inbox = Arc::new(Inbox::default());
        let writer = {
            let inbox = Arc::clone(&inbox);
            std::thread::spawn(move || {
                let t = Instant::now();
                (inbox.wait_first(Duration::from_secs(30)), t.elapsed())
            })
        };
        while inbox.lock().writer != Writer::Idle {
            std::thread::yield_now();
        }
        assert_eq!(inbox.send(append(1), || 0), Some(true));
        let (first, took) = writer.join().unwrap();
        assert_eq!(first, First::Got);
        assert!(took < Duration::from_secs(10), "{took:?}");
    }

    #[test]
    fn a_gone_writer_answers_what_waits_and_refuses_the_rest() {
        let inbox = Arc::new(Inbox::default());
        let (done, mut answer) = tokio::sync::oneshot::channel();
        assert!(inbox.send(Append { done, ..append(1) }, || 0).is_some());
        // The writer thread panics while holding its end.
        let end = WriterEnd(Arc::clone(&inbox));
        let gone = std::thread::spawn(move || {
            let _end = end;
            panic!("a writer bug");
        });
        assert!(gone.join().is_err());
        // Dropped, not left waiting: the caller's end sees the sender gone.
        assert_eq!(answer.try_recv(), Err(tokio::sync::oneshot::error::TryRecvError::Closed));
        assert_eq!(inbox.send(append(1), || 0), None);
    }

    /// The gathering writer sleeps through appends while more are on their way and is
    /// woken by the last, long before its deadline.
    #[test]
    fn a_gathering_writer_wakes_for_the_last_arrival_not_each() {
        let inbox = Arc::new(Inbox::default());
        let on_the_way = Arc::new(AtomicU64::new(3));
        let writer = {
            let (inbox, on_the_way) = (Arc::clone(&inbox), Arc::clone(&on_the_way));
            std::thread::spawn(move || {
                let mut group = Vec::new();
                let t = Instant::now();
                let bytes = inbox.gather_until(t + Duration::from_secs(30), &mut group, 0, || on_the_way.load(Ordering::SeqCst));
                (group.len(), bytes, t.elapsed())
            })
        };
        while inbox.lock().writer != Writer::Gathering {
            std::thread::yield_now();
        }
        let mut woke = Vec::new();
        for left in [2, 1, 0] {
            on_the_way.store(left, Ordering::SeqCst);
            woke.push(inbox.send(append(100), || on_the_way.load(Ordering::SeqCst)).unwrap());
        }
        assert_eq!(woke, [false, false, true]);
        let (n, bytes, took) = writer.join().unwrap();
        assert_eq!(n, 3);
        assert!(bytes > 300);
        assert!(took < Duration::from_secs(10), "woken by the last arrival, not the deadline: {took:?}");
    }
}
