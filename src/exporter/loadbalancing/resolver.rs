//! Where the backends come from: a fixed list, a file re-read when it changes (or on
//! SIGHUP), or a DNS
//! name resolved again on an interval. A failed or empty DNS answer keeps the last good
//! set (logged and counted): a resolver hiccup must not empty the ring.

use super::State;
use crate::config::{DnsResolverConfig, FileResolverConfig};
use crate::telemetry::names;
use std::sync::Arc;

/// Sets the first endpoints and starts the task that follows changes (file, DNS).
pub(super) fn start(state: &Arc<State>) -> Result<(), String> {
    let r = &state.config.resolver;
    if let Some(list) = &r.fixed {
        state.set_endpoints(list.clone());
        return Ok(());
    }
    let handle = tokio::runtime::Handle::try_current().map_err(|_| "the file and dns resolvers need a running runtime".to_string())?;
    if let Some(f) = r.file.clone() {
        state.set_endpoints(read_file(&f).unwrap_or_else(|e| {
            tracing::warn!(exporter = %state.name, file = %f.path.display(), error = %e, "cannot read the backends file yet; no backends");
            Vec::new()
        }));
        handle.spawn(follow_file(Arc::downgrade(state), f));
    } else if let Some(d) = r.dns.clone() {
        handle.spawn(follow_dns(Arc::downgrade(state), d));
    }
    Ok(())
}

/// One endpoint a line; blank lines and `#` comments skipped; a bare `host:port` gets
/// `http://`.
fn parse_endpoints(text: &str) -> Vec<String> {
    let mut v: Vec<String> = text
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .map(|l| if l.contains("://") { l.to_string() } else { format!("http://{l}") })
        .collect();
    v.sort();
    v.dedup();
    v
}

fn read_file(f: &FileResolverConfig) -> std::io::Result<Vec<String>> {
    Ok(parse_endpoints(&std::fs::read_to_string(&f.path)?))
}

/// Re-reads the file whenever its modification time or length changes, and on SIGHUP.
async fn follow_file(state: std::sync::Weak<State>, f: FileResolverConfig) {
    let stamp = |f: &FileResolverConfig| std::fs::metadata(&f.path).ok().map(|m| (m.modified().ok(), m.len()));
    let mut last = stamp(&f);
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    loop {
        let asked = tokio::select! {
            _ = tokio::time::sleep(f.interval) => false,
            Some(()) = async {
                match hup.as_mut() {
                    Some(h) => h.recv().await,
                    None => std::future::pending().await,
                }
            } => true,
        };
        let Some(state) = state.upgrade() else { return };
        let now = stamp(&f);
        if now == last && !asked {
            continue;
        }
        last = now;
        match read_file(&f) {
            Ok(list) => state.set_endpoints(list),
            Err(e) => resolver_error(&state, "file", &e.to_string()),
        }
    }
}

/// Resolves the name every interval; an empty answer or an error keeps the last set.
async fn follow_dns(state: std::sync::Weak<State>, d: DnsResolverConfig) {
    loop {
        {
            let Some(state) = state.upgrade() else { return };
            match tokio::net::lookup_host((d.hostname.as_str(), d.port)).await {
                Ok(addrs) => {
                    let mut list: Vec<String> = addrs.map(|a| format!("http://{a}")).collect();
                    list.sort();
                    list.dedup();
                    if list.is_empty() {
                        resolver_error(&state, "dns", "no addresses");
                    } else {
                        state.set_endpoints(list);
                    }
                }
                Err(e) => resolver_error(&state, "dns", &e.to_string()),
            }
        }
        tokio::time::sleep(d.interval).await;
    }
}

fn resolver_error(state: &State, resolver: &'static str, error: &str) {
    tracing::warn!(exporter = %state.name, resolver, error, "backend resolution failed; keeping the last set");
    metrics::counter!(names::LB_RESOLVER_ERRORS, "exporter" => state.name.clone(), "resolver" => resolver).increment(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backends_file_is_one_endpoint_a_line() {
        let got = parse_endpoints("# tier 2\nhttp://b:4317\n\n  a:4317  # bare\nhttp://b:4317\n");
        assert_eq!(got, vec!["http://a:4317".to_string(), "http://b:4317".to_string()]);
    }
}
