#!/usr/bin/env bash
# The seed's A/B/C/D benchmark (0x08) on this machine: weir in a real cgroup with 1 CPU
# and 300 MiB (as the seed's container), exporting over OTLP/gRPC to an unconstrained
# sink weir; loadgen replays warmup / burst / bigpayload.
#
#   A: throttle off, moderate load   B: throttle off, overload
#   C: throttle on,  moderate load   D: throttle on,  overload
#
# Environment: PHASE (length of each loadgen phase, default 40s), C_LOW and C_HIGH (the
# moderate and overload concurrency), EXTRA (more loadgen flags), OUT (results folder,
# default bench/results/<date>), SCENARIOS (a subset, e.g. "B D"; the report needs all four). A weir that dies is restarted (like `restart:
# on-failure`) and counted. Writes OUT/report.md plus one JSON and SVG per scenario.
# CONFIG: weir's config (default config/bench.yaml; its `    enabled: true` line is the
# throttle switch the scenarios flip).
# RATE_LOW and RATE_HIGH (requests/s, both or neither) switch to loadgen's open loop: A and
# C send RATE_LOW, B and D RATE_HIGH, on a fixed schedule with latency measured from it;
# C_HIGH then only bounds the requests in flight (10 x c per phase).
set -euo pipefail
cd "$(dirname "$0")/.."

PHASE=${PHASE:-40s}
# c=2: the largest load this 1-CPU weir takes without refusing in the burst phase (c=3
# already fills its queue). c=512: throttle off is OOM-killed over and over.
C_LOW=${C_LOW:-2}
C_HIGH=${C_HIGH:-512}
# Clients as OTLP exporters behave: a refused request waits for Retry-After (jittered).
# EXTRA="" gives the seed's loop, which retries a refusal at once.
EXTRA=${EXTRA--respect-retry-after}
OUT=${OUT:-bench/results/$(date +%Y-%m-%d)}
RATE_LOW=${RATE_LOW:-}
RATE_HIGH=${RATE_HIGH:-}
if [ -n "$RATE_LOW$RATE_HIGH" ] && { [ -z "$RATE_LOW" ] || [ -z "$RATE_HIGH" ]; }; then
  echo "RATE_LOW and RATE_HIGH go together (open loop), or neither (closed loop)" >&2; exit 2
fi
# PROTOCOL: http (HTTP/1.1, the seed's case), h2c (HTTP/2 without TLS) or grpc (OTLP/gRPC,
# all workers sharing one connection as a tonic channel does).
PROTOCOL=${PROTOCOL:-http}
case $PROTOCOL in
  http) TARGET=(-url http://127.0.0.1:4318/v1/traces) ;;
  h2c) TARGET=(-url http://127.0.0.1:4318/v1/traces -http2) ;;
  grpc) TARGET=(-url http://127.0.0.1:4317 -protocol grpc) ;;
  *) echo "PROTOCOL must be http, h2c or grpc" >&2; exit 2 ;;
esac
CPUS=${CPUS:-1}
MEM=${MEM:-314572800}
# PIN="WEIR_CORES CLIENT_CORES" (e.g. "1 0"): see pin_cores in scripts/lib-bench.sh.
. scripts/lib-bench.sh
pin_cores
mkdir -p "$OUT"
WORK=$(mktemp -d)

# WEIR and LOADGEN name prebuilt binaries (e.g. an older weir for a before/after run);
# without them both are built from this checkout.
if [ -z "${WEIR:-}" ] || [ -z "${LOADGEN:-}" ]; then
  cargo build --release -q -p weir -p loadgen --bins
fi
WEIR=${WEIR:-target/release/weir}
LOADGEN=${LOADGEN:-target/release/loadgen}

cleanup() {
  touch "$WORK/stop"
  pkill -f "$WORK/" 2>/dev/null || true
  stop_pid "${SINK_PID:-}"
  sleep 0.5
  scripts/run-in-cgroup.sh --remove "weir-bench-$$" || true
  rm -rf "$WORK"
}
trap cleanup EXIT

