//! Where the quota store lives: a Redis URL checked at load (`redis://` or `rediss://`,
//! `[user:password@]host[:port][/db]`) and the TLS files of a `rediss://` store.

use std::path::PathBuf;

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
    pub(crate) url: String,
    /// `host:port`, for log lines (never the password).
    pub addr: String,
    pub(crate) tls: Option<TlsFiles>,
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
