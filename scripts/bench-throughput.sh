#!/usr/bin/env bash
# Throughput benchmark (issue #9): weir pinned to one core, h2load pinned to the other,
# fixed bodies, blackhole exporter. Reports spans per CPU-second of weir (utime+stime
# from /proc), spans/s, peak RSS and h2load's latency per cell, three runs after a
# warm-up (median and range), the decode-only criterion rate and the ratio, and what a
# refused request costs. Writes bench/results/<date>/throughput.md.
#
#   bash scripts/bench-throughput.sh            # everything, about 15 minutes
#   RUNS=1 SPANS_PER_RUN=1000000 CELLS="h2c/512x10" bash scripts/bench-throughput.sh
#
# Environment (no WEIR_ names: weir reads those as config): RUNS (3), SPANS_PER_RUN (3000000: requests per run = this / spans per
# request), CELLS (space-separated "protocol/body" list, default all), SERVER_CORE (0),
# LOAD_CORE (1), CRITERION_ARGS (e.g. "--measurement-time 1" for a smoke run), SERVER_BIN (target/release/weir: another build to compare), OUT (bench/results/<date>/throughput.md), SKIP_DECODE_BENCH=1,
# COMPARE_BIN (another weir build, e.g. the one before a change: run beside this one,
# run by run, on the same cells, and reported side by side), REFUSALS=0 (skip the
# refusal-cost and floor sections), ROTEL=0 (skip the rotel column; else rotel's agent is fetched from its PyPI wheel into
# target/rotel and run beside weir, the same way, on the 512x10 cells),
# SMOKE=1 (CI: the debug build the tests already compiled, no criterion, 600 accepted
# requests as the refusal baseline; it checks the script and weir's counts, and its
# numbers measure nothing).
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-3}
SPANS_PER_RUN=${SPANS_PER_RUN:-3000000}
SERVER_CORE=${SERVER_CORE:-0}
LOAD_CORE=${LOAD_CORE:-1}
OUT=${OUT:-bench/results/$(date -u +%F)/throughput.md}
ALL_CELLS="grpc/512x10 grpc/512x10.gz grpc/512x10.zst h1/512x10 h1/512x10.gz h1/512x10.zst h2c/512x10 h2c/512x10.gz h2c/512x10.zst grpc/512x2 h1/512x2 h2c/512x2 grpc/100x10 h1/100x10 h2c/100x10"
CELLS=${CELLS:-$ALL_CELLS}
CRITERION_ARGS=${CRITERION_ARGS:-}
# Decided before anything is written (the report itself lives in the tree).
DIRTY=$(git diff --quiet -- . ':!bench/results' || echo ' + uncommitted changes')
CLK_TCK=$(getconf CLK_TCK)

command -v h2load > /dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nghttp2-client; }
[ -x target/pyvenv-bench/bin/python ] || python3 -m venv target/pyvenv-bench
target/pyvenv-bench/bin/pip install -q --disable-pip-version-check opentelemetry-proto grpcio

# A release build takes minutes on a 2-core machine; the smoke run in CI reuses the
# debug build the tests made.
PROFILE_DIR=release
if [ -n "${SMOKE:-}" ]; then
  PROFILE_DIR=debug SKIP_DECODE_BENCH=1
  cargo build -q --bin weir --example throughput_bodies --example h2_floor --example raw_floor
else
  cargo build -q --release --bin weir --example throughput_bodies --example h2_floor --example raw_floor
fi
SERVER_BIN=${SERVER_BIN:-./target/$PROFILE_DIR/weir}
BODIES=target/throughput/bodies
"./target/$PROFILE_DIR/examples/throughput_bodies" "$BODIES"

WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2> /dev/null || true; done
  wait 2> /dev/null || true
  [ -n "${OPEN_CGROUP:-}" ] && bash scripts/run-in-cgroup.sh --remove "$OPEN_CGROUP"
  rm -rf "$WORK"
}
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start_weir NAME EXTRA_RECEIVER_YAML [WRAPPER...]: weir on $SERVER_CORE (inside WRAPPER,
# e.g. scripts/run-in-cgroup.sh, which execs it); sets ${NAME}_{PID,HTTP,GRPC,ADMIN}.
# H2_WINDOW, if set, is both servers' http2_stream_window_bytes.
start_weir() {
  local name=$1 extra=$2 http grpc admin pid
  shift 2
  http=$(port); grpc=$(port); admin=$(port)
  cat > "$WORK/$name.yaml" << YAML
receiver:
  http_server: {endpoint: "127.0.0.1:$http", middlewares: ["content_decompressor", "throttle"]${H2_WINDOW:+, http2_stream_window_bytes: $H2_WINDOW}}
  grpc_server: {endpoint: "127.0.0.1:$grpc", middlewares: ["content_decompressor", "throttle"]${H2_WINDOW:+, http2_stream_window_bytes: $H2_WINDOW}}
$extra
exporters:
  - {type: blackhole}
admin: {endpoint: "127.0.0.1:$admin"}
log: {level: warn}
YAML
  taskset -c "$SERVER_CORE" "$@" "$SERVER_BIN" --config "$WORK/$name.yaml" > "$WORK/$name.log" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  for _ in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$admin/readyz" > /dev/null && break
    sleep 0.1
  done
  curl -sf "http://127.0.0.1:$admin/readyz" > /dev/null || { cat "$WORK/$name.log"; exit 1; }
  printf -v "${name}_PID" %s "$pid"
  printf -v "${name}_HTTP" %s "$http"
  printf -v "${name}_GRPC" %s "$grpc"
  printf -v "${name}_ADMIN" %s "$admin"
}

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
sys_ticks() { awk '{print $15}' "/proc/$1/stat"; }
metric() { # metric ADMIN_PORT REGEX -> sum of matching samples
  curl -sf "http://127.0.0.1:$1/metrics" | awk -v re="$2" '$0 ~ re {s += $NF} END {printf "%.0f\n", s}'
}
spans_of() { case $1 in 512x*) echo 512 ;; 100x*) echo 100 ;; esac; }
shape_of() { local b=${1%.gz}; echo "${b%.zst}"; }

