#!/usr/bin/env bash
# Goodput under refusal storms: A (throttle off, c=2, the capacity a calm client mix
# gets) against D (throttle on, c=512), for every protocol, with clients that retry a
# refusal at once and with clients that honour Retry-After, plus the open loop at 10x
# A's rate, in a 1 CPU / 300 MiB and a 0.5 CPU / 150 MiB cgroup. weir runs
# config/weir.yaml as shipped, with only its exporter swapped for the sink. Each pair is
# one run of scripts/bench-scenarios.sh; this script writes OUT/<size>/storm.md with
# D / A per phase, every pass's figures, and how many passes met the goal.
#
# Environment: SIZES (default "1:300 0.5:150", CPUs:MiB), CONFIG (default: the shipped
# config with the sink as exporter; config/bench.yaml or any file instead),
# PHASE (default 8s), OUT (default bench/results/<date>/storm), RUNS (a
# subset of: http-once h2c-once grpc-once http-respect open-loop), WEIR and LOADGEN
# (prebuilt binaries, e.g. an older weir for a before/after run), LABEL (what the report
# calls the weir measured; default the checkout's commit), PASSES (default 1: how many
# times each pair runs; with more, the report gives the median of each figure and the
# range of D / A, since single runs on a small shared machine move by a fifth), PIN (see
# scripts/bench-scenarios.sh: weir's core and the clients' core). About 10 minutes per pass.
set -euo pipefail
cd "$(dirname "$0")/.."

PHASE=${PHASE:-8s}
OUT=${OUT:-bench/results/$(date +%Y-%m-%d)/storm}
RUNS=${RUNS:-http-once h2c-once grpc-once http-respect open-loop}
PASSES=${PASSES:-1}
mkdir -p "$OUT"
if [ -z "${WEIR:-}" ] || [ -z "${LOADGEN:-}" ]; then
  cargo build --release -q -p weir -p loadgen --bins
fi
export WEIR=${WEIR:-target/release/weir} LOADGEN=${LOADGEN:-target/release/loadgen} PHASE
SIZES=${SIZES:-1:300 0.5:150}
ROOT_OUT=$OUT
if [ -z "${CONFIG:-}" ]; then
  # The shipped config, its exporter swapped for the sink (nothing else changed).
  CONFIG="$ROOT_OUT/weir-shipped.yaml"
  python3 - config/weir.yaml "$CONFIG" <<'PY'
import sys
text = open(sys.argv[1]).read()
head, tail = text.split("\nexporters:\n", 1)
rest = tail.split("\n\n", 1)[1] if "\n\n" in tail else ""
sink = "\nexporters:\n  - type: otlp\n    endpoint: \"http://127.0.0.1:14317\"\n    compression: none\n\n"
open(sys.argv[2], "w").write(head + sink + rest)
PY
fi
export CONFIG
for size in $SIZES; do
export CPUS=${size%%:*} MEM=$(( ${size##*:} * 1048576 ))
OUT="$ROOT_OUT/${CPUS}cpu-${size##*:}mib"
mkdir -p "$OUT"

# SUMMARY_ONLY=1: only write storm.md from the runs already in OUT.
for pass in $(seq 1 "$PASSES"); do
for run in $([ -n "${SUMMARY_ONLY:-}" ] || echo "$RUNS"); do
  # One pass writes OUT/<run>/, several OUT/<run>/pass-<n>/.
  dir="$OUT/$run"; [ "$PASSES" -gt 1 ] && dir="$OUT/$run/pass-$pass"
  case $run in
    http-once) PROTOCOL=http EXTRA="" ;;
    h2c-once) PROTOCOL=h2c EXTRA="" ;;
    grpc-once) PROTOCOL=grpc EXTRA="" ;;
    http-respect) PROTOCOL=http EXTRA=-respect-retry-after ;;
    open-loop) PROTOCOL=http EXTRA="" ;;
    *) echo "unknown run $run" >&2; exit 2 ;;
  esac
  # Odd passes run A first, even passes D first: the machine's speed drifts over minutes,
  # and always running one of them first would tilt every pair the same way.
  order="A D"; [ $((pass % 2)) -eq 0 ] && order="D A"
  if [ "$run" = open-loop ]; then
    # 150 requests/s: no refusal with the throttle off; 1500/s: ten times that.
    RATE_LOW=150 RATE_HIGH=1500 PROTOCOL=$PROTOCOL EXTRA=$EXTRA SCENARIOS="$order" OUT="$dir" bash scripts/bench-scenarios.sh
  else
    PROTOCOL=$PROTOCOL EXTRA=$EXTRA SCENARIOS="$order" OUT="$dir" bash scripts/bench-scenarios.sh
  fi
