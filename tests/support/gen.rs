//! Random OTLP messages covering every field, from a seed (for round-trip proptests).

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::*;
use opentelemetry_proto::tonic::logs::v1::*;
use opentelemetry_proto::tonic::metrics::v1::*;
use opentelemetry_proto::tonic::profiles::v1development as prof;
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::*;
use weir::otlp::synth::SplitMix;

pub struct G(SplitMix, u32);

impl G {
    pub fn new(seed: u64) -> G {
        G(SplitMix::new(seed), 0)
    }
    fn n(&mut self, max: u64) -> u64 {
        self.0.next_u64() % (max + 1)
    }
    fn b(&mut self) -> bool {
        self.n(1) == 1
    }
    fn u64(&mut self) -> u64 {
        match self.n(3) {
            0 => 0,
            1 => self.n(1000),
            _ => self.0.next_u64(),
        }
    }
    fn i64(&mut self) -> i64 {
        self.u64() as i64
    }
    fn u32(&mut self) -> u32 {
        self.u64() as u32
    }
    fn i32(&mut self) -> i32 {
        self.u64() as i32
    }
    fn f64(&mut self) -> f64 {
        match self.n(6) {
            0 => 0.0,
            1 => f64::INFINITY,
            2 => f64::NEG_INFINITY,
            3 => -0.5,
            4 => 1e-300,
            _ => {
                let v = f64::from_bits(self.0.next_u64());
                if v.is_finite() {
                    v
                } else {
                    1.25
                }
            }
        }
    }
    fn s(&mut self) -> String {
        const PARTS: [&str; 8] = ["", "a", "héllo", "\"quoted\"", "back\\slash", "ctl\u{1}\n\t", "日本", "😀"];
        (0..self.n(3)).map(|_| PARTS[self.n(7) as usize]).collect()
    }
    fn bytes(&mut self, max: u64) -> Vec<u8> {
        (0..self.n(max)).map(|_| self.0.next_u64() as u8).collect()
    }
    fn id(&mut self, len: usize) -> Vec<u8> {
        if self.b() {
            Vec::new()
        } else {
            (0..len).map(|_| self.0.next_u64() as u8).collect()
        }
    }
    fn vec<T>(&mut self, max: u64, f: impl Fn(&mut G) -> T) -> Vec<T> {
        (0..self.n(max)).map(|_| f(self)).collect()
    }
    fn opt<T>(&mut self, f: impl FnOnce(&mut G) -> T) -> Option<T> {
        if self.b() {
            Some(f(self))
        } else {
            None
        }
    }

    fn any(&mut self) -> AnyValue {
        self.1 += 1;
        let depth = self.1;
        let value = match if depth > 3 { self.n(4) } else { self.n(8) } {
            0 => None,
            1 => Some(any_value::Value::StringValue(self.s())),
            2 => Some(any_value::Value::BoolValue(self.b())),
            3 => Some(any_value::Value::IntValue(self.i64())),
            4 => Some(any_value::Value::DoubleValue(self.f64())),
            5 => Some(any_value::Value::BytesValue(self.bytes(5))),
            6 => Some(any_value::Value::ArrayValue(ArrayValue { values: self.vec(3, |g| g.any()) })),
            7 => Some(any_value::Value::KvlistValue(KeyValueList { values: self.vec(3, |g| g.kv()) })),
            _ => Some(any_value::Value::StringValueStrindex(self.i32())),
        };
        self.1 -= 1;
        AnyValue { value }
    }
    fn kv(&mut self) -> KeyValue {
        KeyValue { key: self.s(), value: self.opt(|g| g.any()), key_strindex: if self.b() { self.i32() } else { 0 } }
    }
    fn attrs(&mut self) -> Vec<KeyValue> {
        self.vec(3, |g| g.kv())
    }
    fn resource(&mut self) -> Option<Resource> {
        self.opt(|g| Resource {
            attributes: g.attrs(),
            dropped_attributes_count: g.u32(),
            entity_refs: g.vec(2, |g| EntityRef {
                schema_url: g.s(),
                r#type: g.s(),
                id_keys: g.vec(2, |g| g.s()),
                description_keys: g.vec(2, |g| g.s()),
            }),
        })
    }
    fn scope(&mut self) -> Option<InstrumentationScope> {
        self.opt(|g| InstrumentationScope { name: g.s(), version: g.s(), attributes: g.attrs(), dropped_attributes_count: g.u32() })
    }

