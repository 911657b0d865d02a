"""Medians over the passes of several storm folders taken together.

    python3 bench/results/2026-12-06/pooled.py <storm dir> [<storm dir> ...]

For each run and phase: the median and range of the per-pass D / A accepted spans/s,
the pooled ratio (D's accepted spans over all passes / A's), and the median and highest
per-pass P99 ratio (D / A, accepted requests, whole phase)."""
import glob
import json
import os
import statistics
import sys

RUNS = ['http-once', 'h2c-once', 'grpc-once', 'http-respect', 'open-loop']
for run in RUNS:
    per_phase = {}
    for base in sys.argv[1:]:
        for pdir in sorted(glob.glob(f'{base}/{run}/pass-*')):
            try:
                a = json.load(open(os.path.join(pdir, 'A.json')))
                d = json.load(open(os.path.join(pdir, 'D.json')))
            except (OSError, ValueError):
                continue
            for pa, pd in zip(a['phases'], d['phases']):
                r = per_phase.setdefault(pa['phase'], {'g': [], 'p': [], 'a': 0.0, 'd': 0.0})
                r['g'].append(pd['accepted_spans_per_s'] / pa['accepted_spans_per_s'])
                r['p'].append(pd['p99_ms'] / pa['p99_ms'])
                r['a'] += pa['accepted_spans_per_s']
                r['d'] += pd['accepted_spans_per_s']
    for phase, r in per_phase.items():
        print(f"{run:13} {phase:11} passes {len(r['g']):2}  D/A median {100 * statistics.median(r['g']):4.0f}% "
              f"({100 * min(r['g']):.0f}-{100 * max(r['g']):.0f}%), pooled {100 * r['d'] / r['a']:4.0f}%  "
              f"P99 D/A median {statistics.median(r['p']):.2f}x, highest {max(r['p']):.2f}x")
