//! The one composition root: builds exporters, the pipeline, the receivers and the admin
//! server, and shuts them down in stages (receivers, then pipeline, then exporters).

pub mod admin;

use crate::config::Config;
use crate::config::ServerKind;
use crate::exporter;
use crate::pipeline::{Pipeline, PipelineTasks};
use crate::receiver::connection::listener::{self, ServerHandle};
use crate::receiver::middleware::{self, AuthLayerState, HttpContext};
use crate::receiver::otlp::{grpc, http};
use crate::receiver::Ingest;
use crate::telemetry;
use crate::throttle::classify::RouteRegistry;
use crate::throttle::Throttle;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// `receiver.max_body_bytes_in_flight`, with 0 resolved: a quarter of the cgroup
/// memory limit, or 256 MiB where there is none.
fn body_budget(config: &Config) -> u64 {
    match config.receiver.max_body_bytes_in_flight {
        0 => crate::throttle::cgroup::CgroupReader::discover(&config.receiver.throttle.cgroup_root, 0.0)
            .memory()
            .and_then(|m| m.limit)
            .map_or(256 << 20, |limit| limit / 4),
        n => n,
    }
}

/// `pipeline.queue.max_bytes`, with 0 resolved: a tenth of the memory limit (the cgroup's,
/// else 640 MiB's worth), at most 64 MiB. Accepted data takes about three times its
/// encoded size in memory once decoded, and the bodies in flight may take a quarter of
/// the limit, so a fixed size would not fit a small container
/// (`docs/overload.md#measurements-behind-the-defaults`).
fn queue_bytes(config: &Config) -> usize {
    match config.pipeline.queue.max_bytes {
        0 => crate::throttle::cgroup::CgroupReader::discover(&config.receiver.throttle.cgroup_root, 0.0)
            .memory()
            .and_then(|m| m.limit)
            .map_or(64 << 20, |limit| (limit / 10).clamp(1 << 20, 64 << 20) as usize),
        n => n,
    }
}

/// Why weir could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// An exporter could not be built.
    #[error(transparent)]
    Exporter(#[from] exporter::BuildError),
    /// A server could not start.
    #[error(transparent)]
    Server(#[from] listener::ServerError),
    /// The middleware list is invalid (normally caught by config validation).
    #[error("middlewares: {0}")]
    Middleware(String),
    /// The disk queue could not be opened.
    #[error(transparent)]
    Queue(#[from] crate::pipeline::disk::OpenError),
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
    auth: Option<AuthLayerState>,
    quota_sync: Option<crate::quota::store::QuotaSync>,
    config: Config,
}

/// The fleet sync of `receiver.auth.quota_store`, when there is a store and tenants.
fn start_quota_sync(auth_config: &crate::config::AuthConfig, auth: Option<&AuthLayerState>) -> Option<crate::quota::store::QuotaSync> {
    let store = auth_config.quota_store.as_ref()?;
    let Some(auth) = auth.cloned() else {
        tracing::warn!("receiver.auth.quota_store is set but no tenants or tokens are: there are no quotas to share");
        return None;
    };
    // The URL was checked with the rest of the config.
    let target = store.target().ok()?;
    let settings = crate::quota::store::StoreSettings { target, sync_interval: store.sync_interval, key_prefix: store.key_prefix.clone() };
    Some(crate::quota::store::QuotaSync::start(settings, move || auth.shared_limiters()))
}

fn cores() -> f64 {
    std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64)
}

/// The memory a connection cap is reckoned against: the cgroup's limit when there is
/// one, else the machine's.
fn memory_for_connections(throttle: &Throttle) -> u64 {
    let cgroup = throttle.reader.as_ref().and_then(|r| r.memory()).and_then(|m| m.limit);
    cgroup.or_else(machine_memory).unwrap_or(1 << 30)
}

fn machine_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib = info.lines().find_map(|l| l.strip_prefix("MemTotal:"))?.trim().trim_end_matches("kB").trim().parse::<u64>().ok()?;
    Some(kib * 1024)
}

/// Raises the soft open-file limit to the hard one (as Go's runtime does): every
/// connection is a file, and a soft limit of 1,024 would cap weir below what its memory
/// serves. Returns the soft limit in force.
fn raise_open_files() -> u64 {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `lim` is a valid, writable rlimit for getrlimit to fill in.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return 1024;
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit { rlim_cur: lim.rlim_max, rlim_max: lim.rlim_max };
        // SAFETY: setting the soft limit to the current hard limit is always allowed.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            lim = raised;
        }
    }
    lim.rlim_cur
}