done
done

CPUS=$CPUS MEM=$MEM python3 - "$OUT" "$PHASE" "$("$WEIR" --version 2>/dev/null || true)" "${LABEL:-$(git rev-parse --short HEAD)}" $RUNS <<'PY'
import json, os, sys
out, phase, version, commit, *runs = sys.argv[1:]
what = {
    "http-once": "HTTP/1.1, JSON bodies, clients retry a refusal at once (the seed's loop)",
    "h2c-once": "HTTP/2 (h2c), JSON bodies, clients retry at once",
    "grpc-once": "OTLP/gRPC, one shared connection, clients retry at once",
    "http-respect": "HTTP/1.1, JSON bodies, clients wait for Retry-After (jittered) as OTLP exporters do",
    "open-loop": "HTTP/1.1, JSON bodies, open loop: A at 150 requests/s, D at 1500/s (10x), refusals not retried",
}
ms = lambda v: "-" if v is None else f"{v:.1f}"
lines = ["# Goodput under refusal storms", "",
         f"weir {commit} in a real cgroup with {os.environ['CPUS']} CPU and {int(os.environ['MEM']) // 1048576} MiB, exporting over OTLP/gRPC to a sink weir; loadgen phases of {phase} "
         "(warmup c/5 x 128 spans x 128 B, burst c x 512 x 1 KiB, bigpayload c x 128 x 4 KiB). A: throttle off, c=2. D: throttle on, c=512. "
         "Requests still unanswered when a phase ends are cancelled and not counted. `P99 after 2 s` leaves out requests sent in a phase's "
         "first two seconds, when all of its connections open at once.", ""]
pin = os.environ.get("PIN", "").split()
if len(pin) == 2:
    lines += [f"Cores pinned (`PIN=\"{pin[0]} {pin[1]}\"`): weir's cgroup has core {pin[0]} to itself; loadgen and the sink run on core {pin[1]}, "
                    "as when the clients are other machines.", ""]
else:
    lines += ["Cores not pinned: weir's cgroup, loadgen and the sink share every core of the machine.", ""]
import glob, statistics
med = lambda xs: statistics.median(xs) if xs else None
secs = int(phase.rstrip("s")) if phase.rstrip("s").isdigit() else None
def phase_cpu(dd, who, i):
    """weir's mean CPU (cores) over phase i, leaving out its first and last second."""
    try:
        pct = [int(l.split()[0]) for l in open(os.path.join(dd, f"{who}.cpu.txt")) if l.strip()]
    except (FileNotFoundError, ValueError):
        return None
    if not secs:
        return None
    part = pct[i * secs + 1:(i + 1) * secs - 1]
    return sum(part) / len(part) / 100 if part else None
