#!/usr/bin/env bash
# CI smoke of the benchmark path (not the benchmark): weir in a real cgroup (1 CPU,
# 300 MiB) exporting to a sink weir, loadgen with 3-second phases; checks that every
# phase printed its counts and that the JSON output parses.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q -p weir -p loadgen --bins
WORK=$(mktemp -d)
NAME="weir-smoke-$$"
cleanup() {
  [ -n "${WEIR_PID:-}" ] && { kill "$WEIR_PID" 2>/dev/null || true; wait "$WEIR_PID" 2>/dev/null || true; }
  [ -n "${SINK_PID:-}" ] && { kill "$SINK_PID" 2>/dev/null || true; wait "$SINK_PID" 2>/dev/null || true; }
  scripts/run-in-cgroup.sh --remove "$NAME" || true
  rm -rf "$WORK"
}
trap cleanup EXIT
WEIR_PIPELINE__SHUTDOWN_DELAY=0s target/debug/weir --config config/sink.yaml > "$WORK/sink.log" 2>&1 &
SINK_PID=$!
WEIR_PIPELINE__SHUTDOWN_DELAY=0s scripts/run-in-cgroup.sh "$NAME" 1 314572800 -- target/debug/weir --config config/bench.yaml > "$WORK/weir.log" 2>&1 &
WEIR_PID=$!
for _ in $(seq 1 100); do curl -sf http://127.0.0.1:8888/readyz > /dev/null && break; sleep 0.1; done
curl -sf http://127.0.0.1:8888/debug/throttle | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["effective_cores"] == 1.0, d; print("weir sees", d["effective_cores"], "core and", d["mem_limit_bytes"], "bytes")'
target/debug/loadgen -c 4 -d 3s -metrics-url http://127.0.0.1:8888/metrics -json "$WORK/out.json" -report "$WORK/out.svg" | tee "$WORK/out.txt"
for phase in warmup burst bigpayload; do
  grep -q "^phase=$phase .*200=[0-9]* 429=[0-9]* 503=[0-9]* other=[0-9]* transport_errors=[0-9]*" "$WORK/out.txt" || { echo "phase $phase printed no counts"; cat "$WORK/weir.log"; exit 1; }
done
python3 - "$WORK/out.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert [p["phase"] for p in d["phases"]] == ["warmup", "burst", "bigpayload"], d["phases"]
assert all(p["counts"]["ok"] > 0 for p in d["phases"]), d["phases"]
assert d["metrics"], "metrics were scraped"
print("loadgen smoke: 3 phases, JSON parses,", sum(p["counts"]["ok"] for p in d["phases"]), "requests accepted")
PY
grep -q "<svg" "$WORK/out.svg"
