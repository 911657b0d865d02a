//! Splitting an OTLP export request by a routing key at the wire, without decoding it:
//! each span (or log record) is assigned a destination from its trace ID, or each
//! resource from its `service.name` or its whole resource, and one request is rebuilt
//! per destination around the untouched bytes of the items, with the same resource and
//! scope bytes. A request whose items all go one way is not rebuilt at all.
//!
//! Works on requests that passed [`super::wire::check`]; anything malformed is an error,
//! never a panic.

use crate::signal::Signal;

/// What a request is split by (`routing_key`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RoutingKey {
    /// Each span's trace ID; log records with one too, others by resource. Metrics by
    /// resource (a series is never split).
    TraceId,
    /// The resource's `service.name` (the whole resource where it has none).
    Service,
    /// The whole resource.
    Resource,
}

/// The destinations chosen for a request.
#[derive(Debug, PartialEq, Eq)]
pub enum Split {
    /// Every item chose destination `.0`: forward the request as it arrived.
    Whole(usize),
    /// One request per destination, in the order the destinations were first chosen,
    /// with its item count where items are counted by message (spans, log records;
    /// `None` for metrics, whose items are data points).
    Parts(Vec<(usize, Vec<u8>, Option<u64>)>),
}

/// What a split met on its way.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SplitStats {
    /// Items routed by [`FALLBACK_KEY`]: a span without a valid trace ID.
    pub fallback_items: u64,
}

/// The key of a span whose trace ID is missing, all zero or not 16 bytes long: such spans
/// still go somewhere, all to the same place.
pub const FALLBACK_KEY: &[u8] = b"weir:no-trace-id";

/// A request the splitter cannot read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot split the request: {0}")]
pub struct SplitError(pub(super) &'static str);

pub(super) const LEN: u8 = 2;

/// One field of a message.
pub(super) struct Field<'a> {
    pub(super) tag: u32,
    pub(super) wire: u8,
    /// A length-delimited field's payload; empty for other wire types.
    pub(super) value: &'a [u8],
    /// The whole field, key included.
    pub(super) raw: &'a [u8],
}

fn varint(buf: &[u8], pos: &mut usize) -> Result<u64, SplitError> {
    let mut v = 0u64;
    for i in 0..10 {
        let b = *buf.get(*pos).ok_or(SplitError("truncated varint"))?;
        *pos += 1;
        v |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return Ok(v);
        }
    }
    Err(SplitError("varint too long"))
}

/// The fields of `buf`, in order.
pub(super) fn fields(buf: &[u8]) -> impl Iterator<Item = Result<Field<'_>, SplitError>> {
    let mut pos = 0;
    std::iter::from_fn(move || {
        if pos >= buf.len() {
            return None;
        }
        let start = pos;
        let next = (|| {
            let k = varint(buf, &mut pos)?;
            let (tag, wire) = ((k >> 3) as u32, (k & 7) as u8);
            let mut value: &[u8] = &[];
            match wire {
                0 => {
                    varint(buf, &mut pos)?;
                }
                1 => pos += 8,
                5 => pos += 4,
                LEN => {
                    let n = varint(buf, &mut pos)? as usize;
                    let end = pos.checked_add(n).filter(|&e| e <= buf.len()).ok_or(SplitError("length past the end"))?;
                    value = &buf[pos..end];
                    pos = end;
                }
                _ => return Err(SplitError("unsupported wire type")),
            }
            if pos > buf.len() {
                return Err(SplitError("field past the end"));
            }
            Ok(Field { tag, wire, value, raw: &buf[start..pos] })
        })();
        if next.is_err() {
            pos = buf.len();
        }
        Some(next)
    })
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends a length-delimited field `tag` made of `parts`.
pub(super) fn put_message(out: &mut Vec<u8>, tag: u32, parts: &[&[u8]]) {
    put_varint(out, u64::from(tag) << 3 | u64::from(LEN));
    put_varint(out, parts.iter().map(|p| p.len() as u64).sum());
    for p in parts {
        out.extend_from_slice(p);
    }
}

/// The `service.name` string of a resource message, if it has one.
fn service_name(resource: &[u8]) -> Result<Option<&[u8]>, SplitError> {
    for kv in fields(resource) {
        let kv = kv?;
        if kv.tag != 1 || kv.wire != LEN {
            continue;
        }
        let (mut key, mut value) = (None, None);
        for f in fields(kv.value) {
            let f = f?;
            match (f.tag, f.wire) {
                (1, LEN) => key = Some(f.value),
                (2, LEN) => value = Some(f.value),
                _ => {}
            }
        }
        if key == Some(b"service.name".as_slice()) {
            for f in fields(value.unwrap_or_default()) {
                let f = f?;
                if f.tag == 1 && f.wire == LEN {
                    return Ok(Some(f.value));
                }
            }
        }
    }
    Ok(None)
}

