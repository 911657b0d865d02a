#!/usr/bin/env bash
# Runs real Python clients against a real weir and checks the file exporter's output:
# the OpenTelemetry SDK's gRPC + HTTP/protobuf exporters in one venv, its HTTP/JSON
# exporter in another (their pins clash), and a Prometheus remote-write client library in
# a third; then the SDK through the kafka exporter to a Kafka-compatible broker (tansu),
# read back with kafka-python. Venvs live under target/.
set -euo pipefail
cd "$(dirname "$0")/.."

venv() { # venv DIR PACKAGES...
  local dir=$1; shift
  [ -x "$dir/bin/python" ] || python3 -m venv "$dir"
  "$dir/bin/pip" install -q --disable-pip-version-check "$@"
}
venv target/pyvenv-sdk opentelemetry-sdk opentelemetry-exporter-otlp-proto-grpc opentelemetry-exporter-otlp-proto-http kafka-python
venv target/pyvenv-json opentelemetry-exporter-otlp-json-http
venv target/pyvenv-prw prometheus-remote-writer

cargo build -q -p weir -p loadgen --bins
# A free port, never one this script handed out before (a port bound and released can be
# offered again at once, so two calls could return the same one).
PORTS_GIVEN=$(mktemp)
port() {
  local p
  while :; do
    p=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    grep -qx "$p" "$PORTS_GIVEN" || break
  done
  echo "$p" >> "$PORTS_GIVEN"
  echo "$p"
}
WEIR_PID=
WORK=
cleanup() {
  [ -n "$WEIR_PID" ] && { kill "$WEIR_PID" 2>/dev/null || true; wait "$WEIR_PID" 2>/dev/null || true; }
  [ -n "$WORK" ] && rm -rf "$WORK"
  WEIR_PID= WORK=
}
trap cleanup EXIT

# start_weir NAME ADMIN_PORT: runs weir on WORK/NAME.yaml (log WORK/NAME.log), sets
# STARTED to its pid and waits until it is ready.
start_weir() {
  WEIR_PIPELINE__SHUTDOWN_DELAY=0s ./target/debug/weir --config "$WORK/$1.yaml" > "$WORK/$1.log" 2>&1 &
  STARTED=$!
  for _ in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$2/readyz" > /dev/null && return 0
    sleep 0.1
  done
  echo "weir $1 did not start:" >&2; cat "$WORK/$1.log" >&2; return 1
}

for mode in proto json remotewrite; do
  WORK=$(mktemp -d)
  HTTP_PORT=$(port); GRPC_PORT=$(port); ADMIN_PORT=$(port)
  cat > "$WORK/weir.yaml" <<YAML
receiver:
  http_server: {endpoint: "127.0.0.1:$HTTP_PORT", middlewares: ["logging", "content_decompressor"]}
  grpc_server: {endpoint: "127.0.0.1:$GRPC_PORT", middlewares: ["logging", "content_decompressor"]}
pipeline:
  batch: {timeout: 20ms}
exporters:
  - {type: file, path: "$WORK/data"}
admin: {endpoint: "127.0.0.1:$ADMIN_PORT"}
YAML
  start_weir weir "$ADMIN_PORT"
  WEIR_PID=$STARTED
  case $mode in
    proto) cmd=(target/pyvenv-sdk/bin/python tests/python/sdk_export.py proto "http://127.0.0.1:$GRPC_PORT" "http://127.0.0.1:$HTTP_PORT" "$WORK/data") ;;
    json) cmd=(target/pyvenv-json/bin/python tests/python/sdk_export.py json "http://127.0.0.1:$GRPC_PORT" "http://127.0.0.1:$HTTP_PORT" "$WORK/data") ;;
    remotewrite) cmd=(target/pyvenv-prw/bin/python tests/python/remote_write.py "http://127.0.0.1:$HTTP_PORT" "$WORK/data") ;;
  esac
  if ! "${cmd[@]}"; then
    echo "--- weir log"; cat "$WORK/weir.log"
    exit 1
  fi
  cleanup
done

