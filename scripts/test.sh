#!/usr/bin/env bash
# The test command: every Rust test (unit, integration over real sockets, real cgroups,
# the simulator), the OpenTelemetry Python SDK interop tests (they make their own venvs),
# and the loadgen smoke run in a constrained cgroup.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --all-targets
bash scripts/python-sdk-test.sh
bash scripts/bench-smoke.sh
