//! Refusals answered by the connection that read them, without a task per stream.
//!
//! hyper hands each new HTTP/2 stream to its executor, and `TokioExecutor` spawns a task
//! for it. A refused request (throttle, quota, no token) needs no task: its answer is
//! ready the first time its future is polled, before any body byte is read. A task per
//! refusal costs a spawn, a trip through the scheduler, a wake of the connection task
//! from another task and the task's teardown; perf put that at several per cent of a
//! refusal's CPU.
//!
//! So each connection gets its own executor, [`ConnExec`], which only queues the new
//! streams. [`InlineFirst`] wraps the connection's future: after every poll of the
//! connection it polls each queued stream once, on the connection's task. A stream that
//! finishes there (a refusal) is done; one that is still pending is spawned as before.
//!
//! An admitted request must not do its work (reading, decompressing, decoding the body)
//! on the connection's task: streams of one connection would then run one after another
//! instead of on all cores. [`ProbeBody`] wraps every request body and, on that first
//! poll only, answers the first read with `Pending` (after waking the task, so nothing
//! stalls): whatever reads the body gets no further, the stream stays pending and goes to
//! its own task, and there the read goes on. Over HTTP/1.1 hyper polls the service on the
//! connection's task itself; nothing is queued and [`ProbeBody`] never holds a read back.

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

thread_local! {
    /// Set while [`InlineFirst`] polls a queued stream on its connection's task.
    static ON_CONNECTION_TASK: Cell<bool> = const { Cell::new(false) };
}

/// A stream's future, boxed to sit in the queue.
type StreamTask = Pin<Box<dyn Future<Output = ()> + Send>>;

/// hyper's executor for one connection: queues what hyper would spawn.
#[derive(Clone, Default)]
pub struct ConnExec {
    queued: Arc<Mutex<Vec<StreamTask>>>,
}

impl<F> hyper::rt::Executor<F> for ConnExec
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, fut: F) {
        self.queued.lock().unwrap_or_else(PoisonError::into_inner).push(Box::pin(fut));
    }
}

pin_project_lite::pin_project! {
    /// A connection's future that polls its new streams once on its own task before
    /// spawning the ones still pending.
    pub struct InlineFirst<C> {
        #[pin]
        conn: C,
        queued: Arc<Mutex<Vec<StreamTask>>>,
        // The queue's previous allocation, reused.
        spare: Vec<StreamTask>,
    }
}

impl<C> InlineFirst<C> {
    /// Wraps `conn`, served with `exec` as its executor.
    pub fn new(conn: C, exec: &ConnExec) -> Self {
        InlineFirst { conn, queued: Arc::clone(&exec.queued), spare: Vec::new() }
    }
}

impl<C: Future> Future for InlineFirst<C> {
    type Output = C::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<C::Output> {
        let this = self.project();
        let out = this.conn.poll(cx);
        // A stream polled here may queue no new ones, but loop in case hyper ever does.
        loop {
            std::mem::swap(&mut *this.queued.lock().unwrap_or_else(PoisonError::into_inner), this.spare);
            if this.spare.is_empty() {
                break;
            }
            for mut task in this.spare.drain(..) {
                ON_CONNECTION_TASK.set(true);
                // A panic in one stream must not end the connection's other streams (as
                // it would not have with a task of its own): the stream is dropped, which
                // resets it.
                let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| task.as_mut().poll(cx)));
                ON_CONNECTION_TASK.set(false);
                match polled {
                    Ok(Poll::Ready(())) => {}
                    Ok(Poll::Pending) => {
                        tokio::spawn(task);
                    }
                    Err(_) => tracing::error!("an HTTP/2 stream panicked; it was reset"),
                }
            }
        }
        out
    }
}

pin_project_lite::pin_project! {
    /// A request body whose first read, on the connection's task, waits one turn (see
    /// the module doc).
    pub struct ProbeBody<B> {
        #[pin]
        inner: B,
        checked: bool,
    }
}

impl<B> ProbeBody<B> {
    /// Wraps a request body.
    pub fn new(inner: B) -> Self {
        ProbeBody { inner, checked: false }
    }
}

impl<B: Body<Data = Bytes>> Body for ProbeBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.project();
        if !*this.checked {
            if ON_CONNECTION_TASK.get() {
                // Woken at once: the stream's own task polls it again right after the
                // spawn, and this wake only costs the connection a spare poll.
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            *this.checked = true;
        }
        this.inner.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, Full};
    use hyper::rt::Executor;

    /// A queued stream that finishes on its first poll runs on the connection's task;
    /// one that reads its body is held back there and finishes on a task of its own.
    #[tokio::test]
    async fn refusals_finish_inline_and_body_reads_move_to_their_own_task() {
        let exec = ConnExec::default();
        let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<(&'static str, bool)>();
        let tx = done_tx.clone();
        let refused = async move {
            // No body read: finishes where it is first polled.
            tx.send(("refused", ON_CONNECTION_TASK.get())).unwrap();
        };
        let tx = done_tx.clone();
        let admitted = async move {
            let body = ProbeBody::new(Full::new(Bytes::from_static(b"spans")));
            let bytes = body.collect().await.unwrap().to_bytes();
            assert_eq!(&bytes[..], b"spans");
            tx.send(("admitted", ON_CONNECTION_TASK.get())).unwrap();
        };
        // The "connection": ready at once, after hyper queued two streams.
        exec.execute(refused);
        exec.execute(admitted);
        InlineFirst::new(std::future::ready(()), &exec).await;
        let mut seen = vec![done_rx.recv().await.unwrap(), done_rx.recv().await.unwrap()];
        seen.sort();
        assert_eq!(seen, vec![("admitted", false), ("refused", true)]);
        assert!(exec.queued.lock().unwrap().is_empty());
    }

    /// A stream that panics on the connection's task is dropped; the connection's future
    /// still completes.
    #[tokio::test]
    async fn a_panicking_stream_does_not_take_the_connection_down() {
        let exec = ConnExec::default();
        exec.execute(async { panic!("boom") });
        let out = InlineFirst::new(std::future::ready(7), &exec).await;
        assert_eq!(out, 7);
    }
}
