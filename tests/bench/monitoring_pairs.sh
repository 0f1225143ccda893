#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# What watching a run costs its ranks' throughput, in many short runs rather than a few long
# ones: on a shared machine the training rate drifts over minutes, so each round runs every way
# back to back, in an order that turns round by round, and each way is set against the two
# metrics-off runs of its own round.
#
#   tests/bench/monitoring_pairs.sh [rounds=20] [steps=100000]
#
# A round runs the default profile (seed workload, 2 DDP ranks over shared memory), `steps`
# steps each, five ways:
#   off, off'  headless with run.metrics false, twice
#   stored     a headless run, every record stored (ranks write their steps, Note [Ranks write
#              their steps] in core/engine/worker.cpp)
#   window     the window, offscreen (`ptw --start`), every record stored and the charts live
#   burn       metrics off beside a program that only burns CPU, 5 ms every 50 ms (about 10% of
#              one core; its CPU time over the run is measured): what taking a known share of a
#              core costs these ranks, large enough to resolve, to set against monitoring's
#              share of the machine (monitoring_cpu.sh)
# and three more when PTW_WAYS names them (PTW_WAYS="off stored off2 window burn idle pulse nostacks"):
#   idle       metrics off beside an idle window (offscreen, left open after a run of one step,
#              its device list already listed): what the window's mere presence costs
#   pulse      metrics off beside a program that wakes like the window's process while it
#              watches (13 times a second, and 5 ms of CPU every 2 s, as one redraw takes):
#              what any program with that pattern costs, window or not
#   nostacks   metrics off with the ranks' stacks handler left out (PTW_STACKS_HANDLER=off,
#              Note [Native stacks] in core/engine/native_stacks.h): off / nostacks is what the
#              handler, installed in every run and idle while nothing asks, costs a healthy run
# The rate is rank 0's "finished after N steps in X s" (training time, start-up left out). It
# prints, for stored, window and burn, the median over rounds of rate ÷ mean of the round's two
# off rates, and for off ÷ off' the same: two runs that differ in nothing, whose spread is what
# the machine's noise alone gives (the resolution of the others). Each median comes with a 95%
# bootstrap interval over rounds. All rates go to tests/bench/monitoring-samples.json (or
# $PTW_BENCH_SAMPLES).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ptw=${PTW:-$here/../../build/bin/ptw}
rounds=${1:-20}
steps=${2:-100000}
samples=${PTW_BENCH_SAMPLES:-$here/monitoring-samples.json}
[ -x "$ptw" ] || { echo "monitoring_pairs: build ptw first (README)" >&2; exit 2; }
[[ $rounds =~ ^[0-9]+$ ]] && [ "$rounds" -ge 2 ] || { echo "monitoring_pairs: rounds must be a whole number >= 2, not '$rounds'" >&2; exit 2; }
[[ $steps =~ ^[0-9]+$ ]] && [ "$steps" -ge 1000 ] || { echo "monitoring_pairs: steps must be a whole number >= 1000, not '$steps'" >&2; exit 2; }
out=$(mktemp -d)
trap 'pkill -P $$ 2>/dev/null || true; rm -rf "$out"' EXIT
common=(--set "hyper.max_steps=$steps" --set data.samples=4096)

burner() {  # a process that spins 5 ms and sleeps 45 ms, forever
  exec /usr/bin/python3 -c 'import time
while True:
    t = time.perf_counter()
    while time.perf_counter() - t < 0.005: pass
    time.sleep(0.045)'
}
pulser() {  # a process that wakes 13 times a second and spins 5 ms every 2 s, forever
  exec /usr/bin/python3 -c 'import time
n = 0
while True:
    n += 1
    if n % 26 == 0:
        t = time.perf_counter()
        while time.perf_counter() - t < 0.005: pass
    time.sleep(1 / 13)'
}
cpu_ns() { awk '{print $1}' "/proc/$1/schedstat"; }
rate() { grep -ho "after [0-9]* steps in [0-9.]* s" "$1"/*/rank0.log | awk '{print $2 / $5}'; }
run() {  # run WAY DIR
  case $1 in
    off | off2) "$ptw" --headless --runs-dir "$2" "${common[@]}" --set run.metrics=false > /dev/null 2>&1 ;;
    nostacks) PTW_STACKS_HANDLER=off "$ptw" --headless --runs-dir "$2" "${common[@]}" --set run.metrics=false > /dev/null 2>&1 ;;
    burn | pulse)
      if [ "$1" = burn ]; then burner & else pulser & fi
      local bp=$!
      sleep 0.3
      local c0 t0 c1 t1
      c0=$(cpu_ns "$bp"); t0=$(date +%s%N)
      "$ptw" --headless --runs-dir "$2" "${common[@]}" --set run.metrics=false > /dev/null 2>&1
      c1=$(cpu_ns "$bp"); t1=$(date +%s%N)
      kill "$bp"; wait "$bp" 2>/dev/null || true
      echo $(((c1 - c0) * 10000 / (t1 - t0))) > "$2.$1" ;;  # its share of one core, in 1/10000
    idle)
      mkdir -p "$2"
      QT_QPA_PLATFORM=offscreen "$ptw" --start --runs-dir "$2/idle" --set hyper.max_steps=1 > /dev/null 2>&1 &
      local wp=$!
      sleep 5  # its run and then its device list are done within ~3 s; then it only waits
      "$ptw" --headless --runs-dir "$2" "${common[@]}" --set run.metrics=false > /dev/null 2>&1
      kill "$wp"; wait "$wp" 2>/dev/null || true ;;
    stored) "$ptw" --headless --runs-dir "$2" "${common[@]}" > /dev/null 2>&1 ;;
    window)
      QT_QPA_PLATFORM=offscreen "$ptw" --start --runs-dir "$2" "${common[@]}" > /dev/null 2>&1 &
      local pid=$! fd f lines
      # Waits for rank 0's last line with builtins only: a grep and a sleep started five times a
      # second takes a share of the machine (perf) larger than the window's own. `read -t` on a
      # pipe nobody writes sleeps without starting a process.
      exec {fd}<> <(:)
      while :; do
        for f in "$2"/*/rank0.log; do
          [ -f "$f" ] && mapfile -t lines < "$f" && [[ "${lines[*]}" == *" steps in "* ]] && break 2
        done
        kill -0 "$pid" 2>/dev/null || { echo "monitoring_pairs: the window ended before its run" >&2; exit 3; }
        read -r -t 0.5 -u "$fd" || true
      done
      exec {fd}>&-
      kill "$pid"; wait "$pid" 2>/dev/null || true ;;
  esac
}

