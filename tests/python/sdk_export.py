"""Exports spans, metrics and logs with the OpenTelemetry Python SDK's OTLP exporters to a
running weir, then reads weir's file exporter output back and checks every item: names,
IDs, attributes, counts.

usage: sdk_export.py proto GRPC_ENDPOINT HTTP_ENDPOINT DATA_DIR   (gRPC + HTTP/protobuf)
       sdk_export.py json  GRPC_ENDPOINT HTTP_ENDPOINT DATA_DIR   (HTTP/JSON; its own venv)
"""

import json
import logging
import os
import sys
import time

from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

SPANS = 7
LOGS = 5


def run(transport, span_exporter, metric_exporter, log_exporter):
    resource = Resource.create({"service.name": f"py-{transport}"})
    tp = TracerProvider(resource=resource)
    tp.add_span_processor(SimpleSpanProcessor(span_exporter))
    tracer = tp.get_tracer("weir-python-test", "1.0")
    ids = {}
    with tracer.start_as_current_span(f"{transport}-parent") as parent:
        ids[f"{transport}-parent"] = parent.get_span_context()
        for i in range(SPANS - 1):
            with tracer.start_as_current_span(f"{transport}-child-{i}", attributes={"i": i, "transport": transport}) as s:
                ids[f"{transport}-child-{i}"] = s.get_span_context()
    tp.shutdown()

    reader = PeriodicExportingMetricReader(metric_exporter, export_interval_millis=3_600_000)
    mp = MeterProvider(resource=resource, metric_readers=[reader])
    counter = mp.get_meter("weir-python-test").create_counter(f"{transport}.requests", unit="1")
    counter.add(3, {"route": "a"})
    counter.add(4, {"route": "b"})
    mp.shutdown()

    lp = LoggerProvider(resource=resource)
    lp.add_log_record_processor(SimpleLogRecordProcessor(log_exporter))
    logger = logging.getLogger(f"weir.{transport}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    handler = LoggingHandler(level=logging.INFO, logger_provider=lp)
    logger.addHandler(handler)
    for i in range(LOGS):
        logger.warning("log %s %d", transport, i)
    lp.shutdown()
    logger.removeHandler(handler)
    return ids


def items(data_dir, signal, res, scope, item):
    path = os.path.join(data_dir, f"{signal}.jsonl")
    out = []
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            req = json.loads(line)
            for r in req.get(res, []):
                svc = {a["key"]: a["value"].get("stringValue") for a in r.get("resource", {}).get("attributes", [])}
                for s in r.get(scope, []):
                    for it in s.get(item, []):
                        out.append((svc.get("service.name"), s.get("scope", {}), it))
    return out


def wait_for(fn, want, what):
    deadline = time.time() + 15
    got = fn()
    while len(got) < want and time.time() < deadline:
        time.sleep(0.1)
        got = fn()
    assert len(got) == want, f"{what}: want {want}, got {len(got)}"
    return got


def main():
    mode, grpc_ep, http_ep, data_dir = sys.argv[1:5]
    all_ids = {}
    if mode == "proto":
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcLogExporter
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetricExporter
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpLogExporter
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter

        transports = ["grpc", "http"]
        all_ids.update(run("grpc", GrpcSpanExporter(endpoint=grpc_ep, insecure=True), GrpcMetricExporter(endpoint=grpc_ep, insecure=True), GrpcLogExporter(endpoint=grpc_ep, insecure=True)))
        all_ids.update(run("http", HttpSpanExporter(endpoint=f"{http_ep}/v1/traces"), HttpMetricExporter(endpoint=f"{http_ep}/v1/metrics"), HttpLogExporter(endpoint=f"{http_ep}/v1/logs")))
    else:
        from opentelemetry.exporter.otlp.json.http._log_exporter import OTLPLogExporter as JsonLogExporter
        from opentelemetry.exporter.otlp.json.http.metric_exporter import OTLPMetricExporter as JsonMetricExporter
        from opentelemetry.exporter.otlp.json.http.trace_exporter import OTLPSpanExporter as JsonSpanExporter

        transports = ["json"]
        all_ids.update(run("json", JsonSpanExporter(endpoint=f"{http_ep}/v1/traces"), JsonMetricExporter(endpoint=f"{http_ep}/v1/metrics"), JsonLogExporter(endpoint=f"{http_ep}/v1/logs")))
    n = len(transports)

    spans = wait_for(lambda: items(data_dir, "traces", "resourceSpans", "scopeSpans", "spans"), n * SPANS, "spans")
    by_name = {s["name"]: (svc, scope, s) for svc, scope, s in spans}
    for name, ctx in all_ids.items():
        svc, scope, s = by_name[name]
        transport = name.split("-")[0]
        assert svc == f"py-{transport}", (name, svc)
        assert scope.get("name") == "weir-python-test" and scope.get("version") == "1.0", scope
        assert s["traceId"] == format(ctx.trace_id, "032x"), (name, s["traceId"])
        assert s["spanId"] == format(ctx.span_id, "016x"), (name, s["spanId"])
        if "child" in name:
            parent = all_ids[f"{transport}-parent"]
            assert s["parentSpanId"] == format(parent.span_id, "016x"), name
            attrs = {a["key"]: a["value"] for a in s["attributes"]}
            assert attrs["i"] == {"intValue": name.rsplit("-", 1)[1]}, attrs
            assert attrs["transport"] == {"stringValue": transport}, attrs

    metrics = wait_for(lambda: items(data_dir, "metrics", "resourceMetrics", "scopeMetrics", "metrics"), n, "metrics")
    for svc, _, m in metrics:
        transport = svc.split("-")[1]
        assert m["name"] == f"{transport}.requests", m
        points = {p["attributes"][0]["value"]["stringValue"]: p["asInt"] for p in m["sum"]["dataPoints"]}
        assert points == {"a": "3", "b": "4"}, points
        assert m["sum"]["isMonotonic"] is True

    logs = wait_for(lambda: items(data_dir, "logs", "resourceLogs", "scopeLogs", "logRecords"), n * LOGS, "logs")
    bodies = sorted(r["body"]["stringValue"] for _, _, r in logs)
    assert bodies == sorted([f"log {t} {i}" for t in transports for i in range(LOGS)]), bodies
    assert all(r["severityText"] == "WARN" or r["severityText"] == "WARNING" for _, _, r in logs), logs[0]
    print(f"python sdk ({mode}): {len(spans)} spans, {len(metrics)} metrics, {len(logs)} logs exported and checked")


if __name__ == "__main__":
    main()
