#!/usr/bin/env bash
# What routing by trace ID costs: spans per tier-1 CPU-second with the `loadbalancing`
# exporter to three sinks, against the plain `otlp` exporter to one sink, run by run
# interleaved. Tier 1 (release build) is pinned to SERVER_CORE, h2load and the sinks to
# LOAD_CORE; 512x10 bodies whose spans belong to 64 traces, so every batch is split
# three ways. CPU counted: tier 1's utime+stime from the first request until every span
# it accepted has been exported. Writes bench/results/<date>/routing.md.
#
#   bash scripts/bench-routing.sh
#   RUNS=5 REQUESTS=3000 bash scripts/bench-routing.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib-bench.sh
RUNS=${RUNS:-3}
REQUESTS=${REQUESTS:-2000}
SERVER_CORE=${SERVER_CORE:-0}
LOAD_CORE=${LOAD_CORE:-1}
OUT=${OUT:-bench/results/$(date -u +%F)/routing.md}
CLK_TCK=$(getconf CLK_TCK)
command -v h2load > /dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nghttp2-client; }
cargo build -q --release --bin weir --example throughput_bodies
./target/release/examples/throughput_bodies target/throughput/bodies > /dev/null
BODY=target/throughput/bodies/512x10-64traces.pb
WEIR=./target/release/weir
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2> /dev/null || true; done; wait 2> /dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
metric() { curl -sf "http://127.0.0.1:$1/metrics" | awk -v re="$2" '$0 ~ re {s += $NF} END {printf "%.0f\n", s}'; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# start NAME CORE EXPORTERS_YAML: a weir; sets NAME_{PID,HTTP,GRPC,ADMIN}.
start() {
  local name=$1 core=$2 exporters=$3 http grpc admin
  http=$(port) grpc=$(port) admin=$(port)
  cat > "$WORK/$name.yaml" << YAML
receiver:
  http_server: {endpoint: "127.0.0.1:$http"}
  grpc_server: {endpoint: "127.0.0.1:$grpc"}
  throttle: {enabled: false}
pipeline:
  # Room for a whole run: the sinks share a core with h2load, so export lags the load,
  # and a refusal would count CPU for spans not accepted.
  queue: {max_bytes: 1073741824}
exporters:
$exporters
admin: {endpoint: "127.0.0.1:$admin"}
log: {level: warn}
YAML
  taskset -c "$core" "$WEIR" --config "$WORK/$name.yaml" > "$WORK/$name.log" 2>&1 &
  PIDS+=($!)
  printf -v "${name}_PID" %s "$!"
  printf -v "${name}_HTTP" %s "$http"
  printf -v "${name}_GRPC" %s "$grpc"
  printf -v "${name}_ADMIN" %s "$admin"
  wait_ready "http://127.0.0.1:$admin/readyz" "$WORK/$name.log" "$name"
}

for i in 0 1 2; do start "sink$i" "$LOAD_CORE" "  - {type: blackhole}"; done
start plain "$SERVER_CORE" "  - {type: otlp, endpoint: \"http://127.0.0.1:$sink0_GRPC\", compression: none}"
start routed "$SERVER_CORE" "  - type: loadbalancing
    compression: none
    resolver: {static: [\"http://127.0.0.1:$sink0_GRPC\", \"http://127.0.0.1:$sink1_GRPC\", \"http://127.0.0.1:$sink2_GRPC\"]}"

# run NAME -> "spans CPU-seconds": REQUESTS requests, then until all are exported.
run() {
  local name=$1 pid admin http t0 t1 acc sent
  eval "pid=\$${name}_PID admin=\$${name}_ADMIN http=\$${name}_HTTP"
  local e0 a0
  a0=$(metric "$admin" '^weir_items_accepted_total')
  e0=$(metric "$admin" '^weir_items_exported_total')
  t0=$(cpu_ticks "$pid")
  taskset -c "$LOAD_CORE" h2load -n "$REQUESTS" -c 4 -m 16 -d "$BODY" -H 'content-type: application/x-protobuf' \
    "http://127.0.0.1:$http/v1/traces" > "$WORK/h2load.out" 2>&1
  acc=$(($(metric "$admin" '^weir_items_accepted_total') - a0))
  for _ in $(seq 1 1200); do
    sent=$(($(metric "$admin" '^weir_items_exported_total') - e0))
    [ "$sent" -ge "$acc" ] && break
    sleep 0.05
  done
  t1=$(cpu_ticks "$pid")
  [ "$acc" -eq $((REQUESTS * 512)) ] || { echo "$name accepted $acc of $((REQUESTS * 512)) spans" >&2; cat "$WORK/h2load.out" >&2; exit 1; }
  [ "$sent" -ge "$acc" ] || { echo "$name exported $sent of $acc spans" >&2; tail "$WORK/$name.log" >&2; exit 1; }
  echo "$acc $(awk -v t=$((t1 - t0)) -v hz="$CLK_TCK" 'BEGIN {printf "%.3f", t / hz}')"
}

run plain > /dev/null
run routed > /dev/null
plain=() routed=() ratios=()
for r in $(seq 1 "$RUNS"); do
  read -r pa pc <<< "$(run plain)"
  read -r ra rc <<< "$(run routed)"
  p=$(awk -v a="$pa" -v c="$pc" 'BEGIN {printf "%.0f", a / c}')
  q=$(awk -v a="$ra" -v c="$rc" 'BEGIN {printf "%.0f", a / c}')
  plain+=("$p") routed+=("$q") ratios+=("$(awk -v p="$p" -v q="$q" 'BEGIN {printf "%.0f%%", q / p * 100}')")
  echo "run $r: otlp to one sink $p spans per CPU-second, loadbalancing to three $q (${ratios[-1]})"
done
split=$(curl -sf "http://127.0.0.1:$routed_ADMIN/metrics" | awk '/^weir_loadbalancing_items_total/ {match($0, /backend="[^"]*"/); b = substr($0, RSTART + 9, RLENGTH - 10); printf "%s%s %s", sep, b, $NF; sep = ", "}')
mkdir -p "$(dirname "$OUT")"
{
  echo "# Routing by trace ID, $(date -u +%F)"
  echo
  echo "\`bash scripts/bench-routing.sh\` (RUNS=$RUNS, REQUESTS=$REQUESTS of 512x10, h2c, 4 connections x 16 streams) at $(git rev-parse --short HEAD)."
  echo "Tier 1 (release) pinned to CPU $SERVER_CORE; h2load and three blackhole sinks on CPU $LOAD_CORE. Spans per tier-1 CPU-second, CPU counted until every accepted span was exported."
  echo "Machine: $(nproc) CPUs, $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)."
  echo
  echo "| exporter | spans per CPU-second, every run | median |"
  echo "|---|---|---|"
  echo "| otlp to one sink | ${plain[*]} | $(printf '%s\n' "${plain[@]}" | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}') |"
  echo "| loadbalancing (trace_id) to three sinks | ${routed[*]} | $(printf '%s\n' "${routed[@]}" | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}') |"
  echo
  echo "loadbalancing / otlp, every run: ${ratios[*]}. Spans the routed tier 1 delivered over all runs (warm-up included), by backend: $split."
} > "$OUT"
cat "$OUT"
