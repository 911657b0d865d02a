//! The quota store's connection to Redis, through the `redis` crate: `redis://` or
//! `rediss://` (TLS, with a CA file and an optional client certificate for managed
//! services), `user:password@` for ACL users. The store sends one script call per sync
//! interval, so one multiplexed connection is all it needs; every timeout stays in weir's
//! hands (the connection's and each call's are the sync's own).

use std::path::PathBuf;
use std::time::Duration;

/// The TLS files of a `rediss://` store (PEM).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TlsFiles {
    /// The CA that signed the server's certificate; none: the system's roots.
    pub ca_file: Option<PathBuf>,
    /// A client certificate and its key, for stores that ask for one (mutual TLS).
    pub cert_file: Option<PathBuf>,
    /// The client certificate's key.
    pub key_file: Option<PathBuf>,
}

/// Where and how to connect.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    url: String,
    /// `host:port`, for log lines (never the password).
    pub addr: String,
    tls: Option<TlsFiles>,
}

impl Target {
    /// Checks the URL (`redis://` or `rediss://`, `[user:password@]host[:port][/db]`);
    /// the error names what is wrong with it, never the password. `tls` applies to
    /// `rediss://` only.
    pub fn parse(url: &str, tls: Option<TlsFiles>) -> Result<Target, String> {
        let secure = url.starts_with("rediss://");
        if !secure && !url.starts_with("redis://") {
            return Err("must start with redis:// or rediss:// (TLS)".into());
        }
        if tls.is_some() && !secure {
            return Err("`tls` is set but the URL is redis://; use rediss:// for TLS".into());
        }
        let info = redis::IntoConnectionInfo::into_connection_info(url)
            .map_err(|e| format!("not a Redis URL: {}", e.detail().unwrap_or("malformed")))?;
        let addr = info.addr().to_string().trim_start_matches("rediss://").trim_start_matches("redis://").to_string();
        Ok(Target { url: url.to_string(), addr, tls: if secure { Some(tls.unwrap_or_default()) } else { None } })
    }

    fn client(&self) -> Result<redis::Client, String> {
        let Some(tls) = &self.tls else {
            return redis::Client::open(self.url.as_str()).map_err(|e| e.to_string());
        };
        let read = |p: &PathBuf| std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()));
        let root_cert = tls.ca_file.as_ref().map(read).transpose()?;
        let client_tls = match (&tls.cert_file, &tls.key_file) {
            (Some(c), Some(k)) => Some(redis::ClientTlsConfig { client_cert: read(c)?, client_key: read(k)? }),
            (None, None) => None,
            _ => return Err("tls.cert_file and tls.key_file go together".into()),
        };
        redis::Client::build_with_tls(self.url.as_str(), redis::TlsCertificates { client_tls, root_cert }).map_err(|e| e.to_string())
    }

    /// Connects (TLS handshake and AUTH included) within `timeout`; each call on the
    /// connection then answers within `timeout` too.
    pub async fn connect(&self, timeout: Duration) -> Result<redis::aio::MultiplexedConnection, String> {
        let client = self.client()?;
        let config = redis::AsyncConnectionConfig::new().set_connection_timeout(Some(timeout)).set_response_timeout(Some(timeout));
        tokio::time::timeout(timeout, client.get_multiplexed_async_connection_with_config(&config))
            .await
            .map_err(|_| format!("connect {}: timed out after {timeout:?}", self.addr))?
            .map_err(|e| format!("connect {}: {e}", self.addr))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked_and_errors_never_show_the_password() {
        let t = Target::parse("redis://weir:pw-s3cret@redis.example:6380/2", None).unwrap();
        assert_eq!(t.addr, "redis.example:6380");
        assert!(t.tls.is_none());
        assert!(Target::parse("rediss://cache.example", None).unwrap().tls.is_some(), "rediss:// is TLS");
        let e = Target::parse("http://redis:6379", None).unwrap_err();
        assert!(e.contains("redis://"), "{e}");
        let e = Target::parse("redis://x:pw-s3cret@redis:6379", Some(TlsFiles::default())).unwrap_err();
        assert!(e.contains("rediss://") && !e.contains("s3cret"), "{e}");
        let e = Target::parse("redis://:pw-s3cret@redis:notaport", None).unwrap_err();
        assert!(!e.contains("s3cret"), "{e}");
    }
}
