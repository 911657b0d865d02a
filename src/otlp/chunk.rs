//! Cutting an OTLP export request into requests of at most `max` bytes, at the wire and
//! without decoding: whole resources where they fit, else groups of scopes, else groups of
//! items, each part keeping its resource's and its scope's own fields. An item too large
//! to fit even alone is left out and counted, never sent.
//!
//! Works on requests that passed [`super::wire::check`]; anything malformed is an error,
//! never a panic.

use super::split::{fields, put_message, SplitError, LEN};
use crate::signal::Signal;

/// One part: a complete export request and the items in it (spans, metric data points,
/// log records).
#[derive(Debug, PartialEq, Eq)]
pub struct Chunk {
    /// The request.
    pub bytes: Vec<u8>,
    /// Its items.
    pub items: usize,
}

/// The parts of a request, and the items that fit in none.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Chunks {
    /// Requests of at most `max` bytes each, in the order of the original.
    pub parts: Vec<Chunk>,
    /// Items left out: even alone, with their resource and scope, they pass `max`.
    pub oversized_items: usize,
}

/// A request-level field (one resource message, key included) and its items.
struct Piece<'a> {
    bytes: std::borrow::Cow<'a, [u8]>,
    items: usize,
}

/// The bytes a length-delimited field with a one-byte key takes around `n` bytes.
fn wrapped(n: usize) -> usize {
    let mut v = n;
    let mut len = 1;
    while v >= 0x80 {
        v >>= 7;
        len += 1;
    }
    1 + len + n
}

/// Cuts `body`, an export request of `signal`, into requests of at most `max` bytes.
/// Profiles are never cut (their resources share one dictionary): a profiles request over
/// `max` is one oversized part.
pub fn chunk(signal: Signal, body: &[u8], max: usize) -> Result<Chunks, SplitError> {
    let mut out = Chunks::default();
    if signal == Signal::Profiles {
        out.oversized_items = super::wire::check(signal, body).map_err(|_| SplitError("profiles request does not check"))?;
        return Ok(out);
    }
    let mut pieces = Vec::new();
    for r in fields(body) {
        let r = r?;
        if r.tag != 1 || r.wire != LEN {
            continue;
        }
        if r.raw.len() <= max {
            pieces.push(Piece { bytes: r.raw.into(), items: resource_items(signal, r.value)? });
        } else {
            out.oversized_items += cut_resource(signal, r.value, max, &mut pieces)?;
        }
    }
    let mut cur = Chunk { bytes: Vec::with_capacity(max.min(body.len())), items: 0 };
    for p in pieces {
        if !cur.bytes.is_empty() && cur.bytes.len() + p.bytes.len() > max {
            let full = std::mem::replace(&mut cur, Chunk { bytes: Vec::with_capacity(max.min(body.len())), items: 0 });
            out.parts.push(full);
        }
        cur.bytes.extend_from_slice(&p.bytes);
        cur.items += p.items;
    }
    if !cur.bytes.is_empty() {
        out.parts.push(cur);
    }
    Ok(out)
}

/// A message's own fields, and its children (field 2), each whole and its payload.
type Parts<'a> = (Vec<&'a [u8]>, Vec<(&'a [u8], &'a [u8])>);

/// A resource- or scope-level message's own fields and its children (field 2).
fn parts_of(msg: &[u8]) -> Result<Parts<'_>, SplitError> {
    let (mut own, mut children) = (Vec::new(), Vec::new());
    for f in fields(msg) {
        let f = f?;
        if f.tag == 2 && f.wire == LEN {
            children.push((f.raw, f.value));
        } else {
            own.push(f.raw);
        }
    }
    Ok((own, children))
}