/// Starts everything described by `config`.
pub async fn start(config: Config) -> Result<RunningApp, StartError> {
    let original = config.clone();
    let prometheus = telemetry::install_recorder();
    let exporters = exporter::build(&config.exporters, &config.pipeline.batch)?;
    let mut pipeline_config = config.pipeline.clone();
    pipeline_config.queue.max_bytes = queue_bytes(&config);
    tracing::info!(bytes = pipeline_config.queue.max_bytes, "pipeline queue: byte budget");
    let routing = exporters.clone();
    let (pipeline, tasks) = Pipeline::start(&pipeline_config, exporters)?;
    publish_start_gauges(&config, &pipeline_config);
    let ingest_base = Ingest::new(Arc::clone(&pipeline));
    let auth = AuthLayerState::with_quotas(&config.receiver.auth.all_tokens(), crate::quota::Quotas::from_config(&config.receiver.auth));
    let quota_sync = start_quota_sync(&config.receiver.auth, auth.as_ref());
    let conns = Arc::new(crate::receiver::connection::conntrack::ConnRegistry::default());
    let throttle = Throttle::start(&config.receiver.throttle, &config.receiver.auth, Arc::clone(&conns) as _);
    if let Some(d) = pipeline.disk() {
        throttle.manager.set_disk(Arc::clone(d));
        d.count_admitted_with(crate::receiver::middleware::drain::admitted_in_flight);
    }
    throttle.manager.set_config_hash(config.hash());
    let ingest = ingest_base.with_priorities(Arc::clone(&throttle.manager)).with_item_quotas(auth.clone());
    let ctx = http_context(&config, &throttle, &pipeline);
    tracing::info!(bytes = ctx.bodies.limit(), "request bodies in flight: memory budget");
    let open_files = raise_open_files();
    let conn_memory = memory_for_connections(&throttle);
    let conn_cap = |limit: crate::config::ConnLimit, server: &'static str| {
        let n = limit.resolve(cores(), conn_memory, open_files);
        metrics::gauge!(telemetry::names::MAX_CONNECTIONS, "server" => server).set(n as f64);
        tracing::info!(server, max_connections = n, ?limit, memory_bytes = conn_memory, open_files, "connection cap");
        n
    };
    let mut receivers = Vec::new();

    let mut http_addr = None;
    let h = &config.receiver.http_server;
    if h.enabled {
        let specs = crate::config::middleware::parse_list(&h.middlewares, ServerKind::Http).map_err(StartError::Middleware)?;
        let (app, listener) = middleware::apply_http(http::router(ingest.clone(), h.max_request_body_bytes), &specs, &ctx, auth.clone());
        let tls = h.tls.as_ref().map(|t| listener::tls_acceptor("http", t, &[b"h2", b"http/1.1"])).transpose()?;
        let listen = listener::Listen {
            tls,
            max_conns: listener.max_conns.map(|l| conn_cap(l, "http")),
            h2_stream_window: h.http2_stream_window_bytes,
            tracker: Some(Arc::clone(&conns)),
            connections: h.connections,
            ..listener::Listen::new("http", &h.endpoint)
        };
        let handle = listener::serve(listen, app).await?;
        tracing::info!(addr = %handle.local_addr, tls = h.tls.is_some(), "OTLP/HTTP listening");
        http_addr = Some(handle.local_addr);
        receivers.push(handle);
    }

    let mut grpc_addr = None;
    let g = &config.receiver.grpc_server;
    if g.enabled {
        let specs = crate::config::middleware::parse_list(&g.middlewares, ServerKind::Grpc).map_err(StartError::Middleware)?;
        let settings = middleware::grpc_settings(&specs, g.max_recv_msg_size_bytes);
        let ctx = HttpContext { grpc_max_message_bytes: settings.max_message_bytes, ..ctx.clone() };
        let (app, listener) = middleware::apply_grpc(grpc::router(ingest.clone(), settings), &specs, &ctx, auth.clone());
        let tls = g.tls.as_ref().map(|t| listener::tls_acceptor("grpc", t, &[b"h2"])).transpose()?;
        let listen = listener::Listen {
            tls,
            max_conns: listener.max_conns.map(|l| conn_cap(l, "grpc")),
            h2_stream_window: g.http2_stream_window_bytes,
            tracker: Some(Arc::clone(&conns)),
            connections: g.connections,
            http1: false,
            ..listener::Listen::new("grpc", &g.endpoint)
        };
        let handle = listener::serve(listen, app).await?;
        tracing::info!(addr = %handle.local_addr, tls = g.tls.is_some(), "OTLP/gRPC listening");
        grpc_addr = Some(handle.local_addr);
        receivers.push(handle);
    }

    let ready = Arc::new(AtomicBool::new(false));
    let admin_router =
        admin::router(admin::AdminState { prometheus, ready: Arc::clone(&ready), queue: pipeline.disk().cloned(), exporters: routing })
            .merge(crate::throttle::debug::router(Arc::clone(&throttle.manager), throttle.reader.clone(), Arc::clone(&throttle.admission)));
    let admin = listener::serve(listener::Listen::new("admin", &config.admin.endpoint), admin_router).await?;
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
        auth,
        quota_sync,
        config: original,
    })
}

