//! Metrics: `resourceMetrics` down to the five kinds of data point and their exemplars.

use super::common::{attributes, resource, scope};
use super::{boolean, enumeration, f64v, hex_id, i32v, i64v, list, object, opt, string, u32v, u64v, Path, R};
use crate::otlp::json::tree::{Key, Value};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::metrics::v1::{
    exemplar, exponential_histogram_data_point, metric, number_data_point, summary_data_point, AggregationTemporality, Exemplar,
    ExponentialHistogram, ExponentialHistogramDataPoint, Gauge, Histogram, HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics,
    ScopeMetrics, Sum, Summary, SummaryDataPoint,
};

/// The export request's top-level fields.
pub(super) fn request(obj: &[(Key, Value)], root: &Path) -> R<ExportMetricsServiceRequest> {
    let mut r = ExportMetricsServiceRequest::default();
    for (k, v) in obj {
        if let "resourceMetrics" | "resource_metrics" = k.as_str() {
            r.resource_metrics = list(v, &root.field("resourceMetrics"), resource_metrics)?;
        }
    }
    Ok(r)
}

fn resource_metrics(v: &Value, p: &Path) -> R<ResourceMetrics> {
    let mut r = ResourceMetrics::default();
    for (k, v) in object(v, p)? {
        match k.as_str() {
            "resource" => r.resource = opt(v, &p.field("resource"), resource)?,
            "scopeMetrics" | "scope_metrics" => r.scope_metrics = list(v, &p.field("scopeMetrics"), scope_metrics)?,
            "schemaUrl" | "schema_url" => r.schema_url = string(v, &p.field("schemaUrl"))?,
            _ => {}
        }
    }
    Ok(r)
}

fn scope_metrics(v: &Value, p: &Path) -> R<ScopeMetrics> {
    let mut s = ScopeMetrics::default();
    for (k, v) in object(v, p)? {
        match k.as_str() {
            "scope" => s.scope = opt(v, &p.field("scope"), scope)?,
            "metrics" => s.metrics = list(v, &p.field("metrics"), metric)?,
            "schemaUrl" | "schema_url" => s.schema_url = string(v, &p.field("schemaUrl"))?,
            _ => {}
        }
    }
    Ok(s)
}

fn temporality(v: &Value, p: &Path) -> R<i32> {
    enumeration(v, p, |n| AggregationTemporality::from_str_name(n).map(|e| e as i32), "AggregationTemporality")
}

fn metric(v: &Value, p: &Path) -> R<Metric> {
    let mut m = Metric::default();
    let set_data = |data: metric::Data, p: &Path, m: &mut Metric| -> R<()> {
        if m.data.is_some() {
            return Err(p.err("more than one of gauge, sum, histogram, exponentialHistogram, summary set"));
        }
        m.data = Some(data);
        Ok(())
    };
    for (k, v) in object(v, p)? {
        match k.as_str() {
            "name" => m.name = string(v, &p.field("name"))?,
            "description" => m.description = string(v, &p.field("description"))?,
            "unit" => m.unit = string(v, &p.field("unit"))?,
            "metadata" => m.metadata = attributes(v, &p.field("metadata"))?,
            _ if v.is_null() => {}
            "gauge" => {
                let gp = p.field("gauge");
                let mut g = Gauge::default();
                for (k, v) in object(v, &gp)? {
                    if let "dataPoints" | "data_points" = k.as_str() {
                        g.data_points = list(v, &gp.field("dataPoints"), number_point)?;
                    }
                }
                set_data(metric::Data::Gauge(g), p, &mut m)?;
            }
            "sum" => {
                let sp = p.field("sum");
                let mut s = Sum::default();
                for (k, v) in object(v, &sp)? {
                    match k.as_str() {
                        "dataPoints" | "data_points" => s.data_points = list(v, &sp.field("dataPoints"), number_point)?,
                        "aggregationTemporality" | "aggregation_temporality" => {
                            s.aggregation_temporality = temporality(v, &sp.field("aggregationTemporality"))?
                        }
                        "isMonotonic" | "is_monotonic" => s.is_monotonic = boolean(v, &sp.field("isMonotonic"))?,
                        _ => {}
                    }
                }
                set_data(metric::Data::Sum(s), p, &mut m)?;
            }
            "histogram" => {
                let hp = p.field("histogram");
                let mut h = Histogram::default();
                for (k, v) in object(v, &hp)? {
                    match k.as_str() {
                        "dataPoints" | "data_points" => h.data_points = list(v, &hp.field("dataPoints"), histogram_point)?,
                        "aggregationTemporality" | "aggregation_temporality" => {
                            h.aggregation_temporality = temporality(v, &hp.field("aggregationTemporality"))?
                        }
                        _ => {}
                    }
                }
                set_data(metric::Data::Histogram(h), p, &mut m)?;
            }
            "exponentialHistogram" | "exponential_histogram" => {
                let hp = p.field("exponentialHistogram");
                let mut h = ExponentialHistogram::default();
                for (k, v) in object(v, &hp)? {
                    match k.as_str() {
                        "dataPoints" | "data_points" => h.data_points = list(v, &hp.field("dataPoints"), exp_histogram_point)?,
                        "aggregationTemporality" | "aggregation_temporality" => {
                            h.aggregation_temporality = temporality(v, &hp.field("aggregationTemporality"))?
                        }
                        _ => {}
                    }
                }
                set_data(metric::Data::ExponentialHistogram(h), p, &mut m)?;
            }
            "summary" => {
                let sp = p.field("summary");
                let mut s = Summary::default();
                for (k, v) in object(v, &sp)? {
                    if let "dataPoints" | "data_points" = k.as_str() {
                        s.data_points = list(v, &sp.field("dataPoints"), summary_point)?;
                    }
                }
                set_data(metric::Data::Summary(s), p, &mut m)?;
            }
            _ => {}
        }
    }
    Ok(m)
}

