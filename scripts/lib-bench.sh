# Shared by the benchmark scripts (source it from the checkout's root).

# wait_ready URL LOG WHAT: waits up to 10 s for URL to answer; otherwise prints LOG and
# fails, naming WHAT.
wait_ready() {
  for _ in $(seq 1 100); do curl -sf "$1" > /dev/null && return 0; sleep 0.1; done
  echo "$3 did not start:" >&2; cat "$2" >&2; return 1
}

# start_sink WORK: starts the unconstrained sink weir ($WEIR, config/sink.yaml), logging
# to WORK/sink.log, sets SINK_PID and waits until it is ready. A sink that did not start
# (a port still taken) would turn every export into a retry and every phase into
# queue_full, so this fails instead. SINK_RUN, an array, is a command to run it under
# (e.g. taskset).
start_sink() {
  "${SINK_RUN[@]}" "$WEIR" --config config/sink.yaml > "$1/sink.log" 2>&1 &
  SINK_PID=$!
  wait_ready http://127.0.0.1:18888/readyz "$1/sink.log" "the sink weir"
}

# pin_cores: reads PIN="WEIR_CORES CLIENT_CORES" (e.g. "1 0"). Set, weir's cgroup gets
# WEIR_CORES to itself (CPUSET, for run-in-cgroup.sh) and CLIENT_RUN, an array, runs
# loadgen and the sink on CLIENT_CORES, as when the clients are other machines. Unset,
# CLIENT_RUN is empty and everything shares every core: 512 clients starting at once then
# take CPU that weir's quota would otherwise have had.
pin_cores() {
  CLIENT_RUN=()
  CLIENT_CORES=""
  [ -n "${PIN:-}" ] || return 0
  read -r WEIR_CORES CLIENT_CORES <<< "$PIN"
  [ -n "${CLIENT_CORES:-}" ] || { echo "PIN is \"WEIR_CORES CLIENT_CORES\", e.g. \"1 0\"" >&2; exit 2; }
  CLIENT_RUN=(taskset -c "$CLIENT_CORES")
  export CPUSET=$WEIR_CORES
}

# stop_pid PID: stops a process and waits for it (the next run binds the same ports).
stop_pid() {
  [ -n "${1:-}" ] && { kill "$1" 2>/dev/null; wait "$1" 2>/dev/null; } || true
}

# The exporter benchmarks (bench-routing.sh, bench-kafka.sh): tiers started by start_tier
# and driven by run_tier with h2load. They need WORK, WEIR, PIDS (an array), REQUESTS,
# BODY (a 512-span request), LOAD_CORE and CLK_TCK.
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
metric() { curl -sf "http://127.0.0.1:$1/metrics" | awk -v re="$2" '$0 ~ re {s += $NF} END {printf "%.0f\n", s}'; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

# start_tier NAME CORE EXPORTERS_YAML: a weir pinned to CORE; sets NAME_{PID,HTTP,GRPC,ADMIN}.
start_tier() {
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

# run_tier NAME -> "spans CPU-seconds": REQUESTS requests of BODY over h2c (4 connections
# x 16 streams), then until every accepted span is exported; CPU is NAME's utime+stime.
run_tier() {
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
