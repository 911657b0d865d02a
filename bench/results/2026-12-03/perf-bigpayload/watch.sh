#!/bin/bash
# perf-records weir's process during the bigpayload phase of each scenario named:
#   OUT=<dir> watch.sh A D   (beside scripts/bench-scenarios.sh with SCENARIOS="A D")
# writes OUT/<scenario>.data; bigpayload starts 30 s after weir does (15 s phases).
OUT=${OUT:-.}
for s in "$@"; do
  pid=""
  until [ -n "$pid" ]; do pid=$(pgrep -f "weir --config .*weir-$s.yaml" | while read -r p; do [ "$(cat /proc/$p/comm)" = weir ] && echo "$p"; done | head -1); sleep 0.05; done
  sleep 32
  taskset -c 0 perf record -F 997 -p "$pid" -o "$OUT/$s.data" -- sleep 10 2> "$OUT/$s.perf.log"
  while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
done
