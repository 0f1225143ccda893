#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Side-by-side throughput of ptw and PyTorch's Python DDP (the reference peer), measured in
# one run, alternating, on two fixed workloads. Builds nothing: run after the default build.
#
#   tests/bench/bench_ddp.sh [repeats=3] > table.md      (all samples in tests/bench/bench-samples.json)
#   tests/bench/bench_ddp.sh --table [FILE]              (prints the tables of a kept run, or of the last)
#
# Each run is also kept in tests/bench/results/<date>-<commit>-<machine>.json, with its machine and
# commit; `--table FILE` prints any of them as the same tables (bench_table.py --list lists them).
#
# Rows: Python single and DDP; ptw Single, DataParallel (2 lanes), DDP over Gloo and over shared
# memory (2 ranks), process pool sync and hogwild (2 workers); and two ptw Single runs at once that share
# nothing (two-singles-apart): the most two ranks can reach on this machine, communication aside; and
# twice the slower of those two (lockstep-ceiling): the most ranks that wait for each other every step
# can reach when one core is slower than the other.
# MLP_STEPS (default 600) and SEED_STEPS (default 60000) set the runs' lengths: a few seconds each, so a
# burst of load from elsewhere on the machine is averaged out rather than decisive. WORKLOADS=mlp (or
# seed) runs one workload.
# Workloads (one intra-op thread per rank, 2 ranks):
#   seed: Linear(10, 2), cross-entropy, SGD momentum 0.9, batch 16/rank   (latency-bound)
#   mlp:  MLP 784-512-512-10, cross-entropy, SGD momentum 0.9, batch 128/rank (compute-bound)
# Python numbers come from shared reference/py_ddp_ref.py (copied here as py_ddp_ref.py when absent);
# ptw numbers are the run summary's throughput.samples_per_s (samples / time inside steps, summed over ranks);
# a last table gives each ptw configuration's mean step time and its split (the summary's step_ms, averaged
# over ranks). The Python peer runs the OpenBLAS kernels ptw's workers run (see below).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
ptw=${PTW:-$root/build/bin/ptw}
repeats=${1:-3}
mlp_steps=${MLP_STEPS:-600}
seed_steps=${SEED_STEPS:-60000}
workloads=" ${WORKLOADS:-seed mlp} "   # WORKLOADS=mlp runs one of them
if [ "$repeats" = "--table" ]; then exec /usr/bin/python3 "$here/bench_table.py" "${2:-$here/bench-samples.json}"; fi
ref=${PY_DDP_REF:-$here/py_ddp_ref.py}
[ -x "$ptw" ] || { echo "bench: $ptw not built; run the README's build first" >&2; exit 2; }
[ -f "$ref" ] || { echo "bench: reference script $ref missing" >&2; exit 2; }
# The Python peer runs the OpenBLAS kernels ptw's ranks run (Note [BLAS kernels] in
# core/engine/blas.cpp: a worker replaces OpenBLAS's SSE3 fallback on a CPU it does not know),
# so that both sides multiply matrices alike.
blas_core=$("${PTW_WORKER:-$(dirname "$ptw")/ptw-worker}" --blas 2>/dev/null | sed -n 's/.*"openblas_core": "\([^"]*\)".*/\1/p') || blas_core=""
py_blas=()
[ -n "$blas_core" ] && py_blas=(OPENBLAS_CORETYPE="${OPENBLAS_CORETYPE:-$blas_core}")
echo "bench: OpenBLAS kernels: ${blas_core:-not OpenBLAS}" >&2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
samples="$here/bench-samples.json"
echo "[" > "$samples.tmp"
first=1

record() {  # workload impl value [step_ms JSON]
  [ $first -eq 1 ] || echo "," >> "$samples.tmp"
  first=0
  printf '{"workload":"%s","impl":"%s","samples_per_s":%s%s}' "$1" "$2" "$3" "${4:+,\"step_ms\":$4}" >> "$samples.tmp"
  echo "$1 $2 $3" >> "$out/all.txt"
}

# The run summaries' throughput (summed), and their ranks' mean step split (averaged).
summaries() {  # summary.json...
  /usr/bin/python3 - "$@" <<'PY'
import json, sys
runs = [json.load(open(f)) for f in sys.argv[1:]]
ranks = [r["step_ms"] for s in runs for r in s["ranks"] if "step_ms" in r]
split = json.dumps({k: sum(r[k] for r in ranks) / len(ranks) for k in ranks[0]}, separators=(",", ":")) if ranks else ""
print(sum(s["throughput"]["samples_per_s"] for s in runs), split)
PY
}

py_ddp() {  # workload steps batch envs...
  local w=$1 steps=$2 batch=$3; shift 3
  local line value="" attempt port
  # A port the system says is free; another program can still take it before rank 0 binds
  # it, and then rank 0 fails at once while rank 1 would wait for it: both are bounded by
  # `timeout` and the pair is tried again on another port.
  for attempt in 1 2 3; do
    port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    line=$(for r in 1 0; do env "$@" "${py_blas[@]}" OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$r \
             WORLD_SIZE=2 timeout 120 /usr/bin/python3 "$ref" "$steps" "$batch" & done; wait) || true
    value=$(echo "$line" | sed -n 's/.*"samples_per_s": \([0-9.]*\).*/\1/p' | head -1)
    [ -n "$value" ] && break
    echo "bench: Python DDP on port $port failed (attempt $attempt of 3)" >&2
  done
  [ -n "$value" ] || { echo "bench: Python DDP failed three times" >&2; exit 1; }
  record "$w" python-ddp "$value"
}
py_single() {
  local w=$1 steps=$2 batch=$3; shift 3
  local line
  line=$(env "$@" "${py_blas[@]}" OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 /usr/bin/python3 "$ref" "$steps" "$batch")
  record "$w" python-single "$(echo "$line" | sed -n 's/.*"samples_per_s": \([0-9.]*\).*/\1/p')"
}
ptw_run() {  # workload impl steps sets...
  local w=$1 impl=$2 steps=$3; shift 3
  "$ptw" --headless --runs-dir "$out/runs" --summary "$out/s.json" --set hyper.max_steps="$steps" "$@" >/dev/null
  local value split
  read -r value split < <(summaries "$out/s.json")
  record "$w" "$impl" "$value" "$split"
}