    pub fn traces(&mut self) -> ExportTraceServiceRequest {
        ExportTraceServiceRequest {
            resource_spans: self.vec(2, |g| ResourceSpans {
                resource: g.resource(),
                scope_spans: g.vec(2, |g| ScopeSpans { scope: g.scope(), spans: g.vec(3, |g| g.span()), schema_url: g.s() }),
                schema_url: g.s(),
            }),
        }
    }
    fn span(&mut self) -> Span {
        Span {
            trace_id: self.id(16),
            span_id: self.id(8),
            trace_state: self.s(),
            parent_span_id: self.id(8),
            flags: self.u32(),
            name: self.s(),
            kind: self.n(5) as i32,
            start_time_unix_nano: self.u64(),
            end_time_unix_nano: self.u64(),
            attributes: self.attrs(),
            dropped_attributes_count: self.u32(),
            events: self.vec(2, |g| span::Event {
                time_unix_nano: g.u64(),
                name: g.s(),
                attributes: g.attrs(),
                dropped_attributes_count: g.u32(),
            }),
            dropped_events_count: self.u32(),
            links: self.vec(2, |g| span::Link {
                trace_id: g.id(16),
                span_id: g.id(8),
                trace_state: g.s(),
                attributes: g.attrs(),
                dropped_attributes_count: g.u32(),
                flags: g.u32(),
            }),
            dropped_links_count: self.u32(),
            status: self.opt(|g| Status { message: g.s(), code: g.n(2) as i32 }),
        }
    }

    pub fn logs(&mut self) -> ExportLogsServiceRequest {
        ExportLogsServiceRequest {
            resource_logs: self.vec(2, |g| ResourceLogs {
                resource: g.resource(),
                scope_logs: g.vec(2, |g| ScopeLogs {
                    scope: g.scope(),
                    log_records: g.vec(3, |g| LogRecord {
                        time_unix_nano: g.u64(),
                        observed_time_unix_nano: g.u64(),
                        severity_number: g.n(24) as i32,
                        severity_text: g.s(),
                        body: g.opt(|g| g.any()),
                        attributes: g.attrs(),
                        dropped_attributes_count: g.u32(),
                        flags: g.u32(),
                        trace_id: g.id(16),
                        span_id: g.id(8),
                        event_name: g.s(),
                    }),
                    schema_url: g.s(),
                }),
                schema_url: g.s(),
            }),
        }
    }

    fn exemplar(&mut self) -> Exemplar {
        Exemplar {
            filtered_attributes: self.attrs(),
            time_unix_nano: self.u64(),
            span_id: self.id(8),
            trace_id: self.id(16),
            value: match self.n(2) {
                0 => None,
                1 => Some(exemplar::Value::AsDouble(self.f64())),
                _ => Some(exemplar::Value::AsInt(self.i64())),
            },
        }
    }
    fn number_point(&mut self) -> NumberDataPoint {
        NumberDataPoint {
            attributes: self.attrs(),
            start_time_unix_nano: self.u64(),
            time_unix_nano: self.u64(),
            exemplars: self.vec(2, |g| g.exemplar()),
            flags: self.u32(),
            value: match self.n(2) {
                0 => None,
                1 => Some(number_data_point::Value::AsDouble(self.f64())),
                _ => Some(number_data_point::Value::AsInt(self.i64())),
            },
        }
    }
    fn buckets(&mut self) -> Option<exponential_histogram_data_point::Buckets> {
        self.opt(|g| exponential_histogram_data_point::Buckets { offset: g.i32(), bucket_counts: g.vec(3, |g| g.u64()) })
    }
    fn metric(&mut self) -> Metric {
        let data = match self.n(5) {
            0 => None,
            1 => Some(metric::Data::Gauge(Gauge { data_points: self.vec(2, |g| g.number_point()) })),
            2 => Some(metric::Data::Sum(Sum {
                data_points: self.vec(2, |g| g.number_point()),
                aggregation_temporality: self.n(2) as i32,
                is_monotonic: self.b(),
            })),
            3 => Some(metric::Data::Histogram(Histogram {
                data_points: self.vec(2, |g| HistogramDataPoint {
                    attributes: g.attrs(),
                    start_time_unix_nano: g.u64(),
                    time_unix_nano: g.u64(),
                    count: g.u64(),
                    sum: g.opt(|g| g.f64()),
                    bucket_counts: g.vec(3, |g| g.u64()),
                    explicit_bounds: g.vec(3, |g| g.f64()),
                    exemplars: g.vec(1, |g| g.exemplar()),
                    flags: g.u32(),
                    min: g.opt(|g| g.f64()),
                    max: g.opt(|g| g.f64()),
                }),
                aggregation_temporality: self.n(2) as i32,
            })),
            4 => Some(metric::Data::ExponentialHistogram(ExponentialHistogram {
                data_points: self.vec(2, |g| ExponentialHistogramDataPoint {
                    attributes: g.attrs(),
                    start_time_unix_nano: g.u64(),
                    time_unix_nano: g.u64(),
                    count: g.u64(),
                    sum: g.opt(|g| g.f64()),
                    scale: g.i32(),
                    zero_count: g.u64(),
                    positive: g.buckets(),
                    negative: g.buckets(),
                    flags: g.u32(),
                    exemplars: g.vec(1, |g| g.exemplar()),
                    min: g.opt(|g| g.f64()),
                    max: g.opt(|g| g.f64()),
                    zero_threshold: g.f64(),
                }),
                aggregation_temporality: self.n(2) as i32,
            })),
            _ => Some(metric::Data::Summary(Summary {
                data_points: self.vec(2, |g| SummaryDataPoint {
                    attributes: g.attrs(),
                    start_time_unix_nano: g.u64(),
                    time_unix_nano: g.u64(),
                    count: g.u64(),
                    sum: g.f64(),
                    quantile_values: g.vec(3, |g| summary_data_point::ValueAtQuantile { quantile: g.f64(), value: g.f64() }),
                    flags: g.u32(),
                }),
            })),
        };
        Metric { name: self.s(), description: self.s(), unit: self.s(), metadata: self.attrs(), data }
    }

