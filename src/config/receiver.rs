//! `receiver:`: the HTTP and gRPC servers, their middleware lists and auth.

use super::middleware::{MiddlewareSpec, ServerKind};
use super::{validate_endpoint, ConfigError};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

/// 64 MiB: the OTLP specification's recommended body limit.
const DEFAULT_MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// The receiver block.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReceiverConfig {
    /// OTLP/HTTP.
    pub http_server: HttpServerConfig,
    /// OTLP/gRPC.
    pub grpc_server: GrpcServerConfig,
    /// Bearer / X-BK-TOKEN authentication.
    pub auth: AuthConfig,
    /// The adaptive throttle (acts where `throttle` is in a middleware list).
    pub throttle: super::ThrottleConfig,
    /// Request bodies both servers may hold in memory at once: wire bytes as they
    /// arrive plus what decompression makes of them. A request that would pass it is
    /// refused before its body is read (503 / UNAVAILABLE with a retry delay); one
    /// request alone is always let through (its own limits bound it). 0 = a quarter of
    /// the cgroup memory limit, or 256 MiB where there is none.
    pub max_body_bytes_in_flight: u64,
    /// A compressed body may inflate to at most this many times its wire size (413
    /// otherwise); bodies that inflate to 1 MiB or less are never refused for it. OTLP
    /// compresses 3 to 20 times; a zip bomb, 1000 times. 0 = no ratio limit.
    pub max_decompression_ratio: u32,
}

impl Default for ReceiverConfig {
    fn default() -> Self {
        ReceiverConfig {
            http_server: HttpServerConfig::default(),
            grpc_server: GrpcServerConfig::default(),
            auth: AuthConfig::default(),
            throttle: super::ThrottleConfig::default(),
            max_body_bytes_in_flight: 0,
            max_decompression_ratio: 100,
        }
    }
}

/// The default HTTP/2 stream window: 1 MiB, hyper's default, which lets a typical
/// OTLP request (a few hundred KB) arrive without waiting for a WINDOW_UPDATE.
pub const DEFAULT_H2_STREAM_WINDOW: u32 = 1024 * 1024;

/// The smallest stream window accepted. The protocol allows less, but below its own
/// default (65535) some clients stall (h2load at 16384 leaves streams that never
/// finish), and nothing is gained that 65535 does not give.
pub const MIN_H2_STREAM_WINDOW: u32 = 65_535;

/// The largest window HTTP/2 can express (RFC 9113 6.9.1).
pub const MAX_H2_STREAM_WINDOW: u32 = (1 << 31) - 1;

/// OTLP/HTTP server.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpServerConfig {
    /// Whether to start it.
    pub enabled: bool,
    /// Listen address.
    pub endpoint: String,
    /// Ordered middleware list, `name;key=value`. The LAST item wraps outermost and runs first.
    pub middlewares: Vec<String>,
    /// Limit for the wire body and for the body after decompression.
    pub max_request_body_bytes: usize,
    /// HTTP/2: how many body bytes a client may send on one stream before weir has
    /// read them (the initial stream flow-control window). While a connection is
    /// refusing (its latest request was answered with the body unread and nothing on it
    /// is reading a body) weir sets the window to 0, so refused requests arrive as
    /// headers only; the next admitted request restores this value. A smaller value
    /// makes the first refused large request on a connection cheaper and every accepted
    /// one a little dearer (more WINDOW_UPDATE round trips). At least 65535 (the
    /// protocol's default).
    pub http2_stream_window_bytes: u32,
    /// Optional TLS.
    pub tls: Option<TlsConfig>,
    /// Connection hygiene: timeouts, keepalive, listen backlog.
    pub connections: ConnectionConfig,
}

