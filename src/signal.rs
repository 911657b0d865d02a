//! The four OTLP signals and the payload that travels through the pipeline: decoded, or
//! (protobuf traces, metrics, logs) the checked bytes it arrived in.

use bytes::Bytes;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use prost::Message;
use std::borrow::Cow;

/// A telemetry signal; also the throttle's record type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Signal {
    /// Spans.
    Traces,
    /// Metric data points.
    Metrics,
    /// Log records.
    Logs,
    /// Profiles (v1development).
    Profiles,
}

impl Signal {
    /// All signals, in a fixed order (useful for per-signal arrays).
    pub const ALL: [Signal; 4] = [Signal::Traces, Signal::Metrics, Signal::Logs, Signal::Profiles];

    /// Lower-case name used in metrics, file names and config keys.
    pub fn as_str(self) -> &'static str {
        match self {
            Signal::Traces => "traces",
            Signal::Metrics => "metrics",
            Signal::Logs => "logs",
            Signal::Profiles => "profiles",
        }
    }

    /// Index into [`Signal::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// The OTLP/HTTP path.
    pub const fn http_path(self) -> &'static str {
        match self {
            Signal::Traces => "/v1/traces",
            Signal::Metrics => "/v1/metrics",
            Signal::Logs => "/v1/logs",
            Signal::Profiles => "/v1development/profiles",
        }
    }

    /// The OTLP/gRPC method path.
    pub const fn grpc_path(self) -> &'static str {
        match self {
            Signal::Traces => "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
            Signal::Metrics => "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
            Signal::Logs => "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
            Signal::Profiles => "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export",
        }
    }

    /// The word for one item of this signal, as in OTLP's partial-success fields.
    pub fn item_noun(self) -> &'static str {
        match self {
            Signal::Traces => "spans",
            Signal::Metrics => "data_points",
            Signal::Logs => "log_records",
            Signal::Profiles => "profiles",
        }
    }
}

/// One export request on its way through the pipeline: decoded, or (protobuf traces,
/// metrics and logs) still in the bytes it arrived in, checked and counted by
/// [`crate::otlp::wire`].
#[derive(Debug, Clone, PartialEq)]
pub enum Payload {
    /// A checked protobuf export request (or several, concatenated: protobuf merges
    /// repeated fields by concatenation, so the parts are one valid request).
    Encoded(Encoded),
    /// Traces.
    Traces(ExportTraceServiceRequest),
    /// Metrics.
    Metrics(ExportMetricsServiceRequest),
    /// Logs.
    Logs(ExportLogsServiceRequest),
    /// Profiles.
    Profiles(ExportProfilesServiceRequest),
}

impl Payload {
    /// Which signal this is.
    pub fn signal(&self) -> Signal {
        match self {
            Payload::Traces(_) => Signal::Traces,
            Payload::Metrics(_) => Signal::Metrics,
            Payload::Logs(_) => Signal::Logs,
            Payload::Profiles(_) => Signal::Profiles,
            Payload::Encoded(e) => e.signal,
        }
    }

    /// Items: spans, metric data points, log records or profiles.
    pub fn item_count(&self) -> usize {
        match self {
            Payload::Traces(r) => r.resource_spans.iter().flat_map(|r| &r.scope_spans).map(|s| s.spans.len()).sum(),
            Payload::Metrics(r) => r
                .resource_metrics
                .iter()
                .flat_map(|r| &r.scope_metrics)
                .flat_map(|s| &s.metrics)
                .map(|m| data_point_count(m.data.as_ref()))
                .sum(),
            Payload::Logs(r) => r.resource_logs.iter().flat_map(|r| &r.scope_logs).map(|s| s.log_records.len()).sum(),
            Payload::Profiles(r) => r.resource_profiles.iter().flat_map(|r| &r.scope_profiles).map(|s| s.profiles.len()).sum(),
            Payload::Encoded(e) => e.items,
        }
    }

    /// Size of the protobuf encoding; what the queue bound counts.
    pub fn encoded_len(&self) -> usize {
        match self {
            Payload::Traces(r) => r.encoded_len(),
            Payload::Metrics(r) => r.encoded_len(),
            Payload::Logs(r) => r.encoded_len(),
            Payload::Profiles(r) => r.encoded_len(),
            Payload::Encoded(e) => e.len,
        }
    }