    pub fn metrics(&mut self) -> ExportMetricsServiceRequest {
        ExportMetricsServiceRequest {
            resource_metrics: self.vec(2, |g| ResourceMetrics {
                resource: g.resource(),
                scope_metrics: g.vec(2, |g| ScopeMetrics { scope: g.scope(), metrics: g.vec(3, |g| g.metric()), schema_url: g.s() }),
                schema_url: g.s(),
            }),
        }
    }

    fn value_type(&mut self) -> Option<prof::ValueType> {
        self.opt(|g| prof::ValueType { type_strindex: g.i32(), unit_strindex: g.i32() })
    }
    pub fn profiles(&mut self) -> ExportProfilesServiceRequest {
        ExportProfilesServiceRequest {
            resource_profiles: self.vec(2, |g| prof::ResourceProfiles {
                resource: g.resource(),
                scope_profiles: g.vec(2, |g| prof::ScopeProfiles {
                    scope: g.scope(),
                    profiles: g.vec(2, |g| prof::Profile {
                        sample_type: g.value_type(),
                        samples: g.vec(3, |g| prof::Sample {
                            stack_index: g.i32(),
                            attribute_indices: g.vec(3, |g| g.i32()),
                            link_index: g.i32(),
                            values: g.vec(3, |g| g.i64()),
                            timestamps_unix_nano: g.vec(3, |g| g.u64()),
                        }),
                        time_unix_nano: g.u64(),
                        duration_nano: g.u64(),
                        period_type: g.value_type(),
                        period: g.i64(),
                        profile_id: g.id(16),
                        dropped_attributes_count: g.u32(),
                        original_payload_format: g.s(),
                        original_payload: g.bytes(6),
                        attribute_indices: g.vec(3, |g| g.i32()),
                    }),
                    schema_url: g.s(),
                }),
                schema_url: g.s(),
            }),
            dictionary: self.opt(|g| prof::ProfilesDictionary {
                mapping_table: g.vec(2, |g| prof::Mapping {
                    memory_start: g.u64(),
                    memory_limit: g.u64(),
                    file_offset: g.u64(),
                    filename_strindex: g.i32(),
                    attribute_indices: g.vec(2, |g| g.i32()),
                }),
                location_table: g.vec(2, |g| prof::Location {
                    mapping_index: g.i32(),
                    address: g.u64(),
                    lines: g.vec(2, |g| prof::Line { function_index: g.i32(), line: g.i64(), column: g.i64() }),
                    attribute_indices: g.vec(2, |g| g.i32()),
                }),
                function_table: g.vec(2, |g| prof::Function {
                    name_strindex: g.i32(),
                    system_name_strindex: g.i32(),
                    filename_strindex: g.i32(),
                    start_line: g.i64(),
                }),
                link_table: g.vec(2, |g| prof::Link { trace_id: g.id(16), span_id: g.id(8) }),
                string_table: g.vec(3, |g| g.s()),
                attribute_table: g.vec(2, |g| prof::KeyValueAndUnit {
                    key_strindex: g.i32(),
                    value: g.opt(|g| g.any()),
                    unit_strindex: g.i32(),
                }),
                stack_table: g.vec(2, |g| prof::Stack { location_indices: g.vec(3, |g| g.i32()) }),
            }),
        }
    }
}