/// Cuts one resource that does not fit into pieces that do; returns the items left out.
fn cut_resource<'a>(signal: Signal, resource: &'a [u8], max: usize, pieces: &mut Vec<Piece<'a>>) -> Result<usize, SplitError> {
    let (own, scopes) = parts_of(resource)?;
    let own_len: usize = own.iter().map(|f| f.len()).sum();
    let mut oversized = 0;
    let mut group: Vec<&[u8]> = Vec::new();
    let (mut group_len, mut group_items) = (0, 0);
    let emit = |group: &mut Vec<&[u8]>, items: &mut usize, len: &mut usize, pieces: &mut Vec<Piece<'a>>| {
        if !group.is_empty() {
            let mut b = Vec::with_capacity(wrapped(own_len + *len));
            let all: Vec<&[u8]> = own.iter().copied().chain(group.iter().copied()).collect();
            put_message(&mut b, 1, &all);
            pieces.push(Piece { bytes: b.into(), items: *items });
        }
        group.clear();
        (*items, *len) = (0, 0);
    };
    for (raw, value) in scopes {
        let items = scope_items(signal, value)?;
        if wrapped(own_len + raw.len()) <= max {
            if wrapped(own_len + group_len + raw.len()) > max {
                emit(&mut group, &mut group_items, &mut group_len, pieces);
            }
            group.push(raw);
            group_len += raw.len();
            group_items += items;
            continue;
        }
        emit(&mut group, &mut group_items, &mut group_len, pieces);
        oversized += cut_scope(signal, &own, value, max, pieces)?;
    }
    emit(&mut group, &mut group_items, &mut group_len, pieces);
    Ok(oversized)
}

/// Cuts one scope that does not fit, with its resource's `own` fields, into pieces of
/// whole items; returns the items left out.
fn cut_scope(signal: Signal, own: &[&[u8]], scope: &[u8], max: usize, pieces: &mut Vec<Piece<'_>>) -> Result<usize, SplitError> {
    let (scope_own, items) = parts_of(scope)?;
    let own_len: usize = own.iter().map(|f| f.len()).sum();
    let scope_own_len: usize = scope_own.iter().map(|f| f.len()).sum();
    let fits = |len: usize| wrapped(own_len + wrapped(scope_own_len + len)) <= max;
    let mut oversized = 0;
    let mut group: Vec<&[u8]> = Vec::new();
    let (mut group_len, mut group_items) = (0, 0);
    let mut emit = |group: &mut Vec<&[u8]>, count: usize, len: usize| {
        if group.is_empty() {
            return;
        }
        let mut s = Vec::with_capacity(wrapped(scope_own_len + len));
        let all: Vec<&[u8]> = scope_own.iter().copied().chain(group.iter().copied()).collect();
        put_message(&mut s, 2, &all);
        let mut b = Vec::with_capacity(wrapped(own_len + s.len()));
        let all: Vec<&[u8]> = own.iter().copied().chain(std::iter::once(s.as_slice())).collect();
        put_message(&mut b, 1, &all);
        pieces.push(Piece { bytes: b.into(), items: count });
        group.clear();
    };
    for (raw, value) in items {
        let n = item_count(signal, value)?;
        if !fits(raw.len()) {
            oversized += n;
            continue;
        }
        if !fits(group_len + raw.len()) {
            emit(&mut group, group_items, group_len);
            (group_len, group_items) = (0, 0);
        }
        group.push(raw);
        group_len += raw.len();
        group_items += n;
    }
    emit(&mut group, group_items, group_len);
    Ok(oversized)
}

fn resource_items(signal: Signal, resource: &[u8]) -> Result<usize, SplitError> {
    let mut n = 0;
    for f in fields(resource) {
        let f = f?;
        if f.tag == 2 && f.wire == LEN {
            n += scope_items(signal, f.value)?;
        }
    }
    Ok(n)
}

fn scope_items(signal: Signal, scope: &[u8]) -> Result<usize, SplitError> {
    let mut n = 0;
    for f in fields(scope) {
        let f = f?;
        if f.tag == 2 && f.wire == LEN {
            n += item_count(signal, f.value)?;
        }
    }
    Ok(n)
}

