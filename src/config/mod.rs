//! Configuration: serde structs with defaults, loaded with figment (defaults, then the
//! YAML file, then `WEIR_*` environment variables) and checked by [`Config::validate`],
//! whose errors name the offending key and the rule it broke.

mod admission;
pub mod auto;
mod envsub;
mod exporter;
pub mod kafka;
pub mod middleware;
mod pipeline;
mod receiver;
pub mod redis;
mod retry;
mod throttle;

pub use admission::{BbrConfig, BurstDampingConfig, ConnectionSignalConfig, KneeConfig, PidConfig, SlowStartConfig};
pub use exporter::{
    BlackholeExporterConfig, DebugExporterConfig, DnsResolverConfig, ExporterConfig, FileExporterConfig, FileResolverConfig,
    LoadBalancingExporterConfig, OtlpExporterConfig, OtlpHttpExporterConfig, ResolverConfig, RetryConfig, RoutingKeyConfig,
};
pub use middleware::{ConnLimit, MiddlewareSpec, ServerKind, CONN_COST_BYTES};
pub use pipeline::{BatchConfig, DiskConfig, PipelineConfig, QueueConfig, SyncMode};
pub use receiver::{
    token_label, AuthConfig, ConnectionConfig, GrpcServerConfig, HttpServerConfig, RateConfig, ReceiverConfig, TenantConfig, TlsConfig,
    DEFAULT_H2_STREAM_WINDOW, MAX_H2_STREAM_WINDOW, MIN_H2_STREAM_WINDOW,
};
pub use throttle::{Priority, RetryAfterConfig, Rule, RuleConfig, RulesConfig, SignalConfig, SlotConfig, ThresholdsConfig, ThrottleConfig};

use figment::providers::{Env, Format, Serialized, Yaml};
use figment::Figment;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// A configuration problem: the dotted key and what is wrong with it.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be parsed or a value had the wrong type or an unknown key.
    #[error("{0}")]
    Parse(String),
    /// A value parsed but broke a rule.
    #[error("{key}: {rule}")]
    Invalid {
        /// Dotted path of the key, e.g. `receiver.http_server.endpoint`.
        key: String,
        /// The rule it broke.
        rule: String,
    },
}

impl ConfigError {
    /// Builds an [`ConfigError::Invalid`].
    pub fn invalid(key: impl Into<String>, rule: impl Into<String>) -> Self {
        ConfigError::Invalid { key: key.into(), rule: rule.into() }
    }
}

/// The whole weir configuration.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Receivers (HTTP, gRPC), auth and admission.
    pub receiver: ReceiverConfig,
    /// The queue and batch stages between receivers and exporters.
    pub pipeline: PipelineConfig,
    /// Where accepted data goes; every batch is sent to each of them.
    pub exporters: Vec<ExporterConfig>,
    /// The admin server (/metrics, /healthz, /readyz).
    pub admin: AdminConfig,
    /// Logging.
    pub log: LogConfig,
    /// Hot reload.
    pub reload: ReloadConfig,
}

/// Hot reload: SIGHUP always reloads the config file; optionally the file is watched.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReloadConfig {
    /// Reload when the file's modification time changes.
    pub watch_file: bool,
    /// How often the file is checked.
    #[serde(with = "humantime_serde")]
    pub interval: std::time::Duration,
}

impl Default for ReloadConfig {
    fn default() -> Self {
        ReloadConfig { watch_file: false, interval: std::time::Duration::from_secs(2) }
    }
}

/// The admin server.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// Listen address, e.g. `0.0.0.0:8888`.
    pub endpoint: String,
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig { endpoint: "0.0.0.0:8888".into() }
    }
}

/// Logging.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// Level filter (`error`, `warn`, `info`, `debug`, `trace` or an env-filter string).
    /// `RUST_LOG`, when set, wins.
    pub level: String,
    /// `text` or `json`.
    pub format: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig { level: "info".into(), format: "text".into() }
    }
}

/// The YAML's values with `${env:…}` references expanded (see [`envsub`]).
fn expanded(yaml: figment::providers::Data<Yaml>) -> Result<Serialized<figment::value::Dict>, ConfigError> {
    use figment::Provider;
    let mut data = yaml.data().map_err(|e| ConfigError::Parse(describe_figment_error(e)))?;
    let mut dict = data.remove(&figment::Profile::Default).unwrap_or_default();
    envsub::expand_dict(&mut dict, "")?;
    Ok(Serialized::defaults(dict))
}

/// The top-level sections, which a `WEIR_` variable must start with to be read.
const SECTIONS: [&str; 6] = ["receiver", "pipeline", "exporters", "admin", "log", "reload"];

/// Whether a `WEIR_`-stripped variable name starts with a section (`RECEIVER__…`).
fn names_a_section(key: &str) -> bool {
    let first = key.split("__").next().unwrap_or("");
    SECTIONS.iter().any(|s| s.eq_ignore_ascii_case(first))
}

