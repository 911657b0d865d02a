//! One listener loop for both receivers: optional TLS (rustls), an optional connection
//! cap (`maxconns`), HTTP/1.1 (hyper) and HTTP/2 (`http2`, told apart by the client
//! preface, with or without TLS), and graceful shutdown.

use crate::config::{ConnectionConfig, TlsConfig};
use crate::receiver::connection::http2::{self, H2Settings};
use crate::receiver::connection::hygiene::{read_away, Closed, ConnOpts};
use crate::receiver::connection::stamp::mono_ms;
use crate::receiver::connection::stamp::{Discard, RxStamp};
use crate::telemetry::names;
use axum::http::Request;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::JoinHandle;

/// Why a server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The address could not be bound.
    #[error("{name}: cannot listen on {endpoint}: {source}")]
    Bind {
        /// Server name.
        name: &'static str,
        /// The address.
        endpoint: String,
        /// Cause.
        source: std::io::Error,
    },
    /// The TLS files are unusable.
    #[error("{name}: TLS: {message}")]
    Tls {
        /// Server name.
        name: &'static str,
        /// Cause.
        message: String,
    },
}

/// A running server.
pub struct ServerHandle {
    /// The bound address (useful with port 0).
    pub local_addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl ServerHandle {
    /// Stops accepting, lets open requests finish up to `deadline`, then closes.
    pub async fn shutdown(self, deadline: Duration) {
        let _ = self.stop.send(true);
        let _ = tokio::time::timeout(deadline + Duration::from_millis(100), self.task).await;
    }
}

/// Builds a rustls server config; `alpn` lists the protocols to offer.
pub fn tls_acceptor(name: &'static str, tls: &TlsConfig, alpn: &[&[u8]]) -> Result<tokio_rustls::TlsAcceptor, ServerError> {
    let err = |message: String| ServerError::Tls { name, message };
    let read = |p: &std::path::Path| std::fs::read(p).map_err(|e| err(format!("{}: {e}", p.display())));
    let certs = rustls_pemfile::certs(&mut read(&tls.cert_file)?.as_slice())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| err(format!("cert_file: {e}")))?;
    if certs.is_empty() {
        return Err(err("cert_file holds no certificate".into()));
    }
    let key = rustls_pemfile::private_key(&mut read(&tls.key_file)?.as_slice())
        .map_err(|e| err(format!("key_file: {e}")))?
        .ok_or_else(|| err("key_file holds no private key".into()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| err(e.to_string()))?;
    let builder = match &tls.client_ca_file {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in rustls_pemfile::certs(&mut read(ca)?.as_slice()) {
                roots.add(c.map_err(|e| err(format!("client_ca_file: {e}")))?).map_err(|e| err(format!("client_ca_file: {e}")))?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| err(format!("client_ca_file: {e}")))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(certs, key).map_err(|e| err(e.to_string()))?;
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// Where and how a server listens.
pub struct Listen<'a> {
    /// Server name, for logs and metric labels.
    pub name: &'static str,
    /// Address to bind.
    pub endpoint: &'a str,
    /// TLS, when configured.
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    /// Connection cap (`maxconns`).
    pub max_conns: Option<usize>,
    /// HTTP/2 initial stream window (`http2_stream_window_bytes`).
    pub h2_stream_window: u32,
    /// Where open connections are registered (the throttle's conntrack), if anywhere.
    pub tracker: Option<Arc<crate::receiver::connection::conntrack::ConnRegistry>>,
    /// Timeouts, keepalive and the listen backlog.
    pub connections: ConnectionConfig,
    /// Whether HTTP/1.1 is served beside HTTP/2 (the gRPC port speaks HTTP/2 only).
    pub http1: bool,
}

impl<'a> Listen<'a> {
    /// Plain TCP on `endpoint`: no TLS, no cap, the default window, untracked.
    pub fn new(name: &'static str, endpoint: &'a str) -> Self {
        Listen {
            name,
            endpoint,
            tls: None,
            max_conns: None,
            h2_stream_window: crate::config::DEFAULT_H2_STREAM_WINDOW,
            tracker: None,
            connections: ConnectionConfig::default(),
            http1: true,
        }
    }
}

/// Binds `endpoint` with a listen backlog of `backlog`; `receive_buffer` (0: the
/// kernel's) is inherited by every accepted connection.
async fn bind(endpoint: &str, backlog: u32, receive_buffer: u32) -> io::Result<TcpListener> {
    let mut last = None;
    for addr in tokio::net::lookup_host(endpoint).await? {
        let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
        socket.set_reuseaddr(true)?;
        if receive_buffer > 0 {
            socket.set_recv_buffer_size(receive_buffer)?;
            // The kernel reports twice what it granted and caps it at net.core.rmem_max,
            // without an error.
            let granted = socket.recv_buffer_size()? / 2;
            if granted < receive_buffer {
                tracing::warn!(%addr, asked = receive_buffer, granted, "receive_buffer is above net.core.rmem_max; the kernel granted less");
            }
        }
        match socket.bind(addr).and_then(|()| socket.listen(backlog)) {
            Ok(l) => return Ok(l),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::new(io::ErrorKind::AddrNotAvailable, "the address resolves to nothing")))
}

/// The open connections of one server, for choosing one to close at the cap.
#[derive(Default)]
struct Open {
    conns: std::sync::Mutex<HashMap<u64, (RxStamp, u64)>>,
}

impl Open {
    fn add(&self, id: u64, stamp: RxStamp, opened: u64) {
        self.conns.lock().unwrap_or_else(|e| e.into_inner()).insert(id, (stamp, opened));
    }

    fn remove(&self, id: u64) {
        self.conns.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
    }

    /// Asks the connection idle the longest (nothing in flight) to close; none is asked
    /// when every connection is busy.
    fn evict_idlest(&self) {
        self.evict_idle_for(0);
    }

    /// [`Open::evict_idlest`] among the connections idle for at least `min_ms`.
    fn evict_idle_for(&self, min_ms: u64) {
        let now = mono_ms();
        let conns = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        let idlest = conns
            .values()
            .filter(|(stamp, _)| !stamp.eviction_asked())
            .filter_map(|(stamp, opened)| stamp.idle_ms(now, *opened).map(|idle| (idle, stamp)))
            .filter(|(idle, _)| *idle >= min_ms)
            .max_by_key(|(idle, _)| *idle);
        if let Some((_, stamp)) = idlest {
            stamp.evict();
        }
    }
}

/// With memory short, only a connection idle this long makes room for a new one.
const MEMORY_EVICT_IDLE_MS: u64 = 1000;

/// Binds `listen.endpoint` and serves `app` until shut down.
pub async fn serve(listen: Listen<'_>, app: Router) -> Result<ServerHandle, ServerError> {
    let Listen { name, endpoint, tls, max_conns, h2_stream_window, tracker, connections, http1 } = listen;
    let listener = bind(endpoint, connections.listen_backlog, connections.receive_buffer).await.map_err(|source| ServerError::Bind {
        name,
        endpoint: endpoint.to_string(),
        source,
    })?;
    let local_addr = listener.local_addr().map_err(|source| ServerError::Bind { name, endpoint: endpoint.to_string(), source })?;
    if !crate::receiver::connection::stamp::enable_on_listener(&listener) {
        tracing::warn!(server = name, "the kernel gives no receive timestamps: the queue-delay layer sees no waits");
    }
    let (stop, mut stopped) = watch::channel(false);
    let limit = max_conns.map(|n| Arc::new(Semaphore::new(n)));
    let open_conns = Arc::new(Open::default());
    let task = tokio::spawn(async move {
        // Every connection holds a sender; when the last is gone, all have finished.
        let (open_tx, mut open_rx) = mpsc::channel::<()>(1);
        let mut next_id = 0u64;
        loop {
            let (stream, peer) = tokio::select! {
                r = listener.accept() => match r {
                    Ok(x) => x,
                    Err(e) => {
                        accept_failed(name, &e).await;
                        continue;
                    }
                },
                _ = stopped.changed() => break,
            };
            // Memory short: the connection idle the longest makes room, whatever the count,
            // if it has been idle a while (a client between two requests is not idle).
            if tracker.as_ref().is_some_and(|t| t.memory_short()) {
                open_conns.evict_idle_for(MEMORY_EVICT_IDLE_MS);
            }
            // At the cap, the connection idle the longest makes room; with none idle,
            // this one waits (and the next ones in the kernel's backlog).
            let permit = match &limit {
                Some(sem) => match Arc::clone(sem).try_acquire_owned() {
                    Ok(p) => Some(p),
                    Err(_) => {
                        open_conns.evict_idlest();
                        tokio::select! {
                            p = Arc::clone(sem).acquire_owned() => p.ok(),
                            _ = stopped.changed() => break,
                        }
                    }
                },
                None => None,
            };
            let _ = stream.set_nodelay(true);
            let conn = tracker.clone().map(|t| {
                let id = t.for_server(name).map(|c| c.open(std::os::fd::AsRawFd::as_raw_fd(&stream)));
                (t, id)
            });
            // Reads record when the data arrived; each request carries the stamp so the
            // throttle can see how long it waited before weir looked at it (`connection::stamp`).
            let stream = crate::receiver::connection::stamp::Stamped::new(stream);
            let stamp = stream.stamp();
            next_id += 1;
            let id = next_id;
            let opened = mono_ms();
            open_conns.add(id, stamp.clone(), opened);
            let tls = tls.clone();
            let app = app.clone();
            let stop = stopped.clone();
            let open = open_tx.clone();
            let open_conns = Arc::clone(&open_conns);
            let opts = ConnOpts { server: name, opened, limits: connections, http1 };
            let settings = H2Settings { stream_window: h2_stream_window, opts };
            tokio::spawn(async move {
                let _open = open;
                let _permit = permit;
                let gauge = metrics::gauge!(names::CONNECTIONS, "server" => name);
                gauge.increment(1.0);
                let result = match tls {
                    Some(acceptor) => serve_tls(acceptor, stream, app, stamp, settings, stop, peer).await,
                    None => serve_connection(stream, app, stamp, settings, stop).await,
                };
                if let Err(e) = result {
                    tracing::debug!(server = name, %peer, error = %e, "connection ended with error");
                }
                open_conns.remove(id);
                gauge.decrement(1.0);
                if let Some((t, Some(id))) = conn {
                    if let Some(c) = t.for_server(name) {
                        c.close(id);
                    }
                }
            });
        }
        drop(listener);
        // Open connections finish their requests; the caller bounds how long.
        drop(open_tx);
        let _ = open_rx.recv().await;
    });
    Ok(ServerHandle { local_addr, stop, task })
}

/// A TLS handshake within the header timeout (an eviction ends it too), then the
/// connection as any other.
async fn serve_tls(
    acceptor: tokio_rustls::TlsAcceptor,
    stream: crate::receiver::connection::stamp::Stamped,
    app: Router,
    stamp: RxStamp,
    settings: H2Settings,
    stop: watch::Receiver<bool>,
    peer: SocketAddr,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let name = settings.opts.server;
    let handshake = tokio::time::timeout(settings.opts.limits.header_read_timeout, acceptor.accept(stream));
    let handshake = tokio::select! {
        h = handshake => Some(h),
        _ = evicted(&stamp) => None,
    };
    match handshake {
        Some(Ok(Ok(s))) => serve_connection(s, app, stamp, settings, stop).await,
        Some(Ok(Err(e))) => {
            tracing::debug!(server = name, %peer, error = %e, "TLS handshake failed");
            Ok(())
        }
        Some(Err(_)) => {
            Closed::HeaderTimeout.count(name);
            Ok(())
        }
        None => {
            Closed::Evicted.count(name);
            Ok(())
        }
    }
}

/// Out of file descriptors, mostly: logged a line a second at most, and a pause before
/// the next accept.
async fn accept_failed(name: &str, e: &io::Error) {
    static LINES: crate::telemetry::lograte::LineBudget = crate::telemetry::lograte::LineBudget::new("accept_failed", 1);
    if let Some(suppressed) = LINES.admit() {
        tracing::warn!(server = name, error = %e, suppressed, "accept failed");
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
}

/// Resolves once the server asks the connection to close to make room.
async fn evicted(stamp: &RxStamp) {
    std::future::poll_fn(|cx| if stamp.evicted(cx) { Poll::Ready(()) } else { Poll::Pending }).await
}

/// Resolves once the server is told to stop (or its handle is gone).
async fn stop_signal(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// hyper's largest HTTP/1.1 read buffer (its least is 8 KiB).
const HTTP1_MAX_BUF: usize = 16 * 1024;

/// Serves one connection, HTTP/2 if it opens with the client preface, else HTTP/1.1.
async fn serve_connection<I>(
    mut io: I,
    app: Router,
    stamp: RxStamp,
    settings: H2Settings,
    stop: watch::Receiver<bool>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>>
where
    I: AsyncRead + AsyncWrite + Discard + Unpin + Send + 'static,
{
    // Read until the bytes differ from the preface or all of it is there: an HTTP/1.1
    // request differs by its second byte, so this is one read in practice.
    let opts = settings.opts;
    let mut seen = [0u8; http2::PREFACE.len()];
    let mut len = 0;
    let sniff = async {
        loop {
            let n = io.read(&mut seen[len..]).await?;
            if n == 0 {
                return Ok::<_, io::Error>(None);
            }
            len += n;
            if !http2::PREFACE.starts_with(&seen[..len]) {
                return Ok(Some(false));
            }
            if len == http2::PREFACE.len() {
                return Ok(Some(true));
            }
        }
    };
    let h2 = tokio::select! {
        r = tokio::time::timeout(opts.limits.header_read_timeout, sniff) => match r {
            Ok(r) => match r? {
                Some(h2) => h2,
                None => return Ok(()),
            },
            Err(_) => {
                Closed::HeaderTimeout.count(opts.server);
                return Ok(());
            }
        },
        _ = stop_signal(stop.clone()) => return Ok(()),
        _ = evicted(&stamp) => {
            Closed::Evicted.count(opts.server);
            return Ok(());
        }
    };
    if !h2 && !opts.http1 {
        // Not the HTTP/2 preface on a port that speaks nothing else (RFC 9113 3.4): a
        // connection error, PROTOCOL_ERROR, and the reason in the GOAWAY's debug data.
        const WHY: &[u8] = b"this port speaks HTTP/2 only (OTLP/gRPC)";
        let mut goaway = vec![0, 0, 8 + WHY.len() as u8, 0x7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        goaway.extend_from_slice(WHY);
        let _ = tokio::time::timeout(Duration::from_secs(1), io.write_all(&goaway)).await;
        let _ = io.shutdown().await;
        return Ok(());
    }
    let io = Rewind { seen, len, pos: 0, inner: io };
    if h2 {
        return Ok(http2::serve(io, app, stamp, settings, stop_signal(stop)).await?);
    }
    serve_http1(io, app, stamp, opts, stop).await
}

/// Serves HTTP/1.1 on hyper until the peer closes, the server stops or the connection's
/// hygiene closes it; an answer given without reading the body lingers over the rest.
async fn serve_http1<I>(
    io: Rewind<I>,
    app: Router,
    stamp: RxStamp,
    opts: ConnOpts,
    stop: watch::Receiver<bool>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>>
where
    I: AsyncRead + AsyncWrite + Discard + Unpin + Send + 'static,
{
    let conn_stamp = stamp.clone();
    let body_limit = opts.limits.body_read_timeout;
    let svc = TowerToHyperService::new(tower::service_fn(move |req: Request<Incoming>| {
        let mut req = req.map(|body| crate::receiver::connection::hygiene::Deadline::new(body, body_limit));
        req.extensions_mut().insert(stamp.clone());
        Tracked { call: tower::ServiceExt::oneshot(app.clone(), req), _busy: stamp.busy() }
    }));
    // hyper's read buffer grows to about 400 KiB while a large body streams in and keeps
    // that size for the connection's life, so the next request's head is read together
    // with that much of its body, which a refusal held with reads paused keeps. Every
    // connection streaming a body holds one, so 16 KiB bounds it, at the cost of more
    // reads per large body (`docs/overload.md#measurements-behind-the-defaults`).
    let mut conn = hyper::server::conn::http1::Builder::new().max_buf_size(HTTP1_MAX_BUF).serve_connection(TokioIo::new(io), svc);
    let mut stop = pin!(stop_signal(stop));
    let mut stopping = false;
    let tick = opts.tick();
    let mut check = pin!(tokio::time::sleep(tick));
    let mut closed = None;
    let served = std::future::poll_fn(|cx| {
        if !stopping && stop.as_mut().poll(cx).is_ready() {
            stopping = true;
            Pin::new(&mut conn).graceful_shutdown();
        }
        let evicted = conn_stamp.evicted(cx);
        while evicted || check.as_mut().poll(cx).is_ready() {
            if let Some(why) = opts.verdict(&conn_stamp, evicted, true) {
                closed = Some(why);
                return Poll::Ready(Ok(()));
            }
            if evicted {
                // Busy: it closes after the request in flight.
                stopping = true;
                Pin::new(&mut conn).graceful_shutdown();
                break;
            }
            check.as_mut().reset(tokio::time::Instant::now() + tick);
        }
        conn.poll_without_shutdown(cx)
    })
    .await;
    if let Some(why) = closed {
        // Nothing in flight: closing loses no answer.
        why.count(opts.server);
        drop(conn);
        return Ok(());
    }
    let mut io = conn.into_parts().io.into_inner();
    if served.is_ok() && !stopping && conn_stamp.wants_linger() {
        linger(io).await;
    } else {
        let _ = io.shutdown().await;
    }
    Ok(served?)
}

/// A request's handling, counted in flight on its connection until it is answered.
struct Tracked<F> {
    call: F,
    _busy: crate::receiver::connection::stamp::Busy,
}

impl<F: std::future::Future + Unpin> std::future::Future for Tracked<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        Pin::new(&mut self.call).poll(cx)
    }
}

/// A lingering close, as nginx does, for a connection weir closes with a request body
/// unread (a refusal answered with `Connection: close`). Closing a socket with unread
/// data makes the kernel send a reset, and a reset that reaches the client before it
/// has read the answer destroys it: the client sees a broken pipe instead of the 429
/// and its Retry-After (clients that read only after sending the whole body always
/// do). So the write side is shut (the answer is followed by FIN) and what the client
/// still sends is read away until it closes, within
/// the bounds of [`read_away`]; a reset after that finds the answer long delivered.
async fn linger<I: AsyncWrite + Discard + Unpin>(mut io: I) {
    if io.shutdown().await.is_ok() {
        read_away(&mut io).await;
    }
}

impl<I: Discard + AsyncRead + Unpin> Discard for Rewind<I> {
    fn poll_discard(&mut self, cx: &mut Context<'_>, max: usize) -> Poll<io::Result<usize>> {
        let replay = (self.len - self.pos).min(max);
        if replay > 0 {
            self.pos += replay;
            return Poll::Ready(Ok(replay));
        }
        self.inner.poll_discard(cx, max)
    }
}

/// An I/O that replays the bytes read to tell the protocol before reading on.
struct Rewind<I> {
    seen: [u8; http2::PREFACE.len()],
    /// Bytes in `seen`, and how many of them have been replayed.
    len: usize,
    pos: usize,
    inner: I,
}

impl<I: AsyncRead + Unpin> AsyncRead for Rewind<I> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let take = buf.remaining().min(this.len - this.pos);
        if take > 0 {
            buf.put_slice(&this.seen[this.pos..this.pos + take]);
            this.pos += take;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Rewind<I> {
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