/// The field of an item that holds its trace ID, for the signals that carry one.
fn trace_id_tag(signal: Signal) -> Option<u32> {
    match signal {
        Signal::Traces => Some(1),
        Signal::Logs => Some(9),
        Signal::Metrics | Signal::Profiles => None,
    }
}

fn valid_trace_id(id: &[u8]) -> bool {
    id.len() == 16 && id.iter().any(|&b| b != 0)
}

/// A scope-level message: its own fields and its items with their destinations.
struct Scope<'a> {
    own: Vec<&'a [u8]>,
    items: Vec<(&'a [u8], usize)>,
}

/// A resource-level message: its own fields and its scopes.
struct Resource<'a> {
    own: Vec<&'a [u8]>,
    scopes: Vec<Scope<'a>>,
    /// Set when the whole resource goes to one destination.
    whole: Option<usize>,
}

/// Splits `body`, an export request of `signal`, by `key`; `route` maps a key to a
/// destination.
pub fn split(
    signal: Signal,
    body: &[u8],
    key: RoutingKey,
    route: &mut dyn FnMut(&[u8]) -> usize,
) -> Result<(Split, SplitStats), SplitError> {
    let mut stats = SplitStats::default();
    // A profiles request shares one dictionary among its resources: never split.
    if signal == Signal::Profiles {
        return Ok((Split::Whole(route(FALLBACK_KEY)), stats));
    }
    let by_item = if key == RoutingKey::TraceId { trace_id_tag(signal) } else { None };
    let mut resources = Vec::new();
    let mut seen: Vec<usize> = Vec::new();
    let mut note = |d: usize| {
        if !seen.contains(&d) {
            seen.push(d);
        }
    };
    for r in fields(body) {
        let r = r?;
        if r.tag != 1 || r.wire != LEN {
            continue;
        }
        let mut res = Resource { own: Vec::new(), scopes: Vec::new(), whole: None };
        let mut resource_bytes: &[u8] = &[];
        for f in fields(r.value) {
            let f = f?;
            match (f.tag, f.wire) {
                (2, LEN) => res.scopes.push(scope(f.value)?),
                (1, LEN) => {
                    resource_bytes = f.value;
                    res.own.push(f.raw);
                }
                _ => res.own.push(f.raw),
            }
        }
        let resource_key = match key {
            RoutingKey::Service => service_name(resource_bytes)?.unwrap_or(resource_bytes),
            _ => resource_bytes,
        };
        for s in &mut res.scopes {
            for (item, dest) in &mut s.items {
                let id = match by_item {
                    Some(tag) => item_trace_id(item, tag)?,
                    None => None,
                };
                *dest = match (id, signal) {
                    (Some(id), _) => route(id),
                    (None, Signal::Traces) if by_item.is_some() => {
                        stats.fallback_items += 1;
                        route(FALLBACK_KEY)
                    }
                    _ => *res.whole.get_or_insert_with(|| route(resource_key)),
                };
                note(*dest);
            }
        }
        if res.scopes.iter().all(|s| s.items.is_empty()) {
            let d = *res.whole.get_or_insert_with(|| route(resource_key));
            note(d);
        }
        resources.push(res);
    }
    if seen.len() <= 1 {
        return Ok((Split::Whole(seen.first().copied().unwrap_or_else(|| route(FALLBACK_KEY))), stats));
    }
    let size = body.len() / seen.len() + 64;
    let counted = matches!(signal, Signal::Traces | Signal::Logs);
    let parts = seen
        .iter()
        .map(|&d| {
            let (bytes, items) = rebuild(&resources, d, size);
            (d, bytes, counted.then_some(items))
        })
        .collect();
    Ok((Split::Parts(parts), stats))
}

/// A scope-level message's fields, its items (field 2) not yet routed.
fn scope(buf: &[u8]) -> Result<Scope<'_>, SplitError> {
    let mut s = Scope { own: Vec::new(), items: Vec::new() };
    for f in fields(buf) {
        let f = f?;
        if f.tag == 2 && f.wire == LEN {
            s.items.push((f.raw, usize::MAX));
        } else {
            s.own.push(f.raw);
        }
    }
    Ok(s)
}

/// The valid trace ID of an item (its field `tag`), if it has one.
fn item_trace_id(raw: &[u8], tag: u32) -> Result<Option<&[u8]>, SplitError> {
    // `raw` is the whole field: skip its key and length to the message.
    let mut pos = 0;
    varint(raw, &mut pos)?;
    varint(raw, &mut pos)?;
    for f in fields(&raw[pos..]) {
        let f = f?;
        if f.tag == tag && f.wire == LEN {
            return Ok(valid_trace_id(f.value).then_some(f.value));
        }
    }
    Ok(None)
}

