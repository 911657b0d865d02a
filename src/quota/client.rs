//! The quota store's connection to Redis, through the `redis` crate: `redis://` or
//! `rediss://` (TLS, with a CA file and an optional client certificate for managed
//! services), `user:password@` for ACL users. The store sends one script call per sync
//! interval, so one multiplexed connection is all it needs; every timeout stays in weir's
//! hands (the connection's and each call's are the sync's own).

use crate::config::redis::Target;
use std::path::PathBuf;
use std::time::Duration;

impl Target {
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
