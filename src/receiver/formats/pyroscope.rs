//! Pyroscope: the legacy `POST /pyroscope/ingest` (also `/ingest`) with `name`, `from`,
//! `until`, `format`, `sampleRate`, `spyName`, `units`, `aggregationType` query parameters
//! (formats `folded` and `pprof`), and the push API `POST /push.v1.PusherService/Push`
//! (connect-rpc unary, binary protobuf or JSON). Profiles become OTLP profiles and are
//! exported like the OTLP ones; classified as profiles for the throttle.

use crate::config::ServerKind;
use crate::otlp::profiles::{from_folded, from_pprof, resource};
use crate::pyroscope_push::PushRequest;
use crate::receiver::connection::hygiene::read_body;
use crate::receiver::response::ApiError;
use crate::receiver::{count_request, Ingest, Tenant};
use crate::signal::{Payload, Signal};
use crate::telemetry::names;
use axum::body::Body;
use axum::http::{header, HeaderValue, Request, Response, StatusCode};
use base64::Engine;
use prost::Message;
use std::collections::HashMap;
use std::io::Read;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Labels as (name, value) pairs.
pub type Labels = Vec<(String, String)>;

/// `app.cpu{env=prod,region=eu}` → ("app", "cpu", labels).
pub fn parse_name(name: &str) -> Result<(String, String, Labels), ApiError> {
    let (base, labels) = match name.split_once('{') {
        Some((b, rest)) => {
            let inner = rest.strip_suffix('}').ok_or_else(|| ApiError::BadRequest(format!("name `{name}`: missing closing brace")))?;
            let labels = inner
                .split(',')
                .filter(|p| !p.trim().is_empty())
                .map(|p| {
                    p.split_once('=')
                        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                        .ok_or_else(|| ApiError::BadRequest(format!("name `{name}`: label `{p}` is not key=value")))
                })
                .collect::<Result<Vec<_>, _>>()?;
            (b, labels)
        }
        None => (name, Vec::new()),
    };
    if base.is_empty() {
        return Err(ApiError::BadRequest("the `name` query parameter is required".into()));
    }
    let (app, kind) = base.rsplit_once('.').unwrap_or((base, "cpu"));
    Ok((app.to_string(), kind.to_string(), labels))
}

fn maybe_gunzip(data: &[u8], limit: usize) -> Result<Vec<u8>, ApiError> {
    if data.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::MultiGzDecoder::new(data)
            .take(limit as u64 + 1)
            .read_to_end(&mut out)
            .map_err(|e| ApiError::BadRequest(format!("invalid gzip in profile: {e}")))?;
        if out.len() > limit {
            return Err(ApiError::PayloadTooLarge(format!("decompressed profile exceeds {limit} bytes")));
        }
        Ok(out)
    } else {
        Ok(data.to_vec())
    }
}

fn pprof_payload(raw: &[u8], limit: usize, res: opentelemetry_proto::tonic::resource::v1::Resource) -> Result<Payload, ApiError> {
    let plain = maybe_gunzip(raw, limit)?;
    let p =
        crate::pprof::Profile::decode(plain.as_slice()).map_err(|e| ApiError::BadRequest(format!("cannot decode pprof profile: {e}")))?;
    from_pprof(&p, res).map(Payload::Profiles).map_err(|e| ApiError::BadRequest(format!("invalid pprof profile: {e}")))
}

fn now_s() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