read -r -a ways <<< "${PTW_WAYS:-off stored off2 window burn}"
for w in off off2; do [[ " ${ways[*]} " == *" $w "* ]] || { echo "monitoring_pairs: PTW_WAYS must name off and off2" >&2; exit 2; }; done
for w in "${ways[@]}"; do
  [[ $w =~ ^(off|off2|stored|window|burn|idle|pulse|nostacks)$ ]] || { echo "monitoring_pairs: PTW_WAYS: no way '$w' (off off2 stored window burn idle pulse nostacks)" >&2; exit 2; }
done
: > "$out/rates.txt"
for i in $(seq 0 $((rounds - 1))); do
  line="$i"
  for k in "${!ways[@]}"; do
    w=${ways[$(((i + k) % ${#ways[@]}))]}
    rm -rf "$out/runs"
    run "$w" "$out/runs"
    r=$(rate "$out/runs")
    [ -n "$r" ] || { echo "monitoring_pairs: the $w run of round $i reported no rate" >&2; exit 3; }
    line="$line $w=$r"
    [[ $w == burn || $w == pulse ]] && line="$line ${w}_core=$(awk '{print $1 / 10000}' "$out/runs.$w")"
  done
  echo "$line" >> "$out/rates.txt"
  echo "round $((i + 1))/$rounds: ${line#* }" >&2
done

/usr/bin/python3 - "$out/rates.txt" "$samples" "$steps" "$(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)" <<'EOF'
import json, random, statistics, sys
path, samples, steps, commit = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
rounds = []
for line in open(path):
    fields = line.split()[1:]
    rounds.append({k: float(v) for k, v in (f.split("=") for f in fields)})
json.dump({"commit": commit, "steps": steps, "unit": "steps/s of rank 0", "rounds": rounds},
          open(samples, "w"), indent=1)
rng = random.Random(1)
def summary(name, ratios):
    boot = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(4000))
    lo, hi = boot[int(0.025 * len(boot))], boot[int(0.975 * len(boot)) - 1]
    q = sorted(ratios)
    print(f"{name:28} median {statistics.median(ratios):.3f}  95% interval {lo:.3f}-{hi:.3f}  "
          f"quartiles {q[len(q) // 4]:.3f}-{q[(3 * len(q)) // 4]:.3f}")
print(f"monitoring cost, seed workload, DDP shm, 2 ranks, {steps} steps a run, {len(rounds)} rounds "
      f"(commit {commit}); metrics off {statistics.median(r['off'] for r in rounds):,.0f} steps/s (median)")
off = [(r["off"] + r["off2"]) / 2 for r in rounds]
summary("off / off' (noise alone)", [r["off"] / r["off2"] for r in rounds])
names = {"stored": "stored / metrics off", "window": "window / metrics off",
         "idle": "idle window beside off / off", "nostacks": "no stacks handler / off"}
for way, name in names.items():
    if way in rounds[0]:
        summary(name, [r[way] / o for r, o in zip(rounds, off)])
for way, what in (("pulse", "pulser"), ("burn", "burner")):
    if way in rounds[0]:
        core = statistics.median(r[way + "_core"] for r in rounds)
        summary(f"{what} {100 * core:.1f}% of a core / off", [r[way] / o for r, o in zip(rounds, off)])
if "burn" in rounds[0]:
    burn = statistics.median(r["burn_core"] for r in rounds)
    cost = 1 - statistics.median(r["burn"] / o for r, o in zip(rounds, off))
    print(f"the burner's cost per % of one core it takes: {cost / burn:.2f}% "
          f"(multiply monitoring_cpu.sh's share of one core by it)")
print(f"samples: {samples}")
EOF
