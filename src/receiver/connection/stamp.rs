//! How long a request waited before weir looked at it.
//!
//! On a busy core the queue that hurts is not inside weir: requests wait in the socket's
//! receive buffer and in the runtime's run queue until their connection task is polled,
//! and by the time the throttle sees a request it is alone (one core runs one handler at
//! a time, so an in-flight count stays at one however long the line outside is). The
//! kernel knows when each byte arrived: with `SO_TIMESTAMPNS` every `recvmsg` returns the
//! arrival time of the data it hands over. [`Stamped`] reads a TCP connection that way
//! and keeps the latest arrival time; [`RxStamp`], put into each request's extensions,
//! turns it into the time the request has been waiting (the admission layer
//! `queue_delay` refuses on it).
//!
//! The stamp is the arrival of the newest data read, so a request that trickles in looks
//! fresh: the error is always towards "waited less", never a refusal for a wait that did
//! not happen. Data the kernel did not stamp makes the wait unknown (`None`), never the
//! wait of older bytes. The listening socket asks for stamps too ([`enable_on_listener`]),
//! which keeps the kernel stamping for weir's whole life.
//!
//! Being the one place every plaintext connection's bytes pass through, the wrapper also
//! saves system calls: HTTP/2 writes are gathered across streams
//! (`Stamped::hold_once`), large bodies are read up to 64 KiB more per call
//! (`SPILL_BYTES`), and a read that drains the socket is not followed by one that can
//! only return EAGAIN. The first two apply to connections that open with the HTTP/2
//! preface; a TLS connection opens with a TLS handshake and its bytes are encrypted here,
//! so it gets only the last.

use std::io;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

/// The arrival time (nanoseconds since the Unix epoch, the kernel's real-time clock) of
/// the newest bytes read from one connection (0 until a stamped read), and a switch that
/// stops the connection's reads (see [`RxStamp::pause_reads`]).
#[derive(Debug, Clone, Default)]
pub struct RxStamp(Arc<Shared>);

#[derive(Debug, Default)]
struct Shared {
    at: AtomicU64,
    /// Reads are paused: the connection's reads wait until the pause ends.
    paused: AtomicBool,
    /// The connection's reader, waiting for the pause to end.
    reader: futures_util::task::AtomicWaker,
    /// Weir answered with `Connection: close` and left a request body unread: close
    /// the connection with a lingering close (see `server::linger`).
    linger: AtomicBool,
    /// Requests (HTTP/2: streams) being handled on the connection.
    in_flight: AtomicU32,
    /// When bytes were last read, or a request last finished ([`mono_ms`]).
    active_ms: AtomicU64,
    /// When the first bytes arrived with no request in flight: an HTTP/1.1 request head
    /// being received ([`mono_ms`], 0 = none).
    head_since_ms: AtomicU64,
    /// The server wants the connection closed once nothing is in flight (see
    /// [`RxStamp::evict`]).
    evict: AtomicBool,
    /// The connection's task, woken by [`RxStamp::evict`].
    conn: futures_util::task::AtomicWaker,
}

/// Milliseconds on a monotonic clock that starts at 1 (0 means "never").
pub fn mono_ms() -> u64 {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    EPOCH.get_or_init(std::time::Instant::now).elapsed().as_millis() as u64 + 1
}

/// A request in flight on its connection; dropped when it is answered.
#[derive(Debug)]
pub struct Busy(RxStamp);

