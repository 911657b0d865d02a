//! Token authentication, decided from headers before any body byte is read:
//! `Authorization: Bearer <token>` or `X-BK-TOKEN: <token>` (gRPC: the same metadata).
//! The token becomes the request's [`Tenant`].

use super::{reject, ServerKind};
use crate::receiver::response::ApiError;
use crate::receiver::Tenant;
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, Request, Response};
use axum::middleware::Next;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

/// The accepted tokens and the tenants' request quotas, swappable on reload.
#[derive(Debug, Clone)]
pub struct AuthLayerState {
    inner: Arc<arc_swap::ArcSwap<AuthPolicy>>,
}

#[derive(Debug)]
struct AuthPolicy {
    tokens: HashSet<Arc<str>>,
    quotas: crate::quota::Quotas,
}

impl AuthLayerState {
    /// `None` when no tokens are configured (auth off).
    pub fn new(tokens: &[String]) -> Option<Self> {
        Self::with_quotas(tokens, crate::quota::Quotas::default())
    }

    /// With per-tenant quotas, checked right after the token, before any body byte.
    pub fn with_quotas(tokens: &[String], quotas: crate::quota::Quotas) -> Option<Self> {
        if tokens.is_empty() {
            return None;
        }
        let policy = AuthPolicy { tokens: tokens.iter().map(|t| Arc::from(t.as_str())).collect(), quotas };
        Some(AuthLayerState { inner: Arc::new(arc_swap::ArcSwap::from_pointee(policy)) })
    }

    /// Swaps in new tokens and quotas (hot reload). Tenants whose rate did not change
    /// keep their limiter state. Turning authentication on or off needs a restart.
    pub fn reload(&self, auth: &crate::config::AuthConfig) {
        let old = self.inner.load();
        let quotas = crate::quota::Quotas::reloaded(&old.quotas, auth);
        let tokens = auth.all_tokens().iter().map(|t| Arc::from(t.as_str())).collect();
        self.inner.store(Arc::new(AuthPolicy { tokens, quotas }));
    }

    fn find(&self, presented: &str) -> Option<Arc<str>> {
        self.inner.load().tokens.get(presented).cloned()
    }

    /// Takes up to `n` items of `signal` from `tenant`'s item quota; returns how many fit.
    pub fn take_items(&self, tenant: &str, signal: crate::signal::Signal, n: usize) -> usize {
        self.inner.load().quotas.take_items(tenant, signal, n)
    }

    fn check_quota(&self, tenant: &str) -> Result<(), std::time::Duration> {
        self.inner.load().quotas.check(tenant)
    }
}

fn presented_token(req: &Request<Body>) -> Option<&str> {
    if let Some(v) = req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()) {
        let v = v.trim();
        if v.len() > 7 && v[..7].eq_ignore_ascii_case("bearer ") {
            return Some(v[7..].trim());
        }
    }
    req.headers().get("x-bk-token").and_then(|v| v.to_str().ok()).map(str::trim)
}

pub(super) async fn auth(State((kind, state)): State<(ServerKind, AuthLayerState)>, mut req: Request<Body>, next: Next) -> Response<Body> {
    let started = Instant::now();
    let tenant = presented_token(&req).and_then(|t| state.find(t));
    match tenant {
        Some(t) => {
            if let Err(wait) = state.check_quota(&t) {
                let tenant = Tenant(Arc::clone(&t));
                metrics::counter!(crate::telemetry::names::QUOTA_REJECTED, "tenant" => Tenant::label(Some(&tenant))).increment(1);
                req.extensions_mut().insert(tenant);
                let err = ApiError::Throttled {
                    message: format!("tenant quota exceeded; next request conforms in {:.3}s", wait.as_secs_f64()),
                    retry_after: wait,
                    open: false,
                };
                let resp = reject(kind, &req, err, started);
                return super::drain::finish_async(req, resp).await;
            }
            req.extensions_mut().insert(Tenant(t));
            next.run(req).await
        }
        None => {
            let msg = if presented_token(&req).is_some() {
                "unknown token"
            } else {
                "missing token: send Authorization: Bearer <token> or X-BK-TOKEN"
            };
            let resp = reject(kind, &req, ApiError::Unauthenticated(msg.into()), started);
            super::drain::without_reading(&req, resp)
        }
    }
}