async fn ingest_inner(ingest: &Ingest, max_body: usize, req: Request<Body>) -> Result<(), ApiError> {
    let tenant = req.extensions().get::<Tenant>().cloned();
    let q: HashMap<String, String> =
        serde_urlencoded::from_str(req.uri().query().unwrap_or("")).map_err(|e| ApiError::BadRequest(format!("bad query string: {e}")))?;
    let name = q.get("name").map(String::as_str).unwrap_or("");
    let (app, kind, mut labels) = parse_name(name)?;
    let num = |k: &str, default: u64| -> Result<u64, ApiError> {
        q.get(k).map_or(Ok(default), |v| {
            v.parse::<u64>().map_err(|_| ApiError::BadRequest(format!("query parameter `{k}`: `{v}` is not a number")))
        })
    };
    let until = num("until", now_s())?;
    let from = num("from", until)?;
    let sample_rate = num("sampleRate", 100)?;
    let units = q.get("units").cloned().unwrap_or_else(|| "samples".into());
    for k in ["spyName", "aggregationType"] {
        if let Some(v) = q.get(k) {
            labels.push((format!("pyroscope.{k}"), v.clone()));
        }
    }
    let format = q.get("format").map(String::as_str).unwrap_or("folded");
    let body = read_body(req.into_body(), max_body).await?;
    metrics::counter!(names::REQUEST_BYTES, "protocol" => "pyroscope", "signal" => "profiles").increment(body.len() as u64);
    let res = resource(&app, &labels);
    let payload = match format {
        "folded" | "" => {
            let text = std::str::from_utf8(&body).map_err(|_| ApiError::BadRequest("folded profile is not UTF-8".into()))?;
            Payload::Profiles(
                from_folded(text, &kind, &units, sample_rate, from, until, res)
                    .map_err(|e| ApiError::BadRequest(format!("invalid folded profile: {e}")))?,
            )
        }
        "pprof" => pprof_payload(&body, max_body, res)?,
        other => return Err(ApiError::BadRequest(format!("format `{other}` is not supported (folded, pprof)"))),
    };
    ingest.accept_from(payload, ServerKind::Http, tenant.as_ref()).await.map(|_| ())
}

/// Push API request bodies, protobuf or connect JSON.
fn decode_push(body: &[u8], json: bool) -> Result<PushRequest, ApiError> {
    if !json {
        return PushRequest::decode(body).map_err(|e| ApiError::BadRequest(format!("cannot decode push.v1.PushRequest: {e}")));
    }
    use crate::pyroscope_push::{LabelPair, RawProfileSeries, RawSample};
    let v: serde_json::Value = serde_json::from_slice(body).map_err(|e| ApiError::BadRequest(format!("invalid JSON: {e}")))?;
    let bad = |m: String| ApiError::BadRequest(m);
    let mut req = PushRequest::default();
    for (i, s) in v.get("series").and_then(|s| s.as_array()).into_iter().flatten().enumerate() {
        let mut series = RawProfileSeries::default();
        for l in s.get("labels").and_then(|l| l.as_array()).into_iter().flatten() {
            series.labels.push(LabelPair {
                name: l.get("name").and_then(|x| x.as_str()).unwrap_or_default().to_string(),
                value: l.get("value").and_then(|x| x.as_str()).unwrap_or_default().to_string(),
            });
        }
        for (j, smp) in s.get("samples").and_then(|l| l.as_array()).into_iter().flatten().enumerate() {
            let raw = smp.get("rawProfile").or_else(|| smp.get("raw_profile")).and_then(|x| x.as_str()).unwrap_or_default();
            let raw_profile = base64::engine::general_purpose::STANDARD
                .decode(raw)
                .map_err(|e| bad(format!("series[{i}].samples[{j}].rawProfile: invalid base64: {e}")))?;
            series.samples.push(RawSample { raw_profile, id: smp.get("ID").and_then(|x| x.as_str()).unwrap_or_default().to_string() });
        }
        req.series.push(series);
    }
    Ok(req)
}

async fn push_inner(ingest: &Ingest, max_body: usize, req: Request<Body>, json: bool) -> Result<usize, ApiError> {
    let tenant = req.extensions().get::<Tenant>().cloned();
    let body = read_body(req.into_body(), max_body).await?;
    metrics::counter!(names::REQUEST_BYTES, "protocol" => "pyroscope", "signal" => "profiles").increment(body.len() as u64);
    let push = decode_push(&body, json)?;
    // Decode everything first: a bad sample rejects the whole request, nothing half-accepted.
    let mut payloads = Vec::new();
    for (i, s) in push.series.iter().enumerate() {
        let labels: Vec<(String, String)> = s.labels.iter().map(|l| (l.name.clone(), l.value.clone())).collect();
        let service = labels.iter().find(|(k, _)| k == "service_name").map_or("unknown_service", |(_, v)| v.as_str());
        let labels: Vec<(String, String)> = labels.iter().filter(|(k, _)| k != "service_name").cloned().collect();
        for (j, smp) in s.samples.iter().enumerate() {
            let p = pprof_payload(&smp.raw_profile, max_body, resource(service, &labels))
                .map_err(|e| ApiError::BadRequest(format!("series[{i}].samples[{j}]: {e}")))?;
            payloads.push(p);
        }
    }
    let n = payloads.len();
    for p in payloads {
        ingest.accept_from(p, ServerKind::Http, tenant.as_ref()).await?;
    }
    Ok(n)
}