impl Default for HttpServerConfig {
    fn default() -> Self {
        HttpServerConfig {
            enabled: true,
            endpoint: "0.0.0.0:4318".into(),
            middlewares: vec!["logging".into(), "content_decompressor".into(), "throttle".into(), "maxconns".into()],
            max_request_body_bytes: DEFAULT_MAX_BODY_BYTES,
            http2_stream_window_bytes: DEFAULT_H2_STREAM_WINDOW,
            tls: None,
            connections: ConnectionConfig::default(),
        }
    }
}

/// OTLP/gRPC server.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GrpcServerConfig {
    /// Whether to start it.
    pub enabled: bool,
    /// Listen address.
    pub endpoint: String,
    /// Ordered middleware list, `name;key=value`. The LAST item wraps outermost and runs first.
    pub middlewares: Vec<String>,
    /// Largest accepted message, compressed on the wire or decompressed.
    pub max_recv_msg_size_bytes: usize,
    /// As [`HttpServerConfig::http2_stream_window_bytes`].
    pub http2_stream_window_bytes: u32,
    /// Optional TLS.
    pub tls: Option<TlsConfig>,
    /// Connection hygiene: timeouts, keepalive, listen backlog.
    pub connections: ConnectionConfig,
}

impl Default for GrpcServerConfig {
    fn default() -> Self {
        GrpcServerConfig {
            enabled: true,
            endpoint: "0.0.0.0:4317".into(),
            middlewares: vec!["logging".into(), "content_decompressor".into(), "throttle".into(), "maxconns".into()],
            max_recv_msg_size_bytes: DEFAULT_MAX_BODY_BYTES,
            http2_stream_window_bytes: DEFAULT_H2_STREAM_WINDOW,
            tls: None,
            connections: ConnectionConfig::default(),
        }
    }
}

/// How long a connection may take over each step, and how the listener queues new ones.
/// A connection that overstays is closed; one with no request in flight is the first to
/// go when the server is at its connection cap (`maxconns`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConnectionConfig {
    /// From the first byte of a request head (HTTP/1.1), or of the connection (the
    /// HTTP/2 preface and first SETTINGS, a TLS handshake), until it is complete
    /// (slowloris). Closed without an answer when exceeded.
    #[serde(with = "humantime_serde")]
    pub header_read_timeout: Duration,
    /// A request's body must have arrived within this of its head (slow POST): 408 /
    /// DEADLINE_EXCEEDED otherwise.
    #[serde(with = "humantime_serde")]
    pub body_read_timeout: Duration,
    /// A connection with no request in flight and nothing received for this long is
    /// closed (HTTP/1.1 keep-alive, HTTP/2 with no stream open). 0 = never.
    #[serde(with = "humantime_serde")]
    pub idle_timeout: Duration,
    /// HTTP/2: after this long with nothing received, weir sends a PING. 0 = off.
    #[serde(with = "humantime_serde")]
    pub http2_keepalive_interval: Duration,
    /// HTTP/2: a PING not answered within this closes the connection.
    #[serde(with = "humantime_serde")]
    pub http2_keepalive_timeout: Duration,
    /// The listen backlog: connections the kernel completes and queues before weir
    /// accepts them (the kernel caps it at `net.core.somaxconn`).
    pub listen_backlog: u32,
    /// `SO_RCVBUF` of every accepted connection, in bytes (set on the listening socket,
    /// which they inherit); 0 = the kernel's default, which it grows as weir reads
    /// (`net.ipv4.tcp_rmem`). Bytes a client sent that weir has not read wait there:
    /// with this set, at most about twice the value per connection (the kernel doubles it
    /// for bookkeeping and caps it at `net.core.rmem_max`), and cgroup v2 counts them as
    /// the container's memory.
    pub receive_buffer: u32,
}

impl Default for ConnectionConfig {
    fn default() -> Self {
        ConnectionConfig {
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(120),
            http2_keepalive_interval: Duration::from_secs(30),
            http2_keepalive_timeout: Duration::from_secs(10),
            listen_backlog: 4096,
            receive_buffer: 0,
        }
    }
}

