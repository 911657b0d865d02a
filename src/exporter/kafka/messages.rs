//! A batch as Kafka messages: the received protobuf bytes as they are (or OTLP/JSON),
//! one message per trace when keyed by trace ID, and every message cut to fit
//! `max_message_bytes` at the wire.

use crate::config::kafka::KafkaEncoding;
use crate::otlp::chunk::chunk;
use crate::otlp::split::{split, RoutingKey, Split, FALLBACK_KEY};
use crate::signal::{Encoded, Payload, Signal};
use bytes::Bytes;

/// One message to produce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The trace ID in hex when keyed by trace; `None`: spread over the partitions.
    pub key: Option<Vec<u8>>,
    /// An OTLP export request, protobuf or JSON.
    pub value: Bytes,
    /// Items in it.
    pub items: usize,
}

/// A batch's messages, and the items too large for any message.
#[derive(Debug, Default)]
pub struct Messages {
    /// The messages, each at most the budget.
    pub list: Vec<Message>,
    /// Items left out: even alone they pass the budget.
    pub oversized_items: usize,
}

/// Lowercase hex, as the Collector keys messages by trace ID.
fn hex(id: &[u8]) -> Vec<u8> {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    id.iter().flat_map(|b| [DIGITS[usize::from(b >> 4)], DIGITS[usize::from(b & 15)]]).collect()
}

/// A request with its message key and its items.
type Group = (Option<Vec<u8>>, Bytes, usize);

/// The batch's requests before encoding: per trace when `by_trace` (traces only), else
/// the whole batch, each with its key.
fn groups(signal: Signal, body: &Bytes, items: usize, by_trace: bool) -> Result<Vec<Group>, String> {
    if !(by_trace && signal == Signal::Traces) {
        return Ok(vec![(None, body.clone(), items)]);
    }
    let mut keys: Vec<Option<Vec<u8>>> = Vec::new();
    let mut route = |id: &[u8]| {
        let key = (id != FALLBACK_KEY).then(|| hex(id));
        keys.iter().position(|k| *k == key).unwrap_or_else(|| {
            keys.push(key);
            keys.len() - 1
        })
    };
    let (s, _) = split(signal, body, RoutingKey::TraceId, &mut route).map_err(|e| e.to_string())?;
    Ok(match s {
        Split::Whole(d) => vec![(keys[d].clone(), body.clone(), items)],
        Split::Parts(parts) => parts.into_iter().map(|(d, b, n)| (keys[d].clone(), Bytes::from(b), n.unwrap_or(0) as usize)).collect(),
    })
}

/// The batch as messages of at most `budget` bytes each.
pub fn build(payload: &Payload, encoding: KafkaEncoding, by_trace: bool, budget: usize) -> Result<Messages, String> {
    let signal = payload.signal();
    let body = payload.to_bytes();
    let mut out = Messages::default();
    for (key, bytes, items) in groups(signal, &body, payload.item_count(), by_trace)? {
        let pieces = if bytes.len() <= budget {
            vec![(bytes, items)]
        } else {
            let c = chunk(signal, &bytes, budget).map_err(|e| e.to_string())?;
            out.oversized_items += c.oversized_items;
            c.parts.into_iter().map(|p| (Bytes::from(p.bytes), p.items)).collect()
        };
        for (bytes, items) in pieces {
            match encoding {
                KafkaEncoding::OtlpProto => out.list.push(Message { key: key.clone(), value: bytes, items }),
                KafkaEncoding::OtlpJson => json(signal, bytes, items, key.as_deref(), budget, &mut out)?,
            }
        }
    }
    Ok(out)
}

