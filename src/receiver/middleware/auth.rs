//! Token authentication, decided from headers before any body byte is read:
//! `Authorization: Bearer <token>` or `X-BK-TOKEN: <token>` (gRPC: the same metadata).
//! The token's tenant (its name, never the token) becomes the request's [`Tenant`].

use crate::config::ServerKind;
use crate::receiver::middleware::refuse::reject;
use crate::receiver::response::ApiError;
use crate::receiver::{Tenant, TenantCounters};
use axum::body::Body;
use axum::http::{header, Request, Response};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// The accepted tokens and the tenants' request quotas, swappable on reload.
#[derive(Debug, Clone)]
pub struct AuthLayerState {
    inner: Arc<arc_swap::ArcSwap<AuthPolicy>>,
}

#[derive(Debug)]
struct AuthPolicy {
    /// Each token, with its tenant's name and counters (looked up in the metrics registry
    /// once, not per request).
    tokens: HashMap<Box<str>, (Arc<str>, Arc<TenantCounters>)>,
    quotas: crate::quota::Quotas,
}

impl AuthLayerState {
    /// `None` when no tokens are configured (auth off). `tokens`: (token, tenant name).
    pub fn new(tokens: &[(String, String)]) -> Option<Self> {
        Self::with_quotas(tokens, crate::quota::Quotas::default())
    }

    /// With per-tenant quotas, checked right after the token, before any body byte.
    pub fn with_quotas(tokens: &[(String, String)], quotas: crate::quota::Quotas) -> Option<Self> {
        if tokens.is_empty() {
            return None;
        }
        let policy = AuthPolicy { tokens: token_map(tokens), quotas };
        Some(AuthLayerState { inner: Arc::new(arc_swap::ArcSwap::from_pointee(policy)) })
    }

    /// Swaps in new tokens and quotas (hot reload). Tenants whose rate did not change
    /// keep their limiter state. Turning authentication on or off needs a restart.
    pub fn reload(&self, auth: &crate::config::AuthConfig) {
        let old = self.inner.load();
        let quotas = crate::quota::Quotas::reloaded(&old.quotas, auth);
        let tokens = token_map(&auth.all_tokens());
        self.inner.store(Arc::new(AuthPolicy { tokens, quotas }));
    }

    /// The limiters a fleet shares (the current ones: a reload's new limiters appear).
    pub fn shared_limiters(&self) -> Vec<crate::quota::SharedLimiter> {
        self.inner.load().quotas.shared()
    }

    /// Takes up to `n` items of `signal` from `tenant`'s item quota; returns how many fit.
    pub fn take_items(&self, tenant: &str, signal: crate::signal::Signal, n: usize) -> usize {
        self.inner.load().quotas.take_items(tenant, signal, n)
    }
}

/// Token -> (tenant name, counters); a tenant's tokens share one name and one set of
/// counters.
fn token_map(tokens: &[(String, String)]) -> HashMap<Box<str>, (Arc<str>, Arc<TenantCounters>)> {
    let mut tenants: HashMap<&str, (Arc<str>, Arc<TenantCounters>)> = HashMap::new();
    tokens
        .iter()
        .map(|(token, name)| {
            let t = tenants.entry(name.as_str()).or_insert_with(|| (Arc::from(name.as_str()), Arc::default()));
            (Box::from(token.as_str()), (Arc::clone(&t.0), Arc::clone(&t.1)))
        })
        .collect()
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

/// Builds [`Auth`] services. A tower layer rather than an axum `from_fn`: the decision
/// (token, then quota) is made in `call`, so a refusal is ready without a boxed future or
/// a clone of the inner service, and the connection that read the request answers it at
/// once (see `receiver::connection::http2`).
#[derive(Clone)]
pub struct AuthLayer {
    kind: ServerKind,
    state: AuthLayerState,
}

impl AuthLayer {
    /// A layer for one server.
    pub fn new(kind: ServerKind, state: AuthLayerState) -> Self {
        AuthLayer { kind, state }
    }
}

impl<S> tower::Layer<S> for AuthLayer {
    type Service = Auth<S>;
    fn layer(&self, inner: S) -> Auth<S> {
        Auth { inner, layer: self.clone() }
    }
}

/// The authentication middleware.
#[derive(Clone)]
pub struct Auth<S> {
    inner: S,
    layer: AuthLayer,
}

impl<S> tower::Service<Request<Body>> for Auth<S>
where
    S: tower::Service<Request<Body>, Response = Response<Body>>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = crate::receiver::middleware::throttle::ResponseFuture<S::Future, S::Error>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<Body>) -> Self::Future {
        use crate::receiver::middleware::throttle::ResponseFuture;
        let started = Instant::now();
        let (kind, state) = (self.layer.kind, &self.layer.state);
        let policy = state.inner.load();
        let Some((t, counters)) = presented_token(&req).and_then(|t| policy.tokens.get(t)) else {
            let msg = if presented_token(&req).is_some() {
                "unknown token"
            } else {
                "missing token: send Authorization: Bearer <token> or X-BK-TOKEN"
            };
            let resp = reject(kind, &req, ApiError::Unauthenticated(msg.into()), started);
            return ResponseFuture::refused(Ok(crate::receiver::middleware::drain::without_reading(&req, resp)));
        };
        let tenant = Tenant(Arc::clone(t), Arc::clone(counters));
        if let Err(wait) = policy.quotas.check(t) {
            tenant
                .1
                .quota_rejected
                .get_or_init(|| metrics::counter!(crate::telemetry::names::QUOTA_REJECTED, "tenant" => Tenant::label(Some(&tenant))))
                .increment(1);
            req.extensions_mut().insert(tenant);
            let err = ApiError::Quota {
                // Integer formatting: a float's costs more than the rest of the message.
                message: format!("tenant quota exceeded; next request conforms in {}.{:03}s", wait.as_secs(), wait.subsec_millis()),
                retry_after: wait,
            };
            let resp = reject(kind, &req, err, started);
            return ResponseFuture::refused(crate::receiver::middleware::drain::finish(req, resp));
        }
        req.extensions_mut().insert(tenant);
        ResponseFuture::Inner { fut: self.inner.call(req), guard: None, reserved: None }
    }
}
