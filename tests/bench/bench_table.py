"""Prints the benchmark table from bench-samples.json.

Ratios are paired: each round's ptw figure is divided by the Python DDP (or ptw Single) figure of the
same round, and the median of those ratios is shown, so load that comes and goes on a shared machine
affects both sides of a ratio alike. Load on a shared machine only ever slows a run down, so the best
of the rounds is each configuration's least disturbed figure: the last two columns give it and its
ratio to Python DDP's best, as a check on the medians.
"""
import json, os, platform, statistics, subprocess, sys

rows = json.load(open(sys.argv[1]))
runs = {}
for r in rows:
    runs.setdefault((r["workload"], r["impl"]), []).append(r["samples_per_s"])
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.machine())
rounds = min(len(v) for v in runs.values())
print(f"Machine: {cpu}, {os.cpu_count()} cores; commit {commit}; {rounds} rounds; medians; ratios paired per round.\n")
print("| workload | impl | samples/s | × Python DDP | scaling efficiency | best samples/s | best × Python DDP best |")
print("|---|---|---:|---:|---:|---:|---:|")
for (w, impl), values in sorted(runs.items()):
    base = runs.get((w, "python-ddp"))
    single = runs.get((w, "ptw-single"))
    ratio = statistics.median(v / b for v, b in zip(values, base)) if base else float("nan")
    workers = 2 if any(k in impl for k in ("ddp", "dataparallel", "pool", "two-", "lockstep")) else 1
    eff = ""
    if single and (impl.startswith("ptw") or impl in ("two-singles-apart", "lockstep-ceiling")):
        eff = f"{statistics.median(v / (workers * s) for v, s in zip(values, single)):.2f}"
    best = max(values) / max(base) if base else float("nan")
    print(f"| {w} | {impl} | {statistics.median(values):,.0f} | {ratio:.2f} | {eff} | {max(values):,.0f} | {best:.2f} |")

# Synchronous strategies against what lock-step allows on this machine in the same round.
lockstep = [(w, impl) for (w, impl) in sorted(runs) if impl in ("ptw-ddp-shm", "ptw-dataparallel", "ptw-pool-sync")]
if any((w, "lockstep-ceiling") in runs for w, _ in lockstep):
    print("\n| workload | impl | × lock-step ceiling (median) | best ÷ best ceiling |")
    print("|---|---|---:|---:|")
    for w, impl in lockstep:
        ceiling = runs.get((w, "lockstep-ceiling"))
        if not ceiling:
            continue
        values = runs[(w, impl)]
        print(f"| {w} | {impl} | {statistics.median(v / c for v, c in zip(values, ceiling)):.2f} | "
              f"{max(values) / max(ceiling):.2f} |")

# Where a step's time goes: each rank's mean step time after its warm-up and its parts (the run
# summary's step_ms), averaged over ranks, median over rounds.
split = {}
for r in rows:
    if r.get("step_ms"):
        split.setdefault((r["workload"], r["impl"]), []).append(r["step_ms"])
if split:
    parts = ("total", "data", "compute", "comm", "opt")
    print("\n| workload | impl | step ms | data | compute | comm | opt |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for (w, impl), values in sorted(split.items()):
        cells = " | ".join(f"{statistics.median(v[p] for v in values):.3f}" for p in parts)
        print(f"| {w} | {impl} | {cells} |")
