"""Summarises the held-bytes runs in a folder (the argument): a row per run and phase."""
import glob, json, os, sys

here = sys.argv[1]
rows = []


def label(bound):
    b = int(bound)
    return "none" if b == 0 else f"{b >> 20} MiB" if b >= 1 << 20 else f"{b} B"


for d in sorted(glob.glob(os.path.join(here, "*-*-*")), key=lambda p: int(os.path.basename(p).split("-")[0])):
    name = os.path.basename(d)
    _, scen, bound = name.split("-")
    j = json.load(open(os.path.join(d, f"{scen}.json")))
    cg = json.load(open(os.path.join(d, f"{scen}.cgroup.json")))
    m = j["metrics"]
    skipped = max((s["counters"].get("holds_skipped/held_bytes", 0) for s in m), default=0)
    held_peak = max((s["gauges"].get("weir_throttle_held_bytes", 0) for s in m), default=0)
    read_first = max((s["counters"].get("weir_throttle_holds_read_first_total", 0) for s in m), default=0)
    for p in j["phases"]:
        rows.append((name, scen, label(bound), p["phase"], p["accepted_spans_per_s"], p["p99_ms"], p["p99_settled_ms"]))
    rows.append((name, scen, label(bound), "run", skipped, held_peak, (cg["peak_mem_bytes"] >> 20, cg.get("peak_socket_bytes", 0) >> 20, cg["oom_kills"], cg.get("connections_accepted", 0), read_first)))

print("| run | bound | phase | accepted spans/s | P99 ms | P99 after 2 s ms |")
print("|---|---|---|---|---|---|")
for r in rows:
    if r[3] != "run":
        print(f"| {r[0]} | {r[2]} | {r[3]} | {r[4]:,.0f} | {r[5]:.1f} | {r[6]:.1f} |")
print()
print("| run | answered at once for want of room | held after reading the body | held bytes, peak (MiB) | memory peak MiB | socket peak MiB | OOM kills | connections accepted |")
print("|---|---|---|---|---|---|---|---|")
for r in rows:
    if r[3] == "run":
        print(f"| {r[0]} | {r[4]:,.0f} | {r[6][4]:,.0f} | {r[5] / 2**20:.1f} | {r[6][0]} | {r[6][1]} | {r[6][2]} | {r[6][3]:,} |")
