//! `cors`: answers preflights and marks responses for allowed browser origins.

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderValue, Method, Request, Response, StatusCode};
use axum::middleware::Next;
use std::sync::Arc;

#[derive(Clone)]
pub(super) struct CorsState {
    any: bool,
    origins: Arc<[String]>,
}

impl CorsState {
    pub(super) fn new(origins: &[String]) -> Self {
        CorsState { any: origins.iter().any(|o| o == "*"), origins: origins.to_vec().into() }
    }

    fn allows(&self, origin: &str) -> bool {
        self.any || self.origins.iter().any(|o| o.eq_ignore_ascii_case(origin))
    }
}

pub(super) async fn cors(State(state): State<CorsState>, req: Request<Body>, next: Next) -> Response<Body> {
    let origin = req.headers().get(header::ORIGIN).and_then(|v| v.to_str().ok()).map(str::to_string);
    let Some(origin) = origin.filter(|o| state.allows(o)) else {
        return next.run(req).await;
    };
    let allow_origin = HeaderValue::from_str(&origin).unwrap_or(HeaderValue::from_static("*"));
    if req.method() == Method::OPTIONS && req.headers().contains_key(header::ACCESS_CONTROL_REQUEST_METHOD) {
        let mut resp = Response::new(Body::empty());
        *resp.status_mut() = StatusCode::NO_CONTENT;
        let h = resp.headers_mut();
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, allow_origin);
        h.insert(header::ACCESS_CONTROL_ALLOW_METHODS, HeaderValue::from_static("POST, OPTIONS"));
        if let Some(asked) = req.headers().get(header::ACCESS_CONTROL_REQUEST_HEADERS) {
            h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, asked.clone());
        }
        h.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("7200"));
        h.insert(header::VARY, HeaderValue::from_static("Origin"));
        return resp;
    }
    let mut resp = next.run(req).await;
    resp.headers_mut().insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, allow_origin);
    resp.headers_mut().insert(header::VARY, HeaderValue::from_static("Origin"));
    resp
}
