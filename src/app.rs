//! The one composition root: builds exporters, the pipeline, the receivers and the admin
//! server, and shuts them down in stages (receivers, then pipeline, then exporters).

use crate::config::Config;
use crate::exporter;
use crate::pipeline::{Pipeline, PipelineTasks};
use crate::receiver::middleware::{self, AuthLayerState, HttpContext, ServerKind};
use crate::receiver::server::{self, ServerHandle};
use crate::receiver::{grpc, http, Ingest};
use crate::signal::Signal;
use crate::telemetry::{self, admin};
use crate::throttle::classify::RouteRegistry;
use crate::throttle::Throttle;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Why weir could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// An exporter could not be built.
    #[error(transparent)]
    Exporter(#[from] exporter::BuildError),
    /// A server could not start.
    #[error(transparent)]
    Server(#[from] server::ServerError),
    /// The middleware list is invalid (normally caught by config validation).
    #[error("middlewares: {0}")]
    Middleware(String),
}

/// A running weir.
pub struct RunningApp {
    /// OTLP/HTTP address, if enabled.
    pub http_addr: Option<SocketAddr>,
    /// OTLP/gRPC address, if enabled.
    pub grpc_addr: Option<SocketAddr>,
    /// Admin address.
    pub admin_addr: SocketAddr,
    receivers: Vec<ServerHandle>,
    admin: ServerHandle,
    pipeline: Arc<Pipeline>,
    tasks: PipelineTasks,
    ready: Arc<AtomicBool>,
    shutdown_timeout: Duration,
    throttle: Throttle,
}

fn cores() -> f64 {
    std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64)
}

/// Starts everything described by `config`.
pub async fn start(config: Config) -> Result<RunningApp, StartError> {
    let prometheus = telemetry::install_recorder();
    let exporters = exporter::build(&config.exporters)?;
    let (pipeline, tasks) = Pipeline::start(&config.pipeline, exporters);
    let ingest_base = Ingest::new(Arc::clone(&pipeline));
    let auth = AuthLayerState::with_quotas(&config.receiver.auth.all_tokens(), crate::quota::Quotas::from_config(&config.receiver.auth));
    let throttle = Throttle::start(&config.receiver.throttle, &config.receiver.auth);
    let ingest = ingest_base.with_priorities(Arc::clone(&throttle.manager));
    let mut routes = RouteRegistry::new();
    // Each receiver declares its own routes.
    for (path, signal) in http::routes() {
        routes.register(path, signal);
    }
    for signal in Signal::ALL {
        routes.register(signal.grpc_path(), signal);
    }
    let ctx = HttpContext {
        max_request_body_bytes: config.receiver.http_server.max_request_body_bytes,
        throttle: Arc::clone(&throttle.manager),
        admission: Arc::clone(&throttle.admission),
        routes: Arc::new(routes),
    };
    let mut receivers = Vec::new();

    let mut http_addr = None;
    let h = &config.receiver.http_server;
    if h.enabled {
        let specs = middleware::parse_list(&h.middlewares, ServerKind::Http).map_err(StartError::Middleware)?;
        let (app, listener) = middleware::apply_http(http::router(ingest.clone(), h.max_request_body_bytes), &specs, &ctx, auth.clone());
        let tls = h.tls.as_ref().map(|t| server::tls_acceptor("http", t, &[b"h2", b"http/1.1"])).transpose()?;
        let handle =
            server::serve("http", &h.endpoint, tls, listener.max_conns.map(|l| l.resolve(cores())), app, Some(Arc::clone(&throttle.conns)))
                .await?;
        tracing::info!(addr = %handle.local_addr, tls = h.tls.is_some(), "OTLP/HTTP listening");
        http_addr = Some(handle.local_addr);
        receivers.push(handle);
    }

    let mut grpc_addr = None;
    let g = &config.receiver.grpc_server;
    if g.enabled {
        let specs = middleware::parse_list(&g.middlewares, ServerKind::Grpc).map_err(StartError::Middleware)?;
        let settings = middleware::grpc_settings(&specs, g.max_recv_msg_size_bytes);
        let (app, listener) = middleware::apply_grpc(grpc::router(ingest.clone(), settings), &specs, &ctx, auth.clone());
        let tls = g.tls.as_ref().map(|t| server::tls_acceptor("grpc", t, &[b"h2"])).transpose()?;
        let handle =
            server::serve("grpc", &g.endpoint, tls, listener.max_conns.map(|l| l.resolve(cores())), app, Some(Arc::clone(&throttle.conns)))
                .await?;
        tracing::info!(addr = %handle.local_addr, tls = g.tls.is_some(), "OTLP/gRPC listening");
        grpc_addr = Some(handle.local_addr);
        receivers.push(handle);
    }

    let ready = Arc::new(AtomicBool::new(false));
    let admin_router = admin::router(admin::AdminState { prometheus, ready: Arc::clone(&ready) }).merge(crate::throttle::debug::router(
        Arc::clone(&throttle.manager),
        throttle.reader.clone(),
        Arc::clone(&throttle.admission),
    ));
    let admin = server::serve("admin", &config.admin.endpoint, None, None, admin_router, None).await?;
    tracing::info!(addr = %admin.local_addr, "admin listening");
    ready.store(true, Ordering::Release);

    Ok(RunningApp {
        http_addr,
        grpc_addr,
        admin_addr: admin.local_addr,
        receivers,
        admin,
        pipeline,
        tasks,
        ready,
        shutdown_timeout: config.pipeline.shutdown_timeout,
        throttle,
    })
}

impl RunningApp {
    /// Bytes held by the pipeline now.
    pub fn queued_bytes(&self) -> usize {
        self.pipeline.queued_bytes()
    }

    /// Staged shutdown: stop receivers (in-flight requests finish), drain and flush the
    /// pipeline and exporters, then stop the admin server. Each stage has a deadline.
    pub async fn shutdown(self) {
        self.ready.store(false, Ordering::Release);
        tracing::info!("shutting down: stopping receivers");
        let receiver_deadline = (self.shutdown_timeout / 3).max(Duration::from_secs(1));
        for r in self.receivers {
            r.shutdown(receiver_deadline).await;
        }
        tracing::info!(queued_bytes = self.pipeline.queued_bytes(), "draining pipeline");
        self.tasks.shutdown(self.pipeline, self.shutdown_timeout).await;
        self.throttle.stop().await;
        self.admin.shutdown(Duration::from_secs(1)).await;
        tracing::info!("shutdown complete");
    }
}

/// Runs until SIGINT or SIGTERM, then shuts down.
pub async fn run(config: Config) -> Result<(), StartError> {
    let app = start(config).await?;
    wait_for_signal().await;
    app.shutdown().await;
    Ok(())
}

async fn wait_for_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => tracing::info!("SIGINT received"),
        _ = term => tracing::info!("SIGTERM received"),
    }
}