# h2load_args PROTOCOL BODY HTTP_PORT GRPC_PORT -> the h2load command line (without -n).
h2load_args() {
  local proto=$1 body=$2 http=$3 grpc=$4 file ext= enc=
  case $body in *.gz) ext=.gz enc=gzip ;; *.zst) ext=.zst enc=zstd ;; esac
  case $proto in
    grpc)
      file="$BODIES/${body%"$ext"}.grpc$ext"
      echo "-c 4 -m 4 -d $file -H content-type:application/grpc -H te:trailers ${enc:+-H grpc-encoding:$enc} http://127.0.0.1:$grpc/opentelemetry.proto.collector.trace.v1.TraceService/Export"
      ;;
    h1 | h2c)
      file="$BODIES/${body%"$ext"}.pb$ext"
      # HTTP/1.1 has one request per connection at a time: 16 connections match the
      # 4 x 4 streams of the HTTP/2 cells.
      local conn="-c 4 -m 4"
      [ "$proto" = h1 ] && conn="--h1 -c 16 -m 1"
      echo "$conn -d $file -H content-type:application/x-protobuf ${enc:+-H content-encoding:$enc} http://127.0.0.1:$http/v1/traces"
      ;;
  esac
}

# run_once NAME PROTO BODY N EXTRA_H2LOAD_ARGS -> "spans cpu_s wall_s rss_kb http_2xx refused mean max sys_s answered"
# (spans: weir's accepted counter; refused: weir's refused-request counter, which also
# sees gRPC refusals that travel as HTTP 200 with a grpc-status; answered: requests
# h2load got a status for, of any class).
run_once() {
  local name=$1 proto=$2 body=$3 n=$4 extra=${5:-} pid admin http grpc t0 t1 a0 a1 r0 r1 out
  eval "pid=\$${name}_PID admin=\$${name}_ADMIN http=\$${name}_HTTP grpc=\$${name}_GRPC"
  local args
  args=$(h2load_args "$proto" "$body" "$http" "$grpc")
  echo 5 > "/proc/$pid/clear_refs" 2> /dev/null || true # reset VmHWM so the peak is this run's
  a0=$(metric "$admin" '^weir_items_accepted_total')
  r0=$(metric "$admin" '^weir_receiver_requests_rejected_total')
  t0=$(cpu_ticks "$pid") s0=$(sys_ticks "$pid")
  # shellcheck disable=SC2086
  out=$(taskset -c "$LOAD_CORE" h2load -n "$n" $args $extra 2>&1)
  t1=$(cpu_ticks "$pid") s1=$(sys_ticks "$pid")
  a1=$(metric "$admin" '^weir_items_accepted_total')
  r1=$(metric "$admin" '^weir_receiver_requests_rejected_total')
  local rss wall ok2xx mean max answered
  rss=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
  wall=$(echo "$out" | awk '/^finished in/ {v=$3; sub(/,$/, "", v); if (v ~ /ms$/) {sub(/ms$/, "", v); v = v / 1000} else sub(/s$/, "", v); print v}')
  ok2xx=$(echo "$out" | awk '/^status codes:/ {gsub(",", ""); print $3}')
  answered=$(echo "$out" | awk '/^status codes:/ {gsub(",", ""); print $3 + $5 + $7 + $9}')
  mean=$(echo "$out" | awk '/^time for request:/ {print $6}')
  max=$(echo "$out" | awk '/^time for request:/ {print $5}')
  echo "$((a1 - a0)) $(awk -v t=$((t1 - t0)) -v hz="$CLK_TCK" 'BEGIN {printf "%.3f", t / hz}') $wall $rss $ok2xx $((r1 - r0)) $mean $max $(awk -v t=$((s1 - s0)) -v hz="$CLK_TCK" 'BEGIN {printf "%.3f", t / hz}') ${answered:-0}"
}

# median_range VALUES... -> "median (min–max)"
median_range() {
  printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.0f (%.0f–%.0f)", m, v[1], v[NR]}'
}

# spread VALUES... -> "median min max" (the lower of the two middle values for an even count)
spread() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)], v[1], v[NR]}'; }
# middle VALUES... -> the median alone
middle() { spread "$@" | cut -d' ' -f1; }

to_ms() { # h2load prints 812us / 3.2ms / 1.1s
  awk -v v="$1" 'BEGIN {if (v ~ /us$/) {sub(/us$/, "", v); v /= 1000} else if (v ~ /ms$/) sub(/ms$/, "", v); else if (v ~ /s$/) {sub(/s$/, "", v); v *= 1000} printf "%.2f", v}'
}

# The throttle runs on every request (classify, decide, admission layers) but must not
# shed: a core saturated on purpose is the measurement, not an overload. Its CPU lines
# are raised out of reach, slow start (200 requests/s for 30 s) is off, and so is the
# knee learner (a saturated core's latency rises with its CPU: it learned a knee near
# 0.9 and lowered the enter line to it, and a smoke run shed 242 of 3000 requests).
THROTTLE_IN_PATH="  throttle:
    enabled: true
    thresholds: {cpu: {exit: 8.0, enter: 9.0, hard: 10.0, breach_n: 3}}
    slow_start: {enabled: false}
    knee: {enabled: false}"
start_weir main "$THROTTLE_IN_PATH"
echo "== checking bodies with real clients (opentelemetry-proto, urllib, grpcio)"
target/pyvenv-bench/bin/python tests/python/check_bodies.py "$BODIES" "127.0.0.1:$main_GRPC" "http://127.0.0.1:$main_HTTP" "http://127.0.0.1:$main_ADMIN/metrics"

# rotel, another Rust OTLP gateway, as the peer column: its agent binary from its PyPI
# wheel (0.0.1a15: the newest; earlier wheels need glibc 2.38), blackhole exporter,
# pinned to the same core and driven by the same h2load command lines.
ROTEL_VERSION=0.0.1a15
ROTEL_BIN=target/rotel/$ROTEL_VERSION/rotel/rotel-agent
if [ "${ROTEL:-1}" != 0 ] && [ -z "${SMOKE:-}" ]; then
  if [ ! -x "$ROTEL_BIN" ]; then
    target/pyvenv-bench/bin/pip download -q --disable-pip-version-check --no-deps "rotel==$ROTEL_VERSION" -d "target/rotel/$ROTEL_VERSION"
    (cd "target/rotel/$ROTEL_VERSION" && python3 -m zipfile -e rotel-*.whl . && chmod +x rotel/rotel-agent)
  fi
  rotel_HTTP=$(port) rotel_GRPC=$(port)
  taskset -c "$SERVER_CORE" "$ROTEL_BIN" start --otlp-http-endpoint "127.0.0.1:$rotel_HTTP" --otlp-grpc-endpoint "127.0.0.1:$rotel_GRPC" \
    --exporter blackhole > "$WORK/rotel.log" 2>&1 &
  rotel_PID=$!
  PIDS+=("$rotel_PID")
  for _ in $(seq 1 50); do curl -s -o /dev/null "http://127.0.0.1:$rotel_HTTP/" && break; sleep 0.1; done