impl Drop for Busy {
    fn drop(&mut self) {
        let s = &self.0 .0;
        s.active_ms.store(mono_ms(), Ordering::Relaxed);
        s.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Keeps a connection's reads paused until dropped.
#[derive(Debug)]
pub struct ReadPause(RxStamp);

impl Drop for ReadPause {
    fn drop(&mut self) {
        self.0 .0.paused.store(false, Ordering::Release);
        self.0 .0.reader.wake();
    }
}

impl RxStamp {
    /// How long ago the newest bytes read from this connection arrived; `None` when that
    /// is unknown (nothing stamped read yet). A clock stepped back reads as no wait.
    pub fn waited_nanos(&self) -> Option<u64> {
        let at = self.0.at.load(Ordering::Relaxed);
        (at != 0).then(|| realtime_nanos().saturating_sub(at))
    }

    /// Stops reading from the connection until the guard is dropped. A held refusal of an
    /// HTTP/1.x request uses it: hyper reads a body ahead into memory whether or not
    /// anyone wants it (up to about 400 KiB per connection, enough for many held refusals
    /// to exhaust a container: `docs/overload.md#measurements-behind-the-defaults`);
    /// paused, the body stays in the kernel's socket buffer and TCP flow control stops
    /// the client.
    pub fn pause_reads(&self) -> ReadPause {
        self.0.paused.store(true, Ordering::Release);
        ReadPause(self.clone())
    }

    /// Asks for a lingering close when the connection ends: weir closes it with a request
    /// body unread.
    pub fn linger_on_close(&self) {
        self.0.linger.store(true, Ordering::Relaxed);
    }

    /// Whether [`RxStamp::linger_on_close`] was asked for.
    pub fn wants_linger(&self) -> bool {
        self.0.linger.load(Ordering::Relaxed)
    }

    /// A request (HTTP/2: a stream) is being handled until the guard is dropped.
    pub fn busy(&self) -> Busy {
        self.0.in_flight.fetch_add(1, Ordering::AcqRel);
        self.0.head_since_ms.store(0, Ordering::Relaxed);
        Busy(self.clone())
    }

    /// Requests in flight on the connection.
    pub fn in_flight(&self) -> u32 {
        self.0.in_flight.load(Ordering::Acquire)
    }

    /// How long the connection has been idle at `now` ([`mono_ms`]): nothing in flight,
    /// nothing read since; `None` while a request is in flight. `opened` counts as
    /// activity (a connection that never sent anything is idle since it opened).
    pub fn idle_ms(&self, now: u64, opened: u64) -> Option<u64> {
        (self.in_flight() == 0).then(|| now.saturating_sub(self.0.active_ms.load(Ordering::Relaxed).max(opened)))
    }

    /// How long nothing has been read, at `now`.
    pub fn quiet_ms(&self, now: u64) -> u64 {
        now.saturating_sub(self.0.active_ms.load(Ordering::Relaxed))
    }

    /// How long an HTTP/1.1 request head has been arriving at `now`, if one is.
    pub fn head_waiting_ms(&self, now: u64) -> Option<u64> {
        let since = self.0.head_since_ms.load(Ordering::Relaxed);
        (since != 0 && self.in_flight() == 0).then(|| now.saturating_sub(since))
    }

    /// Asks the connection to close once nothing is in flight (the server is at its
    /// connection cap and this connection is the least useful).
    pub fn evict(&self) {
        self.0.evict.store(true, Ordering::Release);
        self.0.conn.wake();
    }

    /// Whether [`RxStamp::evict`] was asked for.
    pub fn eviction_asked(&self) -> bool {
        self.0.evict.load(Ordering::Acquire)
    }

    /// Whether [`RxStamp::evict`] was asked for; registers `cx` to hear of it.
    pub fn evicted(&self, cx: &mut Context<'_>) -> bool {
        self.0.conn.register(cx.waker());
        self.0.evict.load(Ordering::Acquire)
    }

    /// Bytes were read from the connection.
    fn on_read(&self) {
        let now = mono_ms();
        self.0.active_ms.store(now, Ordering::Relaxed);
        if self.0.in_flight.load(Ordering::Relaxed) == 0 && self.0.head_since_ms.load(Ordering::Relaxed) == 0 {
            self.0.head_since_ms.store(now, Ordering::Relaxed);
        }
    }

    /// Whether reads must wait; registers `cx` to be woken when the pause ends.
    fn paused(&self, cx: &mut Context<'_>) -> bool {
        if !self.0.paused.load(Ordering::Acquire) {
            return false;
        }
        self.0.reader.register(cx.waker());
        // Ended between the check and the registration: read now.
        self.0.paused.load(Ordering::Acquire)
    }

    /// A stamp that says the data arrived at `nanos` (Unix epoch, real-time clock): for
    /// tests and benches.
    pub fn arrived_at(nanos: u64) -> Self {
        let s = RxStamp::default();
        s.set(nanos);
        s
    }

    fn set(&self, nanos: u64) {
        self.0.at.store(nanos, Ordering::Relaxed);
    }
}

/// Now, in the stamps' clock.
pub fn realtime_nanos() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// A TCP connection whose reads record the kernel's arrival time of the data.
#[derive(Debug)]
pub struct Stamped {
    inner: TcpStream,
    stamp: RxStamp,
    /// `SO_TIMESTAMPNS` could be set: read with `recvmsg`; otherwise plain reads.
    on: bool,
    /// What the connection turned out to be, from its first bytes.
    kind: Kind,
    /// A write of this HTTP/2 connection was put off once already (see [`Stamped::hold_once`]).
    held: bool,
    /// The socket's last write attempt found it full. No write is put off while it is:
    /// a put-off write wakes its own task, and a connection whose peer stopped reading
    /// would spin a core on that wake (h2 flushes more than once per poll) instead of
    /// waiting for the socket to take bytes.
    blocked: bool,
    /// Read-ahead (see [`SPILL_BYTES`]): bytes `spill_pos..` are next.
    spill: Option<Vec<u8>>,
    spill_pos: usize,
}

/// Read-ahead for an HTTP/2 connection that sends more than its reader asks for at a time. h2
/// reads about 8 KiB per call, so a large body costs dozens of `recvmsg` calls, and for a
/// refused request (whose body h2 reads only to throw away) those calls are most of what
/// the refusal costs. Once a read fills the caller's buffer (more is likely waiting), later reads pass
/// this much room as a second iovec: one call takes up to 64 KiB more, served to the
/// next reads by a copy in user space, which costs far less than the calls it saves. A
/// read that comes up short frees it again, so idle connections hold none. HTTP/1.x is
/// left alone: hyper grows its own read buffer after full reads, so the extra copy would
/// only cost there (`docs/benchmarks.md#measurements-behind-the-decoders`).
const SPILL_BYTES: usize = 64 * 1024;

/// What the first bytes read from a connection say it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Unknown,
    /// Opened with the HTTP/2 client preface (h2c with prior knowledge, gRPC).
    Http2,
    /// Anything else: HTTP/1.x, or a preface split across reads.
    Other,
}

/// What a connection's first read must start with to count as HTTP/2: the client
/// preface's first line (the rest may arrive in a later read).
/// The first bytes of every HTTP/2 connection, the client preface (RFC 9113 3.4).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

const H2_PREFACE: &[u8] = PREFACE.split_at(16).0;

/// Asks the kernel to timestamp what arrives on `fd`; false if it refused.
fn ask_for_stamps(fd: libc::c_int) -> bool {
    let one: libc::c_int = 1;
    // SAFETY: a socket fd and a c_int option value of the size given.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    rc == 0
}

/// Turns stamping on for a listening socket. The kernel stamps packets only while some
/// socket wants stamps, and switches that on a moment after the first one asks; the
/// listener asks for weir's whole life, so even the first bytes of a new connection after
/// an idle spell carry their arrival time. Accepted sockets inherit the option.
pub fn enable_on_listener(listener: &tokio::net::TcpListener) -> bool {
    ask_for_stamps(listener.as_raw_fd())
}

impl Stamped {
    /// Wraps `inner`, asking the kernel for receive timestamps.
    pub fn new(inner: TcpStream) -> Self {
        let on = ask_for_stamps(inner.as_raw_fd());
        Stamped { inner, stamp: RxStamp::default(), on, kind: Kind::Unknown, held: false, blocked: false, spill: None, spill_pos: 0 }
    }