    /// Protobuf encoding of the export request.
    pub fn encode_to_vec(&self) -> Vec<u8> {
        match self {
            Payload::Traces(r) => r.encode_to_vec(),
            Payload::Metrics(r) => r.encode_to_vec(),
            Payload::Logs(r) => r.encode_to_vec(),
            Payload::Profiles(r) => r.encode_to_vec(),
            Payload::Encoded(e) => e.to_vec(),
        }
    }

    /// The protobuf encoding as one buffer: shared, not copied, when the payload is a
    /// single encoded request.
    pub fn to_bytes(&self) -> Bytes {
        match self {
            Payload::Encoded(e) if e.chunks.len() == 1 => e.chunks[0].clone(),
            other => Bytes::from(other.encode_to_vec()),
        }
    }

    /// The protobuf encoding as the pieces it is made of: the requests an encoded batch
    /// appended, shared, not joined (a decoded payload is encoded into one piece).
    pub fn pieces(&self) -> Vec<Bytes> {
        match self {
            Payload::Encoded(e) => e.chunks.clone(),
            other => vec![Bytes::from(other.encode_to_vec())],
        }
    }

    /// The decoded form: borrowed when decoded already, else decoded from the bytes
    /// (which were checked on arrival, so this does not fail in practice; if it does, the
    /// error says why and the caller drops the batch with that reason).
    pub fn decoded(&self) -> Result<Cow<'_, Payload>, prost::DecodeError> {
        let Payload::Encoded(e) = self else {
            return Ok(Cow::Borrowed(self));
        };
        let buf = self.to_bytes();
        Ok(Cow::Owned(match e.signal {
            Signal::Traces => Payload::Traces(ExportTraceServiceRequest::decode(buf)?),
            Signal::Metrics => Payload::Metrics(ExportMetricsServiceRequest::decode(buf)?),
            Signal::Logs => Payload::Logs(ExportLogsServiceRequest::decode(buf)?),
            Signal::Profiles => Payload::Profiles(ExportProfilesServiceRequest::decode(buf)?),
        }))
    }

    /// Keeps the first `keep` items (in order) and drops the rest, with any resource or
    /// scope left empty; returns how many items were dropped.
    pub fn truncate_items(&mut self, keep: usize) -> usize {
        if let Payload::Encoded(e) = self {
            if keep >= e.items {
                return 0;
            }
            // Cutting inside the bytes is rare (item quotas): decode and cut the structs.
            match self.decoded() {
                Ok(d) => *self = d.into_owned(),
                Err(_) => return 0,
            }
        }
        fn cut<R, S, I>(resources: &mut Vec<R>, scopes: fn(&mut R) -> &mut Vec<S>, items: fn(&mut S) -> &mut Vec<I>, keep: usize) -> usize {
            let mut left = keep;
            let mut dropped = 0;
            for r in resources.iter_mut() {
                for s in scopes(r).iter_mut() {
                    let v = items(s);
                    let k = left.min(v.len());
                    dropped += v.len() - k;
                    v.truncate(k);
                    left -= k;
                }
                scopes(r).retain_mut(|s| !items(s).is_empty());
            }
            resources.retain_mut(|r| !scopes(r).is_empty());
            dropped
        }
        match self {
            Payload::Traces(r) => cut(&mut r.resource_spans, |r| &mut r.scope_spans, |s| &mut s.spans, keep),
            Payload::Logs(r) => cut(&mut r.resource_logs, |r| &mut r.scope_logs, |s| &mut s.log_records, keep),
            Payload::Profiles(r) => cut(&mut r.resource_profiles, |r| &mut r.scope_profiles, |s| &mut s.profiles, keep),
            Payload::Encoded(_) => unreachable!("decoded above"),
            Payload::Metrics(r) => {
                // Data points, metric by metric.
                let mut left = keep;
                let mut dropped = 0;
                for rm in r.resource_metrics.iter_mut() {
                    for sm in rm.scope_metrics.iter_mut() {
                        for m in sm.metrics.iter_mut() {
                            let n = data_point_count(m.data.as_ref());
                            let k = left.min(n);
                            dropped += n - k;
                            left -= k;
                            match m.data.as_mut() {
                                Some(Data::Gauge(g)) => g.data_points.truncate(k),
                                Some(Data::Sum(x)) => x.data_points.truncate(k),
                                Some(Data::Histogram(h)) => h.data_points.truncate(k),
                                Some(Data::ExponentialHistogram(h)) => h.data_points.truncate(k),
                                Some(Data::Summary(x)) => x.data_points.truncate(k),
                                None => {}
                            }
                        }
                        sm.metrics.retain(|m| data_point_count(m.data.as_ref()) > 0);
                    }
                    rm.scope_metrics.retain(|s| !s.metrics.is_empty());
                }
                r.resource_metrics.retain(|x| !x.scope_metrics.is_empty());
                dropped
            }
        }
    }

    /// Appends `other` (same signal) to `self`. Profiles are not merged, because each
    /// request carries its own dictionary that its indices point into; returns `other`
    /// back in that case (and when the signals differ); `None` means merged.
    pub fn merge(&mut self, other: Payload) -> Option<Payload> {
        if self.signal() != other.signal() || self.signal() == Signal::Profiles {
            return Some(other);
        }
        // Encoded on either side: the batch stays encoded, the decoded side is encoded
        // once (cheaper than decoding the other).
        if let Payload::Encoded(b) = other {
            if let Payload::Encoded(a) = self {
                a.append(b);
            } else {
                let mut a = Encoded::single(self.signal(), Bytes::from(self.encode_to_vec()), self.item_count());
                a.append(b);
                *self = Payload::Encoded(a);
            }
            return None;
        }
        if let Payload::Encoded(a) = self {
            a.append(Encoded::single(other.signal(), Bytes::from(other.encode_to_vec()), other.item_count()));
            return None;
        }
        match (self, other) {
            (Payload::Traces(a), Payload::Traces(b)) => a.resource_spans.extend(b.resource_spans),
            (Payload::Metrics(a), Payload::Metrics(b)) => a.resource_metrics.extend(b.resource_metrics),
            (Payload::Logs(a), Payload::Logs(b)) => a.resource_logs.extend(b.resource_logs),
            (_, other) => return Some(other),
        }
        None
    }
}

