#!/usr/bin/env bash
# The disk queue's crash test, many times: weir with a disk queue exports over OTLP/HTTP
# to a second weir (the sink) that writes files; clients send spans with unique names and
# record which requests got 200; weir is kill -9ed at random moments (every other time
# with the sink stopped as well) and restarted; at the end every span of every
# acknowledged request must be in the sink's files. The test suite runs it with 4 kills;
# this runs more on a release build.
#
#   bash scripts/crash-test.sh            # 40 kills
#   CRASH_ITERATIONS=200 bash scripts/crash-test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export CRASH_ITERATIONS=${CRASH_ITERATIONS:-40}
cargo test --release --test disk_queue kill_9_at_random_moments_loses_nothing_acknowledged -- --nocapture
