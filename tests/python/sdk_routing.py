"""The OpenTelemetry Python SDK sends traces of 1-30 spans through a BatchSpanProcessor
(small batches, so a trace's spans travel in several requests) to a tier-1 weir whose
`loadbalancing` exporter routes by trace ID to tier-2 weirs; every tier-2 writes what it
gets with the file exporter. loadgen sends its own volume at the same time. Checks that
every SDK span arrived and that each trace, the SDK's and loadgen's, is at exactly one
tier-2.

usage: sdk_routing.py TIER1_GRPC_ENDPOINT DATA_DIR [DATA_DIR...]
"""

import json
import os
import random
import sys
import time

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

TRACES = 2000


def send(endpoint):
    tp = TracerProvider(resource=Resource.create({"service.name": "py-routing"}))
    tp.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, insecure=True), max_export_batch_size=64, schedule_delay_millis=50, max_queue_size=100_000))
    tracer = tp.get_tracer("weir-routing-test")
    rng = random.Random(7)
    sent = {}
    # Traces interleaved: several open at once, so one batch holds parts of many traces
    # and one trace's spans end up in several batches.
    open_traces = []
    for t in range(TRACES):
        root = tracer.start_span(f"t{t}-root")
        open_traces.append((t, root, rng.randint(0, 29)))
        sent[format(root.get_span_context().trace_id, "032x")] = 1 + open_traces[-1][2]
        if len(open_traces) >= 8:
            t0, r0, children = open_traces.pop(0)
            ctx = trace.set_span_in_context(r0)
            for c in range(children):
                tracer.start_span(f"t{t0}-{c}", context=ctx).end()
            r0.end()
    for t0, r0, children in open_traces:
        ctx = trace.set_span_in_context(r0)
        for c in range(children):
            tracer.start_span(f"t{t0}-{c}", context=ctx).end()
        r0.end()
    tp.force_flush()
    tp.shutdown()
    return sent


def delivered(dirs):
    """trace id -> {tier-2 index: spans}"""
    at = {}
    for i, d in enumerate(dirs):
        path = os.path.join(d, "traces.jsonl")
        if not os.path.exists(path):
            continue
        with open(path) as f:
            for line in f:
                try:
                    req = json.loads(line)
                except ValueError:
                    continue  # a line still being written
                for rs in req.get("resourceSpans", []):
                    for ss in rs.get("scopeSpans", []):
                        for s in ss.get("spans", []):
                            per = at.setdefault(s["traceId"], {})
                            per[i] = per.get(i, 0) + 1
    return at


def main():
    endpoint, dirs = sys.argv[1], sys.argv[2:]
    sent = send(endpoint)
    total = sum(sent.values())
    deadline = time.time() + 30
    while True:
        at = delivered(dirs)
        # Only the SDK's traces count here: loadgen sends beside it.
        got = sum(n for t in sent for n in at.get(t, {}).values())
        if got >= total or time.time() > deadline:
            break
        time.sleep(0.2)
    missing = [t for t, n in sent.items() if sum(at.get(t, {}).values()) < n]
    split = [t for t, per in at.items() if len(per) > 1]
    spread = [sum(1 for per in at.values() if i in per) for i in range(len(dirs))]
    spread_sdk = [sum(1 for t in sent if i in at.get(t, {})) for i in range(len(dirs))]
    print(f"{len(sent)} traces, {total} spans sent; {got} of them at the tier-2s; SDK traces per tier-2: {spread_sdk}; "
          f"all traces (loadgen's too) per tier-2: {spread}")
    assert not missing, f"{len(missing)} traces incomplete, e.g. {missing[:3]}"
    assert not split, f"{len(split)} traces at more than one tier-2, e.g. {split[:3]}"
    assert all(n > len(sent) / len(dirs) / 2 for n in spread_sdk), f"uneven: {spread_sdk}"
    print("sdk routing: ok")


if __name__ == "__main__":
    main()