fi
# rotel_accepts PROTO BODY -> "ok", or what rotel answered instead. h2load counts a gRPC
# refusal (HTTP 200 with a grpc-status in the trailers) as a success, so one request goes
# through curl first and its status and trailers are read.
rotel_accepts() {
  local proto=$1 body=$2 ext= enc= head
  case $body in *.gz) ext=.gz enc=gzip ;; *.zst) ext=.zst enc=zstd ;; esac
  if [ "$proto" = grpc ]; then
    head=$(curl -s --http2-prior-knowledge -H content-type:application/grpc -H te:trailers ${enc:+-H grpc-encoding:$enc} \
      --data-binary "@$BODIES/${body%"$ext"}.grpc$ext" -D - -o /dev/null \
      "http://127.0.0.1:$rotel_GRPC/opentelemetry.proto.collector.trace.v1.TraceService/Export" | tr -d '\r')
    echo "$head" | grep -q '^grpc-status: 0$' && { echo ok; return; }
    echo "$head" | awk '/^grpc-status:/ {s = $2} /^grpc-message:/ {sub(/^grpc-message: /, ""); m = $0} END {printf "grpc-status %s", s; if (m != "") printf " (%s)", m}' | python3 -c 'import sys, urllib.parse; print(urllib.parse.unquote(sys.stdin.read()))'
  else
    local code
    code=$(curl -s -o /dev/null -w '%{http_code}' -H content-type:application/x-protobuf ${enc:+-H content-encoding:$enc} \
      --data-binary "@$BODIES/${body%"$ext"}.pb$ext" "http://127.0.0.1:$rotel_HTTP/v1/traces")
    [ "$code" = 200 ] && echo ok || echo "HTTP $code to Content-Encoding ${enc:-identity}"
  fi
}
# rotel_once PROTO BODY N -> "spans cpu_s status": spans = h2load's successes x spans per
# request (rotel keeps no counter of its own); status "ok", or what failed.
rotel_once() {
  local proto=$1 body=$2 n=$3 t0 t1 out ok errs0 errs1
  errs0=$(grep -c ERROR "$WORK/rotel.log" || true)
  t0=$(cpu_ticks "$rotel_PID")
  # shellcheck disable=SC2046
  out=$(taskset -c "$LOAD_CORE" h2load -n "$n" $(h2load_args "$proto" "$body" "$rotel_HTTP" "$rotel_GRPC") 2>&1)
  t1=$(cpu_ticks "$rotel_PID")
  errs1=$(grep -c ERROR "$WORK/rotel.log" || true)
  ok=$(echo "$out" | awk '/^status codes:/ {gsub(",", ""); print $3}')
  local status=ok
  [ "$ok" -eq "$n" ] && [ "$errs1" -eq "$errs0" ] || status="$((n - ok)) of $n refused, $((errs1 - errs0)) errors logged"
  echo "$((ok * $(spans_of "$body"))) $(awk -v t=$((t1 - t0)) -v hz="$CLK_TCK" 'BEGIN {printf "%.3f", t / hz}') $status"
}

if [ -n "${COMPARE_BIN:-}" ]; then
  SAVED_BIN=$SERVER_BIN
  SERVER_BIN=$COMPARE_BIN
  start_weir before "$THROTTLE_IN_PATH"
  SERVER_BIN=$SAVED_BIN
fi

declare -A CELL_CPU_RATE CELL_ROTEL CELL_BEFORE
ROWS=()
for cell in $CELLS; do
  proto=${cell%%/*} body=${cell#*/}
  spans=$(spans_of "$body")
  n=$((SPANS_PER_RUN / spans))
  run_once main "$proto" "$body" $((n / 5)) > /dev/null # warm-up
  per_cpu=() per_wall=() rss=() means=() maxes=() rotel_cpu=() rotel_status=ok before_cpu=()
  [ -n "${before_PID:-}" ] && run_once before "$proto" "$body" $((n / 5)) > /dev/null
  with_rotel=
  [ -n "${rotel_PID:-}" ] && [ "$(shape_of "$body")" = 512x10 ] && with_rotel=1
  if [ -n "$with_rotel" ]; then
    rotel_status=$(rotel_accepts "$proto" "$body")
    [ "$rotel_status" = ok ] && rotel_once "$proto" "$body" $((n / 5)) > /dev/null
  fi
  for r in $(seq 1 "$RUNS"); do
    read -r acc cpu wall peak ok refused mean max _sys <<< "$(run_once main "$proto" "$body" "$n")"
    if [ "$acc" -ne $((ok * spans)) ] || [ "$refused" -ne 0 ]; then
      echo "cell $cell run $r: weir accepted $acc spans and refused $refused requests; h2load saw $ok successes" >&2
      curl -sf "http://127.0.0.1:$main_ADMIN/metrics" | grep -E '^weir_receiver_(requests_rejected|connections_closed)_total' >&2 || true
      tail -20 "$WORK/main.log" >&2
      exit 1
    fi
    per_cpu+=("$(awk -v a="$acc" -v c="$cpu" 'BEGIN {printf "%.0f", a / c}')")
    per_wall+=("$(awk -v a="$acc" -v w="$wall" 'BEGIN {printf "%.0f", a / w}')")
    rss+=("$((peak / 1024))")
    means+=("$(to_ms "$mean")")
    maxes+=("$(to_ms "$max")")
    echo "  $cell run $r: $acc spans, $cpu CPU-s, $wall s, peak RSS $((peak / 1024)) MiB, mean $mean max $max"
    # The build to compare, and rotel, interleaved with weir run by run, so all see the
    # same machine.
    if [ -n "${before_PID:-}" ]; then
      read -r bacc bcpu _ <<< "$(run_once before "$proto" "$body" "$n")"
      before_cpu+=("$(awk -v a="$bacc" -v c="$bcpu" 'BEGIN {printf "%.0f", a / c}')")
      echo "  $cell run $r, $COMPARE_BIN: $bacc spans, $bcpu CPU-s"
    fi
    if [ -n "$with_rotel" ] && [ "$rotel_status" = ok ]; then
      read -r racc rcpu rstatus <<< "$(rotel_once "$proto" "$body" "$n")"
      rotel_status=$rstatus
      [ "$rstatus" = ok ] && rotel_cpu+=("$(awk -v a="$racc" -v c="$rcpu" 'BEGIN {printf "%.0f", a / c}')")
      echo "  $cell run $r, rotel: $racc spans, $rcpu CPU-s, $rstatus"
    fi
  done
  [ -n "${before_PID:-}" ] && CELL_BEFORE[$cell]=$(median_range "${before_cpu[@]}")
  if [ -n "$with_rotel" ]; then
    if [ "$rotel_status" = ok ]; then CELL_ROTEL[$cell]=$(middle "${rotel_cpu[@]}"); else CELL_ROTEL[$cell]="refused: $rotel_status"; fi
  fi
  CELL_CPU_RATE[$cell]=$(middle "${per_cpu[@]}")
  ROWS+=("| $proto | $body | $(median_range "${per_cpu[@]}") | ${CELL_ROTEL[$cell]:-} | $(median_range "${per_wall[@]}") | $(median_range "${rss[@]}") | $(middle "${means[@]}") | $(printf '%s\n' "${maxes[@]}" | sort -g | tail -1) |")
  echo "${ROWS[-1]}"