fn finish(
    result: Result<(), ApiError>,
    started: Instant,
    tenant: Option<&Tenant>,
    ok: Response<Body>,
    err: impl FnOnce(ApiError) -> Response<Body>,
) -> Response<Body> {
    match result {
        Ok(()) => {
            count_request(ServerKind::Http, Signal::Profiles.as_str(), "accepted", tenant, started.elapsed());
            ok
        }
        Err(e) => {
            crate::receiver::count_rejection(ServerKind::Http, Signal::Profiles.as_str(), e.reason(), tenant, started.elapsed(), &e);
            err(e)
        }
    }
}

/// `POST /pyroscope/ingest`: 200 with an empty body on success.
pub async fn ingest(ingest: Ingest, max_body: usize, req: Request<Body>) -> Response<Body> {
    let started = Instant::now();
    let tenant = req.extensions().get::<Tenant>().cloned();
    let result = ingest_inner(&ingest, max_body, req).await;
    finish(result, started, tenant.as_ref(), Response::new(Body::empty()), |e| e.into_http(crate::receiver::format::Format::Json))
}

/// A connect-rpc error body: `{"code": "...", "message": "..."}`.
fn connect_error(e: ApiError) -> Response<Body> {
    let code = match e.http_status().as_u16() {
        400 => "invalid_argument",
        401 => "unauthenticated",
        413 | 429 => "resource_exhausted",
        415 => "invalid_argument",
        503 => "unavailable",
        _ => "internal",
    };
    let mut msg = String::new();
    crate::otlp::json::write_json_str(&mut msg, &e.to_string());
    let mut r = Response::new(Body::from(format!("{{\"code\":\"{code}\",\"message\":{msg}}}")));
    *r.status_mut() = e.http_status();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Some(d) = e.retry_after() {
        r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(d.as_secs().max(1)));
    }
    r
}

/// `POST /push.v1.PusherService/Push` (connect unary): `application/proto` or `application/json`.
pub async fn push(ingest: Ingest, max_body: usize, req: Request<Body>) -> Response<Body> {
    let started = Instant::now();
    let tenant = req.extensions().get::<Tenant>().cloned();
    let ct = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let json = match ct.as_str() {
        "application/proto" | "application/x-protobuf" | "application/protobuf" => false,
        "application/json" => true,
        other => {
            let e = ApiError::UnsupportedMediaType(format!("connect unary needs application/proto or application/json, got `{other}`"));
            return finish(Err(e), started, tenant.as_ref(), Response::new(Body::empty()), connect_error);
        }
    };
    let result = push_inner(&ingest, max_body, req, json).await.map(|_| ());
    let mut ok = Response::new(Body::from(if json { &b"{}"[..] } else { &b""[..] }));
    ok.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(if json { "application/json" } else { "application/proto" }));
    *ok.status_mut() = StatusCode::OK;
    finish(result, started, tenant.as_ref(), ok, connect_error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_with_labels() {
        let (app, kind, labels) = parse_name("checkout.cpu{env=prod, region=eu}").unwrap();
        assert_eq!((app.as_str(), kind.as_str()), ("checkout", "cpu"));
        assert_eq!(labels, vec![("env".into(), "prod".into()), ("region".into(), "eu".into())]);
        assert!(parse_name("a.cpu{env").is_err());
        assert!(parse_name("").is_err());
        assert_eq!(parse_name("svc").unwrap().1, "cpu");
    }
}
