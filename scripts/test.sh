#!/usr/bin/env bash
# The test command: every Rust test (unit, integration over real sockets) and the
# OpenTelemetry Python SDK interop test (which makes its own venv).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --all-targets
bash scripts/python-sdk-test.sh