fn number_point(v: &Value, p: &Path) -> R<NumberDataPoint> {
    let mut d = NumberDataPoint::default();
    for (k, v) in object(v, p)? {
        match k.as_str() {
            "attributes" => d.attributes = attributes(v, &p.field("attributes"))?,
            "startTimeUnixNano" | "start_time_unix_nano" => d.start_time_unix_nano = u64v(v, &p.field("startTimeUnixNano"))?,
            "timeUnixNano" | "time_unix_nano" => d.time_unix_nano = u64v(v, &p.field("timeUnixNano"))?,
            "exemplars" => d.exemplars = list(v, &p.field("exemplars"), exemplar)?,
            "flags" => d.flags = u32v(v, &p.field("flags"))?,
            _ if v.is_null() => {}
            "asDouble" | "as_double" => set_once(&mut d.value, number_data_point::Value::AsDouble(f64v(v, &p.field("asDouble"))?), p)?,
            "asInt" | "as_int" => set_once(&mut d.value, number_data_point::Value::AsInt(i64v(v, &p.field("asInt"))?), p)?,
            _ => {}
        }
    }
    Ok(d)
}

fn set_once<T>(slot: &mut Option<T>, value: T, p: &Path) -> R<()> {
    if slot.is_some() {
        return Err(p.err("both asDouble and asInt set"));
    }
    *slot = Some(value);
    Ok(())
}

fn histogram_point(v: &Value, p: &Path) -> R<HistogramDataPoint> {
    let mut d = HistogramDataPoint::default();
    for (k, v) in object(v, p)? {
        match k.as_str() {
            "attributes" => d.attributes = attributes(v, &p.field("attributes"))?,
            "startTimeUnixNano" | "start_time_unix_nano" => d.start_time_unix_nano = u64v(v, &p.field("startTimeUnixNano"))?,
            "timeUnixNano" | "time_unix_nano" => d.time_unix_nano = u64v(v, &p.field("timeUnixNano"))?,
            "count" => d.count = u64v(v, &p.field("count"))?,
            "sum" => d.sum = opt(v, &p.field("sum"), f64v)?,
            "bucketCounts" | "bucket_counts" => d.bucket_counts = list(v, &p.field("bucketCounts"), u64v)?,
            "explicitBounds" | "explicit_bounds" => d.explicit_bounds = list(v, &p.field("explicitBounds"), f64v)?,
            "exemplars" => d.exemplars = list(v, &p.field("exemplars"), exemplar)?,
            "flags" => d.flags = u32v(v, &p.field("flags"))?,
            "min" => d.min = opt(v, &p.field("min"), f64v)?,
            "max" => d.max = opt(v, &p.field("max"), f64v)?,
            _ => {}
        }
    }
    Ok(d)
}