impl Config {
    /// Loads defaults, then `path`, then `WEIR_` environment variables (`__` separates
    /// levels: `WEIR_RECEIVER__HTTP_SERVER__ENDPOINT`), and validates the result.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        if !path.exists() {
            return Err(ConfigError::Parse(format!("config file {} does not exist", path.display())));
        }
        Self::from_figment(Figment::from(Serialized::defaults(Config::default())).merge(expanded(Yaml::file(path))?))
    }

    /// Loads from a YAML string (tests and `--check` of inline configs).
    pub fn from_yaml(yaml: &str) -> Result<Config, ConfigError> {
        Self::from_figment(Figment::from(Serialized::defaults(Config::default())).merge(expanded(Yaml::string(yaml))?))
    }

    fn from_figment(figment: Figment) -> Result<Config, ConfigError> {
        let env = Env::prefixed("WEIR_").filter(|key| names_a_section(key.as_str())).split("__");
        let figment = figment.merge(env);
        let mut config: Config = figment.extract().map_err(|e| ConfigError::Parse(describe_figment_error(e)))?;
        config.receiver.auth.normalize()?;
        config.validate()?;
        Ok(config)
    }

    /// `WEIR_*` environment variables that name no config section, and so are ignored:
    /// Kubernetes gives every pod `WEIR_PORT`, `WEIR_SERVICE_HOST`, `WEIR_PORT_4317_TCP`
    /// and the like for a Service named `weir`, and those must not stop weir from
    /// starting. A variable that names a section but a wrong key below it is still an
    /// error naming the key (a typo in a real override must not pass unseen).
    pub fn ignored_env() -> Vec<String> {
        std::env::vars_os()
            .filter_map(|(k, _)| k.into_string().ok())
            .filter(|k| k.strip_prefix("WEIR_").is_some_and(|rest| !names_a_section(rest)))
            .collect()
    }

    /// Checks every rule that serde cannot express.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.receiver.validate()?;
        self.pipeline.validate()?;
        validate_endpoint("admin.endpoint", &self.admin.endpoint)?;
        if !matches!(self.log.format.as_str(), "text" | "json") {
            return Err(ConfigError::invalid("log.format", "must be `text` or `json`"));
        }
        if self.exporters.is_empty() {
            return Err(ConfigError::invalid("exporters", "at least one exporter is required"));
        }
        for (i, e) in self.exporters.iter().enumerate() {
            e.validate(&format!("exporters[{i}]"))?;
        }
        // With a disk queue each exporter's cursor is a file named after it.
        if self.pipeline.queue.disk.is_some() {
            let mut seen = std::collections::HashSet::new();
            for (i, e) in self.exporters.iter().enumerate() {
                if !seen.insert(e.name()) {
                    return Err(ConfigError::invalid(
                        format!("exporters[{i}].name"),
                        format!(
                            "`{}` is used twice; with pipeline.queue.disk every exporter needs its own name (its cursor file)",
                            e.name()
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// A stable 64-bit hash (FNV-1a) of the effective configuration.
    pub fn hash(&self) -> u64 {
        self.to_yaml().bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
    }

    /// The keys whose change a reload cannot apply (they need a restart).
    pub fn restart_needed(&self, new: &Config) -> Vec<&'static str> {
        let y = |v: &dyn erased::Yaml| v.yaml();
        let mut keys = Vec::new();
        let pairs: [(&'static str, String, String); 8] = [
            ("receiver.http_server", y(&self.receiver.http_server), y(&new.receiver.http_server)),
            ("receiver.grpc_server", y(&self.receiver.grpc_server), y(&new.receiver.grpc_server)),
            ("pipeline", y(&self.pipeline), y(&new.pipeline)),
            ("exporters", y(&self.exporters), y(&new.exporters)),
            ("admin", y(&self.admin), y(&new.admin)),
            ("log", y(&self.log), y(&new.log)),
            ("reload", y(&self.reload), y(&new.reload)),
            ("receiver.throttle.cgroup_root", y(&self.receiver.throttle.cgroup_root), y(&new.receiver.throttle.cgroup_root)),
        ];
        for (k, a, b) in pairs {
            if a != b {
                keys.push(k);
            }
        }
        if self.receiver.auth.all_tokens().is_empty() != new.receiver.auth.all_tokens().is_empty() {
            keys.push("receiver.auth (turning authentication on or off)");
        }
        if y(&self.receiver.auth.quota_store) != y(&new.receiver.auth.quota_store) {
            keys.push("receiver.auth.quota_store");
        }
        if self.receiver.throttle.enabled != new.receiver.throttle.enabled {
            keys.push("receiver.throttle.enabled");
        }
        if self.receiver.throttle.knee.enabled != new.receiver.throttle.knee.enabled {
            keys.push("receiver.throttle.knee.enabled");
        }
        keys
    }

    /// The effective configuration as YAML, defaults filled in.
    pub fn to_yaml(&self) -> String {
        serde_yaml::to_string(self).unwrap_or_else(|e| format!("# cannot render config: {e}\n"))
    }
}

/// Turns figment's error into one line per problem, each naming the key.
fn describe_figment_error(err: figment::Error) -> String {
    err.into_iter()
        .map(|e| {
            let key = e.path.join(".");
            let mut kind = e.kind.to_string();
            if let figment::error::Kind::UnknownField(field, _) = &e.kind {
                kind = format!("unknown key `{field}`");
            }
            let key = match &e.kind {
                figment::error::Kind::UnknownField(field, _) if key.is_empty() => field.clone(),
                figment::error::Kind::UnknownField(field, _) if !key.ends_with(field.as_str()) => format!("{key}.{field}"),
                _ => key,
            };
            if key.is_empty() {
                kind
            } else {
                format!("{key}: {kind}")
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Checks that an endpoint is `host:port`.
pub(crate) fn validate_endpoint(key: &str, value: &str) -> Result<(), ConfigError> {
    match value.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => Ok(()),
        _ => Err(ConfigError::invalid(key, format!("`{value}` is not host:port"))),
    }
}

mod erased {
    /// Serialises any config section for comparison.
    pub trait Yaml {
        fn yaml(&self) -> String;
    }
    impl<T: serde::Serialize> Yaml for T {
        fn yaml(&self) -> String {
            serde_yaml::to_string(self).unwrap_or_default()
        }
    }
}