SINK_RUN=("${CLIENT_RUN[@]}")
start_sink "$WORK"

cg_file() { # the cgroup file for a controller
  if [ -f /sys/fs/cgroup/cgroup.controllers ]; then echo "/sys/fs/cgroup/weir-bench-$$/$2";
  else echo "$(awk -v c="$1" '$0 ~ / - cgroup / { n=split($NF, o, ","); for (i=1;i<=n;i++) if (o[i]==c) { print $5; exit } }' /proc/self/mountinfo)/weir-bench-$$/$3"; fi
}

run_scenario() { # name throttle(true|false) concurrency [rate]
  local name=$1 throttle=$2 c=$3 rate=${4:-}
  local load=(-c "$c")
  [ -n "$rate" ] && load=(-c "$C_HIGH" -rate "$rate")
  local cfg="$WORK/weir-$name.yaml"
  sed "s/^    enabled: true$/    enabled: $throttle/" "${CONFIG:-config/bench.yaml}" > "$cfg"
  grep -q "enabled: $throttle" "$cfg"
  rm -f "$WORK/stop"; echo 0 > "$WORK/restarts-$name"
  (
    restarts=0
    while true; do
      scripts/run-in-cgroup.sh "weir-bench-$$" "$CPUS" "$MEM" -- "$WEIR" --config "$cfg" >> "$WORK/weir-$name.log" 2>&1 || true
      [ -f "$WORK/stop" ] && break
      restarts=$((restarts + 1)); echo "$restarts" > "$WORK/restarts-$name"
      sleep 0.5
    done
  ) &
  local sup=$!
  for _ in $(seq 1 100); do curl -sf http://127.0.0.1:8888/readyz > /dev/null && break; sleep 0.1; done
  echo "== $name: throttle=$throttle $PROTOCOL ${load[*]} phases of $PHASE"
  # CPU and memory of the cgroup once a second, whether or not weir's throttle samples,
  # and the whole machine's idle share (percent of all its cores): loadgen and the sink run
  # beside weir, and when 512 clients start at once they leave the machine no idle time.
  (
    prev=""; prev_idle=""; prev_all=""; while [ ! -f "$WORK/stop" ]; do
      read -r idle all < <(awk '$1=="cpu" { print $5 + $6, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' /proc/stat)
      if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
        u=$(awk '$1=="usage_usec" {print $2 * 1000}' "$(cg_file cpu cpu.stat cpu.stat)" 2>/dev/null || echo 0)
        m=$(cat "$(cg_file memory memory.current memory.current)" 2>/dev/null || echo 0)
      else
        u=$(cat "$(cg_file cpuacct x cpuacct.usage)" 2>/dev/null || echo 0)
        m=$(cat "$(cg_file memory x memory.usage_in_bytes)" 2>/dev/null || echo 0)
      fi
      [ -n "$prev" ] && echo "$(( (u - prev) / 10000000 )) $m $(( 100 * (idle - prev_idle) / (all - prev_all > 0 ? all - prev_all : 1) ))"
      prev=$u; prev_idle=$idle; prev_all=$all; sleep 1
    done > "$WORK/cpu-$name.txt"
  ) &
  "${CLIENT_RUN[@]}" "$LOADGEN" "${TARGET[@]}" "${load[@]}" -d "$PHASE" $EXTRA \
    -metrics-url http://127.0.0.1:8888/metrics -json "$OUT/$name.json" -report "$OUT/$name.svg" | tee "$OUT/$name.txt"
  # New connections weir took during the run: clients that keep theirs take one each.
  local conns
  conns=$(curl -s http://127.0.0.1:8888/metrics | awk '/^weir_receiver_connections_accepted_total\{server="(http|grpc)"\}/ { n += $2 } END { print n + 0 }')
  local oom peak
  if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    oom=$(awk '$1=="oom_kill" {print $2}' "$(cg_file memory memory.events memory.events)" 2>/dev/null || echo 0)
    peak=$(cat "$(cg_file memory memory.peak memory.peak)" 2>/dev/null || echo 0)
  else
    oom=$(awk '$1=="oom_kill" {print $2}' "$(cg_file memory x memory.oom_control)" 2>/dev/null || echo 0)
    peak=$(cat "$(cg_file memory x memory.max_usage_in_bytes)" 2>/dev/null || echo 0)
  fi
  # Socket buffers: under v2 they are inside memory.peak already; v1 counts them apart
  # (scripts/run-in-cgroup.sh switches that count on). 0 where neither says.
  local sock_peak=0
  [ -f /sys/fs/cgroup/cgroup.controllers ] || sock_peak=$(cat "$(cg_file memory x memory.kmem.tcp.max_usage_in_bytes)" 2>/dev/null || echo 0)
  touch "$WORK/stop"
  for p in $(cat "$(cg_file memory cgroup.procs cgroup.procs)" 2>/dev/null); do kill "$p" 2>/dev/null || true; done
  wait "$sup" 2>/dev/null || true
  local cpu_peak
  cpu_peak=$(sort -n "$WORK/cpu-$name.txt" | tail -1 | awk '{print $1}')
  # Per second from loadgen's start: weir's CPU (per cent of one core) and memory.
  cp "$WORK/cpu-$name.txt" "$OUT/$name.cpu.txt"
  echo "{\"oom_kills\": ${oom:-0}, \"restarts\": $(cat "$WORK/restarts-$name"), \"peak_mem_bytes\": ${peak:-0}, \"peak_socket_bytes\": ${sock_peak:-0}, \"cpu_peak_pct\": ${cpu_peak:-0}, \"connections_accepted\": ${conns:-0}, \"throttle\": $throttle, \"c\": $c, \"rate\": ${rate:-0}}" > "$OUT/$name.cgroup.json"
  scripts/run-in-cgroup.sh --remove "weir-bench-$$"
  sleep 1
}

SCENARIOS=${SCENARIOS:-A B C D}
for s in $SCENARIOS; do
  case $s in
    A) run_scenario A false "$C_LOW" "$RATE_LOW" ;;
    B) run_scenario B false "$C_HIGH" "$RATE_HIGH" ;;
    C) run_scenario C true "$C_LOW" "$RATE_LOW" ;;
    D) run_scenario D true "$C_HIGH" "$RATE_HIGH" ;;
  esac
