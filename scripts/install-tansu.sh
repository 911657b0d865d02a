#!/usr/bin/env bash
# Installs tansu, a Kafka-compatible broker from crates.io, for the kafka exporter's tests
# (tests/kafka.rs, scripts/python-sdk-test.sh). It takes about 12 minutes to build, so it
# is built once into a cache folder outside the clone (WEIR_TOOLS, default
# ~/.cache/weir-tools) and found there afterwards. Prints the binary's path.
set -euo pipefail
DIR=${WEIR_TOOLS:-$HOME/.cache/weir-tools}/tansu
BIN=$DIR/bin/tansu
if [ ! -x "$BIN" ]; then
  echo "installing tansu 0.6.0 into $DIR (a one-time build of about 12 minutes)" >&2
  cargo install tansu --version 0.6.0 --features dynostore --locked --root "$DIR" >&2
fi
echo "$BIN"