/// Items in one scope-level entry: a span or a log record is one; a metric is its data
/// points (the `data_points` of its gauge, sum, histogram, exponential histogram or
/// summary), as [`super::wire::check`] counts them.
fn item_count(signal: Signal, item: &[u8]) -> Result<usize, SplitError> {
    if signal != Signal::Metrics {
        return Ok(1);
    }
    let mut n = 0;
    for f in fields(item) {
        let f = f?;
        if matches!(f.tag, 5 | 7 | 9 | 10 | 11) && f.wire == LEN {
            for p in fields(f.value) {
                let p = p?;
                if p.tag == 1 && p.wire == LEN {
                    n += 1;
                }
            }
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::otlp::synth;
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::metrics::v1::{metric, Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics};
    use prost::Message;

    /// `resources` resources of `scopes` scopes of `spans` spans each, names all distinct.
    fn traces(resources: usize, scopes: usize, spans: usize) -> ExportTraceServiceRequest {
        let mut req = ExportTraceServiceRequest::default();
        for r in 0..resources {
            let mut rs = synth::traces_request(spans, 2, 40, r as u64).resource_spans.remove(0);
            let template = rs.scope_spans.remove(0);
            for s in 0..scopes {
                let mut ss = template.clone();
                ss.scope.as_mut().unwrap().name = format!("scope-{r}-{s}");
                for (i, sp) in ss.spans.iter_mut().enumerate() {
                    sp.name = format!("span-{r}-{s}-{i}");
                }
                rs.scope_spans.push(ss);
            }
            req.resource_spans.push(rs);
        }
        req
    }

    /// Every span of `body` as (resource, scope, span name), in order.
    fn spans(body: &[u8]) -> Vec<(String, String, String)> {
        let req = ExportTraceServiceRequest::decode(body).expect("a valid request");
        let mut v = Vec::new();
        for r in &req.resource_spans {
            let res = format!("{:?}", r.resource);
            for s in &r.scope_spans {
                let scope = format!("{:?}", s.scope);
                for sp in &s.spans {
                    v.push((res.clone(), scope.clone(), sp.name.clone()));
                }
            }
        }
        v
    }

    #[test]
    fn every_part_fits_and_every_item_is_kept_once_in_order() {
        let body = traces(3, 3, 12).encode_to_vec();
        let all = spans(&body);
        for max in [1024, 2048, 4096, 10_000, body.len() / 2, body.len() - 1] {
            let c = chunk(Signal::Traces, &body, max).unwrap();
            assert_eq!(c.oversized_items, 0, "max {max}");
            assert!(c.parts.len() > 1, "max {max} below the body's {} must cut", body.len());
            let mut seen = Vec::new();
            for p in &c.parts {
                assert!(p.bytes.len() <= max, "part of {} over {max}", p.bytes.len());
                assert_eq!(p.items, crate::otlp::wire::check(Signal::Traces, &p.bytes).unwrap(), "count of a part");
                seen.extend(spans(&p.bytes));
            }
            assert_eq!(seen, all, "max {max}: the same spans, with their resource and scope, in order");
        }
    }

    #[test]
    fn an_item_too_large_alone_is_counted_and_left_out() {
        let mut req = traces(1, 2, 4);
        req.resource_spans[0].scope_spans[1].spans[1].name = "x".repeat(5000);
        let body = req.encode_to_vec();
        let c = chunk(Signal::Traces, &body, 2048).unwrap();
        assert_eq!(c.oversized_items, 1);
        let kept: usize = c.parts.iter().map(|p| p.items).sum();
        assert_eq!(kept, crate::otlp::wire::check(Signal::Traces, &body).unwrap() - 1);
        assert!(c.parts.iter().all(|p| p.bytes.len() <= 2048));
        assert_eq!(c.parts.iter().flat_map(|p| spans(&p.bytes)).filter(|(_, _, n)| n.len() > 100).count(), 0);
    }

    #[test]
    fn metrics_count_data_points_as_the_wire_check_does() {
        let point = |i: usize| NumberDataPoint { time_unix_nano: i as u64, ..Default::default() };
        let metrics = (0..30)
            .map(|m| Metric {
                name: format!("metric-{m}-{}", "n".repeat(40)),
                data: Some(metric::Data::Gauge(Gauge { data_points: (0..1 + m % 7).map(point).collect() })),
                ..Default::default()
            })
            .collect();
        let req = ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                scope_metrics: vec![ScopeMetrics { metrics, ..Default::default() }],
                ..Default::default()
            }],
        };
        let body = req.encode_to_vec();
        let c = chunk(Signal::Metrics, &body, 1024).unwrap();
        assert!(c.parts.len() > 1);
        let total: usize = c.parts.iter().map(|p| p.items).sum::<usize>() + c.oversized_items;
        assert_eq!(total, crate::otlp::wire::check(Signal::Metrics, &body).unwrap());
        for p in &c.parts {
            assert!(p.bytes.len() <= 1024);
            assert_eq!(p.items, crate::otlp::wire::check(Signal::Metrics, &p.bytes).unwrap());
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(chunk(Signal::Traces, &[0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f], 1024).is_err());
        assert!(chunk(Signal::Logs, &[0x0a, 0x05, 1, 2], 1024).is_err());
    }
}
