#!/usr/bin/env bash
# Builds weir's container image from a fresh clone, in one command: the statically
# linked binaries (weir and loadgen; glibc's static crt, so the image needs no base
# image and none is pulled), then the image FROM scratch, tagged weir:<version> and
# weir:local (what docker-compose.yml and deploy/kubernetes use).
#
#   scripts/image.sh                # release build (what you deploy)
#   PROFILE=debug scripts/image.sh  # a quicker unoptimised build (the image test)
set -euo pipefail
cd "$(dirname "$0")/.."
PROFILE=${PROFILE:-release}
TARGET=x86_64-unknown-linux-gnu
case $PROFILE in
  release) flag=(--release) ;;
  debug) flag=() ;;
  *) echo "PROFILE must be release or debug" >&2; exit 2 ;;
esac
command -v docker > /dev/null || { echo "image.sh: docker is not installed" >&2; exit 1; }
# --target keeps the static build apart from the usual one (build scripts and proc
# macros stay dynamic, as they run here).
RUSTFLAGS="-C target-feature=+crt-static" cargo build "${flag[@]}" --target "$TARGET" -p weir -p loadgen --bin weir --bin loadgen
bin=target/$TARGET/$PROFILE
version=$("$bin/weir" --version | awk '{ print $2 }')
docker build --build-arg PROFILE="$PROFILE" -t "weir:$version" -t weir:local .
echo "built weir:$version and weir:local ($("$bin/weir" --version))"