done
[ "$SCENARIOS" = "A B C D" ] || exit 0

python3 - "$OUT" "$PHASE" "$C_LOW" "$C_HIGH" "$CPUS" "$MEM" "$EXTRA" "$(git rev-parse --short HEAD)" "$RATE_LOW" "$RATE_HIGH" <<'PY'
import json, sys, os
out, phase, c_low, c_high, cpus, mem, extra, commit, rate_low, rate_high = sys.argv[1:11]
open_loop = bool(rate_low)
client = ("each worker waits for Retry-After / RetryInfo (jittered: up to half again as long) after a refusal, as OTLP exporters do"
          if "respect-retry-after" in extra else "the seed's closed loop: a refused request is retried at once")
rows = []
for name, desc in [("A", "throttle off, moderate"), ("B", "throttle off, overload"), ("C", "throttle on, moderate"), ("D", "throttle on, overload")]:
    d = json.load(open(os.path.join(out, f"{name}.json")))
    cg = json.load(open(os.path.join(out, f"{name}.cgroup.json")))
    ph = d["phases"]
    secs = d["seconds"]
    ok = [s["counts"]["ok"] for s in secs]
    peak_qpm = max((sum(ok[i:i + 60]) * 60 / max(1, len(ok[i:i + 60])) for i in range(max(1, len(ok) - 59))), default=0)
    total = lambda k: sum(p["counts"][k] for p in ph)
    dur = sum(p["duration_s"] for p in ph)
    accepted = sum(p["spans_accepted"] for p in ph)
    rejected_spans = sum(p["spans_sent"] - p["spans_accepted"] for p in ph)
    p99 = max((p["p99_ms"] or 0) for p in ph)
    cpu_peak = cg.get("cpu_peak_pct", 0) / 100.0  # CPU time per wall second / 1 core, from the cgroup
    mem_peak_level = max((m["levels"].get("mem", 0) for m in d["metrics"] if m["levels"].get("mem") == m["levels"].get("mem")), default=0)
    rows.append(dict(name=name, desc=desc, c=(f"{cg['rate']}/s" if cg.get("rate") else f"c={cg['c']}"), peak_qpm=peak_qpm, ok=total("ok"), rejected=total("status_429") + total("status_503"),
                     rejected_spans=rejected_spans, lost=total("transport_errors") + total("other"), accepted_sps=accepted / dur, p99=p99,
                     cpu_peak=cpu_peak, mem_peak=int(cg["peak_mem_bytes"]) / 1048576, mem_level=mem_peak_level, oom=cg["oom_kills"], restarts=cg["restarts"], phases=ph))
