//! One listener loop for both receivers: optional TLS (rustls), an optional connection
//! cap (`maxconns`), HTTP/1.1 and HTTP/2 (h2c or ALPN), and graceful shutdown.

use super::inline::{ConnExec, InlineFirst, ProbeBody};
use crate::config::TlsConfig;
use crate::telemetry::names;
use axum::http::Request;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
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

/// Locally reset HTTP/2 streams one connection may cause before it is sent GOAWAY.
const H2_MAX_LOCAL_RESETS: usize = 100_000;

/// The HTTP/1.1 + HTTP/2 server for one connection, with that connection's executor.
fn conn_builder(exec: ConnExec, h2_stream_window: u32) -> auto::Builder<ConnExec> {
    let mut builder = auto::Builder::new(exec);
    // An early refusal (throttle, quota) answers before the request body has arrived
    // and resets the rest of the stream; a client that was already sending keeps
    // sending DATA on it, and h2 counts each such stream as a local error reset. At
    // the default cap (1024 per connection, for its whole life) a client being
    // throttled gets GOAWAY ENHANCE_YOUR_CALM and loses every stream in flight (seen
    // with h2load; `scripts/bench-throughput.sh` refuses 6000 requests on 4
    // connections to keep it honest). The cap stays, to bound reset floods, but high
    // enough that refusals alone do not reach it soon.
    builder.http2().max_local_error_reset_streams(H2_MAX_LOCAL_RESETS);
    // The connection window never starves the streams: at least hyper's 1 MiB, and
    // no less than one stream's window.
    builder.http2().initial_stream_window_size(h2_stream_window).initial_connection_window_size(h2_stream_window.max(1 << 20));
    builder
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
    pub tracker: Option<Arc<super::conntrack::ConnRegistry>>,
}

impl<'a> Listen<'a> {
    /// Plain TCP on `endpoint`: no TLS, no cap, the default window, untracked.
    pub fn new(name: &'static str, endpoint: &'a str) -> Self {
        Listen { name, endpoint, tls: None, max_conns: None, h2_stream_window: crate::config::DEFAULT_H2_STREAM_WINDOW, tracker: None }
    }
}

/// Binds `listen.endpoint` and serves `app` until shut down.
pub async fn serve(listen: Listen<'_>, app: Router) -> Result<ServerHandle, ServerError> {
    let Listen { name, endpoint, tls, max_conns, h2_stream_window, tracker } = listen;
    let listener =
        TcpListener::bind(endpoint).await.map_err(|source| ServerError::Bind { name, endpoint: endpoint.to_string(), source })?;
    let local_addr = listener.local_addr().map_err(|source| ServerError::Bind { name, endpoint: endpoint.to_string(), source })?;
    if !super::rxstamp::enable_on_listener(&listener) {
        tracing::warn!(server = name, "the kernel gives no receive timestamps: the queue-delay layer sees no waits");
    }
    let (stop, mut stopped) = watch::channel(false);
    let limit = max_conns.map(|n| Arc::new(Semaphore::new(n)));
    let task = tokio::spawn(async move {
        let graceful = hyper_util::server::graceful::GracefulShutdown::new();
        loop {
            // With a cap, wait for a free slot before accepting: excess clients queue in
            // the kernel's backlog instead of costing memory here.
            let permit = match &limit {
                Some(sem) => tokio::select! {
                    p = Arc::clone(sem).acquire_owned() => p.ok(),
                    _ = stopped.changed() => break,
                },
                None => None,
            };
            let (stream, peer) = tokio::select! {
                r = listener.accept() => match r {
                    Ok(x) => x,
                    Err(e) => {
                        tracing::warn!(server = name, error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                _ = stopped.changed() => break,
            };
            let _ = stream.set_nodelay(true);
            let conn = tracker.clone().map(|t| {
                let id = t.for_server(name).map(|c| c.open(std::os::fd::AsRawFd::as_raw_fd(&stream)));
                (t, id)
            });
            // Reads record when the data arrived; each request carries the stamp so the
            // throttle can see how long it waited before weir looked at it (`rxstamp`).
            let stream = super::rxstamp::Stamped::new(stream);
            let stamp = stream.stamp();
            let svc = TowerToHyperService::new(tower::ServiceExt::map_request(app.clone(), move |mut req: Request<Incoming>| {
                req.extensions_mut().insert(stamp.clone());
                req.map(ProbeBody::new)
            }));
            let tls = tls.clone();
            // Streams are queued for this connection's task to poll once (`inline`).
            let exec = ConnExec::default();
            let builder = conn_builder(exec.clone(), h2_stream_window);
            let watcher = graceful.watcher();
            tokio::spawn(async move {
                let _permit = permit;
                let gauge = metrics::gauge!(names::CONNECTIONS, "server" => name);
                gauge.increment(1.0);
                let result = match tls {
                    Some(acceptor) => match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream)).await {
                        Ok(Ok(s)) => {
                            InlineFirst::new(
                                watcher.watch(builder.serve_connection_with_upgrades(TokioIo::new(s), svc).into_owned()),
                                &exec,
                            )
                            .await
                        }
                        Ok(Err(e)) => {
                            tracing::debug!(server = name, %peer, error = %e, "TLS handshake failed");
                            Ok(())
                        }
                        Err(_) => Ok(()),
                    },
                    None => {
                        InlineFirst::new(
                            watcher.watch(builder.serve_connection_with_upgrades(TokioIo::new(stream), svc).into_owned()),
                            &exec,
                        )
                        .await
                    }
                };
                if let Err(e) = result {
                    tracing::debug!(server = name, %peer, error = %e, "connection ended with error");
                }
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
        graceful.shutdown().await;
    });
    Ok(ServerHandle { local_addr, stop, task })
}
