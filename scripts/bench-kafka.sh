#!/usr/bin/env bash
# What Kafka costs: spans per weir CPU-second with the `kafka` exporter into a
# Kafka-compatible broker (tansu, in memory), against the `otlp` exporter to a blackhole
# sink, run by run interleaved. Three kafka tiers: the defaults (the received bytes, no
# compression), partition_traces_by_id (one message per trace), and zstd. The tiers
# (release build) are pinned to SERVER_CORE; h2load, the sink and tansu to LOAD_CORE.
# 512x10 bodies whose spans belong to 64 traces. CPU counted: the tier's utime+stime from
# the first request until every span it accepted was acknowledged by the broker (or the
# sink). Writes bench/results/<date>/kafka.md.
#
#   bash scripts/bench-kafka.sh
#   RUNS=5 REQUESTS=1000 bash scripts/bench-kafka.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib-bench.sh
RUNS=${RUNS:-3}
REQUESTS=${REQUESTS:-1000}
SERVER_CORE=${SERVER_CORE:-0}
LOAD_CORE=${LOAD_CORE:-1}
OUT=${OUT:-bench/results/$(date -u +%F)/kafka.md}
CLK_TCK=$(getconf CLK_TCK)
command -v h2load > /dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nghttp2-client; }
TANSU=${TANSU:-$(bash scripts/install-tansu.sh)}
cargo build -q --release --bin weir --example throughput_bodies
./target/release/examples/throughput_bodies target/throughput/bodies > /dev/null
BODY=target/throughput/bodies/512x10-64traces.pb
WEIR=./target/release/weir
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2> /dev/null || true; done; wait 2> /dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

KAFKA=$(port)
taskset -c "$LOAD_CORE" "$TANSU" broker --listener-url "tcp://127.0.0.1:$KAFKA" --advertised-listener-url "tcp://127.0.0.1:$KAFKA" \
  --storage-engine memory://tansu/ > "$WORK/tansu.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 100); do (exec 3<> "/dev/tcp/127.0.0.1/$KAFKA") 2> /dev/null && break; sleep 0.1; done
for t in plain keyed zstd; do "$TANSU" topic create "spans_$t" --partitions 4 --broker "tcp://127.0.0.1:$KAFKA" > /dev/null; done

kafka() { # kafka TOPIC EXTRA_YAML
  printf '  - type: kafka\n    brokers: ["127.0.0.1:%s"]\n    traces: {topic: %s}\n%s' "$KAFKA" "$1" "$2"
}
start_tier sink "$LOAD_CORE" "  - {type: blackhole}"
start_tier otlp "$SERVER_CORE" "  - {type: otlp, endpoint: \"http://127.0.0.1:$sink_GRPC\", compression: none}"
start_tier kplain "$SERVER_CORE" "$(kafka spans_plain "")"
start_tier kkeyed "$SERVER_CORE" "$(kafka spans_keyed "    partition_traces_by_id: true")"
start_tier kzstd "$SERVER_CORE" "$(kafka spans_zstd "    producer: {compression: zstd}")"

TIERS=(otlp kplain kkeyed kzstd)
declare -A RESULTS
for t in "${TIERS[@]}"; do run_tier "$t" > /dev/null; done
for r in $(seq 1 "$RUNS"); do
  line="run $r:"
  for t in "${TIERS[@]}"; do
    read -r acc cpu <<< "$(run_tier "$t")"
    v=$(awk -v a="$acc" -v c="$cpu" 'BEGIN {printf "%.0f", a / c}')
    RESULTS[$t]="${RESULTS[$t]:-} $v"
    line="$line $t $v"
  done
  echo "$line spans per CPU-second"
done
p50() { median ${RESULTS[$1]}; }
ratios() { # ratios TIER: TIER / otlp, run by run
  local -a a b; read -ra a <<< "${RESULTS[otlp]}"; read -ra b <<< "${RESULTS[$1]}"
  for i in "${!a[@]}"; do awk -v p="${a[$i]}" -v q="${b[$i]}" 'BEGIN {printf "%.0f%% ", q / p * 100}'; done
}
# Produce to acknowledgement, from the histogram: the mean, and the bucket that holds the 99th percentile.
produce=$(curl -sf "http://127.0.0.1:$kplain_ADMIN/metrics" | awk '
  /^weir_kafka_produce_duration_seconds_sum/ {sum = $NF}
  /^weir_kafka_produce_duration_seconds_count/ {n = $NF}
  /^weir_kafka_produce_duration_seconds_bucket/ {match($0, /le="[^"]*"/); le[++k] = substr($0, RSTART + 4, RLENGTH - 5); c[k] = $NF}
  END {for (i = 1; i <= k; i++) if (c[i] >= 0.99 * n) {p99 = le[i]; break}; printf "mean %.1f ms over %d messages, p99 at most %s s", sum / n * 1000, n, p99}')
mkdir -p "$(dirname "$OUT")"
{
  echo "# Kafka out, $(date -u +%F)"
  echo
  echo "\`bash scripts/bench-kafka.sh\` (RUNS=$RUNS, REQUESTS=$REQUESTS of 512x10 spans of 64 traces, h2c, 4 connections x 16 streams) at $(git rev-parse --short HEAD)."
  echo "Each weir (release) pinned to CPU $SERVER_CORE; h2load, a blackhole sink weir and tansu (in memory, 4 partitions a topic) on CPU $LOAD_CORE."
  echo "Spans per weir CPU-second, CPU counted until every accepted span was acknowledged. Machine: $(nproc) CPUs, $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)."
  echo
  echo "| exporter | spans per CPU-second, every run | median | of otlp, every run |"
  echo "|---|---|---|---|"
  echo "| otlp to a sink | ${RESULTS[otlp]} | $(p50 otlp) | |"
  echo "| kafka, defaults (received bytes, no compression) | ${RESULTS[kplain]} | $(p50 kplain) | $(ratios kplain)|"
  echo "| kafka, partition_traces_by_id | ${RESULTS[kkeyed]} | $(p50 kkeyed) | $(ratios kkeyed)|"
  echo "| kafka, zstd | ${RESULTS[kzstd]} | $(p50 kzstd) | $(ratios kzstd)|"
  echo
  echo "Produce to acknowledgement (defaults tier, all runs): $produce."
} > "$OUT"
cat "$OUT"
