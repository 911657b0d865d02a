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
WEIR=${WEIR:-./target/release/weir}
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2> /dev/null || true; done; wait 2> /dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT
for i in 0 1 2; do start_tier "sink$i" "$LOAD_CORE" "  - {type: blackhole}"; done
start_tier plain "$SERVER_CORE" "  - {type: otlp, endpoint: \"http://127.0.0.1:$sink0_GRPC\", compression: none}"
start_tier routed "$SERVER_CORE" "  - type: loadbalancing
    compression: none
    resolver: {static: [\"http://127.0.0.1:$sink0_GRPC\", \"http://127.0.0.1:$sink1_GRPC\", \"http://127.0.0.1:$sink2_GRPC\"]}"

run_tier plain > /dev/null
run_tier routed > /dev/null
plain=() routed=() ratios=()
for r in $(seq 1 "$RUNS"); do
  read -r pa pc <<< "$(run_tier plain)"
  read -r ra rc <<< "$(run_tier routed)"
  p=$(awk -v a="$pa" -v c="$pc" 'BEGIN {printf "%.0f", a / c}')
  q=$(awk -v a="$ra" -v c="$rc" 'BEGIN {printf "%.0f", a / c}')
  plain+=("$p") routed+=("$q") ratios+=("$(awk -v p="$p" -v q="$q" 'BEGIN {printf "%.0f%%", q / p * 100}')")
  echo "run $r: otlp to one sink $p spans per CPU-second, loadbalancing to three $q (${ratios[-1]})"
done
split=$(curl -sf "http://127.0.0.1:$routed_ADMIN/metrics" | awk '/^weir_loadbalancing_items_total/ {match($0, /backend="[^"]*"/); b = substr($0, RSTART + 9, RLENGTH - 10); printf "%s%s %s", sep, b, $NF; sep = ", "}')
# Requests to the backends against the plain tier's requests to its sink: the spans each carried.
per_request() { curl -sf "http://127.0.0.1:$1/metrics" | awk -v re="$2" '$0 ~ re && /outcome="sent"/ {n += $NF} END {printf "%d requests", n}'; }
routed_requests=$(per_request "$routed_ADMIN" '^weir_exporter_requests_total\{exporter="loadbalancing/')
plain_requests=$(per_request "$plain_ADMIN" '^weir_exporter_requests_total\{exporter="otlp"')
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
  echo "| otlp to one sink | ${plain[*]} | $(median "${plain[@]}") |"
  echo "| loadbalancing (trace_id) to three sinks | ${routed[*]} | $(median "${routed[@]}") |"
  echo
  echo "loadbalancing / otlp, every run: ${ratios[*]}. Spans the routed tier 1 delivered over all runs (warm-up included), by backend: $split. Requests sent over all runs: loadbalancing to its backends $routed_requests, otlp to its sink $plain_requests."
} > "$OUT"
cat "$OUT"
