#!/usr/bin/env bash
# Hostile and broken clients, one attack at a time, against weir in a real 1 CPU /
# 300 MiB cgroup with the shipped middlewares, beside a legitimate client (20 OTLP/HTTP
# requests a second, each on a new connection): weir's CPU and peak RSS, the legitimate
# client's success rate and P99, the log written, OOM kills (examples/attacks.rs).
# Runs this tree ("after") and BEFORE (a commit, default ecb8624, the last one without
# the hardening) and writes OUT/attacks.md.
#
# Environment: SECS (per attack, default 10), OUT (default bench/results/<date>/attacks),
# ATTACKS (comma-separated subset), BEFORE (commit), BEFORE_BIN (a prebuilt binary for
# it: skips building the old commit; not a WEIR_ name, which weir would read as a
# config key). Needs root (cgroups). About 5 minutes plus builds.
set -euo pipefail
cd "$(dirname "$0")/.."

SECS=${SECS:-10}
OUT=${OUT:-bench/results/$(date +%Y-%m-%d)/attacks}
BEFORE=${BEFORE:-ecb8624}
mkdir -p "$OUT"
if [ -z "${BEFORE_BIN:-}" ]; then
  tree=$(mktemp -d)
  git worktree add -f "$tree" "$BEFORE" -q
  (cd "$tree" && CARGO_TARGET_DIR="$PWD/../$(basename "$PWD")-target" cargo build --release -q --bin weir)
  BEFORE_BIN=$tree-before-weir
  cp "$tree/../$(basename "$tree")-target/release/weir" "$BEFORE_BIN"
  git worktree remove --force "$tree"
fi
cargo build --release -q --bin weir --example attacks
flags=(--secs "$SECS")
[ -n "${ATTACKS:-}" ] && flags+=(--attacks "$ATTACKS")
{
  echo "# Attacks: $(date -u +%Y-%m-%dT%H:%MZ), $SECS s each, weir in 1 CPU / 300 MiB"
  echo
  echo "before = $BEFORE, after = $(git rev-parse --short HEAD)$(git diff --quiet -- . ':!bench/results' || echo ' (with uncommitted changes)')"
  echo
  target/release/examples/attacks --weir "$BEFORE_BIN" --label before "${flags[@]}"
  target/release/examples/attacks --weir target/release/weir --label after "${flags[@]}" | tail -n +3
} | tee "$OUT/attacks.md"
