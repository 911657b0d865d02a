//! Admitted requests leave the connection's task before they do any work.
//!
//! `h2conn` polls each new HTTP/2 stream once on its connection's task, so that a
//! refusal (ready on that first poll, before any body byte is read) needs no task of its
//! own. An admitted request must not do its work (reading, decompressing, decoding the
//! body) there: streams of one connection would then run one after another instead of
//! on all cores. [`ProbeBody`] wraps every HTTP/2 request body and, during that first
//! poll only, answers the first read with `Pending` (after waking the task, so nothing
//! stalls): whatever reads the body gets no further, the stream stays pending and goes
//! to its own task, and there the read goes on.

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::cell::Cell;
use std::pin::Pin;
use std::task::{Context, Poll};

thread_local! {
    /// Set while `h2conn` polls a new stream on its connection's task.
    pub(crate) static ON_CONNECTION_TASK: Cell<bool> = const { Cell::new(false) };
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

    /// On the connection's task the first read waits (and wakes); anywhere else, and
    /// after that, reads go through.
    #[tokio::test]
    async fn the_first_read_on_the_connection_task_waits_a_turn() {
        let mut body = std::pin::pin!(ProbeBody::new(Full::new(Bytes::from_static(b"spans"))));
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        ON_CONNECTION_TASK.set(true);
        assert!(body.as_mut().poll_frame(&mut cx).is_pending());
        ON_CONNECTION_TASK.set(false);
        let bytes = body.collect().await.unwrap().to_bytes();
        assert_eq!(&bytes[..], b"spans");
    }
}
