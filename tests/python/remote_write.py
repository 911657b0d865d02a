"""Sends Prometheus remote-write requests with a real client library
(prometheus-remote-writer from PyPI: snappy-compressed prompb.WriteRequest) to weir, then
checks weir's file exporter output. Unsorted labels must be refused with 400.

usage: remote_write.py HTTP_ENDPOINT DATA_DIR
"""

import json
import os
import sys
import time

from prometheus_remote_writer import RemoteWriter


def main():
    http_ep, data_dir = sys.argv[1:3]
    now_ms = int(time.time() * 1000)
    w = RemoteWriter(url=f"{http_ep}/api/v1/write", sort_labels=True)
    res = w.send([
        {"metric": {"__name__": "py_requests_total", "job": "py", "code": "200"}, "values": [5, 6], "timestamps": [now_ms - 1000, now_ms]},
        {"metric": {"__name__": "py_queue_depth", "job": "py"}, "values": [3.5], "timestamps": [now_ms]},
    ])
    assert res.last_response.status_code == 204, res.last_response.status_code

    # Unsorted labels (the library sends them in the given order when sort_labels=False).
    bad = RemoteWriter(url=f"{http_ep}/api/v1/write", sort_labels=False)
    try:
        r = bad.send([{"metric": {"__name__": "x", "zeta": "1", "alpha": "2"}, "values": [1], "timestamps": [now_ms]}])
        status = r.last_response.status_code
    except RuntimeError as e:  # the library raises on HTTP errors
        status = 400 if "400" in str(e) else str(e)
    assert status == 400, status

    path = os.path.join(data_dir, "metrics.jsonl")
    deadline = time.time() + 15
    metrics = []
    while time.time() < deadline:
        if os.path.exists(path):
            metrics = [m for line in open(path) for rm in json.loads(line)["resourceMetrics"] for sm in rm["scopeMetrics"] for m in sm["metrics"]]
            if len(metrics) >= 2:
                break
        time.sleep(0.1)
    by_name = {m["name"]: m for m in metrics}
    pts = by_name["py_requests_total"]["gauge"]["dataPoints"]
    assert [p["asDouble"] for p in pts] == [5, 6], pts
    assert pts[1]["timeUnixNano"] == str(now_ms * 1_000_000), pts[1]
    attrs = {a["key"]: a["value"]["stringValue"] for a in pts[0]["attributes"]}
    assert attrs == {"code": "200", "job": "py"}, attrs
    assert by_name["py_queue_depth"]["gauge"]["dataPoints"][0]["asDouble"] == 3.5
    print("prometheus remote write (python client): 2 series accepted and checked, unsorted labels refused")


if __name__ == "__main__":
    main()
