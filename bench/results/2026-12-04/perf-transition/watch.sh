#!/bin/bash
# perf-records weir for 3 s across the burst -> bigpayload boundary (about 16 s after weir
# starts with 15 s phases) and for 3 s in bigpayload's steady part (from 24 s):
#   OUT=<dir> watch.sh A D   (beside scripts/bench-scenarios.sh with EXTRA="-phases burst,bigpayload")
OUT=${OUT:-.}
for s in "$@"; do
  pid=""
  until [ -n "$pid" ]; do pid=$(pgrep -f "weir --config .*weir-$s.yaml" | while read -r p; do [ "$(cat /proc/$p/comm)" = weir ] && echo "$p"; done | head -1); sleep 0.05; done
  sleep 16
  taskset -c 0 perf record -F 1999 -g -p "$pid" -o "$OUT/$s-edge.data" -- sleep 3 2> /dev/null
  sleep 5
  taskset -c 0 perf record -F 1999 -g -p "$pid" -o "$OUT/$s-steady.data" -- sleep 3 2> /dev/null
  while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
done