done

REFUSAL_ROWS=()
if [ "${REFUSALS:-1}" != 0 ]; then
# What a refused request costs: the same 512x10 h2c body, refused by a request quota
# (auth + GCRA, before any body byte) and by the throttle (memory thresholds set so low
# that the state is Open), against an accepted request on the quota instance.
echo "== refusal cost"
QUOTA_YAML="  auth:
    tenants:
      ok: {}
      limited: {rate: {requests_per_second: 1, burst: 1}}
$THROTTLE_IN_PATH"
start_weir quota "$QUOTA_YAML"
# The throttle needs a memory limit to read a memory level: a real cgroup (128 MiB) whose
# lines sit well below what weir uses even at rest after jemalloc has purged (a few MiB,
# about 0.017 of the limit; hard is 0.005), so the state is Open from the first sample.
start_weir open "  throttle:
    enabled: true
    sample_interval: 50ms
    thresholds:
      cpu: {exit: 8.0, enter: 9.0, hard: 10.0, breach_n: 3}
      mem: {exit: 0.001, enter: 0.003, hard: 0.005, breach_n: 1}
    slow_start: {enabled: false}" bash scripts/run-in-cgroup.sh weir-throughput-open 2 134217728 --
OPEN_CGROUP=weir-throughput-open
sleep 0.5
# At least 6000 refusals: a client that sends DATA on streams weir has already answered
# makes h2 count a local reset each time, against a per-connection cap (MAX_LOCAL_RESETS
# in src/receiver/connection/http2/); at the library default of 1024 the connections would be
# torn down here and this section fails. (With the window closed while refusing, only
# the first refused body on each connection is sent at all.)
REJ_N=$((SPANS_PER_RUN / 512 * 2))
[ "$REJ_N" -ge 6000 ] || REJ_N=6000
# A two-byte request (one empty ResourceSpans): what a refusal costs weir itself, with
# no body bytes to receive.
printf '\x0a\x00' > "$BODIES/tiny.pb"
printf '\x00\x00\x00\x00\x02\x0a\x00' > "$BODIES/tiny.grpc"
# A 2-byte refusal costs a few µs: at /proc's 10 ms ticks a run needs tens of thousands
# of them for a tick to be under 1% of the total.
TINY_N=$((REJ_N * 5))
[ -n "${SMOKE:-}" ] && TINY_N=$REJ_N
# Accepted requests, the baseline: as many as the refusals, except in a smoke run (a debug
# build decodes slowly).
ACC_N=$REJ_N
[ -n "${SMOKE:-}" ] && ACC_N=600
# cost_per_request NAME PROTO BODY EXTRA N -> "median-µs min-µs max-µs fewest-ok fewest-refused median-kernel-µs longest-wall-s unaccounted"
# over $RUNS runs of N requests after a warm-up (a single run swung by a third between
# runs on this machine). unaccounted: the most requests of one run that got no answer, or
# (over HTTP, where a refusal is a 4xx or 5xx) were neither a 2xx nor counted refused by
# weir; over gRPC every answer, refusals too, is an HTTP 200.
cost_per_request() {
  local acc cpu wall peak ok refused mean max sys answered miss n=$5 us=() ks=() min_ok= min_ref= max_wall=0 worst=0
  run_once "$1" "$2" "$3" $((n / 5)) "$4" > /dev/null
  for _ in $(seq 1 "$RUNS"); do
    read -r acc cpu wall peak ok refused mean max sys answered <<< "$(run_once "$1" "$2" "$3" "$n" "$4")"
    if [ "$2" = grpc ]; then miss=$((n - answered)); else miss=$((n - ok - refused)); fi
    miss=${miss#-}
    [ "$((n - answered))" -gt "$miss" ] && miss=$((n - answered))
    [ "$miss" -gt "$worst" ] && worst=$miss
    us+=("$(awk -v c="$cpu" -v n="$n" 'BEGIN {printf "%.1f", c / n * 1e6}')")
    ks+=("$(awk -v c="$sys" -v n="$n" 'BEGIN {printf "%.1f", c / n * 1e6}')")
    [ -z "$min_ok" ] || [ "$ok" -lt "$min_ok" ] && min_ok=$ok
    [ -z "$min_ref" ] || [ "$refused" -lt "$min_ref" ] && min_ref=$refused
    max_wall=$(awk -v a="$max_wall" -v b="$wall" 'BEGIN {print (b > a) ? b : a}')
  done
  echo "$(spread "${us[@]}") $min_ok $min_ref $(middle "${ks[@]}") $max_wall $worst"
}
# row LABEL MEDIAN LO HI KERNEL -> a refusal table row, as a share of the accepted request
row() {
  awk -v l="$1" -v u="$2" -v lo="$3" -v hi="$4" -v k="$5" -v a="$acc_us" 'BEGIN {v = u; lt = sub(/^</, "", v); printf "| %s | %s (%s–%s) | %s | %s%.1f%% |", l, u, lo, hi, k, lt ? "<" : "", 100 * v / a}'
}
read -r acc_us acc_lo acc_hi acc_ok _ acc_kernel _ _ <<< "$(cost_per_request quota h2c 512x10 "-H x-bk-token:ok" "$ACC_N")"
[ "$acc_ok" -eq "$ACC_N" ] || { echo "accepted only $acc_ok of $ACC_N" >&2; exit 1; }
refusal() { # refusal LABEL NAME PROTO BODY EXTRA [N]
  local us lo hi ok refused kernel wall lost grants n=${6:-$REJ_N}
  read -r us lo hi ok refused kernel wall lost <<< "$(cost_per_request "$2" "$3" "$4" "$5" "$n")"
  # Every request of every run answered, and each either granted or refused.
  [ "${lost:-x}" = 0 ] || { echo "$1: $lost of $n requests in one run neither granted nor refused" >&2; exit 1; }
  # The quota grants one request per second (burst 1), so a run of W seconds may see up
  # to ceil(W) + 1 successes (a debug build's HTTP/1.1 run, reading every body away, takes
  # several seconds), plus one of slack for the second the run started in.
  grants=$(awk -v w="$wall" 'BEGIN {c = int(w); if (c < w) c++; print c + 2}')
  [ "$refused" -ge $((n - grants)) ] || { echo "$1: only $refused of $n refused in a run of up to ${wall} s" >&2; exit 1; }
  REFUSAL_ROWS+=("$(row "$1" "$us" "$lo" "$hi" "$kernel")")
  echo "${REFUSAL_ROWS[-1]}"
}
refusal "request quota (429), h2c, 512x10 body sent" quota h2c 512x10 "-H x-bk-token:limited"
refusal "request quota (RESOURCE_EXHAUSTED), gRPC, 512x10 body sent" quota grpc 512x10 "-H x-bk-token:limited"
refusal "throttle Open (503), h2c, 512x10 body sent" open h2c 512x10 ""
refusal "throttle Open (UNAVAILABLE), gRPC, 512x10 body sent" open grpc 512x10 ""
# HTTP/1.1 (16 connections, one request at a time each) has no flow control: a refused
# body the client sends anyway is read away and discarded before the answer, so the
# connection stays usable (src/receiver/middleware/drain.rs: up to 1 MiB, 8 at a time,
# else the answer closes the connection), and costs what receiving it costs.
refusal "request quota (429), HTTP/1.1, 512x10 body sent" quota h1 512x10 "-H x-bk-token:limited"
refusal "request quota (429), HTTP/1.1, 2-byte body" quota h1 tiny "-H x-bk-token:limited" "$TINY_N"
refusal "request quota (429), h2c, 2-byte body, no body bytes to receive" quota h2c tiny "-H x-bk-token:limited" "$TINY_N"
refusal "throttle Open (503), h2c, 2-byte body, no body bytes to receive" open h2c tiny "" "$TINY_N"
refusal "request quota (RESOURCE_EXHAUSTED), gRPC, 2-byte message" quota grpc tiny "-H x-bk-token:limited" "$TINY_N"
refusal "throttle Open (UNAVAILABLE), gRPC, 2-byte message" open grpc tiny "" "$TINY_N"
# The same with 64 streams per connection (h2load takes the last -m): under a flood of
# refusals many arrive together, and a read and a write serve more of them.
refusal "request quota (429), h2c, 2-byte body, 4 connections x 64 streams" quota h2c tiny "-H x-bk-token:limited -m 64" "$TINY_N"
refusal "throttle Open (503), h2c, 2-byte body, 4 connections x 64 streams" open h2c tiny "-m 64" "$TINY_N"

# Floors: servers that answer every request with weir's 429 and do nothing else, run
# the same way as weir (pinned to $SERVER_CORE, counted by h2load's status line).
# `examples/h2_floor.rs`: the h2 crate with weir's socket layer, allocator and runtime;
# what a refusal costs weir above it is weir's own. `examples/raw_floor.rs`: pre-encoded
# answers, HTTP/2 frame headers parsed and no HPACK, the stream window closed as weir
# closes it while refusing; HTTP/1.1 heads scanned for their end and length. What it
# costs is the kernel's and the runtime's share, which no HTTP implementation can save.
# start_floor NAME BIN [ENV...] -> ${NAME}_PID, ${NAME}_PORT
start_floor() {
  local name=$1 bin=$2 p pid
  shift 2
  p=$(port)
  env "$@" taskset -c "$SERVER_CORE" "./target/$PROFILE_DIR/examples/$bin" "127.0.0.1:$p" > "$WORK/$name.log" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  for _ in $(seq 1 50); do grep -q listening "$WORK/$name.log" && break; sleep 0.1; done
  grep -q listening "$WORK/$name.log" || { cat "$WORK/$name.log"; exit 1; }
  printf -v "${name}_PID" %s "$pid"
  printf -v "${name}_PORT" %s "$p"
}
start_floor h2floor h2_floor
start_floor rawfloor raw_floor
start_floor truncfloor raw_floor FLOOR_TRUNC=1
per_request() { # per_request TICKS N -> µs per request; "<X" when the run took no tick at all
  awk -v t="$1" -v hz="$CLK_TCK" -v n="$2" 'BEGIN {if (t == 0) printf "<%.2f", 1 / hz / n * 1e6; else printf "%.1f", t / hz / n * 1e6}'
}
floor() { # floor LABEL NAME BODY N H2LOAD_ARGS...: the same measure as `refusal`
  local label=$1 name=$2 body=$3 n=$4 pid p t0 t1 s0 s1 out us=() ks=() u lo hi k
  shift 4
  eval "pid=\$${name}_PID p=\$${name}_PORT"
  for r in $(seq 0 "$RUNS"); do
    t0=$(cpu_ticks "$pid") s0=$(sys_ticks "$pid")
    out=$(taskset -c "$LOAD_CORE" h2load -n "$n" "$@" -d "$BODIES/$body" "http://127.0.0.1:$p/v1/traces" 2>&1)
    t1=$(cpu_ticks "$pid") s1=$(sys_ticks "$pid")
    echo "$out" | grep -q "^status codes: 0 2xx, 0 3xx, $n 4xx" || { echo "$label: h2load did not get $n refusals: $out" >&2; exit 1; }
    [ "$r" -eq 0 ] && continue # warm-up
    us+=("$(per_request $((t1 - t0)) "$n")")
    ks+=("$(per_request $((s1 - s0)) "$n")")
  done
  read -r u lo hi <<< "$(spread "${us[@]}")"
  k=$(middle "${ks[@]}")
  REFUSAL_ROWS+=("$(row "$label" "$u" "$lo" "$hi" "$k")")
  echo "${REFUSAL_ROWS[-1]}"
}
floor "floor, h2 crate: bare HTTP/2 server answering 429 (examples/h2_floor), 2-byte body" h2floor tiny.pb "$TINY_N" -c 4 -m 4
floor "floor, h2 crate: the same, 4 connections x 64 streams" h2floor tiny.pb "$TINY_N" -c 4 -m 64
floor "kernel floor, HTTP/2: pre-encoded frames, no HPACK (examples/raw_floor), 2-byte body" rawfloor tiny.pb "$TINY_N" -c 4 -m 4
floor "kernel floor, HTTP/2: the same, 4 connections x 64 streams" rawfloor tiny.pb "$TINY_N" -c 4 -m 64
floor "kernel floor, HTTP/1.1: answer from bytes (examples/raw_floor), 2-byte body" rawfloor tiny.pb "$TINY_N" --h1 -c 16 -m 1
floor "kernel floor, HTTP/1.1: the same, 512x10 body sent and read away" rawfloor 512x10.pb "$REJ_N" --h1 -c 16 -m 1
floor "kernel floor, HTTP/1.1: the same, 512x10 body thrown away in the kernel (recv MSG_TRUNC, no copy)" truncfloor 512x10.pb "$REJ_N" --h1 -c 16 -m 1

fi

# The disk queue (pipeline.queue.disk): the same weir with a disk queue, sync on_ack and
# interval, beside memory-only, 4 connections x 16 streams, run by run interleaved so all
# see the same machine (DISK_PROTOS: "h2c grpc"; empty skips; DISK_DIR: where the queues
# live, target/throughput/queue). With COMPARE_BIN, that build's on_ack queue runs too.
DISK_ROWS=() DISK_RATIOS=() DISK_NOTES=()
DISK_PROTOS=${DISK_PROTOS-h2c grpc}
DISK_DIR=${DISK_DIR:-target/throughput/queue}
disk_run() { # disk_run NAME PROTO N -> "spans/CPU-s spans/s MB/s peakMiB mean_ms"
  local name=$1 proto=$2 n=$3 admin b0 b1
  eval "admin=\$${name}_ADMIN"
  b0=$(metric "$admin" '^weir_queue_appended_bytes_total')
  read -r acc cpu wall peak ok refused mean _max _sys <<< "$(run_once "$name" "$proto" 512x10 "$n" "-m 16")"
  b1=$(metric "$admin" '^weir_queue_appended_bytes_total')
  if [ "$acc" -ne $((ok * 512)) ] || [ "$refused" -ne 0 ]; then
    echo "disk cell $name $proto: weir accepted $acc spans and refused $refused requests; h2load saw $ok successes" >&2
    exit 1
  fi
  echo "$(awk -v a="$acc" -v c="$cpu" 'BEGIN {printf "%.0f", a / c}') $(awk -v a="$acc" -v w="$wall" 'BEGIN {printf "%.0f", a / w}') $(awk -v b=$((b1 - b0)) -v w="$wall" 'BEGIN {printf "%.0f", b / w / 1e6}') $((peak / 1024)) $(to_ms "$mean")"
}
# What a queue's own metrics say: fsync mean and share under 0.5 / 1 ms, group size
# quantiles, records read from memory and from disk.
disk_notes() { # disk_notes NAME LABEL
  local admin m
  eval "admin=\$${1}_ADMIN"
  m=$(curl -sf "http://127.0.0.1:$admin/metrics")
  echo "$m" | awk -v label="$2" '
    /^weir_queue_fsync_duration_seconds_sum/ {s = $NF} /^weir_queue_fsync_duration_seconds_count/ {c = $NF}
    /^weir_queue_fsync_duration_seconds_bucket\{le="0.0005"\}/ {b5 = $NF} /^weir_queue_fsync_duration_seconds_bucket\{le="0.001"\}/ {b1 = $NF}
    /^weir_queue_group_commit_records\{quantile="0.5"\}/ {g50 = $NF} /^weir_queue_group_commit_records\{quantile="0.99"\}/ {g99 = $NF}
    /^weir_queue_read_records_total.*from="memory"/ {mem += $NF} /^weir_queue_read_records_total.*from="disk"/ {disk += $NF}
    END {
      printf "%s: %d fsyncs, mean %.2f ms, %.0f%% under 0.5 ms, %.0f%% under 1 ms; records per group p50 %s, p99 %s", label, c, c ? s / c * 1000 : 0, c ? b5 / c * 100 : 0, c ? b1 / c * 100 : 0, g50 == "" ? "n/a" : sprintf("%.0f", g50), g99 == "" ? "n/a" : sprintf("%.0f", g99)
      if (mem + disk > 0) printf "; records read from memory %.1f%% (%d of %d)", mem / (mem + disk) * 100, mem, mem + disk
      print ""
    }'
}
if [ -n "$DISK_PROTOS" ]; then
  echo "== disk queue"
  DISK_QUEUES="disk_on_ack disk_interval"
  for mode in on_ack interval; do
    rm -rf "${DISK_DIR:?}/$mode"
    start_weir "disk_$mode" "$THROTTLE_IN_PATH
pipeline:
  queue:
    disk: {path: \"$DISK_DIR/$mode\", sync: $mode}"
  done
  if [ -n "${COMPARE_BIN:-}" ]; then
    rm -rf "${DISK_DIR:?}/before"
    SAVED_BIN=$SERVER_BIN SERVER_BIN=$COMPARE_BIN
    start_weir before_on_ack "$THROTTLE_IN_PATH
pipeline:
  queue:
    disk: {path: \"$DISK_DIR/before\", sync: on_ack}"
    SERVER_BIN=$SAVED_BIN
    DISK_QUEUES="$DISK_QUEUES before_on_ack"
  fi
  n=$((SPANS_PER_RUN / 512))
  declare -A DISK_LABEL=([main]="memory only" [disk_on_ack]="disk, on_ack" [disk_interval]="disk, interval (100ms)" [before_on_ack]="disk, on_ack, ${COMPARE_BIN:-}")
  for proto in $DISK_PROTOS; do
    declare -A col_cpu=() col_wall=() col_mbs=() col_rss=() col_mean=()
    for q in main $DISK_QUEUES; do run_once "$q" "$proto" 512x10 $((n / 5)) "-m 16" > /dev/null; done
    ratios=()
    for r in $(seq 1 "$RUNS"); do
      for q in main $DISK_QUEUES; do
        read -r c w mb rs me <<< "$(disk_run "$q" "$proto" "$n")"
        col_cpu[$q]+="$c " col_wall[$q]+="$w " col_mbs[$q]+="$mb " col_rss[$q]+="$rs " col_mean[$q]+="$me "
        echo "  disk $proto run $r, ${DISK_LABEL[$q]}: $c spans per CPU-second"
        [ "$q" = main ] && mem_cpu=$c
        [ "$q" = disk_on_ack ] && ratios+=("$(awk -v d="$c" -v m="$mem_cpu" 'BEGIN {printf "%.0f%%", d / m * 100}')")
      done
    done
    for q in main $DISK_QUEUES; do
      # shellcheck disable=SC2086
      DISK_ROWS+=("| ${DISK_LABEL[$q]} | $proto | $(median_range ${col_cpu[$q]}) | $(median_range ${col_wall[$q]}) | $(median_range ${col_mbs[$q]}) | $(median_range ${col_rss[$q]}) | $(middle ${col_mean[$q]}) |")
      echo "${DISK_ROWS[-1]}"
    done
    DISK_RATIOS+=("| $proto | ${ratios[*]} |")
    unset col_cpu col_wall col_mbs col_rss col_mean
  done
  for q in $DISK_QUEUES; do DISK_NOTES+=("$(disk_notes "$q" "${DISK_LABEL[$q]}")"); done
  DISK_PIDS=$(for q in $DISK_QUEUES; do eval "echo \$${q}_PID"; done)
  # shellcheck disable=SC2086
  kill $DISK_PIDS 2> /dev/null || true
  # A weir that is shutting down still writes its queue's cursors; remove the directories
  # only once all have exited.
  # shellcheck disable=SC2086
  wait $DISK_PIDS 2> /dev/null || true
  rm -rf "${DISK_DIR:?}/on_ack" "${DISK_DIR:?}/interval" "${DISK_DIR:?}/before"
fi

# Decode-only: criterion, pinned to the same core, system allocator and jemalloc.
decode_rate() { # decode_rate BENCH GROUP -> spans/s from criterion's median ("n/a": not run)
  [ -f "target/criterion/$2/$1/new/estimates.json" ] || { echo n/a; return; }
  python3 -c 'import json,sys; e=json.load(open(sys.argv[1])); print(round(int(sys.argv[2]) / (e["median"]["point_estimate"] * 1e-9)))' \
    "target/criterion/$2/$1/new/estimates.json" "$3"
}
if [ -z "${SKIP_DECODE_BENCH:-}" ]; then
  echo "== decode-only criterion benches"
  # shellcheck disable=SC2086
  taskset -c "$SERVER_CORE" cargo bench -q --bench decode -- --noplot $CRITERION_ARGS > "$WORK/decode.txt" 2>&1 || { cat "$WORK/decode.txt"; exit 1; }
  # shellcheck disable=SC2086
  taskset -c "$SERVER_CORE" cargo bench -q --bench decode_jemalloc -- --noplot $CRITERION_ARGS > "$WORK/decode_jemalloc.txt" 2>&1 || { cat "$WORK/decode_jemalloc.txt"; exit 1; }
fi
# Inflating alone: criterion's inflate bench, the same bodies (ns per body, median).
if [ -z "${SKIP_DECODE_BENCH:-}" ]; then
  # shellcheck disable=SC2086
  taskset -c "$SERVER_CORE" cargo bench -q --bench inflate -- --noplot $CRITERION_ARGS > "$WORK/inflate.txt" 2>&1 || { cat "$WORK/inflate.txt"; exit 1; }
fi
inflate_ns() { # inflate_ns GROUP FUNCTION -> median ns, or n/a
  [ -f "target/criterion/$1/$2/new/estimates.json" ] || { echo n/a; return; }
  python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["median"]["point_estimate"]))' "target/criterion/$1/$2/new/estimates.json"
}
PLAIN_512=$(stat -c %s "$BODIES/512x10.pb")
COMPRESSED_ROWS=()
for cell in $CELLS; do
  proto=${cell%%/*} body=${cell#*/}
  case $body in 512x10.gz) enc=gzip ;; 512x10.zst) enc=zstd ;; *) continue ;; esac
  plain=${CELL_CPU_RATE[$proto/512x10]:-}
  rate=${CELL_CPU_RATE[$cell]}
  ns=$(inflate_ns "inflate_${enc}_512x10" weir)
  stream_ns=$(inflate_ns "inflate_${enc}_512x10" streaming)
  rotel=${CELL_ROTEL[$cell]:-n/a}
  # The goal: 0.75 x the uncompressed rate / (1 + inflate time / uncompressed time per request).
  COMPRESSED_ROWS+=("$(awk -v p="$proto" -v b="$body" -v r="$rate" -v u="${plain:-n/a}" -v ns="$ns" -v sns="$stream_ns" -v ro="$rotel" -v bytes="$PLAIN_512" 'BEGIN {
    gbs = (ns == "n/a") ? "n/a" : sprintf("%.2f", bytes / ns); sgbs = (sns == "n/a") ? "n/a" : sprintf("%.2f", bytes / sns)
    if (u == "n/a" || ns == "n/a") { goal = "n/a"; met = "n/a" } else { t = 512 / u * 1e9; g = 0.75 * u / (1 + ns / t); goal = sprintf("%.0f", g); met = (r >= g) ? "yes" : "no" }
    vs = (ro ~ /^[0-9]+$/) ? sprintf("%.2fx", r / ro) : "n/a"
    printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |", p, b, r, ro, vs, u, gbs " (" sgbs ")", goal, met, (ro ~ /^[0-9]+$/) ? ((r >= 3 * ro) ? "yes" : "no") : "n/a" }')")