/// The least `receive_buffer` other than 0: one segment on loopback is 64 KiB, and a
/// buffer that holds only one or two keeps the sender waiting on the window.
pub const MIN_RECEIVE_BUFFER: u32 = 64 * 1024;
/// The most: ten times the kernel's usual ceiling for a grown buffer (6 MiB in
/// `net.ipv4.tcp_rmem`); beyond it a value is more likely a slip than a choice.
pub const MAX_RECEIVE_BUFFER: u32 = 64 * 1024 * 1024;

impl ConnectionConfig {
    fn validate(&self, server: &str) -> Result<(), ConfigError> {
        let key = |k: &str| format!("receiver.{server}.connections.{k}");
        if self.header_read_timeout.is_zero() {
            return Err(ConfigError::invalid(key("header_read_timeout"), "must be > 0"));
        }
        if self.body_read_timeout.is_zero() {
            return Err(ConfigError::invalid(key("body_read_timeout"), "must be > 0"));
        }
        if !self.http2_keepalive_interval.is_zero() && self.http2_keepalive_timeout.is_zero() {
            return Err(ConfigError::invalid(key("http2_keepalive_timeout"), "must be > 0 while http2_keepalive_interval is set"));
        }
        if self.listen_backlog == 0 {
            return Err(ConfigError::invalid(key("listen_backlog"), "must be > 0"));
        }
        if self.receive_buffer != 0 && !(MIN_RECEIVE_BUFFER..=MAX_RECEIVE_BUFFER).contains(&self.receive_buffer) {
            return Err(ConfigError::invalid(
                key("receive_buffer"),
                format!("must be 0 (the kernel's default) or between {MIN_RECEIVE_BUFFER} and {MAX_RECEIVE_BUFFER} bytes"),
            ));
        }
        Ok(())
    }
}

/// TLS for one server (rustls).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM certificate chain.
    pub cert_file: PathBuf,
    /// PEM private key.
    pub key_file: PathBuf,
    /// When set, clients must present a certificate signed by this CA (mutual TLS).
    #[serde(default)]
    pub client_ca_file: Option<PathBuf>,
}

/// Authentication.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// Accepted tokens of no named tenant. Empty (and no `tenants`): no authentication.
    /// Each counts as a tenant named `token-<hash>` (never the token itself).
    pub tokens: Vec<String>,
    /// Tenants by name: their settings and their tokens. (An entry without `tokens` or
    /// `tokens_file` is the older shape, keyed by its token: it is read as a tenant named
    /// `token-<hash>` with that one token.)
    pub tenants: std::collections::BTreeMap<String, TenantConfig>,
    /// Where the replicas of a fleet share their tenants' quotas; none: quotas hold per
    /// replica.
    pub quota_store: Option<QuotaStoreConfig>,
    /// What loading found worth a warning (an older shape read as its newer meaning);
    /// printed once at start, never with a token in it.
    #[serde(skip)]
    pub warnings: Vec<String>,
}

/// `receiver.auth.quota_store`: the tenants' `rate` and `items` quotas shared by every
/// replica that names the same store (see `quota::store`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaStoreConfig {
    /// `redis` (the only kind).
    #[serde(rename = "type")]
    pub kind: String,
    /// `redis://[user:password@]host:port[/db]`, or `rediss://` for TLS.
    pub url: String,
    /// For `rediss://`: the CA file (PEM; default the system's roots) and, for services
    /// that ask for one, a client certificate and key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<QuotaStoreTls>,
    /// How often each replica reconciles its shares with the store.
    #[serde(default = "default_sync_interval", with = "humantime_serde")]
    pub sync_interval: std::time::Duration,
    /// Prefix of every key weir writes (several fleets can share one Redis).
    #[serde(default = "default_key_prefix")]
    pub key_prefix: String,
}

/// `receiver.auth.quota_store.tls`.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct QuotaStoreTls {
    /// The CA that signed the store's certificate (PEM).
    pub ca_file: Option<std::path::PathBuf>,
    /// A client certificate (PEM), with `key_file`.
    pub cert_file: Option<std::path::PathBuf>,
    /// Its key (PEM).
    pub key_file: Option<std::path::PathBuf>,
}

