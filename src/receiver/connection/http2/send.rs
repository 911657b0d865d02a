//! Sending a response on an HTTP/2 stream: the head tidied as hyper would, then the body
//! a frame at a time within the peer's window.

use bytes::Bytes;
use h2::{Reason, SendStream};
use http::header::{HeaderName, HeaderValue, CONNECTION, CONTENT_LENGTH, DATE, TRANSFER_ENCODING, UPGRADE};
use http_body::Body;
use std::future::poll_fn;
use std::pin::pin;
use std::task::Poll;

/// What hyper does to a response head on its way out: a `date`, a `content-length` when
/// the body's size is known, and no connection-specific fields (HTTP/2 forbids them, RFC
/// 9113 8.2.2, and h2 would refuse the head).
pub(super) fn tidy_headers(headers: &mut http::HeaderMap, body: &axum::body::Body) {
    if headers.keys().any(is_connection_field) {
        for name in
            [CONNECTION, TRANSFER_ENCODING, UPGRADE, HeaderName::from_static("keep-alive"), HeaderName::from_static("proxy-connection")]
        {
            headers.remove(name);
        }
    }
    if let http::header::Entry::Vacant(e) = headers.entry(CONTENT_LENGTH) {
        if let Some(n) = body.size_hint().exact() {
            e.insert(HeaderValue::from(n));
        }
    }
    if let http::header::Entry::Vacant(e) = headers.entry(DATE) {
        e.insert(http_date());
    }
}

fn is_connection_field(name: &HeaderName) -> bool {
    name == CONNECTION || name == TRANSFER_ENCODING || name == UPGRADE || name == "keep-alive" || name == "proxy-connection"
}

/// The `date` value, formatted once per second per thread.
fn http_date() -> HeaderValue {
    thread_local! {
        static CACHED: std::cell::RefCell<(u64, HeaderValue)> = const { std::cell::RefCell::new((0, HeaderValue::from_static(""))) };
    }
    let now = std::time::SystemTime::now();
    let second = now.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    CACHED.with(|c| {
        let mut c = c.borrow_mut();
        if c.0 != second {
            let text = httpdate::fmt_http_date(now);
            *c = (second, HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static("")));
        }
        c.1.clone()
    })
}

/// Sends a response body, a frame at a time, each once the peer's window has room for
/// at least a byte of it (so no more than a frame is ever buffered beyond the window).
pub(super) async fn send_body(body: axum::body::Body, send: &mut SendStream<Bytes>) {
    let mut body = pin!(body);
    loop {
        let frame = poll_fn(|cx| match send.poll_reset(cx) {
            Poll::Ready(_) => Poll::Ready(None),
            Poll::Pending => body.as_mut().poll_frame(cx).map(Some),
        })
        .await;
        let Some(frame) = frame else { return };
        match frame {
            None => {
                let _ = send.send_data(Bytes::new(), true);
                return;
            }
            Some(Err(e)) => {
                tracing::debug!(error = %e, "response body failed; stream reset");
                send.send_reset(Reason::INTERNAL_ERROR);
                return;
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => {
                    let end = body.is_end_stream();
                    // A last frame of at most one DATA frame's size goes out as it is
                    // (h2 holds it until the window allows); a longer body waits for
                    // window room frame by frame.
                    let small_last = end && data.len() <= 16 * 1024;
                    if !data.is_empty() && !small_last {
                        send.reserve_capacity(1);
                        match poll_fn(|cx| send.poll_capacity(cx)).await {
                            Some(Ok(_)) => {}
                            _ => return,
                        }
                    }
                    if send.send_data(data, end).is_err() || end {
                        return;
                    }
                }
                Err(frame) => {
                    if let Ok(trailers) = frame.into_trailers() {
                        let _ = send.send_trailers(trailers);
                    } else {
                        let _ = send.send_data(Bytes::new(), true);
                    }
                    return;
                }
            },
        }
    }
}