    /// Notes what the connection is from the first bytes it sent.
    fn classify(&mut self, first: &[u8]) {
        if self.kind == Kind::Unknown && !first.is_empty() {
            self.kind = if first.starts_with(H2_PREFACE) { Kind::Http2 } else { Kind::Other };
        }
    }

    /// Write coalescing for HTTP/2. An admitted stream's response is made by its own
    /// task (refusals are answered on the connection's task, see `receiver::connection::http2`),
    /// and each one wakes the connection task, which writes what is ready at once: one
    /// `writev` per response. On loopback or a fast LAN that system call (with the
    /// peer's receive path it sets off) is most of what a small response costs
    /// (`docs/benchmarks.md#measurements-behind-the-decoders`).
    /// So the first attempt to write is put off by one turn of the scheduler: the
    /// connection task wakes itself and yields, the other streams' tasks that are
    /// already runnable finish their responses, and the next attempt writes them all
    /// in one call. A connection with nothing else to do waits one scheduler turn
    /// (microseconds), never for a timer. HTTP/1.x has one response in flight per
    /// connection and nothing to gather, so it is left alone.
    fn hold_once(&mut self, cx: &mut Context<'_>) -> bool {
        if self.kind != Kind::Http2 || self.blocked {
            return false;
        }
        self.held = !self.held;
        if self.held {
            cx.waker().wake_by_ref();
        }
        self.held
    }