fn buckets(v: &Value, p: &Path) -> R<exponential_histogram_data_point::Buckets> {
    let mut b = exponential_histogram_data_point::Buckets::default();
    for (k, v) in object(v, p)? {
        match k.as_str() {
            "offset" => b.offset = i32v(v, &p.field("offset"))?,
            "bucketCounts" | "bucket_counts" => b.bucket_counts = list(v, &p.field("bucketCounts"), u64v)?,
            _ => {}
        }
    }
    Ok(b)
}

fn exp_histogram_point(v: &Value, p: &Path) -> R<ExponentialHistogramDataPoint> {
    let mut d = ExponentialHistogramDataPoint::default();
    for (k, v) in object(v, p)? {
        match k.as_str() {
            "attributes" => d.attributes = attributes(v, &p.field("attributes"))?,
            "startTimeUnixNano" | "start_time_unix_nano" => d.start_time_unix_nano = u64v(v, &p.field("startTimeUnixNano"))?,
            "timeUnixNano" | "time_unix_nano" => d.time_unix_nano = u64v(v, &p.field("timeUnixNano"))?,
            "count" => d.count = u64v(v, &p.field("count"))?,
            "sum" => d.sum = opt(v, &p.field("sum"), f64v)?,
            "scale" => d.scale = i32v(v, &p.field("scale"))?,
            "zeroCount" | "zero_count" => d.zero_count = u64v(v, &p.field("zeroCount"))?,
            "positive" => d.positive = opt(v, &p.field("positive"), buckets)?,
            "negative" => d.negative = opt(v, &p.field("negative"), buckets)?,
            "flags" => d.flags = u32v(v, &p.field("flags"))?,
            "exemplars" => d.exemplars = list(v, &p.field("exemplars"), exemplar)?,
            "min" => d.min = opt(v, &p.field("min"), f64v)?,
            "max" => d.max = opt(v, &p.field("max"), f64v)?,
            "zeroThreshold" | "zero_threshold" => d.zero_threshold = f64v(v, &p.field("zeroThreshold"))?,
            _ => {}
        }
    }
    Ok(d)
}

fn summary_point(v: &Value, p: &Path) -> R<SummaryDataPoint> {
    let mut d = SummaryDataPoint::default();
    for (k, v) in object(v, p)? {
        match k.as_str() {
            "attributes" => d.attributes = attributes(v, &p.field("attributes"))?,
            "startTimeUnixNano" | "start_time_unix_nano" => d.start_time_unix_nano = u64v(v, &p.field("startTimeUnixNano"))?,
            "timeUnixNano" | "time_unix_nano" => d.time_unix_nano = u64v(v, &p.field("timeUnixNano"))?,
            "count" => d.count = u64v(v, &p.field("count"))?,
            "sum" => d.sum = f64v(v, &p.field("sum"))?,
            "quantileValues" | "quantile_values" => {
                d.quantile_values = list(v, &p.field("quantileValues"), |v, p| {
                    let mut q = summary_data_point::ValueAtQuantile::default();
                    for (k, v) in object(v, p)? {
                        match k.as_str() {
                            "quantile" => q.quantile = f64v(v, &p.field("quantile"))?,
                            "value" => q.value = f64v(v, &p.field("value"))?,
                            _ => {}
                        }
                    }
                    Ok(q)
                })?
            }
            "flags" => d.flags = u32v(v, &p.field("flags"))?,
            _ => {}
        }
    }
    Ok(d)
}

fn exemplar(v: &Value, p: &Path) -> R<Exemplar> {
    let mut e = Exemplar::default();
    for (k, v) in object(v, p)? {
        match k.as_str() {
            "filteredAttributes" | "filtered_attributes" => e.filtered_attributes = attributes(v, &p.field("filteredAttributes"))?,
            "timeUnixNano" | "time_unix_nano" => e.time_unix_nano = u64v(v, &p.field("timeUnixNano"))?,
            "spanId" | "span_id" => e.span_id = hex_id(v, &p.field("spanId"), 8)?,
            "traceId" | "trace_id" => e.trace_id = hex_id(v, &p.field("traceId"), 16)?,
            _ if v.is_null() => {}
            "asDouble" | "as_double" => set_once(&mut e.value, exemplar::Value::AsDouble(f64v(v, &p.field("asDouble"))?), p)?,
            "asInt" | "as_int" => set_once(&mut e.value, exemplar::Value::AsInt(i64v(v, &p.field("asInt"))?), p)?,
            _ => {}
        }
    }
    Ok(e)
}
