//! Prometheus remote write 1.0: `POST /prometheus/write` and `/api/v1/write`, a snappy
//! (block) compressed `prometheus.WriteRequest`. Each sample becomes an OTLP gauge data
//! point: `__name__` is the metric name, the other labels are attributes, timestamps go
//! from milliseconds to nanoseconds. Classified as metrics for the throttle.

use crate::compression::{decompress, DecompressError, Encoding};
use crate::config::ServerKind;
use crate::prompb::{Label, WriteRequest};
use crate::receiver::connection::hygiene::read_body;
use crate::receiver::response::ApiError;
use crate::receiver::{count_request, Ingest, Tenant};
use crate::signal::{Payload, Signal};
use crate::telemetry::names;
use axum::body::Body;
use axum::http::{header, Request, Response, StatusCode};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point, Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics};
use prost::Message;
use std::collections::BTreeMap;
use std::time::Instant;

/// Checks the labels of one series: non-empty names, sorted, unique.
fn check_labels(labels: &[Label], series: usize) -> Result<(), ApiError> {
    for (i, l) in labels.iter().enumerate() {
        if l.name.is_empty() {
            return Err(ApiError::BadRequest(format!("timeseries[{series}].labels[{i}]: empty label name")));
        }
        if i > 0 {
            let prev = &labels[i - 1].name;
            if *prev == l.name {
                return Err(ApiError::BadRequest(format!("timeseries[{series}].labels[{i}]: duplicate label `{}`", l.name)));
            }
            if *prev > l.name {
                return Err(ApiError::BadRequest(format!(
                    "timeseries[{series}].labels[{i}]: labels not sorted (`{prev}` before `{}`)",
                    l.name
                )));
            }
        }
    }
    Ok(())
}

fn kv(key: &str, value: &str) -> KeyValue {
    KeyValue { key: key.into(), value: Some(AnyValue { value: Some(any_value::Value::StringValue(value.into())) }), ..Default::default() }
}

/// Converts a validated request; one metric per metric name, a data point per sample.
pub fn to_otlp(req: &WriteRequest) -> Result<ExportMetricsServiceRequest, ApiError> {
    let mut by_name: BTreeMap<&str, Vec<NumberDataPoint>> = BTreeMap::new();
    for (i, ts) in req.timeseries.iter().enumerate() {
        check_labels(&ts.labels, i)?;
        let name = ts
            .labels
            .iter()
            .find(|l| l.name == "__name__")
            .map(|l| l.value.as_str())
            .ok_or_else(|| ApiError::BadRequest(format!("timeseries[{i}]: no __name__ label")))?;
        let attributes: Vec<KeyValue> = ts.labels.iter().filter(|l| l.name != "__name__").map(|l| kv(&l.name, &l.value)).collect();
        let points = by_name.entry(name).or_default();
        for s in &ts.samples {
            let time = u64::try_from(s.timestamp)
                .ok()
                .and_then(|ms| ms.checked_mul(1_000_000))
                .ok_or_else(|| ApiError::BadRequest(format!("timeseries[{i}]: timestamp {} ms is out of range", s.timestamp)))?;
            points.push(NumberDataPoint {
                attributes: attributes.clone(),
                time_unix_nano: time,
                value: Some(number_data_point::Value::AsDouble(s.value)),
                ..Default::default()
            });
        }
    }
    let metrics = by_name
        .into_iter()
        .map(|(name, data_points)| Metric {
            name: name.to_string(),
            data: Some(metric::Data::Gauge(Gauge { data_points })),
            ..Default::default()
        })
        .collect();
    Ok(ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: None,
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope { name: "weir/prometheus-remote-write".into(), ..Default::default() }),
                metrics,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    })
}