/// The request for destination `d`: each resource and scope that has items for it, with
/// their own fields, and those items; and how many items that is.
fn rebuild(resources: &[Resource<'_>], d: usize, size: usize) -> (Vec<u8>, u64) {
    let mut out = Vec::with_capacity(size);
    let mut body = Vec::new();
    let mut parts: Vec<&[u8]> = Vec::new();
    let mut items = 0u64;
    for r in resources {
        let goes = r.whole == Some(d) || r.scopes.iter().any(|s| s.items.iter().any(|&(_, x)| x == d));
        if !goes {
            continue;
        }
        body.clear();
        for own in &r.own {
            body.extend_from_slice(own);
        }
        for s in &r.scopes {
            parts.clear();
            parts.extend(s.own.iter().copied());
            let own = parts.len();
            parts.extend(s.items.iter().filter(|&&(_, x)| x == d).map(|&(raw, _)| raw));
            let mine = parts.len() - own;
            if mine == 0 && !(s.items.is_empty() && r.whole == Some(d)) {
                continue;
            }
            items += mine as u64;
            put_message(&mut body, 2, &parts);
        }
        put_message(&mut out, 1, &[&body]);
    }
    (out, items)
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
    use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
    use opentelemetry_proto::tonic::resource::v1::Resource as PbResource;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
    use proptest::prelude::*;
    use prost::Message;

    fn service(name: &str) -> PbResource {
        PbResource {
            attributes: vec![KeyValue {
                key: "service.name".into(),
                value: Some(AnyValue { value: Some(any_value::Value::StringValue(name.into())) }),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn span(trace: u8, n: u32) -> Span {
        Span {
            trace_id: if trace == 0 { vec![] } else { vec![trace; 16] },
            span_id: vec![1; 8],
            name: format!("s{n}"),
            ..Default::default()
        }
    }

    fn request(resources: Vec<(&str, Vec<Vec<Span>>)>) -> ExportTraceServiceRequest {
        ExportTraceServiceRequest {
            resource_spans: resources
                .into_iter()
                .map(|(svc, scopes)| ResourceSpans {
                    resource: Some(service(svc)),
                    scope_spans: scopes
                        .into_iter()
                        .enumerate()
                        .map(|(i, spans)| ScopeSpans {
                            scope: Some(InstrumentationScope { name: format!("lib{i}"), ..Default::default() }),
                            spans,
                            schema_url: "https://opentelemetry.io/schemas/1.21.0".into(),
                        })
                        .collect(),
                    schema_url: String::new(),
                })
                .collect(),
        }
    }

    /// (service, scope name, span bytes) of every span, in order.
    fn flat(req: &ExportTraceServiceRequest) -> Vec<(String, String, Vec<u8>)> {
        let mut v = Vec::new();
        for r in &req.resource_spans {
            let svc = format!("{:?}", r.resource);
            for s in &r.scope_spans {
                for sp in &s.spans {
                    v.push((svc.clone(), format!("{:?}{}", s.scope, s.schema_url), sp.encode_to_vec()));
                }
            }
        }
        v
    }

    fn by_first_byte(n: usize) -> impl FnMut(&[u8]) -> usize {
        move |k: &[u8]| k.first().map_or(0, |&b| b as usize % n)
    }

    #[test]
    fn spans_go_by_trace_id_with_their_resource_and_scope() {
        let req = request(vec![("a", vec![vec![span(1, 0), span(2, 1)], vec![span(1, 2)]]), ("b", vec![vec![span(2, 3)]])]);
        let body = req.encode_to_vec();
        let (split, stats) = split(Signal::Traces, &body, RoutingKey::TraceId, &mut by_first_byte(2)).unwrap();
        let Split::Parts(parts) = split else { panic!("two destinations") };
        assert_eq!(parts.iter().map(|(d, _, _)| *d).collect::<Vec<_>>(), vec![1, 0]);
        assert_eq!(parts.iter().map(|(_, _, n)| *n).collect::<Vec<_>>(), vec![Some(2), Some(2)], "spans counted per part");
        assert_eq!(stats.fallback_items, 0);
        let one = ExportTraceServiceRequest::decode(parts[0].1.as_slice()).unwrap();
        let zero = ExportTraceServiceRequest::decode(parts[1].1.as_slice()).unwrap();
        assert_eq!(one.resource_spans.len(), 1, "trace 1 only in service a");
        assert_eq!(one.resource_spans[0].scope_spans.len(), 2);
        assert_eq!(zero.resource_spans.len(), 2);
        assert_eq!(zero.resource_spans[1].resource, Some(service("b")));
    }

    #[test]
    fn a_request_that_goes_one_way_is_forwarded_whole() {
        let body = request(vec![("a", vec![vec![span(2, 0), span(4, 1)]])]).encode_to_vec();
        assert_eq!(split(Signal::Traces, &body, RoutingKey::TraceId, &mut by_first_byte(2)).unwrap().0, Split::Whole(0));
        let two_services = request(vec![("a", vec![vec![span(1, 0)]]), ("b", vec![vec![span(2, 1)]])]).encode_to_vec();
        let mut same = |_: &[u8]| 3;
        assert_eq!(split(Signal::Traces, &two_services, RoutingKey::Service, &mut same).unwrap().0, Split::Whole(3));
    }

    #[test]
    fn spans_without_a_trace_id_take_the_fallback_key_and_are_counted() {
        let body = request(vec![("a", vec![vec![span(0, 0), span(3, 1), span(0, 2)]])]).encode_to_vec();
        let mut keys = Vec::new();
        let mut route = |k: &[u8]| {
            keys.push(k.to_vec());
            usize::from(k == FALLBACK_KEY)
        };
        let (split, stats) = split(Signal::Traces, &body, RoutingKey::TraceId, &mut route).unwrap();
        assert_eq!(stats.fallback_items, 2);
        let Split::Parts(parts) = split else { panic!() };
        let fallback = ExportTraceServiceRequest::decode(parts[0].1.as_slice()).unwrap();
        assert_eq!(fallback.resource_spans[0].scope_spans[0].spans.len(), 2);
    }

    #[test]
    fn service_routing_keeps_each_resource_whole() {
        let body = request(vec![("a", vec![vec![span(1, 0), span(2, 1)]]), ("b", vec![vec![span(1, 2)]])]).encode_to_vec();
        let mut route = |k: &[u8]| usize::from(k == b"b");
        let (Split::Parts(parts), _) = split(Signal::Traces, &body, RoutingKey::Service, &mut route).unwrap() else { panic!() };
        let a = ExportTraceServiceRequest::decode(parts[0].1.as_slice()).unwrap();
        assert_eq!(a.resource_spans[0].scope_spans[0].spans.len(), 2, "both of a's spans together");
    }

    #[test]
    fn logs_go_by_trace_id_where_they_have_one_else_by_resource() {
        let log = |trace: u8| LogRecord { trace_id: if trace == 0 { vec![] } else { vec![trace; 16] }, ..Default::default() };
        let req = ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                resource: Some(service("a")),
                scope_logs: vec![ScopeLogs { log_records: vec![log(1), log(0), log(2)], ..Default::default() }],
                ..Default::default()
            }],
        };
        let mut route = |k: &[u8]| match k.first() {
            Some(1) => 1,
            Some(2) => 2,
            _ => 7,
        };
        let (Split::Parts(parts), stats) = split(Signal::Logs, &req.encode_to_vec(), RoutingKey::TraceId, &mut route).unwrap() else {
            panic!()
        };
        assert_eq!(stats.fallback_items, 0, "a log without a trace ID goes by its resource, not the fallback");
        assert_eq!(parts.iter().map(|(d, _, _)| *d).collect::<Vec<_>>(), vec![1, 7, 2]);
    }

    #[test]
    fn malformed_bodies_are_errors_not_panics() {
        for bad in [&[0x0a, 0xff][..], &[0x0a, 0x05, 0x12, 0x10], &[0xff; 12], &[0x0b]] {
            assert!(split(Signal::Traces, bad, RoutingKey::TraceId, &mut |_| 0).is_err(), "{bad:?}");
        }
    }

    proptest! {
        #[test]
        fn the_parts_hold_every_span_once_byte_for_byte(
            shape in prop::collection::vec(prop::collection::vec(prop::collection::vec(0u8..6, 0..6), 0..4), 1..5),
            n in 1usize..5,
        ) {
            let mut k = 0;
            let resources: Vec<(&str, Vec<Vec<Span>>)> = shape
                .iter()
                .enumerate()
                .map(|(i, scopes)| {
                    let svc = ["a", "b", "c", "d", "e"][i % 5];
                    (svc, scopes.iter().map(|s| s.iter().map(|&t| { k += 1; span(t, k) }).collect()).collect())
                })
                .collect();
            let req = request(resources);
            let body = req.encode_to_vec();
            let (split, _) = split(Signal::Traces, &body, RoutingKey::TraceId, &mut by_first_byte(n)).unwrap();
            let mut got = match split {
                Split::Whole(_) => flat(&req),
                Split::Parts(parts) => parts
                    .iter()
                    .flat_map(|(_, b, _)| flat(&ExportTraceServiceRequest::decode(b.as_slice()).unwrap()))
                    .collect(),
            };
            let mut want = flat(&req);
            got.sort();
            want.sort();
            prop_assert_eq!(got, want);
        }
    }
}
