#!/usr/bin/env bash
# Disk queue benchmark (pipeline.queue.disk): this disk's fsync latency, and replay: a
# backlog of BACKLOG_MB (2048) written while the exporter has nowhere to send, then read
# back by a fresh weir (blackhole exporter, page cache dropped first when the kernel
# allows it): MB/s and peak RSS. Append speed (spans per CPU-second, MB/s) is in
# scripts/bench-throughput.sh. Writes bench/results/<date>/disk-queue.md.
#
#   bash scripts/bench-disk.sh
#   BACKLOG_MB=256 bash scripts/bench-disk.sh
#   SERVER_BIN=/path/to/other/weir OUT=/tmp/before.md bash scripts/bench-disk.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BACKLOG_MB=${BACKLOG_MB:-2048}
DIR=${DIR:-target/bench-disk}
# SERVER_BIN: another weir build to measure (e.g. the one before a change).
SERVER_BIN=${SERVER_BIN:-./target/release/weir}
OUT=${OUT:-bench/results/$(date -u +%F)/disk-queue.md}
command -v h2load > /dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nghttp2-client; }
cargo build -q --release --bin weir --example throughput_bodies
./target/release/examples/throughput_bodies target/throughput/bodies > /dev/null
BODY=target/throughput/bodies/512x10.pb
rm -rf "$DIR" && mkdir -p "$DIR"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2> /dev/null || true; done; wait 2> /dev/null || true; }
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
metric() { curl -sf "http://127.0.0.1:$1/metrics" | awk -v re="$2" '$0 ~ re {s += $NF} END {printf "%.0f\n", s}'; }

echo "== fsync latency (4 KiB append + fdatasync, 2000 times, in $DIR)"
FSYNC=$(python3 - "$DIR" << 'PY'
import os, sys, time
fd = os.open(os.path.join(sys.argv[1], "fsync-probe"), os.O_CREAT | os.O_WRONLY | os.O_TRUNC)
t = []
for _ in range(2000):
    os.write(fd, b"x" * 4096)
    s = time.perf_counter()
    os.fdatasync(fd)
    t.append((time.perf_counter() - s) * 1e6)
t.sort()
print(f"p50 {t[len(t) // 2]:.0f} µs, p99 {t[len(t) * 99 // 100]:.0f} µs, max {t[-1]:.0f} µs")
PY
)
rm -f "$DIR/fsync-probe"
echo "$FSYNC"

# start NAME EXPORTER_YAML: weir on the queue in $DIR/q; sets ${NAME}_{PID,HTTP,ADMIN}.
start() {
  local name=$1 exporter=$2 http grpc admin pid
  http=$(port) grpc=$(port) admin=$(port)
  cat > "$DIR/$name.yaml" << YAML
receiver:
  http_server: {endpoint: "127.0.0.1:$http"}
  grpc_server: {endpoint: "127.0.0.1:$grpc"}
  throttle: {enabled: false}
pipeline:
  shutdown_delay: 0s
  queue:
    disk: {path: "$DIR/q", sync: interval, max_bytes: $(((BACKLOG_MB + 1024) << 20))}
exporters:
  - $exporter
admin: {endpoint: "127.0.0.1:$admin"}
log: {level: warn}
YAML
  "$SERVER_BIN" --config "$DIR/$name.yaml" > "$DIR/$name.log" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  for _ in $(seq 1 200); do curl -sf "http://127.0.0.1:$admin/readyz" > /dev/null && break; sleep 0.05; done
  curl -sf "http://127.0.0.1:$admin/readyz" > /dev/null || { cat "$DIR/$name.log"; exit 1; }
  printf -v "${name}_PID" %s "$pid"
  printf -v "${name}_HTTP" %s "$http"
  printf -v "${name}_ADMIN" %s "$admin"
}

echo "== writing a ${BACKLOG_MB} MiB backlog (the exporter's backend is down)"
start fill '{type: otlphttp, name: out, endpoint: "http://127.0.0.1:9", compression: none}'
N=$(((BACKLOG_MB << 20) / $(stat -c %s "$BODY") + 1))
t0=$(date +%s.%N)
h2load -n "$N" -c 4 -m 16 -d "$BODY" -H content-type:application/x-protobuf "http://127.0.0.1:$fill_HTTP/v1/traces" | grep -E "^(finished|status codes)"
t1=$(date +%s.%N)
BYTES=$(metric "$fill_ADMIN" '^weir_queue_disk_bytes')
SPANS=$(metric "$fill_ADMIN" '^weir_items_accepted_total')
FILL_MBS=$(awk -v b="$BYTES" -v a="$t0" -v z="$t1" 'BEGIN {printf "%.0f", b / (z - a) / 1e6}')
echo "backlog: $BYTES bytes, $SPANS spans, written at $FILL_MBS MB/s (sync: interval)"
kill -TERM "$fill_PID"
wait "$fill_PID" 2> /dev/null || true

sync
COLD="page cache dropped"
echo 3 > /proc/sys/vm/drop_caches 2> /dev/null || COLD="page cache NOT dropped (not permitted here): a warm read"
echo "== replaying ($COLD)"
start replay '{type: blackhole, name: out}'
t0=$(date +%s.%N)
peak=0
while :; do
  lag=$(metric "$replay_ADMIN" '^weir_queue_exporter_lag_records')
  rss=$(awk '/VmRSS/ {print $2}' "/proc/$replay_PID/status")
  [ "$rss" -gt "$peak" ] && peak=$rss
  [ "$lag" -eq 0 ] && [ "$(metric "$replay_ADMIN" '^weir_items_exported_total')" -ge "$SPANS" ] && break
  sleep 0.05
done
t1=$(date +%s.%N)
hwm=$(awk '/VmHWM/ {print $2}' "/proc/$replay_PID/status")
SECS=$(awk -v a="$t0" -v z="$t1" 'BEGIN {printf "%.1f", z - a}')
REPLAY_MBS=$(awk -v b="$BYTES" -v s="$SECS" 'BEGIN {printf "%.0f", b / s / 1e6}')
echo "replayed $BYTES bytes in $SECS s: $REPLAY_MBS MB/s, peak RSS $((hwm / 1024)) MiB"

mkdir -p "$(dirname "$OUT")"
{
  echo "# Disk queue, $(date -u +%F)"
  echo
  echo "\`bash scripts/bench-disk.sh\` (BACKLOG_MB=$BACKLOG_MB) at $(git rev-parse --short HEAD), release build, in $DIR ($(df -T "$DIR" | awk 'NR == 2 {print $2 " on " $1}'))."
  echo "Machine: $(nproc) CPUs, $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)."
  echo
  echo "| what | result |"
  echo "|---|---|"
  echo "| fsync latency of this disk (4 KiB append + fdatasync) | $FSYNC |"
  echo "| backlog written (512x10 h2c, 4 x 16 streams, sync: interval, exporter down) | $((BYTES >> 20)) MiB, $SPANS spans, $FILL_MBS MB/s |"
  echo "| replay to a blackhole exporter ($COLD) | $SECS s, $REPLAY_MBS MB/s |"
  echo "| peak RSS while replaying | $((hwm / 1024)) MiB (pipeline.queue.max_bytes 64 MiB of read-ahead) |"
} > "$OUT"
cat "$OUT"
