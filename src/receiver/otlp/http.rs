//! OTLP/HTTP: `POST /v1/traces`, `/v1/metrics`, `/v1/logs`, `/v1development/profiles`.

use crate::config::ServerKind;
use crate::receiver::connection::hygiene::read_body;
use crate::receiver::format::Format;
use crate::receiver::formats::{promrw, pyroscope};
use crate::receiver::otlp::decode;
use crate::receiver::response::ApiError;
use crate::receiver::routes::{self, Handler};
use crate::receiver::{count_request, Ingest, Tenant};
use crate::signal::Signal;
use crate::telemetry::names;
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderValue, Request, Response, StatusCode};
use axum::routing::post;
use axum::Router;
use std::time::Instant;

/// Shared handler state.
#[derive(Clone)]
pub struct HttpState {
    ingest: Ingest,
    max_body: usize,
}

/// The HTTP routes of [`routes::ROUTES`], without middlewares.
pub fn router(ingest: Ingest, max_request_body_bytes: usize) -> Router {
    let state = HttpState { ingest, max_body: max_request_body_bytes };
    let mut r = Router::new();
    for route in routes::http() {
        let signal = route.signal;
        let handler = match route.handler {
            Handler::OtlpHttp => post(move |st: State<HttpState>, req: Request<Body>| export(st, signal, req)),
            Handler::RemoteWrite => {
                post(|st: State<HttpState>, req: Request<Body>| async move { promrw::write(st.0.ingest, st.0.max_body, req).await })
            }
            Handler::PyroscopeIngest => {
                post(|st: State<HttpState>, req: Request<Body>| async move { pyroscope::ingest(st.0.ingest, st.0.max_body, req).await })
            }
            Handler::PyroscopePush => {
                post(|st: State<HttpState>, req: Request<Body>| async move { pyroscope::push(st.0.ingest, st.0.max_body, req).await })
            }
            Handler::OtlpGrpc => continue,
        };
        r = r.route(route.path, handler.fallback(method_not_allowed));
    }
    r.fallback(not_found).with_state(state)
}

async fn export(State(st): State<HttpState>, signal: Signal, req: Request<Body>) -> Response<Body> {
    let started = Instant::now();
    let tenant = req.extensions().get::<Tenant>().cloned();
    let content_type = req.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_string);
    let error_format = Format::for_errors(content_type.as_deref());
    let result = handle(&st, signal, req, content_type.as_deref(), tenant.as_ref()).await;
    match result {
        Ok((format, rejected)) => {
            count_request(ServerKind::Http, signal.as_str(), "accepted", tenant.as_ref(), started.elapsed());
            let body = if rejected > 0 {
                decode::encode_partial(signal, format, rejected, decode::QUOTA_MESSAGE)
            } else {
                decode::encode_success(signal, format)
            };
            let mut resp = Response::new(Body::from(body));
            resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(format.content_type()));
            resp
        }
        Err(err) => {
            crate::receiver::count_rejection(ServerKind::Http, signal.as_str(), err.reason(), tenant.as_ref(), started.elapsed(), &err);
            let mut resp = err.into_http(error_format);
            resp.extensions_mut().insert(crate::receiver::RefusalLogged);
            resp
        }
    }
}

async fn handle(
    st: &HttpState,
    signal: Signal,
    req: Request<Body>,
    content_type: Option<&str>,
    tenant: Option<&Tenant>,
) -> Result<(Format, u64), ApiError> {
    let format = content_type.and_then(Format::from_content_type).ok_or_else(|| {
        ApiError::UnsupportedMediaType(format!(
            "unsupported Content-Type `{}`; use application/x-protobuf or application/json",
            content_type.unwrap_or("")
        ))
    })?;
    if let Some(enc) = req.headers().get(header::CONTENT_ENCODING) {
        let enc = enc.to_str().unwrap_or("<non-ascii>");
        match crate::compression::Encoding::parse(enc) {
            Some(crate::compression::Encoding::Identity) => {}
            Some(_) => {
                return Err(ApiError::UnsupportedMediaType(format!(
                    "Content-Encoding `{enc}` needs content_decompressor in receiver.http_server.middlewares"
                )))
            }
            None => return Err(ApiError::BadRequest(format!("unsupported Content-Encoding `{enc}`"))),
        }
    }
    let body = read_body(req.into_body(), st.max_body).await?;
    metrics::counter!(names::REQUEST_BYTES, "protocol" => "http", "signal" => signal.as_str()).increment(body.len() as u64);
    let wire = body.len();
    let payload = decode::decode(signal, format, body)?;
    if format == Format::Json {
        // What JSON becomes in the queue, for the throttle's check before reading a body.
        st.ingest.pipeline().learn_json(wire, payload.encoded_len());
    }
    let rejected = st.ingest.accept_from(payload, ServerKind::Http, tenant).await?;
    Ok((format, rejected))
}

async fn method_not_allowed(req: Request<Body>) -> Response<Body> {
    let ct = req.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
    let mut resp = ApiError::MethodNotAllowed(req.method().to_string()).into_http(Format::for_errors(ct));
    resp.headers_mut().insert(header::ALLOW, HeaderValue::from_static("POST"));
    resp
}

async fn not_found(req: Request<Body>) -> Response<Body> {
    let ct = req.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
    let mut resp = ApiError::NotFound(req.uri().path().to_string()).into_http(Format::for_errors(ct));
    *resp.status_mut() = StatusCode::NOT_FOUND;
    resp
}