impl QuotaStoreConfig {
    /// The connection target, as checked at load.
    pub fn target(&self) -> Result<super::redis::Target, String> {
        let tls = self.tls.as_ref().map(|t| super::redis::TlsFiles {
            ca_file: t.ca_file.clone(),
            cert_file: t.cert_file.clone(),
            key_file: t.key_file.clone(),
        });
        super::redis::Target::parse(&self.url, tls)
    }
}

fn default_sync_interval() -> std::time::Duration {
    std::time::Duration::from_millis(200)
}

fn default_key_prefix() -> String {
    "weir:".into()
}

impl QuotaStoreConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        let key = "receiver.auth.quota_store";
        if self.kind != "redis" {
            return Err(ConfigError::invalid(format!("{key}.type"), format!("`{}` is not a store weir knows; use `redis`", self.kind)));
        }
        self.target().map_err(|e| ConfigError::invalid(format!("{key}.url"), e))?;
        if let Some(t) = &self.tls {
            if t.cert_file.is_some() != t.key_file.is_some() {
                return Err(ConfigError::invalid(format!("{key}.tls"), "cert_file and key_file go together"));
            }
            for (name, f) in [("ca_file", &t.ca_file), ("cert_file", &t.cert_file), ("key_file", &t.key_file)] {
                if let Some(f) = f.as_ref().filter(|f| !f.is_file()) {
                    return Err(ConfigError::invalid(format!("{key}.tls.{name}"), format!("{} is not a readable file", f.display())));
                }
            }
        }
        let ms = self.sync_interval.as_millis();
        if !(10..=10_000).contains(&ms) {
            return Err(ConfigError::invalid(format!("{key}.sync_interval"), format!("must be between 10ms and 10s, got {ms}ms")));
        }
        if self.key_prefix.is_empty() || self.key_prefix.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(ConfigError::invalid(format!("{key}.key_prefix"), "must be non-empty, without whitespace"));
        }
        Ok(())
    }
}

/// One tenant's settings.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct TenantConfig {
    /// The tenant's tokens (several, so one can be rotated out while the next is in use).
    pub tokens: Vec<String>,
    /// A file of more tokens, one per line (`#` comments and blank lines skipped): the
    /// shape of a mounted Kubernetes Secret. Read at start and on every reload.
    pub tokens_file: Option<std::path::PathBuf>,
    /// The tenant's priority class (wins over the record type's).
    pub priority: Option<super::Priority>,
    /// Request quota; none = unlimited.
    pub rate: Option<RateConfig>,
    /// Item quotas per signal, items per second (spans, data points, log records,
    /// profiles); items over it are refused after decoding and reported as partial success.
    pub items: ItemQuotas,
}

/// Items per second per signal; unset = unlimited.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct ItemQuotas {
    /// Spans per second.
    pub traces: Option<f64>,
    /// Data points per second.
    pub metrics: Option<f64>,
    /// Log records per second.
    pub logs: Option<f64>,
    /// Profiles per second.
    pub profiles: Option<f64>,
}

impl ItemQuotas {
    /// The configured (signal, rate) pairs.
    pub fn iter(&self) -> impl Iterator<Item = (crate::signal::Signal, f64)> + '_ {
        use crate::signal::Signal;
        [(Signal::Traces, self.traces), (Signal::Metrics, self.metrics), (Signal::Logs, self.logs), (Signal::Profiles, self.profiles)]
            .into_iter()
            .filter_map(|(s, r)| r.map(|r| (s, r)))
    }
}

/// A request quota.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateConfig {
    /// Sustained requests per second.
    pub requests_per_second: f64,
    /// Requests that may come at once.
    #[serde(default = "default_burst")]
    pub burst: u32,
}

fn default_burst() -> u32 {
    1
}

