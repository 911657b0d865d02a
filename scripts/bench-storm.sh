#!/usr/bin/env bash
# Goodput under refusal storms: A (throttle off, c=2, the capacity a calm client mix
# gets) against D (throttle on, c=512) in the seed's 1 CPU / 300 MiB cgroup, for every
# protocol, with clients that retry a refusal at once (the seed's loop) and with clients
# that honour Retry-After, plus the open loop at 10x A's rate. Each pair is one run of
# scripts/bench-scenarios.sh; this script writes OUT/storm.md with D / A per phase.
#
# Environment: PHASE (default 15s), OUT (default bench/results/<date>/storm), RUNS (a
# subset of: http-once h2c-once grpc-once http-respect open-loop), WEIR and LOADGEN
# (prebuilt binaries, e.g. an older weir for a before/after run), LABEL (what the report
# calls the weir measured; default the checkout's commit). About 10 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."

PHASE=${PHASE:-15s}
OUT=${OUT:-bench/results/$(date +%Y-%m-%d)/storm}
RUNS=${RUNS:-http-once h2c-once grpc-once http-respect open-loop}
mkdir -p "$OUT"
if [ -z "${WEIR:-}" ] || [ -z "${LOADGEN:-}" ]; then
  cargo build --release -q -p weir -p loadgen --bins
fi
export WEIR=${WEIR:-target/release/weir} LOADGEN=${LOADGEN:-target/release/loadgen} PHASE

# SUMMARY_ONLY=1: only write storm.md from the runs already in OUT.
for run in $([ -n "${SUMMARY_ONLY:-}" ] || echo "$RUNS"); do
  case $run in
    http-once) PROTOCOL=http EXTRA="" ;;
    h2c-once) PROTOCOL=h2c EXTRA="" ;;
    grpc-once) PROTOCOL=grpc EXTRA="" ;;
    http-respect) PROTOCOL=http EXTRA=-respect-retry-after ;;
    open-loop) PROTOCOL=http EXTRA="" ;;
    *) echo "unknown run $run" >&2; exit 2 ;;
  esac
  if [ "$run" = open-loop ]; then
    # 150 requests/s: no refusal with the throttle off; 1500/s: ten times that.
    RATE_LOW=150 RATE_HIGH=1500 PROTOCOL=$PROTOCOL EXTRA=$EXTRA SCENARIOS="A D" OUT="$OUT/$run" bash scripts/bench-scenarios.sh
  else
    PROTOCOL=$PROTOCOL EXTRA=$EXTRA SCENARIOS="A D" OUT="$OUT/$run" bash scripts/bench-scenarios.sh
  fi
done

python3 - "$OUT" "$PHASE" "$("$WEIR" --version 2>/dev/null || true)" "${LABEL:-$(git rev-parse --short HEAD)}" $RUNS <<'PY'
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
         f"weir {commit} in a real cgroup with 1 CPU and 300 MiB, exporting over OTLP/gRPC to a sink weir; loadgen phases of {phase} "
         "(warmup c/5 x 128 spans x 128 B, burst c x 512 x 1 KiB, bigpayload c x 128 x 4 KiB). A: throttle off, c=2. D: throttle on, c=512. "
         "Requests still unanswered when a phase ends are cancelled and not counted. `P99 after 2 s` leaves out requests sent in a phase's "
         "first two seconds, when all of its connections open at once.", ""]
for run in runs:
    try:
        a = json.load(open(os.path.join(out, run, "A.json")))
        d = json.load(open(os.path.join(out, run, "D.json")))
        dcg = json.load(open(os.path.join(out, run, "D.cgroup.json")))
    except FileNotFoundError:
        continue
    lines += [f"## {run}: {what.get(run, run)}", "",
              "| phase | A accepted spans/s | D accepted spans/s | D / A | A P99 ms | D P99 ms | D / A | A P99 after 2 s | D P99 after 2 s | D / A | D refused | D errors |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for pa, pd in zip(a["phases"], d["phases"]):
        ratio = lambda x, y: "-" if not x or y is None else f"{y / x:.2f}"
        c = pd["counts"]
        lines.append(f"| {pd['phase']} | {pa['accepted_spans_per_s']:.0f} | {pd['accepted_spans_per_s']:.0f} | "
                     f"{100 * pd['accepted_spans_per_s'] / max(1, pa['accepted_spans_per_s']):.0f}% | {ms(pa['p99_ms'])} | {ms(pd['p99_ms'])} | "
                     f"{ratio(pa['p99_ms'], pd['p99_ms'])} | {ms(pa.get('p99_settled_ms'))} | {ms(pd.get('p99_settled_ms'))} | "
                     f"{ratio(pa.get('p99_settled_ms'), pd.get('p99_settled_ms'))} | {c['status_429'] + c['status_503']} | {c['transport_errors'] + c['other']} |")
    lines += ["", f"D: {dcg['oom_kills']} OOM kills, {dcg['restarts']} restarts, memory peak {int(dcg['peak_mem_bytes']) // 1048576} MiB.", ""]
open(os.path.join(out, "storm.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