done

DECODE_ROWS=()
for shape in 512x10 512x2 100x10; do
  spans=$(spans_of "$shape")
  sys=$(decode_rate spans "decode_traces_$shape" "$spans")
  jem=$(decode_rate spans "decode_traces_jemalloc_$shape" "$spans")
  DECODE_ROWS+=("| $shape | $sys | $jem |")
  eval "DECODE_SYS_${shape}=$sys DECODE_JEM_${shape}=$jem"
done

mkdir -p "$(dirname "$OUT")"
{
  echo "# Throughput, $(date -u +%F)"
  echo
  echo "\`bash scripts/bench-throughput.sh\` (RUNS=$RUNS, SPANS_PER_RUN=$SPANS_PER_RUN) at $(git rev-parse --short HEAD)$DIRTY."
  [ -n "${SMOKE:-}" ] && echo "SMOKE run: a debug build and $ACC_N accepted requests as the refusal baseline; it checks the script and weir's counts, and its numbers measure nothing." && echo
  echo "weir ($PROFILE_DIR, blackhole exporter, throttle on every request with its CPU lines out of reach and slow start off, so it decides but does not shed) pinned to CPU $SERVER_CORE; h2load pinned to CPU $LOAD_CORE."
  echo "Machine: $(nproc) CPUs, $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)."
  echo
  echo "## End to end"
  echo
  echo "Spans per CPU-second = spans weir accepted (its own counter, checked against h2load's successes) / weir's utime+stime."
  echo "Median (range) of $RUNS runs after a warm-up; gRPC and h2c: 4 connections x 4 streams; h1: 16 connections."
  echo
  echo "| protocol | body | spans per CPU-second | rotel $ROTEL_VERSION, spans per CPU-second | spans/s | peak RSS MiB | mean latency ms | worst max latency ms |"
  echo "|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${ROWS[@]}"
  echo
  echo "## Decode only (criterion, \`cargo bench --bench decode\` / \`decode_jemalloc\`, pinned to CPU $SERVER_CORE)"
  echo
  echo "| body | prost decode, system allocator, spans/s | prost decode, jemalloc, spans/s |"
  echo "|---|---|---|"
  printf '%s\n' "${DECODE_ROWS[@]}"
  echo
  echo "## Ratio: end to end spans per CPU-second / decode-only spans/s"
  echo
  echo "| protocol | body | vs decode (system allocator) | vs decode (jemalloc) |"
  echo "|---|---|---|---|"
  for cell in $CELLS; do
    proto=${cell%%/*} body=${cell#*/} shape=$(shape_of "$body")
    eval "sys=\$DECODE_SYS_${shape} jem=\$DECODE_JEM_${shape}"
    awk -v p="$proto" -v b="$body" -v e="${CELL_CPU_RATE[$cell]}" -v s="$sys" -v j="$jem" \
      'function pct(d) {return d == "n/a" ? "n/a" : sprintf("%.0f%%", 100 * e / d)} BEGIN {printf "| %s | %s | %s | %s |\n", p, b, pct(s), pct(j)}'
  done
  echo
  if [ -n "${COMPARE_BIN:-}" ]; then
    echo "## Against $COMPARE_BIN (the same cells, run by run beside this build; spans per CPU-second, median (range))"
    echo
    echo "| protocol | body | $COMPARE_BIN | this build | this / that |"
    echo "|---|---|---|---|---|"
    for cell in $CELLS; do
      awk -v p="${cell%%/*}" -v b="${cell#*/}" -v t="${CELL_BEFORE[$cell]}" -v n="${CELL_CPU_RATE[$cell]}" \
        'BEGIN {split(t, m, " "); printf "| %s | %s | %s | %s | %.2fx |\n", p, b, t, n, n / m[1]}'
    done
    echo
  fi
  if [ ${#COMPRESSED_ROWS[@]} -gt 0 ]; then
    echo "## Compressed bodies (512x10: $PLAIN_512 bytes of protobuf; gzip level 6, zstd level 3)"
    echo
    echo "Inflate GB/s: criterion's \`cargo bench --bench inflate\` on the same body, one core, output bytes per second: what weir runs (libdeflate for gzip, a one-shot zstd context), in brackets the streaming decoders it falls back to. Goal: the compressed rate at least 0.75 x the uncompressed rate / (1 + inflate time / uncompressed CPU time per request), and at least 3x rotel's."
    echo
    echo "| protocol | body | weir spans per CPU-second | rotel | weir / rotel | weir uncompressed | inflate GB/s (streaming) | 0.75 x uncompressed / (1 + inflate share) | met | 3x rotel |"
    echo "|---|---|---|---|---|---|---|---|---|---|"
    printf '%s\n' "${COMPRESSED_ROWS[@]}"
    echo
  fi
  if [ ${#DISK_ROWS[@]} -gt 0 ]; then
    echo "## Disk queue (\`pipeline.queue.disk\`, 512x10, 4 connections x 16 streams, median (range) of $RUNS runs)"
    echo
    echo "The same weir and exporter with a disk queue in $DISK_DIR ($(df -T "$DISK_DIR" 2> /dev/null | awk 'NR == 2 {print $2}') on $(df "$DISK_DIR" 2> /dev/null | awk 'NR == 2 {print $1}')). MB/s appended: weir_queue_appended_bytes_total over the run's wall time. on_ack answers each request after the fsync that covers it (group commit); interval after the write, with an fsync every 100 ms."
    echo
    echo "| queue | protocol | spans per CPU-second | spans/s | MB/s appended | peak RSS MiB | mean latency ms |"
    echo "|---|---|---|---|---|---|---|"
    printf '%s\n' "${DISK_ROWS[@]}"
    echo
    echo "on_ack spans per CPU-second as a share of memory only, each pass (the two run back to back):"
    echo
    echo "| protocol | on_ack / memory only, every pass |"
    echo "|---|---|"
    printf '%s\n' "${DISK_RATIOS[@]}"
    echo
    printf -- '- %s\n' "${DISK_NOTES[@]}"
    echo
  fi
  if [ ${#REFUSAL_ROWS[@]} -gt 0 ]; then
  echo "## Refusals ($REJ_N requests per run, $TINY_N for 2-byte bodies; median (range) of $RUNS runs after a warm-up; 4 connections x 4 streams unless the row says otherwise)"
  echo
  echo "The floor rows are servers that answer every request with weir's 429 and do nothing else, run and measured the same way. \`examples/h2_floor.rs\`: the h2 crate with weir's socket layer, allocator and runtime (no routing, auth, throttle or hyper): what HTTP/2 on h2 and the kernel cost before weir does anything. \`examples/raw_floor.rs\`: pre-encoded answers, no HPACK, HTTP/1.1 heads only scanned for their end: what the kernel and the runtime cost, which no HTTP implementation can save. CPU is utime+stime from /proc; the kernel column is stime alone."
  echo
  echo "| request | CPU per request µs | of which kernel µs | share of an accepted 512x10 request |"
  echo "|---|---|---|---|"
  echo "| accepted 512x10, h2c (tenant without quota) | $acc_us ($acc_lo–$acc_hi) | $acc_kernel | 100% |"
  printf '%s\n' "${REFUSAL_ROWS[@]}"
  fi
} > "$OUT"
cat "$OUT"