/// The name a token stands for when no tenant names it: `token-` and 8 hex digits of a
/// hash, so metrics and logs can tell such clients apart without showing the secret.
pub fn token_label(token: &str) -> String {
    let h = token.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    format!("token-{:08x}", (h >> 32) as u32 ^ h as u32)
}

impl AuthConfig {
    /// Replaces every token with `<redacted>` (for printing the config).
    pub fn redact(&mut self) {
        let hide = |v: &mut Vec<String>| v.iter_mut().for_each(|t| *t = "<redacted>".into());
        hide(&mut self.tokens);
        for t in self.tenants.values_mut() {
            hide(&mut t.tokens);
        }
        // A password in the store's URL.
        if let Some(store) = &mut self.quota_store {
            if let Some((scheme_creds, host)) = store.url.rsplit_once('@') {
                let scheme = scheme_creds.split_once("://").map_or("redis", |(s, _)| s);
                store.url = format!("{scheme}://<redacted>@{host}");
            }
        }
    }

    /// Every accepted token with the name of its tenant.
    pub fn all_tokens(&self) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = self.tokens.iter().map(|t| (t.clone(), token_label(t))).collect();
        for (name, t) in &self.tenants {
            v.extend(t.tokens.iter().map(|tok| (tok.clone(), name.clone())));
        }
        v
    }

    /// Reads every `tokens_file` into its tenant's `tokens` and turns entries of the older
    /// shape (keyed by their token) into named ones, so everything after this sees tenant
    /// names only. Errors name the key, never a token.
    pub(super) fn normalize(&mut self) -> Result<(), ConfigError> {
        let mut named = std::collections::BTreeMap::new();
        // Tenants of the older shape, keyed by their token.
        let mut old_shape = std::collections::HashSet::new();
        for (key, mut t) in std::mem::take(&mut self.tenants) {
            if t.tokens.is_empty() && t.tokens_file.is_none() {
                let name = token_label(&key);
                t.tokens = vec![key];
                old_shape.insert(name.clone());
                named.insert(name, t);
                continue;
            }
            if let Some(path) = &t.tokens_file {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    ConfigError::invalid(format!("receiver.auth.tenants.{key}.tokens_file"), format!("cannot read {}: {e}", path.display()))
                })?;
                t.tokens.extend(text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).map(String::from));
            }
            t.tokens.sort();
            t.tokens.dedup();
            named.insert(key, t);
        }
        self.tenants = named;
        let mut owner: std::collections::HashMap<&str, &str> = std::collections::HashMap::new();
        for (name, t) in &self.tenants {
            for (i, tok) in t.tokens.iter().enumerate() {
                if tok.is_empty() || tok.chars().any(|c| c.is_whitespace() || c.is_control()) {
                    return Err(ConfigError::invalid(
                        format!("receiver.auth.tenants.{name}.tokens[{i}]"),
                        "must be non-empty, without whitespace",
                    ));
                }
                if let Some(other) = owner.insert(tok, name) {
                    return Err(ConfigError::invalid(
                        format!("receiver.auth.tenants.{name}.tokens"),
                        format!("a token of `{name}` is also a token of `{other}`: a token must name one tenant"),
                    ));
                }
            }
        }
        // The older shape listed a tenant's token in `tokens` too: it is that tenant. A token
        // of a named tenant listed there stays an error (which tenant would it be?).
        let mut kept = Vec::with_capacity(self.tokens.len());
        let mut warnings = Vec::new();
        for (i, tok) in self.tokens.iter().enumerate() {
            match owner.get(tok.as_str()) {
                Some(other) if old_shape.contains(*other) => warnings.push(format!(
                    "receiver.auth.tokens[{i}] is also the key of tenant `{other}` (the older shape, keyed by its token): \
                     it is read as that tenant. To migrate, give the tenant a name, list the token under its `tokens` \
                     (or `tokens_file`), and remove it from receiver.auth.tokens"
                )),
                Some(other) => {
                    return Err(ConfigError::invalid(format!("receiver.auth.tokens[{i}]"), format!("is also a token of tenant `{other}`")));
                }
                None => kept.push(tok.clone()),
            }
        }
        self.tokens = kept;
        self.warnings.extend(warnings);
        Ok(())
    }
}

