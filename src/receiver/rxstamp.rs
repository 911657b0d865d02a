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

use std::io;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

/// The arrival time (nanoseconds since the Unix epoch, the kernel's real-time clock) of
/// the newest bytes read from one connection; 0 until a stamped read.
#[derive(Debug, Clone, Default)]
pub struct RxStamp(Arc<AtomicU64>);

impl RxStamp {
    /// How long ago the newest bytes read from this connection arrived; `None` when that
    /// is unknown (nothing stamped read yet). A clock stepped back reads as no wait.
    pub fn waited_nanos(&self) -> Option<u64> {
        let at = self.0.load(Ordering::Relaxed);
        (at != 0).then(|| realtime_nanos().saturating_sub(at))
    }

    /// A stamp that says the data arrived at `nanos` (Unix epoch, real-time clock): for
    /// tests and benches.
    pub fn arrived_at(nanos: u64) -> Self {
        let s = RxStamp::default();
        s.set(nanos);
        s
    }

    fn set(&self, nanos: u64) {
        self.0.store(nanos, Ordering::Relaxed);
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
}

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
        Stamped { inner, stamp: RxStamp::default(), on }
    }

    /// The connection's stamp, to hand to its requests.
    pub fn stamp(&self) -> RxStamp {
        self.stamp.clone()
    }
}

/// One `recvmsg` into `buf`: bytes read and the arrival time, if the kernel gave one.
fn recv_stamped(fd: libc::c_int, buf: &mut [std::mem::MaybeUninit<u8>]) -> io::Result<(usize, Option<u64>)> {
    // Room for one cmsg carrying a timespec, u64-aligned as cmsghdr needs.
    let mut control = [0u64; 8];
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    // SAFETY: zeroed msghdr is a valid "no name, no control" header; the fields set below
    // point at live buffers of the lengths given.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
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

impl AsyncRead for Stamped {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.on {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        loop {
            ready!(this.inner.poll_read_ready(cx))?;
            let fd = this.inner.as_raw_fd();
            // SAFETY: recvmsg only writes initialised bytes into the unfilled part, and
            // exactly `n` of them are marked initialised below.
            let unfilled = unsafe { buf.unfilled_mut() };
            match this.inner.try_io(Interest::READABLE, || recv_stamped(fd, unfilled)) {
                Ok((n, at)) => {
                    // SAFETY: the kernel wrote `n` bytes at the start of the unfilled part.
                    unsafe { buf.assume_init(n) };
                    buf.advance(n);
                    // No stamp (the kernel turns timestamping on a moment after the
                    // first socket asks): unknown, which reads as no wait, never as the
                    // wait of older bytes.
                    this.stamp.set(at.unwrap_or(0));
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
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
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
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut client = std::net::TcpStream::connect(addr).unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let mut server = Stamped::new(server);
        let stamp = server.stamp();
        assert!(server.on, "SO_TIMESTAMPNS is available on Linux TCP sockets");
        assert_eq!(stamp.waited_nanos(), None, "nothing read yet");
        let mut buf = [0u8; 64];
        // The kernel switches timestamping on shortly after the first socket asks for it
        // (deferred work); until then reads carry no stamp and report no wait.
        for _ in 0..100 {
            client.write_all(b"x").unwrap();
            assert_eq!(server.read(&mut buf).await.unwrap(), 1);
            if stamp.0.load(Ordering::Relaxed) != 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_ne!(stamp.0.load(Ordering::Relaxed), 0, "no receive timestamp within a second");

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
}