goal_rows = []
for run in runs:
    # One pass: OUT/<run>/; several: OUT/<run>/pass-<n>/.
    dirs = sorted(glob.glob(os.path.join(out, run, "pass-*"))) or [os.path.join(out, run)]
    passes = []
    for dd in dirs:
        try:
            passes.append((json.load(open(os.path.join(dd, "A.json"))), json.load(open(os.path.join(dd, "D.json"))),
                           json.load(open(os.path.join(dd, "D.cgroup.json")))))
        except FileNotFoundError:
            pass
    if not passes:
        continue
    n = len(passes)
    lines += [f"## {run}: {what.get(run, run)}", ""]
    if n > 1:
        lines += [f"{n} passes, A and D run one after the other in each (A first in odd passes, D first in even ones); "
                  "every figure is the median over the passes, `D / A` the median of the per-pass ratios, `range` the lowest and "
                  "highest of them, and `pooled` D's accepted spans over all passes divided by A's.", ""]
    lines += ["| phase | A accepted spans/s | D accepted spans/s | D / A | " + ("range | pooled | " if n > 1 else "") +
              "A P99 ms | D P99 ms | D / A | A P99 after 2 s | D P99 after 2 s | D / A | D refused | D errors | weir CPU A / D |",
              "|---|---|---|---|" + ("---|---|" if n > 1 else "") + "---|---|---|---|---|---|---|---|---|"]
    for i, phase in enumerate(p["phase"] for p in passes[0][1]["phases"]):
        pa = [a["phases"][i] for a, _, _ in passes]
        pd = [d["phases"][i] for _, d, _ in passes]
        get = lambda ps, k: [x[k] for x in ps if x.get(k) is not None]
        a_acc, d_acc = med(get(pa, "accepted_spans_per_s")), med(get(pd, "accepted_spans_per_s"))
        ratios = [y["accepted_spans_per_s"] / max(1, x["accepted_spans_per_s"]) for x, y in zip(pa, pd)]
        p99 = [med(get(ps, k)) for ps in (pa, pd) for k in ("p99_ms", "p99_settled_ms")]
        ratio = lambda x, y: "-" if not x or y is None else f"{y / x:.2f}"
        refused = med([x["counts"]["status_429"] + x["counts"]["status_503"] for x in pd])
        errors = med([x["counts"]["transport_errors"] + x["counts"]["other"] for x in pd])
        pooled = sum(y["accepted_spans_per_s"] for y in pd) / max(1, sum(x["accepted_spans_per_s"] for x in pa))
        cores = [med([c for c in (phase_cpu(dd, who, i) for dd in dirs) if c is not None]) for who in ("A", "D")]
        # The goal, pass by pass: D >= 90% of A's accepted spans/s and, closed loop, D's
        # P99 <= max(2 x A's, A's + 10 ms).
        def held(x, y):
            ok = y["accepted_spans_per_s"] >= 0.9 * max(1, x["accepted_spans_per_s"])
            if run != "open-loop" and x.get("p99_ms") is not None and y.get("p99_ms") is not None:
                ok = ok and y["p99_ms"] <= max(2 * x["p99_ms"], x["p99_ms"] + 10)
            return ok
        goal = sum(held(x, y) for x, y in zip(pa, pd))
        every = " ".join(f"{100 * r:.0f}%" for r in ratios)
        goal_rows.append(f"| {run} | {phase} | {every} | " + " ".join(
            "-" if x.get("p99_ms") is None or y.get("p99_ms") is None else f"{y['p99_ms'] / max(x['p99_ms'], 1e-9):.2f}" for x, y in zip(pa, pd)) +
            f" | {goal} of {n} |")
        cpu = "/".join("-" if c is None else f"{c:.2f}" for c in cores)
        lines.append(f"| {phase} | {a_acc:.0f} | {d_acc:.0f} | {100 * med(ratios):.0f}% | " +
                     (f"{100 * min(ratios):.0f}-{100 * max(ratios):.0f}% | {100 * pooled:.0f}% | " if n > 1 else "") +
                     f"{ms(p99[0])} | {ms(p99[2])} | {ratio(p99[0], p99[2])} | {ms(p99[1])} | {ms(p99[3])} | {ratio(p99[1], p99[3])} | "
                     f"{refused:.0f} | {errors:.0f} | {cpu} |")
    ooms = sum(c["oom_kills"] for _, _, c in passes)
    restarts = sum(c["restarts"] for _, _, c in passes)
    peak = max(int(c["peak_mem_bytes"]) for _, _, c in passes) // 1048576
    sock = max(int(c.get("peak_socket_bytes", 0)) for _, _, c in passes) // 1048576
    # cgroup v1 counts socket buffers apart from memory.max_usage_in_bytes (v2 includes them).
    sock_note = f"; its sockets' buffers peaked at {sock} MiB, which cgroup v1 counts apart and v2 would add" if sock else ""
    lines += ["", f"D: {ooms} OOM kills, {restarts} restarts, memory peak {peak} MiB{sock_note}" + (f" (over {n} passes)." if n > 1 else "."), ""]
lines += ["## Every pass", "", "D / A accepted spans/s and D / A P99 in each pass, and the passes that met the goal "
          "(D >= 90% of A and, closed loop, D's P99 <= max(2x A's, A's + 10 ms)).", "",
          "| run | phase | D / A spans/s, every pass | D / A P99, every pass | goal met |", "|---|---|---|---|---|"] + goal_rows
open(os.path.join(out, "storm.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
done
