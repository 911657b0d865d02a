#!/usr/bin/env bash
# The image test: builds weir's image as scripts/image.sh does (unoptimised, to keep the
# test command short), checks the shipped config inside it, and sends one OTLP request
# through it. Where no Docker engine is reachable it says so and stops (exit 0): a user's
# machine may have none, CI here has one.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v docker > /dev/null || ! docker info > /dev/null 2>&1; then
  echo "image test NOT RUN: no Docker engine reachable"
  exit 0
fi
PROFILE=debug bash scripts/image.sh
docker run --rm weir:local --config /config/weir.yaml --check > /dev/null
echo "image: --check on the shipped config passed"

data=$(mktemp -d)
name=weir-image-test-$$
cleanup() { docker rm -f "$name" > /dev/null 2>&1 || true; rm -rf "$data"; }
trap cleanup EXIT
# Host networking (no bridge or iptables needed); ports apart from the usual ones.
docker run -d --name "$name" --network host -v "$data:/var/lib/weir/data" \
  -e WEIR_RECEIVER__HTTP_SERVER__ENDPOINT=127.0.0.1:24318 \
  -e WEIR_RECEIVER__GRPC_SERVER__ENDPOINT=127.0.0.1:24317 \
  -e WEIR_ADMIN__ENDPOINT=127.0.0.1:28888 \
  weir:local --config /config/weir.yaml > /dev/null
for _ in $(seq 1 100); do curl -sf http://127.0.0.1:28888/readyz > /dev/null && break; sleep 0.1; done
curl -sf http://127.0.0.1:28888/readyz > /dev/null || { docker logs "$name"; echo "image test: weir never became ready" >&2; exit 1; }
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST http://127.0.0.1:24318/v1/logs -H 'Content-Type: application/json' \
  -d '{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"body":{"stringValue":"from the image test"}}]}]}]}')
[ "$code" = 200 ] || { docker logs "$name"; echo "image test: POST answered $code" >&2; exit 1; }
for _ in $(seq 1 50); do grep -qs "from the image test" "$data"/logs*.jsonl && break; sleep 0.1; done
grep -qs "from the image test" "$data"/logs*.jsonl || { docker logs "$name"; ls -la "$data"; echo "image test: the log record was not exported" >&2; exit 1; }
echo "image: one OTLP/HTTP request went through weir:local and was exported"
