"""Checks the throughput benchmark's request bodies with real clients before they are
timed: the OpenTelemetry protobuf classes parse every body (span and attribute counts
as named), the gzip and gRPC-framed variants carry exactly the protobuf bytes, and weir
accepts each one when sent by urllib (OTLP/HTTP) and grpcio (OTLP/gRPC, plain and gzip).

usage: check_bodies.py BODY_DIR GRPC_TARGET HTTP_BASE METRICS_URL
"""

import gzip
import re
import struct
import sys
import urllib.request

import grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

SHAPES = {"512x10": (512, 10), "512x2": (512, 2), "100x10": (100, 10)}
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def accepted_spans(metrics_url):
    text = urllib.request.urlopen(metrics_url, timeout=5).read().decode()
    m = re.search(r'^weir_items_accepted_total\{[^}]*signal="traces"[^}]*\} (\d+)', text, re.M)
    return int(m.group(1)) if m else 0


def unframe(frame):
    flag, length = struct.unpack(">BI", frame[:5])
    assert length == len(frame) - 5, f"frame length {length} != {len(frame) - 5}"
    return flag, frame[5:]


def main():
    body_dir, grpc_target, http_base, metrics_url = sys.argv[1:5]
    channel = grpc.insecure_channel(grpc_target)
    export = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=ExportTraceServiceResponse.FromString)
    before = accepted_spans(metrics_url)
    sent = 0
    for stem, (spans, attrs) in SHAPES.items():
        pb = open(f"{body_dir}/{stem}.pb", "rb").read()
        req = ExportTraceServiceRequest.FromString(pb)
        got = [s for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans]
        assert len(got) == spans, f"{stem}: {len(got)} spans"
        assert all(len(s.attributes) == attrs for s in got), f"{stem}: attribute count"
        assert gzip.decompress(open(f"{body_dir}/{stem}.pb.gz", "rb").read()) == pb, f"{stem}.pb.gz"
        flag, msg = unframe(open(f"{body_dir}/{stem}.grpc", "rb").read())
        assert flag == 0 and msg == pb, f"{stem}.grpc"
        flag, msg = unframe(open(f"{body_dir}/{stem}.grpc.gz", "rb").read())
        assert flag == 1 and gzip.decompress(msg) == pb, f"{stem}.grpc.gz"

        for body, encoding in ((pb, None), (open(f"{body_dir}/{stem}.pb.gz", "rb").read(), "gzip")):
            r = urllib.request.Request(f"{http_base}/v1/traces", data=body, method="POST")
            r.add_header("Content-Type", "application/x-protobuf")
            if encoding:
                r.add_header("Content-Encoding", encoding)
            with urllib.request.urlopen(r, timeout=10) as resp:
                assert resp.status == 200, f"{stem} http {encoding}: {resp.status}"
                assert not ExportTraceServiceResponse.FromString(resp.read()).HasField("partial_success")
            sent += spans
        for compression in (grpc.Compression.NoCompression, grpc.Compression.Gzip):
            resp = export(pb, timeout=10, compression=compression)
            assert not resp.HasField("partial_success"), f"{stem} grpc: {resp}"
            sent += spans
        print(f"{stem}: {spans} spans x {attrs} attributes, {len(pb)} bytes: parsed, framed, accepted over HTTP and gRPC")
    after = accepted_spans(metrics_url)
    assert after - before == sent, f"weir accepted {after - before} spans, sent {sent}"
    print(f"weir accepted all {sent} spans the check sent")


if __name__ == "__main__":
    main()
