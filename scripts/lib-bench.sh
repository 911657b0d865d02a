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
