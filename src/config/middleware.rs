//! The ordered middleware lists `receiver.http_server.middlewares` and
//! `receiver.grpc_server.middlewares`: items in the `name;key=value;key=value` form,
//! parsed here at load so a bad item is an error naming it.

/// Which server: the OTLP/HTTP one or the OTLP/gRPC one (a middleware list, a request,
/// a metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerKind {
    /// OTLP/HTTP.
    Http,
    /// OTLP/gRPC.
    Grpc,
}

impl ServerKind {
    /// Metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ServerKind::Http => "http",
            ServerKind::Grpc => "grpc",
        }
    }
}

/// A connection limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ConnLimit {
    /// `maxConnections=N`.
    Absolute(usize),
    /// `maxConnectionsRatio=R`: R per CPU core.
    PerCore(f64),
    /// `maxconns` alone: from the memory weir may use (see [`ConnLimit::resolve`]).
    Memory,
}

/// What one open connection is reckoned to cost in memory: hyper's buffers, the task,
/// and the kernel's socket buffers of a connection at rest. A connection moving a body
/// costs more, for a while; the memory water level, not this count, handles that (at
/// the memory enter line the idlest connection makes room for each new one).
pub const CONN_COST_BYTES: u64 = 32 * 1024;

impl ConnLimit {
    /// The limit for `cores` CPU cores and `memory` bytes (the cgroup's limit, else the
    /// machine's), at least 1. `Memory`: half of the memory at [`CONN_COST_BYTES`] each
    /// (4,800 in 300 MiB), and never more than half of what the open-file limit leaves
    /// after room for weir's own files (the two servers share that limit).
    pub fn resolve(self, cores: f64, memory: u64, open_files: u64) -> usize {
        match self {
            ConnLimit::Absolute(n) => n.max(1),
            ConnLimit::PerCore(r) => ((r * cores).ceil() as usize).max(1),
            ConnLimit::Memory => {
                let by_memory = memory / 2 / CONN_COST_BYTES;
                let by_files = open_files.saturating_sub(256) / 2;
                by_memory.min(by_files).max(16) as usize
            }
        }
    }
}

/// One parsed middleware item.
#[derive(Debug, Clone, PartialEq)]
pub enum MiddlewareSpec {
    /// Access log: every request at debug level, failures at info.
    Logging,
    /// CORS for browser senders: `cors;allowedOrigins=https://a.example,https://b.example`
    /// (default `*`). HTTP only.
    Cors {
        /// Allowed origins; `*` allows any.
        allowed_origins: Vec<String>,
    },
    /// Decompresses request bodies (gzip, deflate, zstd, snappy) within the body limit.
    ContentDecompressor,
    /// Caps open connections: `maxconns;maxConnections=N` or `maxconns;maxConnectionsRatio=R`.
    MaxConns(ConnLimit),
    /// Caps the wire body: `maxbytes;maxRequestBytes=N`.
    MaxBytes {
        /// The limit in bytes.
        max_request_bytes: usize,
    },
    /// The adaptive throttle (settings in `receiver.throttle`). List it after
    /// `content_decompressor` so it runs before: refusals cost no body read.
    Throttle,
}

impl MiddlewareSpec {
    /// Parses `name;key=value;...`; the error says what is wrong.
    pub fn parse(item: &str, kind: ServerKind) -> Result<MiddlewareSpec, String> {
        let mut parts = item.split(';').map(str::trim);
        let name = parts.next().unwrap_or("");
        let mut opts = Vec::new();
        for p in parts.filter(|p| !p.is_empty()) {
            let (k, v) = p.split_once('=').ok_or_else(|| format!("`{p}` in `{item}` is not key=value"))?;
            opts.push((k.trim(), v.trim()));
        }
        let unknown_opt = |allowed: &[&str]| -> Result<(), String> {
            match opts.iter().find(|(k, _)| !allowed.contains(k)) {
                Some((k, _)) => Err(format!(
                    "unknown option `{k}` for middleware `{name}` (allowed: {})",
                    if allowed.is_empty() { "none".to_string() } else { allowed.join(", ") }
                )),
                None => Ok(()),
            }
        };
        let opt = |k: &str| opts.iter().find(|(key, _)| *key == k).map(|(_, v)| *v);
        match name {
            "logging" => {
                unknown_opt(&[])?;
                Ok(MiddlewareSpec::Logging)
            }
            "cors" => {
                if kind == ServerKind::Grpc {
                    return Err("`cors` applies to the HTTP server only".into());
                }
                unknown_opt(&["allowedOrigins"])?;
                let allowed_origins =
                    opt("allowedOrigins").unwrap_or("*").split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
                Ok(MiddlewareSpec::Cors { allowed_origins })
            }
            "content_decompressor" => {
                unknown_opt(&[])?;
                Ok(MiddlewareSpec::ContentDecompressor)
            }
            "maxconns" => {
                unknown_opt(&["maxConnections", "maxConnectionsRatio"])?;
                match (opt("maxConnections"), opt("maxConnectionsRatio")) {
                    (None, None) => Ok(MiddlewareSpec::MaxConns(ConnLimit::Memory)),
                    (Some(n), None) => match n.parse::<usize>() {
                        Ok(n) if n > 0 => Ok(MiddlewareSpec::MaxConns(ConnLimit::Absolute(n))),
                        _ => Err(format!("maxConnections `{n}` must be a positive integer")),
                    },
                    (None, Some(r)) => match r.parse::<f64>() {
                        Ok(r) if r > 0.0 && r.is_finite() => Ok(MiddlewareSpec::MaxConns(ConnLimit::PerCore(r))),
                        _ => Err(format!("maxConnectionsRatio `{r}` must be a positive number")),
                    },
                    _ => Err("maxconns takes at most one of maxConnections or maxConnectionsRatio (neither: from memory)".into()),
                }
            }
            "maxbytes" => {
                unknown_opt(&["maxRequestBytes"])?;
                match opt("maxRequestBytes").map(str::parse::<usize>) {
                    Some(Ok(n)) if n > 0 => Ok(MiddlewareSpec::MaxBytes { max_request_bytes: n }),
                    _ => Err("maxbytes needs maxRequestBytes=<positive integer>".into()),
                }
            }
            "throttle" => {
                unknown_opt(&[])?;
                Ok(MiddlewareSpec::Throttle)
            }
            "" => Err("empty middleware name".into()),
            other => {
                Err(format!("unknown middleware `{other}` (known: logging, cors, content_decompressor, maxconns, maxbytes, throttle)"))
            }
        }
    }
}

/// Parses a whole list (already validated at config load).
pub fn parse_list(items: &[String], kind: ServerKind) -> Result<Vec<MiddlewareSpec>, String> {
    items.iter().map(|i| MiddlewareSpec::parse(i, kind)).collect()
}