    /// The connection's stamp, to hand to its requests.
    pub fn stamp(&self) -> RxStamp {
        self.stamp.clone()
    }
}

/// One `recvmsg` into `buf` and then, if given, `more`: bytes read and the arrival time,
/// if the kernel gave one.
fn recv_stamped(
    fd: libc::c_int,
    buf: &mut [std::mem::MaybeUninit<u8>],
    more: Option<&mut [std::mem::MaybeUninit<u8>]>,
) -> io::Result<(usize, Option<u64>)> {
    // Room for one cmsg carrying a timespec, u64-aligned as cmsghdr needs.
    let mut control = [0u64; 8];
    let mut iov = [libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() }; 2];
    let mut iovlen = 1;
    if let Some(more) = more {
        iov[1] = libc::iovec { iov_base: more.as_mut_ptr().cast(), iov_len: more.len() };
        iovlen = 2;
    }
    // SAFETY: zeroed msghdr is a valid "no name, no control" header; the fields set below
    // point at live buffers of the lengths given.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = iovlen;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: fd is a socket; msg describes writable buffers owned by this frame.
    let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_DONTWAIT) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut at = None;
    // SAFETY: the CMSG_* macros walk the control buffer the kernel filled, within
    // msg_controllen; the payload of an SCM_TIMESTAMPNS message is a timespec.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                at = Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((n as usize, at))
}

