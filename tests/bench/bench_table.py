# SPDX-License-Identifier: GPL-3.0-or-later
"""Prints the tables of a bench_ddp.sh run, and keeps runs as files.

  bench_table.py FILE               prints the tables of FILE: a run kept in tests/bench/results/, or
                                    bench-samples.json (the last run's samples, taken as this machine's
                                    and this commit's)
  bench_table.py --save DIR FILE    keeps FILE (bench-samples.json) in DIR as a run of this machine and
                                    commit, DIR/<date>-<commit>-<machine>.json, and prints its path
  bench_table.py --list [DIR]       one line per kept run: file, date, commit, machine, rounds
  bench_table.py --targets [DIR]    one row per kept run: its figures for BENCHMARKS.md's targets, each
                                    the median of ratios paired per round, with the rounds' range

A kept run is one JSON object: date (UTC), commit, machine (the CPU's model name), cores, rounds,
command, and samples, one per configuration and round as bench_ddp.sh records them
({"workload", "impl", "samples_per_s", "step_ms"?}).

Ratios are paired: each round's ptw figure is divided by the Python DDP (or ptw Single) figure of the
same round, and the median of those ratios is shown, so load that comes and goes on a shared machine
affects both sides of a ratio alike. Load on a shared machine only ever slows a run down, so the best
of the rounds is each configuration's least disturbed figure: the last two columns give it and its
ratio to Python DDP's best, as a check on the medians.
"""
import datetime, json, os, platform, re, statistics, subprocess, sys


def this_machine():
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")),
               platform.machine())
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    return cpu, os.cpu_count(), commit


def load(path):
    """A kept run, or a bare list of samples taken as this machine's at this commit."""
    data = json.load(open(path))
    if isinstance(data, list):
        cpu, cores, commit = this_machine()
        data = {"machine": cpu, "cores": cores, "commit": commit, "samples": data}
    return data


def machine_slug(cpu):
    words = re.findall(r"[a-z0-9]+", cpu.lower())
    for brand in ("xeon", "epyc", "ryzen", "threadripper", "core", "neoverse", "graviton"):
        if brand in words:
            return brand
    return "-".join(w for w in words if w not in ("intel", "amd", "r", "tm", "cpu", "processor"))[:24] or "cpu"


def print_tables(run):
    rows = run["samples"]
    runs = {}
    for r in rows:
        runs.setdefault((r["workload"], r["impl"]), []).append(r["samples_per_s"])
    rounds = min(len(v) for v in runs.values())
    when = f"{run['date']}; " if run.get("date") else ""
    print(f"Machine: {run['machine']}, {run['cores']} cores; {when}commit {run['commit']}; {rounds} rounds; medians; "
          "ratios paired per round.\n")
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


def save(folder, path):
    run = load(path)
    rounds = min(len([r for r in run["samples"] if (r["workload"], r["impl"]) == k])
                 for k in {(r["workload"], r["impl"]) for r in run["samples"]})
    run = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"), "commit": run["commit"],
           "machine": run["machine"], "cores": run["cores"], "rounds": rounds,
           "command": f"tests/bench/bench_ddp.sh {rounds}", "samples": run["samples"]}
    os.makedirs(folder, exist_ok=True)
    name = os.path.join(folder, f"{run['date']}-{run['commit']}-{machine_slug(run['machine'])}.json")
    with open(name + ".tmp", "w") as out:
        write_run(run, out)
    os.replace(name + ".tmp", name)
    print(name)


def write_run(run, out):
    """Pretty enough to diff: the metadata one field a line, then one sample a line."""
    out.write("{\n")
    for key in ("date", "commit", "machine", "cores", "rounds", "command"):
        out.write(f"  {json.dumps(key)}: {json.dumps(run[key])},\n")
    out.write('  "samples": [\n')
    out.write(",\n".join("    " + json.dumps(s, separators=(", ", ": ")) for s in run["samples"]))
    out.write("\n  ]\n}\n")


def list_runs(folder):
    for name in sorted(os.listdir(folder)):
        if name.endswith(".json"):
            run = json.load(open(os.path.join(folder, name)))
            print(f"{os.path.join(folder, name)}  {run['date']}  {run['commit']}  {run['machine']}, "
                  f"{run['cores']} cores  {run['rounds']} rounds")


def paired(runs, workload, impl, base, factor=1):
    """Median, min and max over rounds of impl ÷ (factor × base) in the same round; None if absent."""
    a, b = runs.get((workload, impl)), runs.get((workload, base))
    if not a or not b:
        return None
    ratios = [x / (factor * y) for x, y in zip(a, b)]
    return statistics.median(ratios), min(ratios), max(ratios)


def cell(figure, digits=2):
    if figure is None:
        return ""
    m, lo, hi = figure
    return f"{m:.{digits}f} ({lo:.{digits}f}-{hi:.{digits}f})"


def commit_order(commit):
    """How far into history `commit` is (newest runs first among a day's), 0 where git does not know it."""
    out = subprocess.run(["git", "rev-list", "--count", commit], capture_output=True, text=True,
                         cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    return int(out) if out.isdigit() else 0


def print_targets(folder):
    print("| run | machine | mlp: DDP ÷ Python DDP | mlp: DDP efficiency | mlp: lock-step ceiling | "
          "seed: DDP ÷ Python DDP | mlp: DataParallel ÷ Single | mlp: pool sync ÷ DDP |")
    print("|---|---|---|---|---|---|---|---|")
    kept = [json.load(open(os.path.join(folder, n))) for n in os.listdir(folder) if n.endswith(".json")]
    # The folder keeps other benchmarks' runs too (loader-*, script-*, multihost): bench_ddp.sh's have samples.
    kept = [run for run in kept if "date" in run and run.get("samples") and all("workload" in r for r in run["samples"])]
    for run in sorted(kept, key=lambda r: (r["date"], commit_order(r["commit"])), reverse=True):
        runs = {}
        for r in run["samples"]:
            runs.setdefault((r["workload"], r["impl"]), []).append(r["samples_per_s"])
        print(f"| {run['date']} {run['commit']} | {machine_slug(run['machine'])} | "
              f"{cell(paired(runs, 'mlp', 'ptw-ddp-shm', 'python-ddp'))} | "
              f"{cell(paired(runs, 'mlp', 'ptw-ddp-shm', 'ptw-single', 2))} | "
              f"{cell(paired(runs, 'mlp', 'lockstep-ceiling', 'ptw-single', 2))} | "
              f"{cell(paired(runs, 'seed', 'ptw-ddp-shm', 'python-ddp'), 1)} | "
              f"{cell(paired(runs, 'mlp', 'ptw-dataparallel', 'ptw-single'))} | "
              f"{cell(paired(runs, 'mlp', 'ptw-pool-sync', 'ptw-ddp-shm'))} |")


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    args = sys.argv[1:]
    if args[:1] == ["--save"] and len(args) == 3:
        save(args[1], args[2])
    elif args[:1] == ["--list"] and len(args) <= 2:
        list_runs(args[1] if len(args) == 2 else os.path.join(here, "results"))
    elif args[:1] == ["--targets"] and len(args) <= 2:
        print_targets(args[1] if len(args) == 2 else os.path.join(here, "results"))
    elif len(args) == 1 and not args[0].startswith("--"):
        print_tables(load(args[0]))
    else:
        sys.exit(__doc__)
