#!/usr/bin/env bash
# D only, all three phases, for each protocol and config, PASSES times, one line per run.
# Run from the repository root as root, with prebuilt binaries:
#   WEIR=target/release/weir LOADGEN=target/release/loadgen \
#   bash bench/results/2026-12-05/line-tradeoff/ab.sh OUT 2 "http h2c grpc" config/bench.yaml bench/results/2026-12-05/line-tradeoff/bench-noline.yaml
set -euo pipefail
out=$1; passes=$2; protos=$3; shift 3
for i in $(seq 1 "$passes"); do for proto in $protos; do for cfg in "$@"; do
  n=$(basename "$cfg" .yaml); o=$out/$proto-$n-$i
  CONFIG=$cfg PIN="1 0" PROTOCOL=$proto EXTRA="" SCENARIOS="D" PHASE=15s OUT=$o bash scripts/bench-scenarios.sh > /dev/null 2>&1
  python3 -c "
import json, sys; d = json.load(open('$o/D.json'))
print(' | '.join('%s %s %s %dK p50 %.2f p99 %.2f r%d' % ('$proto', '$n', p['phase'][:4], p['accepted_spans_per_s'] / 1000, p['p50_ms'], p['p99_ms'], p['counts']['status_429']) for p in d['phases']))"
done; done; done