/// What the middlewares need: the route table, the throttle and the budgets.
fn http_context(config: &Config, throttle: &Throttle, pipeline: &Arc<Pipeline>) -> HttpContext {
    let mut routes = RouteRegistry::new();
    // Each receiver declares its own routes.
    for route in crate::receiver::routes::ROUTES {
        routes.register(route.path, route.signal);
    }
    HttpContext {
        max_request_body_bytes: config.receiver.http_server.max_request_body_bytes,
        throttle: Arc::clone(&throttle.manager),
        admission: Arc::clone(&throttle.admission),
        routes: Arc::new(routes),
        queue: Some(Arc::clone(pipeline)),
        bodies: Arc::new(crate::receiver::middleware::budget::BodyBudget::new(body_budget(config), config.pipeline.queue.retry_after)),
        decompression_ratio: config.receiver.max_decompression_ratio,
        grpc_max_message_bytes: config.receiver.grpc_server.max_recv_msg_size_bytes,
    }
}

/// The gauges that state the sizes weir started with.
fn publish_start_gauges(config: &Config, pipeline_config: &crate::config::PipelineConfig) {
    metrics::gauge!(telemetry::names::QUEUE_MAX_BYTES).set(pipeline_config.queue.max_bytes as f64);
    if let Some(d) = &config.pipeline.queue.disk {
        metrics::gauge!(telemetry::names::DISK_MAX_BYTES).set(d.max_bytes as f64);
    }
    let started = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
    metrics::gauge!(telemetry::names::START_TIME).set(started);
}

impl RunningApp {
    /// Applies a new, already validated configuration: throttle thresholds, rules,
    /// admission settings, tenants and quotas change atomically; windows, EWMAs, state
    /// machines and limiters keep their state where their shape did not change. Returns
    /// the changed keys that need a restart (they are not applied).
    pub fn reload(&mut self, new: Config) -> Vec<&'static str> {
        let restart = self.config.restart_needed(&new);
        self.throttle.reload(&new.receiver.throttle, &new.receiver.auth);
        if let Some(a) = &self.auth {
            a.reload(&new.receiver.auth);
        }
        self.throttle.manager.set_config_hash(new.hash());
        self.config = new;
        restart
    }

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
        // No request is admitted any more: leave the fleet, so the other replicas take
        // over this one's quota shares at their next sync.
        if let Some(q) = self.quota_sync {
            q.stop().await;
        }
        tracing::info!(queued_bytes = self.pipeline.queued_bytes(), "draining pipeline");
        self.tasks.shutdown(self.pipeline, self.shutdown_timeout).await;
        self.throttle.stop().await;
        self.admin.shutdown(Duration::from_secs(1)).await;
        tracing::info!("shutdown complete");
    }
}

/// Runs until SIGINT or SIGTERM, then shuts down. SIGHUP (and, with
/// `reload.watch_file`, a change of the file) reloads `path`; a config that fails to
/// load or validate is refused with a log line and the running one stays.
pub async fn run(config: Config, path: std::path::PathBuf) -> Result<(), StartError> {
    let watch = config.reload.clone();
    let delay = config.pipeline.shutdown_delay;
    let mut app = start(config).await?;
    let stop = wait_for_signal();
    tokio::pin!(stop);
    #[cfg(unix)]
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    let mtime = |p: &std::path::Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let mut seen = mtime(&path);
    let mut tick = tokio::time::interval(watch.interval);
    loop {
        #[cfg(unix)]
        let hup_signal = async {
            match hup.as_mut() {
                Some(h) => {
                    h.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        #[cfg(not(unix))]
        let hup_signal = std::future::pending::<()>();
        let why = tokio::select! {
            signal = &mut stop => {
                if signal == StopSignal::Term && !delay.is_zero() {
                    app.ready.store(false, Ordering::Release);
                    tracing::info!(delay = ?delay, "not ready; still serving for pipeline.shutdown_delay while load balancers stop sending");
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        _ = wait_for_signal() => tracing::info!("second signal: shutting down now"),
                    }
                }
                break;
            }
            _ = hup_signal => "SIGHUP",
            _ = tick.tick(), if watch.watch_file => {
                let now = mtime(&path);
                if now == seen { continue; }
                seen = now;
                "file changed"
            }
        };
        reload_from(&mut app, &path, why);
    }
    app.shutdown().await;
    Ok(())
}

fn reload_from(app: &mut RunningApp, path: &std::path::Path, why: &str) {
    match Config::load(path) {
        Ok(new) => {
            let hash = new.hash();
            let restart = app.reload(new);
            metrics::counter!(crate::telemetry::names::CONFIG_RELOADS, "result" => "success").increment(1);
            tracing::info!(reason = why, config_hash = format!("{hash:016x}"), "config reloaded");
            if !restart.is_empty() {
                tracing::warn!(keys = ?restart, "changed settings that need a restart were not applied");
            }
        }
        Err(e) => {
            metrics::counter!(crate::telemetry::names::CONFIG_RELOADS, "result" => "failure").increment(1);
            tracing::error!(reason = why, error = %e, "config reload refused; the running config stays");
        }
    }
}

/// The signal that asked weir to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopSignal {
    Int,
    Term,
}

async fn wait_for_signal() -> StopSignal {
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
        _ = ctrl_c => {
            tracing::info!("SIGINT received");
            StopSignal::Int
        }
        _ = term => {
            tracing::info!("SIGTERM received");
            StopSignal::Term
        }
    }
}
