#!/usr/bin/env bash
# The docs' examples against a running weir: weir with the shipped config/weir.yaml (the
# README's first command, on its own ports 4317/4318/8888, data under a scratch folder),
# then every ```sh block of README.md and docs/*.md that talks to localhost:4318 or :8888,
# run as written. A block fails the test if it exits non-zero, prints an HTTP status
# other than 2xx (the examples that print one), or, for the README's first request,
# if its log record is not in data/logs.jsonl. Blocks that need a file the reader makes
# first (`--data-binary @file`) are listed and left out.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
weir=${WEIR:-target/debug/weir}
[ -x "$weir" ] || cargo build -q --bin weir
work=$(mktemp -d)
cleanup() { [ -n "${pid:-}" ] && kill "$pid" 2> /dev/null; wait 2> /dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
(cd "$work" && exec "$root/$weir" --config "$root/config/weir.yaml" > weir.log 2>&1) &
pid=$!
for _ in $(seq 1 100); do curl -sf localhost:8888/readyz > /dev/null && break; sleep 0.1; done
curl -sf localhost:8888/readyz > /dev/null || { cat "$work/weir.log"; echo "doc examples: weir did not start" >&2; exit 1; }

python3 - "$work" README.md docs/*.md <<'PY'
import os, re, subprocess, sys, time
work, files = sys.argv[1], sys.argv[2:]
ran = skipped = 0
for f in files:
    text = open(f).read()
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        if not re.search(r"localhost:(4318|8888)", block):
            continue
        where = f"{f}: {block.strip().splitlines()[0][:70]}"
        if re.search(r"--data-binary @", block):
            print(f"left out (needs a file you make): {where}")
            skipped += 1
            continue
        # A person types the next line a moment later: a block is tried up to three times,
        # half a second apart (the file exporter writes a batch within 200 ms).
        for attempt in range(3):
            r = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block], cwd=work, capture_output=True, text=True, timeout=60)
            out = r.stdout
            codes = re.findall(r"^(\d{3})$", out, re.M)
            bad = [c for c in codes if not c.startswith("2")]
            if r.returncode == 0 and not bad and ("hello weir" not in block or "hello weir" in out):
                break
            time.sleep(0.5)
        if r.returncode != 0 or bad:
            sys.exit(f"doc example failed ({where}): exit {r.returncode}, statuses {codes}\n{out}\n{r.stderr}")
        if "hello weir" in block and "hello weir" not in out:
            sys.exit(f"doc example ({where}): the record sent is not in data/logs.jsonl:\n{out}")
        print(f"ran: {where}")
        ran += 1
if ran < 2:
    sys.exit(f"only {ran} doc examples found to run")
print(f"doc examples: {ran} ran, {skipped} left out")
PY
