#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# How long real local ranks take to start: ptw runs a DDP run of RANKS CPU ranks (one step
# of the default profile, headless), and, in the same script, the same run of one rank as
# the baseline; each run's summary says when the first and the last of its ranks sent their
# first record (`ranks_started_s`, counted from the launch of their processes). Writes
# tests/bench/results/startup-<UTC time>.json and prints it:
#
#   ranks                 as asked
#   first_s, last_s       ranks_started_s of the RANKS-rank run (the median of ROUNDS runs)
#   one_rank_s            ranks_started_s.last of the one-rank run (the median of ROUNDS runs)
#   last_over_one_rank    last_s / one_rank_s: what starting RANKS ranks at once costs over one
#
# Usage: tests/bench/bench_startup.sh [RANKS=32] [ROUNDS=3]
set -euo pipefail
ranks=${1:-32} rounds=${2:-3}
[[ $ranks =~ ^[0-9]+$ ]] && [ "$ranks" -ge 1 ] || { echo "bench_startup: RANKS must be a whole number >= 1, not '$ranks'" >&2; exit 2; }
[[ $rounds =~ ^[0-9]+$ ]] && [ "$rounds" -ge 1 ] || { echo "bench_startup: ROUNDS must be a whole number >= 1, not '$rounds'" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
ptw=${PTW:-$here/../../build/bin/ptw}
[ -x "$ptw" ] || { echo "bench_startup: build ptw first (README)" >&2; exit 2; }
runs=$(mktemp -d)
trap 'rm -rf "$runs"' EXIT
mkdir -p "$here/results"
out="$here/results/startup-$(date -u +%Y%m%dT%H%M%SZ).json"

/usr/bin/python3 - "$ptw" "$runs" "$ranks" "$rounds" "$out" <<'EOF'
import json, statistics, subprocess, sys
ptw, runs, ranks, rounds, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]

def started(n, i):
    summary = f"{runs}/summary-{n}-{i}.json"
    p = subprocess.run([ptw, "--headless", "--runs-dir", runs, "--summary", summary, "--set", "strategy.kind=ddp",
                        "--set", f"strategy.ranks={n}", "--set", "hyper.max_steps=1", "--set", "run.timeout_s=600"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"bench_startup: ptw exited {p.returncode} with {n} ranks:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    s = json.load(open(summary))["ranks_started_s"]
    if s is None:
        sys.exit(f"bench_startup: the {n}-rank run's summary has no ranks_started_s")
    return s

# Alternating, so that a burst of load from elsewhere falls on both.
many, one = [], []
for i in range(rounds):
    one.append(started(1, i)["last"])
    many.append(started(ranks, i))
first = statistics.median(s["first"] for s in many)
last = statistics.median(s["last"] for s in many)
base = statistics.median(one)
result = {"ranks": ranks, "rounds": rounds, "first_s": round(first, 3), "last_s": round(last, 3),
          "one_rank_s": round(base, 3), "last_over_one_rank": round(last / base, 2)}
with open(out, "w") as f:
    json.dump(result, f, indent=2)
    f.write("\n")
print(json.dumps(result, indent=2))
print(f"bench_startup: written to {out}", file=sys.stderr)
EOF
