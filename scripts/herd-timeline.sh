#!/usr/bin/env bash
# Where the CPU goes when 512 clients start a phase at once: weir (throttle on) in a real
# cgroup with 1 CPU and 300 MiB, loadgen's warmup then burst phase with clients that
# retry a refusal at once, and every 100 ms the CPU (in cores) of loadgen, weir and the
# sink weir, and the whole machine's idle cores. A phase's first second is where the
# storm report's whole-phase P99 comes from; this shows who has the CPU then.
#
# Environment: PHASE (default 5s), C (default 512), PHASES (loadgen's, default
# warmup,burst; every phase after the first is shown), OUT (default
# bench/results/<date>/herd), WEIR and LOADGEN (prebuilt binaries). Needs root.
# PIN="WEIR_CORES CLIENT_CORES" (e.g. "1 0") gives weir's cgroup WEIR_CORES to itself and
# runs loadgen and the sink on CLIENT_CORES, as `scripts/bench-scenarios.sh` does; the
# `client_kernel` column is then the kernel's share (system, irq, softirq) of the client
# cores, where loopback TCP sends are processed, and `client_idle` their idle cores.
# Writes OUT/timeline.txt (t since loadgen started, loadgen, weir, sink, idle, client_kernel,
# client_idle),
# OUT/loadgen.json and OUT/weir-histograms.txt (weir's request duration and queue delay
# over the run), and prints the timeline around the phase change.
set -euo pipefail
cd "$(dirname "$0")/.."

PHASE=${PHASE:-5s}
C=${C:-512}
PHASES=${PHASES:-warmup,burst}
. scripts/lib-bench.sh
pin_cores
OUT=${OUT:-bench/results/$(date +%Y-%m-%d)/herd}
mkdir -p "$OUT"
if [ -z "${WEIR:-}" ] || [ -z "${LOADGEN:-}" ]; then
  cargo build --release -q -p weir -p loadgen --bins
fi
WEIR=${WEIR:-target/release/weir}
LOADGEN=${LOADGEN:-target/release/loadgen}
WORK=$(mktemp -d)
CG="weir-herd-$$"

cleanup() {
  touch "$WORK/stop"
  stop_pid "${WEIR_PID:-}"
  stop_pid "${SINK_PID:-}"
  sleep 0.5
  scripts/run-in-cgroup.sh --remove "$CG" || true
  rm -rf "$WORK"
}
trap cleanup EXIT

SINK_RUN=("${CLIENT_RUN[@]}")
start_sink "$WORK"
scripts/run-in-cgroup.sh "$CG" 1 314572800 -- "$WEIR" --config config/bench.yaml > "$WORK/weir.log" 2>&1 &
WEIR_PID=$!
wait_ready http://127.0.0.1:8888/readyz "$WORK/weir.log" weir

"${CLIENT_RUN[@]}" "$LOADGEN" -url http://127.0.0.1:4318/v1/traces -c "$C" -d "$PHASE" -phases "$PHASES" \
  -json "$OUT/loadgen.json" > "$OUT/loadgen.txt" &
LG_PID=$!
# utime + stime of a process (clock ticks, all threads), the machine's idle ticks.
python3 - "$LG_PID" "$WEIR_PID" "$SINK_PID" "$OUT/timeline.txt" "$CLIENT_CORES" <<'PY'
import os, sys, time
pids, out = [int(p) for p in sys.argv[1:4]], sys.argv[4]
hz = os.sysconf("SC_CLK_TCK")
def core_set(spec):  # "0", "0,2", "0-1": the client cores; empty: every core
    out = set()
    for part in filter(None, spec.split(",")):
        a, _, b = part.partition("-")
        out.update(range(int(a), int(b or a) + 1))
    return out
client = core_set(sys.argv[5])
def machine():  # idle ticks of the machine; kernel (system + irq + softirq) and idle ticks of the client cores
    all_idle = k = i = 0
    for l in open("/proc/stat"):
        f = l.split()
        if f[0] == "cpu":
            all_idle = int(f[4]) + int(f[5])
        elif f[0].startswith("cpu") and (not client or int(f[0][3:]) in client):
            k += int(f[3]) + int(f[6]) + int(f[7])
            i += int(f[4]) + int(f[5])
    return [all_idle, k, i]
def ticks(pid):
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return int(f[11]) + int(f[12])
    except (FileNotFoundError, ProcessLookupError):
        return None
start = time.monotonic()
prev = [ticks(p) for p in pids] + machine()
rows = []
while ticks(pids[0]) is not None:
    time.sleep(0.1)
    now = [ticks(p) for p in pids] + machine()
    t = time.monotonic() - start
    dt = 0.1 if not rows else t - rows[-1][0]
    cores = [(n - p) / hz / dt if n is not None and p is not None else 0.0 for n, p in zip(now, prev)]
    rows.append((t, *cores))
    prev = now
with open(out, "w") as f:
    f.write("# t_s loadgen weir sink idle client_kernel client_idle (cores)\n")
    for r in rows:
        f.write(" ".join(f"{x:.2f}" for x in r) + "\n")
PY
wait "$LG_PID" || true
cat "$OUT/loadgen.txt"
# weir's own view of every request: time in weir, and the wait in the kernel in front of it.
curl -sf http://127.0.0.1:8888/metrics | grep -E '^weir_(receiver_request_duration|throttle_queue_delay)_seconds_bucket\{protocol="http"(,signal="traces")?,le=' \
  > "$OUT/weir-histograms.txt" || true
secs=${PHASE%s}
python3 - "$OUT/timeline.txt" "$secs" "$OUT/loadgen.json" "$OUT/weir-histograms.txt" "$PHASES" <<'PY'
import json, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1]) if not l.startswith("#")]
phase = float(sys.argv[2])
names = sys.argv[5].split(",")
seconds = json.load(open(sys.argv[3]))["seconds"]
for k, name in enumerate(names[1:], start=1):
    start = k * phase
    print(f"around the {name} phase's start (t = {start:.0f} s), cores:")
    print("   t    loadgen  weir  sink  idle  client_kernel  client_idle")
    for r in rows:
        if start - 0.5 <= r[0] <= start + 2.5:
            print(f"  {r[0]:5.1f}  {r[1]:5.2f}  {r[2]:5.2f}  {r[3]:5.2f}  {r[4]:5.2f}  {r[5]:5.2f}  {r[6]:5.2f}")
    for s in seconds:
        if s["phase"] == name:
            print(f"  {name} second {s['t']}: ok {s['counts']['ok']}, refused {s['counts']['status_429'] + s['counts']['status_503']}, P99 {s['p99_ms'] or 0:.0f} ms")
import re
last = {}
for l in open(sys.argv[4]):
    m = re.match(r'(weir_\w+)_bucket\{.*le="([^"]+)"\} (\d+)', l)
    if m:
        last.setdefault(m.group(1), []).append((m.group(2), int(m.group(3))))
for name, buckets in last.items():
    total = buckets[-1][1]
    le = next((b for b, n in buckets if n == total), "+Inf")
    print(f"  {name}: all {total} requests at or under {le} s")
PY
