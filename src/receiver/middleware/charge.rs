//! The layer that charges each request's body to the [`BodyBudget`] of
//! `receiver::middleware::budget`, and refuses up front a body that declares more than fits.

use crate::config::ServerKind;
use crate::receiver::middleware::budget::{BodyBudget, Charge, Charged};
use crate::receiver::middleware::drain;
use crate::receiver::middleware::refuse::{declared_len, reject};
use axum::body::Body;
use axum::extract::State;
use axum::http::{Request, Response};
use axum::middleware::Next;
use std::sync::Arc;
use std::time::Instant;

/// The layer every server runs inside auth: charges each request's body to the budget,
/// refusing up front what declares more than fits.
pub(crate) async fn charge_bodies(
    State((kind, budget)): State<(ServerKind, Arc<BodyBudget>)>,
    req: Request<Body>,
    next: Next,
) -> Response<Body> {
    let declared = declared_len(&req);
    // Over already with what it declares: refused here, before anything else looks at it.
    if let Some(n) = declared {
        let used = budget.used();
        if used > 0 && used.saturating_add(n) > budget.limit() {
            let err = budget.refusal();
            let resp = reject(kind, &req, err, Instant::now());
            // As any refusal: over HTTP/1.1 a modest body is read away (or the connection
            // closed lingering), so the client reads the answer rather than a reset.
            return match drain::finish(req, resp) {
                Ok(resp) => resp,
                Err(draining) => draining.await,
            };
        }
    }
    let charge = Arc::new(Charge::new(budget));
    let (mut parts, body) = req.into_parts();
    parts.extensions.insert(Arc::clone(&charge));
    let body = Body::new(Charged::new(body, charge, declared));
    next.run(Request::from_parts(parts, body)).await
}
