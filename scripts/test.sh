#!/usr/bin/env bash
# The test command: every Rust test (unit, integration over real sockets, real cgroups,
# the simulator), the OpenTelemetry Python SDK interop tests (they make their own venvs),
# the loadgen smoke run in a constrained cgroup, and a short throughput smoke run on the
# debug build (h2load; it
# fails if weir's counts disagree with the load, or if refusals break HTTP/2 connections).
set -euo pipefail
cd "$(dirname "$0")/.."
# promtool and a real Prometheus for the alert-rule and dashboard tests (tests/deploy.rs).
# redis-server for the fleet's shared quotas (tests/fleet.rs starts its own on a free port).
command -v promtool > /dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus; }
command -v redis-server > /dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server; }
# tansu, a Kafka-compatible broker, for the kafka exporter's tests (built once, cached).
TANSU=$(bash scripts/install-tansu.sh)
export TANSU
cargo test --workspace --all-targets
bash scripts/python-sdk-test.sh
bash scripts/image-test.sh
bash scripts/doc-examples-test.sh
bash scripts/bench-smoke.sh
SMOKE=1 RUNS=1 SPANS_PER_RUN=300000 CELLS="grpc/512x10.gz grpc/512x10.zst h1/100x10 h2c/512x10 h2c/512x10.zst" \
  OUT=target/throughput/smoke.md bash scripts/bench-throughput.sh