apart() {  # workload steps sets...: two ptw Single runs at once, sharing nothing: what 2 ranks could reach
  local w=$1 steps=$2; shift 2
  for k in a b; do
    "$ptw" --headless --runs-dir "$out/runs-$k" --summary "$out/s-$k.json" --set hyper.max_steps="$steps" "$@" \
      --set strategy.kind=single --set strategy.ranks=1 >/dev/null &
  done
  wait
  local a b total split
  read -r a _ < <(summaries "$out/s-a.json")
  read -r b _ < <(summaries "$out/s-b.json")
  read -r total split < <(summaries "$out/s-a.json" "$out/s-b.json")
  record "$w" two-singles-apart "$total" "$split"
  # In lock-step (DDP, DataParallel, pool sync) every rank waits for the slowest each step: with
  # one rank a core, the most they can reach is twice the slower core's Single.
  record "$w" lockstep-ceiling "$(/usr/bin/python3 -c "print(2 * min($a, $b))")"
}

seed_sets=(--set model.kind=linear --set model.in_features=10 --set model.out_features=2 --set data.kind=synthetic-classification
           --set data.samples=4096 --set hyper.batch_size=16 --set hyper.momentum=0.9 --set hyper.lr=0.01)
mlp_sets=(--set model.kind=mlp --set model.in_features=784 --set 'model.hidden=[512,512]' --set model.out_features=10
          --set data.kind=synthetic-classification --set data.samples=8192 --set hyper.batch_size=128 --set hyper.momentum=0.9 --set hyper.lr=0.01)

# Each round runs a workload's configurations in another order (round i starts i places further
# on), so that none always runs first after the machine was idle, or right after the same neighbour.
seed_runs=(
  'py_ddp seed 2000 16 IN=10 HID=0 OUTD=2'
  'ptw_run seed ptw-ddp-gloo 2000 "${seed_sets[@]}" --set strategy.kind=ddp --set strategy.ranks=2 --set strategy.backend=gloo'
  'ptw_run seed ptw-ddp-shm "$seed_steps" "${seed_sets[@]}" --set strategy.kind=ddp --set strategy.ranks=2 --set strategy.backend=shm'
  'py_single seed "$seed_steps" 16 IN=10 HID=0 OUTD=2'
  'ptw_run seed ptw-single "$seed_steps" "${seed_sets[@]}" --set strategy.kind=single --set strategy.ranks=1'
  'apart seed "$seed_steps" "${seed_sets[@]}"'
  'ptw_run seed ptw-dataparallel "$seed_steps" "${seed_sets[@]}" --set strategy.kind=dataparallel --set strategy.ranks=2'
  'ptw_run seed ptw-pool-sync "$seed_steps" "${seed_sets[@]}" --set strategy.kind=pool --set strategy.ranks=2'
  'ptw_run seed ptw-pool-hogwild "$seed_steps" "${seed_sets[@]}" --set strategy.kind=pool --set strategy.ranks=2 --set strategy.pool_mode=hogwild'
)
mlp_runs=(
  'py_ddp mlp "$mlp_steps" 128'
  'ptw_run mlp ptw-ddp-gloo "$mlp_steps" "${mlp_sets[@]}" --set strategy.kind=ddp --set strategy.ranks=2 --set strategy.backend=gloo'
  'ptw_run mlp ptw-ddp-shm "$mlp_steps" "${mlp_sets[@]}" --set strategy.kind=ddp --set strategy.ranks=2 --set strategy.backend=shm'
  'py_single mlp "$mlp_steps" 128'
  'ptw_run mlp ptw-single "$mlp_steps" "${mlp_sets[@]}" --set strategy.kind=single --set strategy.ranks=1'
  'apart mlp "$mlp_steps" "${mlp_sets[@]}"'
  'ptw_run mlp ptw-dataparallel "$mlp_steps" "${mlp_sets[@]}" --set strategy.kind=dataparallel --set strategy.ranks=2'
  'ptw_run mlp ptw-pool-sync "$mlp_steps" "${mlp_sets[@]}" --set strategy.kind=pool --set strategy.ranks=2'
  'ptw_run mlp ptw-pool-hogwild "$mlp_steps" "${mlp_sets[@]}" --set strategy.kind=pool --set strategy.ranks=2 --set strategy.pool_mode=hogwild'
)
rotated() {  # round name_of_runs_array: runs the array's commands starting at entry `round`
  local -n rotated_runs=$2
  local rotated_n=${#rotated_runs[@]} rotated_k
  for ((rotated_k = 0; rotated_k < rotated_n; rotated_k++)); do
    eval "${rotated_runs[(($1 + rotated_k) % rotated_n)]}"
  done
}

for ((i = 0; i < repeats; i++)); do
  if [[ $workloads == *" seed "* ]]; then rotated "$i" seed_runs; fi
  if [[ $workloads == *" mlp "* ]]; then rotated "$i" mlp_runs; fi
done
echo "]" >> "$samples.tmp"
mv "$samples.tmp" "$samples"

kept=$(/usr/bin/python3 "$here/bench_table.py" --save "$here/results" "$samples")
echo "bench: kept as $kept" >&2
/usr/bin/python3 "$here/bench_table.py" "$kept"
