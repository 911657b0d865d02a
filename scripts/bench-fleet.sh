#!/usr/bin/env bash
# What a fleet's shared quotas cost Redis (receiver.auth.quota_store): three release weirs
# with one tenant's quota shared through a real redis-server, flooded by h2load with that
# tenant's token, as fast as one core allows. Prints requests per second across the
# fleet next to Redis commands per second (INFO commandstats): the sync is one script
# call per replica and interval, so the second number stays flat however high the first.
#
#   bash scripts/bench-fleet.sh                 # REQUESTS (200000), SYNC (200ms)
set -euo pipefail
cd "$(dirname "$0")/.."
REQUESTS=${REQUESTS:-200000}
SYNC=${SYNC:-200ms}
command -v redis-server > /dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server; }
command -v h2load > /dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nghttp2-client; }
cargo build -q --release --bin weir
WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2> /dev/null || true; done
  wait 2> /dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

RPORT=$(port)
redis-server --port "$RPORT" --bind 127.0.0.1 --save "" --appendonly no > "$WORK/redis.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 50); do redis-cli -p "$RPORT" ping > /dev/null 2>&1 && break; sleep 0.1; done
HTTP=()
for i in 0 1 2; do
  http=$(port) grpc=$(port) admin=$(port)
  cat > "$WORK/r$i.yaml" << YAML
receiver:
  http_server: {endpoint: "127.0.0.1:$http"}
  grpc_server: {endpoint: "127.0.0.1:$grpc"}
  auth:
    tenants:
      acme: {tokens: [bench-token], rate: {requests_per_second: 1000, burst: 100}}
    quota_store: {type: redis, url: "redis://127.0.0.1:$RPORT/0", sync_interval: $SYNC}
  throttle: {enabled: false}
exporters: [{type: blackhole}]
admin: {endpoint: "127.0.0.1:$admin"}
log: {level: warn}
YAML
  taskset -c 0 ./target/release/weir --config "$WORK/r$i.yaml" > "$WORK/r$i.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$admin/readyz" > /dev/null && break; sleep 0.1; done
  HTTP+=("$http")
done
printf '\x0a\x00' > "$WORK/tiny.pb"
sleep 1
# calls TOTAL|EVALSHA -> commands Redis executed so far: all of them (those a script runs
# count one each), or the script calls alone (one network round trip each).
calls() { redis-cli -p "$RPORT" info commandstats | awk -F'[=,:]' -v only="$1" '/^cmdstat_/ && (only == "TOTAL" || $1 == "cmdstat_evalsha") {s += $3} END {print s + 0}'; }
before=$(calls TOTAL) before_eval=$(calls EVALSHA)
t0=$(date +%s.%N)
# One h2load per replica, in parallel, split 80/15/5.
shares=(80 15 5)
for i in 0 1 2; do
  n=$((REQUESTS * shares[i] / 100))
  taskset -c 1 h2load -n "$n" -c 4 -m 16 -d "$WORK/tiny.pb" -H content-type:application/x-protobuf -H x-bk-token:bench-token \
    "http://127.0.0.1:${HTTP[$i]}/v1/traces" > "$WORK/h2load$i.txt" 2>&1 &
  LOADS[i]=$!
done
wait "${LOADS[@]}"
t1=$(date +%s.%N)
after=$(calls TOTAL) after_eval=$(calls EVALSHA)
ok=$(cat "$WORK"/h2load*.txt | awk '/^status codes:/ {s += $3} END {print s}')
refused=$(cat "$WORK"/h2load*.txt | awk '/^status codes:/ {gsub(",", ""); s += $7} END {print s}')
awk -v n="$REQUESTS" -v ok="$ok" -v r="$refused" -v c=$((after - before)) -v e=$((after_eval - before_eval)) -v t0="$t0" -v t1="$t1" -v sync="$SYNC" 'BEGIN {
  s = t1 - t0
  printf "fleet of 3, sync_interval %s: %d requests in %.1f s (%.0f/s; %d admitted = %.0f/s against a quota of 1000/s, %d refused)\n", sync, n, s, n / s, ok, ok / s, r
  printf "Redis: %d script calls (%.1f/s: one per replica and interval), %d commands executed in all (%.1f/s, %.5f per request)\n", e, e / s, c, c / s, c / n
}'