async fn handle(ingest: &Ingest, max_body: usize, req: Request<Body>) -> Result<(), ApiError> {
    let tenant = req.extensions().get::<Tenant>().cloned();
    let ct = req.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    if !ct.split(';').next().unwrap_or("").trim().eq_ignore_ascii_case("application/x-protobuf") {
        return Err(ApiError::UnsupportedMediaType(format!("remote write needs Content-Type application/x-protobuf, got `{ct}`")));
    }
    // The content_decompressor middleware may already have decompressed the body (it
    // removes the header when it does); otherwise snappy is ours to undo.
    let encoding = req.headers().get(header::CONTENT_ENCODING).and_then(|v| v.to_str().ok()).map(str::to_string);
    let body = read_body(req.into_body(), max_body).await?;
    metrics::counter!(names::REQUEST_BYTES, "protocol" => "prometheus", "signal" => "metrics").increment(body.len() as u64);
    let plain = match encoding.as_deref().map(Encoding::parse) {
        None => body.to_vec(),
        Some(Some(Encoding::Snappy)) => decompress(Encoding::Snappy, &body, max_body).map_err(|e| match e {
            DecompressError::TooLarge { .. } => ApiError::PayloadTooLarge(e.to_string()),
            DecompressError::Corrupt { .. } => ApiError::BadRequest(e.to_string()),
        })?,
        Some(_) => {
            return Err(ApiError::UnsupportedMediaType(format!(
                "remote write needs Content-Encoding snappy (block), got `{}`",
                encoding.unwrap_or_default()
            )))
        }
    };
    let wr =
        WriteRequest::decode(plain.as_slice()).map_err(|e| ApiError::BadRequest(format!("cannot decode prometheus.WriteRequest: {e}")))?;
    let otlp = to_otlp(&wr)?;
    // Remote write has no partial success: items over a quota are counted as rejected.
    ingest.accept_from(crate::receiver::otlp::decode::compact(Payload::Metrics(otlp)), ServerKind::Http, tenant.as_ref()).await.map(|_| ())
}

/// The handler for both paths: 204 on success.
pub async fn write(ingest: Ingest, max_body: usize, req: Request<Body>) -> Response<Body> {
    let started = Instant::now();
    let tenant = req.extensions().get::<Tenant>().cloned();
    let format = crate::receiver::format::Format::Protobuf;
    match handle(&ingest, max_body, req).await {
        Ok(()) => {
            count_request(ServerKind::Http, Signal::Metrics.as_str(), "accepted", tenant.as_ref(), started.elapsed());
            let mut r = Response::new(Body::empty());
            *r.status_mut() = StatusCode::NO_CONTENT;
            r
        }
        Err(e) => {
            crate::receiver::count_rejection(
                ServerKind::Http,
                Signal::Metrics.as_str(),
                e.reason(),
                tenant.as_ref(),
                started.elapsed(),
                &e,
            );
            e.into_http(format)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompb::{Sample, TimeSeries};

    fn l(n: &str, v: &str) -> Label {
        Label { name: n.into(), value: v.into() }
    }

    #[test]
    fn converts_and_validates() {
        let req = WriteRequest {
            timeseries: vec![TimeSeries {
                labels: vec![l("__name__", "http_requests_total"), l("code", "200"), l("job", "api")],
                samples: vec![Sample { value: 3.0, timestamp: 1_700_000_000_123 }],
                exemplars: vec![],
            }],
            metadata: vec![],
        };
        let o = to_otlp(&req).unwrap();
        let m = &o.resource_metrics[0].scope_metrics[0].metrics[0];
        assert_eq!(m.name, "http_requests_total");
        let Some(metric::Data::Gauge(g)) = &m.data else { panic!() };
        assert_eq!(g.data_points[0].time_unix_nano, 1_700_000_000_123_000_000);
        assert_eq!(g.data_points[0].attributes.len(), 2);
        let bad = |labels: Vec<Label>| {
            to_otlp(&WriteRequest { timeseries: vec![TimeSeries { labels, samples: vec![], exemplars: vec![] }], metadata: vec![] })
        };
        assert!(bad(vec![l("__name__", "x"), l("", "v")]).unwrap_err().to_string().contains("empty label name"));
        assert!(bad(vec![l("b", "1"), l("a", "2")]).unwrap_err().to_string().contains("not sorted"));
        assert!(bad(vec![l("__name__", "x"), l("a", "1"), l("a", "2")]).unwrap_err().to_string().contains("duplicate label `a`"));
        assert!(bad(vec![l("a", "1")]).unwrap_err().to_string().contains("no __name__"));
    }
}