/// Reads a connection's incoming bytes only to throw them away (a lingering close).
pub trait Discard {
    /// Discards up to `max` bytes that have arrived: how many (0 at end of stream).
    fn poll_discard(&mut self, cx: &mut Context<'_>, max: usize) -> Poll<io::Result<usize>>;
}

impl Discard for Stamped {
    /// `recv` with `MSG_TRUNC`: TCP drops the bytes in the kernel instead of copying them
    /// out (tcp(7)). A lingering close after a refused large body reads all of it, and
    /// under a flood of such refusals the copy alone costs a noticeable share of the core
    /// (`docs/benchmarks.md#measurements-behind-the-decoders`).
    fn poll_discard(&mut self, cx: &mut Context<'_>, max: usize) -> Poll<io::Result<usize>> {
        loop {
            ready!(self.inner.poll_read_ready(cx))?;
            let fd = self.inner.as_raw_fd();
            let mut drained = None;
            let read = self.inner.try_io(Interest::READABLE, || {
                // SAFETY: with MSG_TRUNC a TCP socket writes nothing to the buffer, which
                // may be null; `max` only bounds how much is dropped.
                let n = unsafe { libc::recv(fd, std::ptr::null_mut(), max, libc::MSG_TRUNC | libc::MSG_DONTWAIT) };
                match n {
                    n if n < 0 => Err(io::Error::last_os_error()),
                    n if n > 0 && (n as usize) < max => {
                        drained = Some(n as usize);
                        Err(io::ErrorKind::WouldBlock.into())
                    }
                    n => Ok(n as usize),
                }
            });
            match read.or_else(|e| drained.ok_or(e)) {
                Ok(n) => return Poll::Ready(Ok(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Discard for tokio_rustls::server::TlsStream<S> {
    /// TLS records must be decrypted to be read past: an ordinary read into scratch.
    fn poll_discard(&mut self, cx: &mut Context<'_>, max: usize) -> Poll<io::Result<usize>> {
        let mut scratch = [0u8; 16 << 10];
        let len = max.min(scratch.len());
        let mut buf = ReadBuf::new(&mut scratch[..len]);
        ready!(Pin::new(self).poll_read(cx, &mut buf))?;
        Poll::Ready(Ok(buf.filled().len()))
    }
}

impl AsyncRead for Stamped {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.stamp.paused(cx) {
            return Poll::Pending;
        }
        if !this.on {
            let before = buf.filled().len();
            ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
            if buf.filled().len() > before {
                this.stamp.on_read();
            }
            this.classify(&buf.filled()[before..]);
            return Poll::Ready(Ok(()));
        }
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        if let Some(spill) = &this.spill {
            if this.spill_pos < spill.len() {
                let take = buf.remaining().min(spill.len() - this.spill_pos);
                buf.put_slice(&spill[this.spill_pos..this.spill_pos + take]);
                this.spill_pos += take;
                return Poll::Ready(Ok(()));
            }
        }
        loop {
            ready!(this.inner.poll_read_ready(cx))?;
            let fd = this.inner.as_raw_fd();
            // SAFETY: recvmsg only writes initialised bytes into the unfilled part, and
            // exactly the bytes it wrote are marked initialised below.
            let unfilled = unsafe { buf.unfilled_mut() };
            let want = unfilled.len();
            let more = this.spill.as_mut().map(|v| {
                v.clear();
                v.spare_capacity_mut()
            });
            let room = want + more.as_ref().map_or(0, |m| m.len());
            // A read that did not fill the room it was given drained the socket: tell
            // tokio so (a WouldBlock from the closure clears the readiness it cached)
            // and the next poll waits for epoll instead of making a `recvmsg` that can
            // only say EAGAIN. tokio's own TcpStream does the same.
            let mut drained = None;
            let read = this.inner.try_io(Interest::READABLE, || match recv_stamped(fd, unfilled, more)? {
                (n, at) if n > 0 && n < room => {
                    drained = Some((n, at));
                    Err(io::ErrorKind::WouldBlock.into())
                }
                got => Ok(got),
            });
            match read.or_else(|e| drained.ok_or(e)) {
                Ok((n, at)) => {
                    let first = n.min(want);
                    // SAFETY: the kernel wrote `first` bytes at the start of the unfilled part.
                    unsafe { buf.assume_init(first) };
                    buf.advance(first);
                    let filled = buf.filled();
                    this.classify(&filled[filled.len() - first..]);
                    match &mut this.spill {
                        // SAFETY: the kernel wrote the other `n - want` bytes at the start of
                        // the spill's spare capacity, which is at least that long.
                        Some(spill) if n > want => {
                            unsafe { spill.set_len(n - want) };
                            this.spill_pos = 0;
                        }
                        Some(_) if n < want => this.spill = None,
                        None if n == want && this.kind == Kind::Http2 => this.spill = Some(Vec::with_capacity(SPILL_BYTES)),
                        _ => {}
                    }
                    // No stamp (the kernel turns timestamping on a moment after the
                    // first socket asks): unknown, which reads as no wait, never as the
                    // wait of older bytes.
                    this.stamp.set(at.unwrap_or(0));
                    if n > 0 {
                        this.stamp.on_read();
                    }
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for Stamped {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.hold_once(cx) {
            return Poll::Pending;
        }
        let written = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.blocked = written.is_pending();
        written
    }

    fn poll_write_vectored(self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.hold_once(cx) {
            return Poll::Pending;
        }
        let written = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.blocked = written.is_pending();
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::time::Duration;
    use tokio::io::AsyncReadExt;

    const MS: u64 = 1_000_000;

    /// Real sockets: bytes that sat in the kernel for 80 ms before the read report about
    /// that wait; bytes read as they arrive report a much shorter one.
    #[tokio::test]
    async fn a_read_reports_how_long_its_bytes_waited() {
        let (mut client, mut server) = pair().await;
        let stamp = server.stamp();
        assert!(server.on, "SO_TIMESTAMPNS is available on Linux TCP sockets");
        assert_eq!(stamp.waited_nanos(), None, "nothing read yet");
        let mut buf = [0u8; 64];
        // The kernel switches timestamping on shortly after the first socket asks for it
        // (deferred work); until then reads carry no stamp and report no wait.
        for _ in 0..100 {
            client.write_all(b"x").unwrap();
            assert_eq!(server.read(&mut buf).await.unwrap(), 1);
            if stamp.0.at.load(Ordering::Relaxed) != 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_ne!(stamp.0.at.load(Ordering::Relaxed), 0, "no receive timestamp within a second");

        client.write_all(b"first").unwrap();
        tokio::time::sleep(Duration::from_millis(80)).await;
        let n = server.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"first");
        let waited = stamp.waited_nanos().expect("stamped");
        assert!((75 * MS..5_000 * MS).contains(&waited), "waited {waited} ns, want about 80 ms");

        client.write_all(b"second").unwrap();
        let n = server.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"second");
        let fresh = stamp.waited_nanos().expect("stamped");
        assert!(fresh < waited, "the newer bytes waited {fresh} ns, no less than the older {waited} ns");

        // Writes pass through, and the end of the stream reads as 0 bytes.
        tokio::io::AsyncWriteExt::write_all(&mut server, b"bye").await.unwrap();
        let mut got = [0u8; 3];
        std::io::Read::read_exact(&mut client, &mut got).unwrap();
        assert_eq!(&got, b"bye");
        drop(client);
        assert_eq!(server.read(&mut buf).await.unwrap(), 0);
    }

    async fn pair() -> (std::net::TcpStream, Stamped) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (client, Stamped::new(server))
    }

    /// Discarding drops exactly the bytes it counts: what follows is read intact, and
    /// the end of the stream reads as 0.
    #[tokio::test]
    async fn discarded_bytes_are_counted_and_what_follows_is_read_intact() {
        let (mut client, mut server) = pair().await;
        let body = vec![7u8; 300_000];
        let writer = std::thread::spawn(move || {
            client.write_all(&body).unwrap();
            client
        });
        let mut gone = 0;
        while gone < 300_000 {
            let n = std::future::poll_fn(|cx| server.poll_discard(cx, 300_000 - gone)).await.unwrap();
            assert!(n > 0, "end of stream after {gone} bytes");
            gone += n;
        }
        assert_eq!(gone, 300_000);
        let mut client = writer.join().unwrap();
        client.write_all(b"next").unwrap();
        let mut buf = [0u8; 16];
        let n = server.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"next");
        drop(client);
        let n = std::future::poll_fn(|cx| server.poll_discard(cx, 1024)).await.unwrap();
        assert_eq!(n, 0, "the end of the stream");
    }

    /// While a read pause is held, nothing is read even with data waiting (it stays in
    /// the kernel); dropping the pause wakes the waiting reader, which then reads it.
    #[tokio::test]
    async fn paused_reads_wait_for_the_pause_to_end() {
        let (mut client, mut server) = pair().await;
        client.write_all(b"POST / HTTP/1.1\r\n").unwrap();
        let mut buf = [0u8; 64];
        let n = server.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"POST / HTTP/1.1\r\n");
        let pause = server.stamp().pause_reads();
        client.write_all(b"body").unwrap();
        let waited = tokio::time::timeout(Duration::from_millis(200), server.read(&mut buf)).await;
        assert!(waited.is_err(), "read {waited:?} while paused");
        let reader = tokio::spawn(async move {
            let mut buf = [0u8; 64];
            let n = server.read(&mut buf).await.unwrap();
            buf[..n].to_vec()
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop(pause);
        let got = tokio::time::timeout(Duration::from_secs(5), reader).await.expect("the reader was not woken").unwrap();
        assert_eq!(got, b"body");
    }

    /// A large HTTP/2 body read through a small buffer (as h2 reads, 8 KiB at a time) arrives
    /// whole and in order: after a read fills the buffer the read-ahead comes into use,
    /// serves the following reads, and is let go once a read comes up short.
    #[tokio::test]
    async fn read_ahead_keeps_every_byte_in_order() {
        let (mut client, mut server) = pair().await;
        // An HTTP/2 connection (the read-ahead is for those only).
        let body: Vec<u8> = H2_PREFACE.iter().copied().chain((0..600_000u32).map(|i| (i % 251) as u8)).collect();
        let sent = body.clone();
        let writer = std::thread::spawn(move || client.write_all(&sent).map(|()| client));
        let mut got = Vec::with_capacity(body.len());
        let mut buf = [0u8; 8192];
        let mut spilled = false;
        while got.len() < body.len() {
            let n = server.read(&mut buf).await.unwrap();
            assert!(n > 0, "end of stream after {} bytes", got.len());
            got.extend_from_slice(&buf[..n]);
            spilled |= server.spill.as_ref().is_some_and(|s| !s.is_empty());
        }
        assert!(got == body, "bytes lost, repeated or reordered");
        assert!(spilled, "600 KB through an 8 KiB buffer never used the read-ahead");
        let mut client = writer.join().unwrap().unwrap();
        // A short read (one small message) drains the socket and frees the read-ahead.
        client.write_all(b"tail").unwrap();
        let n = server.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"tail");
        assert!(server.spill.is_none(), "an idle connection keeps its read-ahead buffer");
        drop(client);
        assert_eq!(server.read(&mut buf).await.unwrap(), 0);
    }

    /// A connection that opened with the HTTP/2 preface has its first write attempt put
    /// off once (the task is woken to come back at once) and the next one written; an
    /// HTTP/1.1 connection writes at the first attempt.
    #[tokio::test]
    async fn http2_writes_wait_one_turn_and_http1_writes_do_not() {
        use std::task::Wake;
        struct Count(std::sync::atomic::AtomicUsize);
        impl Wake for Count {
            fn wake(self: Arc<Self>) {
                self.0.fetch_add(1, Ordering::Relaxed);
            }
        }
        for (preface, held) in [(&b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"[..], true), (&b"POST /v1/traces HTTP/1.1\r\n"[..], false)] {
            let (mut client, mut server) = pair().await;
            client.write_all(preface).unwrap();
            let mut buf = [0u8; 64];
            assert_eq!(server.read(&mut buf).await.unwrap(), preface.len());
            let count = Arc::new(Count(Default::default()));
            let waker = std::task::Waker::from(Arc::clone(&count));
            let mut cx = Context::from_waker(&waker);
            let first = Pin::new(&mut server).poll_write(&mut cx, b"one");
            if held {
                assert!(first.is_pending(), "the first HTTP/2 write went out at once");
                assert_eq!(count.0.load(Ordering::Relaxed), 1, "a held write must wake its task");
                let second = Pin::new(&mut server).poll_write(&mut cx, b"one");
                assert!(matches!(second, Poll::Ready(Ok(3))), "the second attempt must write: {second:?}");
            } else {
                assert!(matches!(first, Poll::Ready(Ok(3))), "HTTP/1.1 write held: {first:?}");
                assert_eq!(count.0.load(Ordering::Relaxed), 0);
            }
            let mut got = [0u8; 3];
            std::io::Read::read_exact(&mut client, &mut got).unwrap();
            assert_eq!(&got, b"one");
        }
    }
}