lines = [f"# weir A/B/C/D benchmark", "",
         (f"weir ({commit}) in a real cgroup with {cpus} CPU and {int(mem)//1048576} MiB, exporting over OTLP/gRPC to a sink weir; loadgen in open loop (JSON bodies as the seed; "
          f"requests sent on a fixed schedule whatever the answers, latency measured from the scheduled time, refusals not retried; in flight bounded by 10 × c) "
          f"with three phases of {phase} (warmup 128 spans × 128 B, burst 512 × 1 KiB, bigpayload 128 × 4 KiB). Moderate {rate_low} requests/s, overload {rate_high} requests/s (c={c_high})."
          if open_loop else
          f"weir ({commit}) in a real cgroup with {cpus} CPU and {int(mem)//1048576} MiB, exporting over OTLP/gRPC to a sink weir; loadgen (closed loop, JSON bodies as the seed; {client}; flags `{extra}`) "
          f"with three phases of {phase} (warmup c/5 × 128 spans × 128 B, burst c × 512 × 1 KiB, bigpayload c × 128 × 4 KiB). Moderate c={c_low}, overload c={c_high}."), "",
         "| scenario | load | peak QPM | 200s | rejected (429+503) | rejected spans | lost (errors, timeouts) | accepted spans/s | P99 of 200s (worst phase) | CPU peak (cores) | memory peak | OOM kills | restarts |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
for r in rows:
    lines.append(f"| {r['name']}: {r['desc']} | {r['c']} | {r['peak_qpm']:.0f} | {r['ok']} | {r['rejected']} | {r['rejected_spans']} | {r['lost']} | {r['accepted_sps']:.0f} | {r['p99']:.0f} ms | {r['cpu_peak']:.2f} | {r['mem_peak']:.0f} MiB | {r['oom']} | {r['restarts']} |")
lines += ["", "Per phase:", "", "| scenario | phase | c | 200 | 429 | 503 | errors | accepted spans/s | P50 | P99 | max |", "|---|---|---|---|---|---|---|---|---|---|---|"]
for r in rows:
    for p in r["phases"]:
        f = lambda v: "-" if v is None else f"{v:.0f} ms"
        lines.append(f"| {r['name']} | {p['phase']} | {p['concurrency']} | {p['counts']['ok']} | {p['counts']['status_429']} | {p['counts']['status_503']} | {p['counts']['transport_errors'] + p['counts']['other']} | {p['accepted_spans_per_s']:.0f} | {f(p['p50_ms'])} | {f(p['p99_ms'])} | {f(p['max_ms'])} |")
a, d = rows[0], rows[3]
lines += ["", "Checks (issue 5):", "",
          f"- D OOM kills = {d['oom']}, restarts = {d['restarts']} (want 0 and 0)",
          f"- D accepted spans/s = {d['accepted_sps']:.0f} = {100*d['accepted_sps']/max(1,a['accepted_sps']):.1f}% of A's {a['accepted_sps']:.0f} (want ≥ 95%)",
          f"- D P99 = {d['p99']:.0f} ms vs A's {a['p99']:.0f} ms (want D ≤ A)", "",
          "Pictures: " + ", ".join(f"[{n}]({n}.svg)" for n in "ABCD")]
open(os.path.join(out, "report.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
