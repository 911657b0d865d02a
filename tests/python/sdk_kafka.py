"""The OpenTelemetry Python SDK sends traces (OTLP/gRPC), metrics and logs (OTLP/HTTP) to
a weir whose `kafka` exporter writes to a Kafka-compatible broker with
`partition_traces_by_id: true`. A kafka-python consumer reads the three topics from
outside, decodes every message with the OTLP protobuf classes, and checks that it finds
exactly what was sent: every span and log record once, every metric, each trace in one
message key and one partition, that partition the one kafka-python's own (Java-compatible,
murmur2) partitioner picks for the key.

usage: sdk_kafka.py GRPC_ENDPOINT HTTP_ENDPOINT BOOTSTRAP
"""

import logging
import sys
import time
from collections import defaultdict

from kafka import KafkaConsumer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.partitioner.default import murmur2
from opentelemetry import trace
from opentelemetry._logs import SeverityNumber
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

TRACES, LOGS, METRICS = 300, 200, 12
PARTITIONS = 4
TOPICS = {"otlp_spans": PARTITIONS, "otlp_metrics": 1, "otlp_logs": 2}


def create_topics(bootstrap):
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="weir-test")
    admin.create_topics([NewTopic(name=n, num_partitions=p, replication_factor=1) for n, p in TOPICS.items()])
    admin.close()


def send(grpc, http):
    resource = Resource.create({"service.name": "py-kafka"})
    tp = TracerProvider(resource=resource)
    tp.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=grpc, insecure=True), max_export_batch_size=50, schedule_delay_millis=50))
    tracer = tp.get_tracer("weir-kafka-test")
    spans = {}
    for t in range(TRACES):
        with tracer.start_as_current_span(f"t{t}-root") as root:
            trace_id = format(root.get_span_context().trace_id, "032x")
            names = [f"t{t}-root"]
            for c in range(t % 5):
                with tracer.start_as_current_span(f"t{t}-{c}"):
                    names.append(f"t{t}-{c}")
        spans[trace_id] = set(names)
    tp.force_flush()
    tp.shutdown()

    reader = PeriodicExportingMetricReader(OTLPMetricExporter(endpoint=f"{http}/v1/metrics"), export_interval_millis=3_600_000)
    mp = MeterProvider(resource=resource, metric_readers=[reader])
    meter = mp.get_meter("weir-kafka-test")
    for m in range(METRICS):
        meter.create_counter(f"kafka.test.counter.{m}").add(m + 1)
    mp.force_flush()
    mp.shutdown()

    lp = LoggerProvider(resource=resource)
    lp.add_log_record_processor(BatchLogRecordProcessor(OTLPLogExporter(endpoint=f"{http}/v1/logs"), max_export_batch_size=64, schedule_delay_millis=50))
    logger = lp.get_logger("weir-kafka-test")
    for i in range(LOGS):
        logger.emit(body=f"kafka log {i}", severity_number=SeverityNumber.INFO, severity_text="INFO")
    lp.force_flush()
    lp.shutdown()
    return spans


def consume(bootstrap, want_spans, deadline_s=90):
    """(topic -> [(partition, key, value)]) once every span and log record has come, or at
    the deadline."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, client_id="weir-test-consumer", group_id=None, auto_offset_reset="earliest", enable_auto_commit=False)
    parts = [TopicPartition(t, p) for t, n in TOPICS.items() for p in range(n)]
    consumer.assign(parts)
    consumer.seek_to_beginning(*parts)
    got = defaultdict(list)
    counts = defaultdict(int)
    end = time.time() + deadline_s
    while time.time() < end:
        for tp, records in consumer.poll(timeout_ms=500).items():
            for r in records:
                got[tp.topic].append((tp.partition, r.key, r.value))
                if tp.topic == "otlp_spans":
                    req = ExportTraceServiceRequest.FromString(r.value)
                    counts["spans"] += sum(len(s.spans) for rs in req.resource_spans for s in rs.scope_spans)
                elif tp.topic == "otlp_logs":
                    req = ExportLogsServiceRequest.FromString(r.value)
                    counts["logs"] += sum(len(s.log_records) for rl in req.resource_logs for s in rl.scope_logs)
                else:
                    counts["metrics"] += 1
        if counts["spans"] >= want_spans and counts["logs"] >= LOGS and counts["metrics"] >= 1:
            # A little longer: anything sent twice would show now.
            for tp, records in consumer.poll(timeout_ms=1500).items():
                for r in records:
                    got[tp.topic].append((tp.partition, r.key, r.value))
            break
    consumer.close()
    return got


def main():
    grpc, http, bootstrap = sys.argv[1:4]
    logging.basicConfig(level=logging.WARNING)
    create_topics(bootstrap)
    sent = send(grpc, http)
    want_spans = sum(len(v) for v in sent.values())
    got = consume(bootstrap, want_spans)

    all_parts = list(range(PARTITIONS))
    seen_spans = defaultdict(list)
    trace_parts = defaultdict(set)
    for partition, key, value in got["otlp_spans"]:
        req = ExportTraceServiceRequest.FromString(value)
        ids = set()
        for rs in req.resource_spans:
            for ss in rs.scope_spans:
                for s in ss.spans:
                    tid = s.trace_id.hex()
                    ids.add(tid)
                    seen_spans[tid].append(s.name)
        assert len(ids) == 1, f"a message with {len(ids)} traces"
        tid = ids.pop()
        assert key == tid.encode(), f"key {key!r} is not the trace ID {tid}"
        # kafka-python's own copy of the Java client's partitioner.
        want = (murmur2(key) & 0x7FFFFFFF) % PARTITIONS
        assert partition == want, f"trace {tid} in partition {partition}, the Java client's partitioner says {want}"
        trace_parts[tid].add(partition)
    assert set(seen_spans) == set(sent), f"{len(set(sent) - set(seen_spans))} traces missing, {len(set(seen_spans) - set(sent))} unexpected"
    for tid, names in sent.items():
        assert sorted(seen_spans[tid]) == sorted(names), f"trace {tid}: sent {sorted(names)}, found {sorted(seen_spans[tid])}"
        assert len(trace_parts[tid]) == 1
    used = set(p for ps in trace_parts.values() for p in ps)
    assert used == set(all_parts), f"{TRACES} traces used partitions {sorted(used)}"

    bodies = []
    for _, key, value in got["otlp_logs"]:
        assert key is None
        req = ExportLogsServiceRequest.FromString(value)
        bodies += [r.body.string_value for rl in req.resource_logs for sl in rl.scope_logs for r in sl.log_records]
    assert sorted(bodies) == sorted(f"kafka log {i}" for i in range(LOGS)), f"{len(bodies)} log records, {len(set(bodies))} distinct"
    log_parts = set(p for p, _, _ in got["otlp_logs"])

    values = {}
    for _, _, value in got["otlp_metrics"]:
        req = ExportMetricsServiceRequest.FromString(value)
        for rm in req.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    values[m.name] = [p.as_int for p in m.sum.data_points]
    assert values == {f"kafka.test.counter.{m}": [m + 1] for m in range(METRICS)}, f"metrics: {values}"
    print(f"kafka: {want_spans} spans of {TRACES} traces, each trace in one partition ({len(used)} used), "
          f"{LOGS} log records over partitions {sorted(log_parts)}, {METRICS} metrics: all once")


if __name__ == "__main__":
    main()
