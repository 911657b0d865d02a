#!/usr/bin/env bash
# Runs the OpenTelemetry Python SDK exporters (gRPC and HTTP/protobuf) against a real
# weir and checks the file exporter's output. Makes its own venv under target/.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=target/pyvenv-sdk
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
"$VENV/bin/pip" install -q --disable-pip-version-check \
  opentelemetry-sdk opentelemetry-exporter-otlp-proto-grpc opentelemetry-exporter-otlp-proto-http

cargo build -q --bin weir
WORK=$(mktemp -d)
trap 'kill $WEIR_PID 2>/dev/null || true; wait $WEIR_PID 2>/dev/null || true; rm -rf "$WORK"' EXIT

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
HTTP_PORT=$(port); GRPC_PORT=$(port); ADMIN_PORT=$(port)
cat > "$WORK/weir.yaml" <<YAML
receiver:
  http_server: {endpoint: "127.0.0.1:$HTTP_PORT", middlewares: ["logging", "content_decompressor"]}
  grpc_server: {endpoint: "127.0.0.1:$GRPC_PORT", middlewares: ["logging", "content_decompressor"]}
pipeline:
  batch: {timeout: 20ms}
exporters:
  - {type: file, path: "$WORK/data"}
admin: {endpoint: "127.0.0.1:$ADMIN_PORT"}
YAML
./target/debug/weir --config "$WORK/weir.yaml" > "$WORK/weir.log" 2>&1 &
WEIR_PID=$!
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$ADMIN_PORT/readyz" > /dev/null && break
  sleep 0.1
done
if ! "$VENV/bin/python" tests/python/sdk_export.py "http://127.0.0.1:$GRPC_PORT" "http://127.0.0.1:$HTTP_PORT" "$WORK/data"; then
  echo "--- weir log"; cat "$WORK/weir.log"
  exit 1
fi