impl ReceiverConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let h = &self.http_server;
        validate_endpoint("receiver.http_server.endpoint", &h.endpoint)?;
        for (i, m) in h.middlewares.iter().enumerate() {
            MiddlewareSpec::parse(m, ServerKind::Http)
                .map_err(|rule| ConfigError::invalid(format!("receiver.http_server.middlewares[{i}]"), rule))?;
        }
        if h.max_request_body_bytes == 0 {
            return Err(ConfigError::invalid("receiver.http_server.max_request_body_bytes", "must be > 0"));
        }
        let g = &self.grpc_server;
        validate_endpoint("receiver.grpc_server.endpoint", &g.endpoint)?;
        for (i, m) in g.middlewares.iter().enumerate() {
            MiddlewareSpec::parse(m, ServerKind::Grpc)
                .map_err(|rule| ConfigError::invalid(format!("receiver.grpc_server.middlewares[{i}]"), rule))?;
        }
        if g.max_recv_msg_size_bytes == 0 {
            return Err(ConfigError::invalid("receiver.grpc_server.max_recv_msg_size_bytes", "must be > 0"));
        }
        h.connections.validate("http_server")?;
        g.connections.validate("grpc_server")?;
        for (name, window) in [("http_server", h.http2_stream_window_bytes), ("grpc_server", g.http2_stream_window_bytes)] {
            if !(MIN_H2_STREAM_WINDOW..=MAX_H2_STREAM_WINDOW).contains(&window) {
                return Err(ConfigError::invalid(
                    format!("receiver.{name}.http2_stream_window_bytes"),
                    format!("must be between {MIN_H2_STREAM_WINDOW} and {MAX_H2_STREAM_WINDOW}, got {window}"),
                ));
            }
        }
        for (name, tls) in [("http_server", &h.tls), ("grpc_server", &g.tls)] {
            if let Some(tls) = tls {
                for (field, path) in [
                    ("cert_file", Some(&tls.cert_file)),
                    ("key_file", Some(&tls.key_file)),
                    ("client_ca_file", tls.client_ca_file.as_ref()),
                ] {
                    if let Some(p) = path {
                        if !p.exists() {
                            return Err(ConfigError::invalid(
                                format!("receiver.{name}.tls.{field}"),
                                format!("file {} does not exist", p.display()),
                            ));
                        }
                    }
                }
            }
        }
        self.throttle.validate("receiver.throttle")?;
        if let Some(store) = &self.auth.quota_store {
            store.validate()?;
        }
        for (i, t) in self.auth.tokens.iter().enumerate() {
            if t.is_empty() || t.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(ConfigError::invalid(format!("receiver.auth.tokens[{i}]"), "must be non-empty, without whitespace"));
            }
        }
        for (t, c) in &self.auth.tenants {
            if t.is_empty() || t.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(ConfigError::invalid(
                    format!("receiver.auth.tenants.{t}"),
                    "a tenant name must be non-empty, without whitespace",
                ));
            }
            for (signal, rate) in c.items.iter() {
                if !(rate >= 1.0 && rate.is_finite()) {
                    return Err(ConfigError::invalid(
                        format!("receiver.auth.tenants.{t}.items.{}", signal.as_str()),
                        "must be >= 1 item per second",
                    ));
                }
            }
            if let Some(r) = &c.rate {
                let ok = r.requests_per_second > 0.0 && r.requests_per_second.is_finite() && r.burst >= 1;
                if !ok {
                    return Err(ConfigError::invalid(
                        format!("receiver.auth.tenants.{t}.rate"),
                        "need requests_per_second > 0 and burst >= 1",
                    ));
                }
            }
        }
        Ok(())
    }
}