# Routing by trace ID: the SDK's BatchSpanProcessor through a tier-1 weir (loadbalancing
# exporter over OTLP/gRPC, disk queue) to three tier-2 weirs with the file exporter.
WORK=$(mktemp -d)
TIER2_PIDS=()
stop_tiers() { for p in "${TIER2_PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; }
trap 'stop_tiers; cleanup' EXIT
BACKENDS=() DIRS=()
for i in 0 1 2; do
  H=$(port); G=$(port); A=$(port)
  cat > "$WORK/tier2-$i.yaml" <<YAML
receiver:
  http_server: {endpoint: "127.0.0.1:$H"}
  grpc_server: {endpoint: "127.0.0.1:$G"}
pipeline:
  batch: {timeout: 20ms}
exporters:
  - {type: file, path: "$WORK/data$i"}
admin: {endpoint: "127.0.0.1:$A"}
YAML
  start_weir "tier2-$i" "$A"
  TIER2_PIDS+=("$STARTED")
  BACKENDS+=("\"http://127.0.0.1:$G\"") DIRS+=("$WORK/data$i")
done
HTTP_PORT=$(port); GRPC_PORT=$(port); ADMIN_PORT=$(port)
cat > "$WORK/tier1.yaml" <<YAML
receiver:
  http_server: {endpoint: "127.0.0.1:$HTTP_PORT"}
  grpc_server: {endpoint: "127.0.0.1:$GRPC_PORT"}
pipeline:
  batch: {timeout: 20ms}
  queue:
    disk: {path: "$WORK/queue"}
exporters:
  - type: loadbalancing
    routing_key: trace_id
    protocol: otlp
    compression: none
    resolver: {static: [$(IFS=,; echo "${BACKENDS[*]}")]}
admin: {endpoint: "127.0.0.1:$ADMIN_PORT"}
YAML
start_weir tier1 "$ADMIN_PORT"
WEIR_PID=$STARTED
# loadgen's volume beside the SDK's traces: 4 workers of 32- and 64-span requests (small
# spans of synthetic traces, so the tier-2s' files stay quick to read back).
target/debug/loadgen -url "http://127.0.0.1:$HTTP_PORT/v1/traces" -encoding proto -c 4 -d 3s -phases warmup,burst \
  -warmup-spans 32 -burst-spans 64 > "$WORK/loadgen.out" 2>&1 &
LOADGEN_PID=$!
if ! target/pyvenv-sdk/bin/python tests/python/sdk_routing.py "http://127.0.0.1:$GRPC_PORT" "${DIRS[@]}"; then
  echo "--- tier-1 log"; cat "$WORK/tier1.log"
  exit 1
fi
wait "$LOADGEN_PID" || { echo "loadgen failed:"; cat "$WORK/loadgen.out"; exit 1; }
# Everything tier 1 accepted (SDK and loadgen) reached the tier-2s: nothing stranded.
# (A request loadgen cancelled at a phase's end may still be accepted a moment later, so
# both counts are read again until they agree.)
traces_total() { curl -sf "http://127.0.0.1:$ADMIN_PORT/metrics" | awk -v re="^$1\\{.*signal=\"traces\"" '$0 ~ re {s += $NF} END {printf "%.0f", s}'; }
for _ in $(seq 1 100); do
  accepted=$(traces_total weir_items_accepted_total)
  exported=$(traces_total weir_items_exported_total)
  [ "$exported" -ge "$accepted" ] && break
  sleep 0.2
done
echo "routing with loadgen volume: tier 1 accepted $accepted spans, exported $exported"
# Equal, not just at least: a request whose client hung up while it was written to the
# disk queue is exported, so it must count as accepted too.
[ "$accepted" -gt 20000 ] && [ "$exported" -eq "$accepted" ] || { echo "tier 1 accepted $accepted spans and exported $exported"; exit 1; }

stop_tiers; cleanup

# Kafka: the SDK's traces (gRPC), metrics and logs (HTTP) through the kafka exporter, keyed
# by trace ID, into tansu; kafka-python reads the topics back and checks every item.
TANSU=${TANSU:-$(bash scripts/install-tansu.sh)}
WORK=$(mktemp -d)
KAFKA_PORT=$(port)
"$TANSU" broker --listener-url "tcp://127.0.0.1:$KAFKA_PORT" --advertised-listener-url "tcp://127.0.0.1:$KAFKA_PORT" \
  --storage-engine memory://tansu/ > "$WORK/tansu.log" 2>&1 &
TANSU_PID=$!
trap 'kill $TANSU_PID 2>/dev/null || true; cleanup' EXIT
HTTP_PORT=$(port); GRPC_PORT=$(port); ADMIN_PORT=$(port)
cat > "$WORK/weir.yaml" <<YAML
receiver:
  http_server: {endpoint: "127.0.0.1:$HTTP_PORT"}
  grpc_server: {endpoint: "127.0.0.1:$GRPC_PORT"}
pipeline:
  batch: {timeout: 20ms}
exporters:
  - type: kafka
    brokers: ["127.0.0.1:$KAFKA_PORT"]
    partition_traces_by_id: true
admin: {endpoint: "127.0.0.1:$ADMIN_PORT"}
YAML
start_weir weir "$ADMIN_PORT"
WEIR_PID=$STARTED
if ! target/pyvenv-sdk/bin/python tests/python/sdk_kafka.py "http://127.0.0.1:$GRPC_PORT" "http://127.0.0.1:$HTTP_PORT" "127.0.0.1:$KAFKA_PORT"; then
  echo "--- weir log"; cat "$WORK/weir.log"; echo "--- tansu log"; tail -50 "$WORK/tansu.log"
  exit 1
fi