/// OTLP/JSON messages of the protobuf request `bytes`; JSON is larger than protobuf, so a
/// message over `budget` is cut again from the protobuf, smaller, up to three times.
fn json(signal: Signal, bytes: Bytes, items: usize, key: Option<&[u8]>, budget: usize, out: &mut Messages) -> Result<(), String> {
    let mut todo = vec![(bytes, items, 0u8)];
    while let Some((bytes, items, round)) = todo.pop() {
        let payload = Payload::Encoded(Encoded::single(signal, bytes.clone(), items));
        let decoded = payload.decoded().map_err(|e| format!("cannot decode for otlp_json: {e}"))?;
        let text = crate::otlp::json::encode(&decoded);
        if text.len() <= budget {
            out.list.push(Message { key: key.map(<[u8]>::to_vec), value: Bytes::from(text.into_bytes()), items });
            continue;
        }
        let smaller = (bytes.len() as u128 * budget as u128 * 9 / (text.len() as u128 * 10)) as usize;
        if round >= 3 || smaller < crate::config::kafka::MIN_MESSAGE_BYTES / 2 {
            out.oversized_items += items;
            continue;
        }
        let c = chunk(signal, &bytes, smaller).map_err(|e| e.to_string())?;
        out.oversized_items += c.oversized_items;
        // Reversed, so that popping keeps the original order.
        todo.extend(c.parts.into_iter().rev().map(|p| (Bytes::from(p.bytes), p.items, round + 1)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::otlp::synth;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use prost::Message as _;

    fn batch(traces: usize, spans: usize) -> Payload {
        let mut req = ExportTraceServiceRequest::default();
        for t in 0..traces {
            req.resource_spans.extend(synth::traces_request(spans, 2, 30, t as u64).resource_spans);
        }
        let bytes = Bytes::from(req.encode_to_vec());
        let items = crate::otlp::wire::check(Signal::Traces, &bytes).unwrap();
        Payload::Encoded(Encoded::single(Signal::Traces, bytes, items))
    }

    #[test]
    fn proto_is_the_received_bytes_untouched() {
        let p = batch(3, 5);
        let m = build(&p, KafkaEncoding::OtlpProto, false, 1_000_000).unwrap();
        assert_eq!(m.list, vec![Message { key: None, value: p.to_bytes(), items: 15 }]);
    }

    #[test]
    fn by_trace_one_message_per_trace_keyed_by_its_hex_id() {
        let p = batch(4, 3);
        let m = build(&p, KafkaEncoding::OtlpProto, true, 1_000_000).unwrap();
        assert_eq!(m.list.len(), 4);
        for msg in &m.list {
            let req = ExportTraceServiceRequest::decode(msg.value.clone()).unwrap();
            let ids: std::collections::BTreeSet<Vec<u8>> =
                req.resource_spans.iter().flat_map(|r| &r.scope_spans).flat_map(|s| &s.spans).map(|s| hex(&s.trace_id)).collect();
            assert_eq!(ids.len(), 1, "one trace per message");
            assert_eq!(msg.key.as_ref(), ids.iter().next(), "keyed by that trace's ID in hex");
            assert_eq!(msg.items, 3);
        }
    }

    #[test]
    fn json_messages_fit_the_budget_and_keep_every_span() {
        let p = batch(2, 40);
        let budget = 4096;
        let m = build(&p, KafkaEncoding::OtlpJson, false, budget).unwrap();
        assert_eq!(m.oversized_items, 0);
        assert!(m.list.len() > 2);
        let mut spans = 0;
        for msg in &m.list {
            assert!(msg.value.len() <= budget, "{} > {budget}", msg.value.len());
            let v: serde_json::Value = serde_json::from_slice(&msg.value).unwrap();
            let n: usize = v["resourceSpans"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|r| r["scopeSpans"].as_array().unwrap())
                .map(|s| s["spans"].as_array().unwrap().len())
                .sum();
            assert_eq!(n, msg.items);
            spans += n;
        }
        assert_eq!(spans, 80);
    }

    #[test]
    fn hex_is_lowercase_and_two_digits_a_byte() {
        assert_eq!(hex(&[0x00, 0xab, 0x0f, 0xf0]), b"00ab0ff0".to_vec());
    }
}