/// Checked protobuf export requests of one signal, kept as they arrived.
#[derive(Debug, Clone, PartialEq)]
pub struct Encoded {
    signal: Signal,
    chunks: Vec<Bytes>,
    items: usize,
    len: usize,
}

impl Encoded {
    /// One request's bytes. `items` must be what [`crate::otlp::wire::check`] counted in
    /// them: the pipeline trusts it.
    pub fn single(signal: Signal, bytes: Bytes, items: usize) -> Self {
        let len = bytes.len();
        Encoded { signal, chunks: vec![bytes], items, len }
    }

    /// Appends another request of the same signal.
    fn append(&mut self, other: Encoded) {
        self.items += other.items;
        self.len += other.len;
        self.chunks.extend(other.chunks);
    }

    fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len);
        for c in &self.chunks {
            v.extend_from_slice(c);
        }
        v
    }
}

/// Data points in one metric; a metric without data counts as zero.
fn data_point_count(data: Option<&Data>) -> usize {
    match data {
        Some(Data::Gauge(g)) => g.data_points.len(),
        Some(Data::Sum(s)) => s.data_points.len(),
        Some(Data::Histogram(h)) => h.data_points.len(),
        Some(Data::ExponentialHistogram(h)) => h.data_points.len(),
        Some(Data::Summary(s)) => s.data_points.len(),
        None => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

    #[test]
    fn truncate_keeps_the_first_items() {
        let scope = |n: usize| ScopeSpans {
            spans: (0..n).map(|i| Span { name: format!("s{i}"), ..Default::default() }).collect(),
            ..Default::default()
        };
        let mut p = Payload::Traces(ExportTraceServiceRequest {
            resource_spans: vec![
                ResourceSpans { scope_spans: vec![scope(2), scope(3)], ..Default::default() },
                ResourceSpans { scope_spans: vec![scope(4)], ..Default::default() },
            ],
        });
        assert_eq!(p.truncate_items(3), 6);
        assert_eq!(p.item_count(), 3);
        let Payload::Traces(t) = &p else { panic!() };
        assert_eq!(t.resource_spans.len(), 1, "empty resources are dropped");
        assert_eq!(t.resource_spans[0].scope_spans[1].spans[0].name, "s0");
        assert_eq!(p.truncate_items(10), 0);
    }
}
