#!/bin/bash
# What watching a run costs its ranks, in many short pairs rather than a few long rounds: on a
# shared machine the training rate drifts over minutes, so each pair runs the two ways back to
# back (the order alternating) and the median of the pairs' ratios is printed.
#
#   tests/bench/monitoring_pairs.sh [pairs=20] [steps=100000]
#
# Each pair is the default profile (seed workload, 2 DDP ranks over shared memory) with
# run.metrics false, headless, against one of:
#   stored  a headless run, every record stored (ranks write their steps, Note [Ranks write their steps])
#   window  the window, offscreen (`ptw --start`), every record stored and the charts live
# The rate is rank 0's "finished after N steps in X s" (training time, start-up left out).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ptw=${PTW:-$here/../../build/bin/ptw}
pairs=${1:-20}
steps=${2:-100000}
[ -x "$ptw" ] || { echo "monitoring_pairs: build ptw first (README)" >&2; exit 2; }
out=$(mktemp -d)
trap 'pkill -P $$ 2>/dev/null || true; rm -rf "$out"' EXIT
common=(--set "hyper.max_steps=$steps" --set data.samples=4096)

rate() { grep -ho "after [0-9]* steps in [0-9.]* s" "$1"/*/rank0.log | awk '{print $2 / $5}'; }
run() {  # run WAY DIR
  case $1 in
    off) "$ptw" --headless --runs-dir "$2" "${common[@]}" --set run.metrics=false > /dev/null 2>&1 ;;
    stored) "$ptw" --headless --runs-dir "$2" "${common[@]}" > /dev/null 2>&1 ;;
    window)
      QT_QPA_PLATFORM=offscreen "$ptw" --start --runs-dir "$2" "${common[@]}" > /dev/null 2>&1 &
      local pid=$!
      until grep -qs "after [0-9]* steps" "$2"/*/rank0.log; do
        kill -0 "$pid" 2>/dev/null || { echo "monitoring_pairs: the window ended before its run" >&2; exit 3; }
        sleep 0.2
      done
      kill "$pid"; wait "$pid" 2>/dev/null || true ;;
  esac
}

for way in stored window; do
  : > "$out/$way.txt"
  for i in $(seq 1 "$pairs"); do
    order="$way off"; [ $((i % 2)) = 0 ] && order="off $way"
    declare -A r=()
    for w in $order; do
      rm -rf "$out/runs"
      run "$w" "$out/runs"
      r[$w]=$(rate "$out/runs")
    done
    echo "${r[$way]} ${r[off]}" >> "$out/$way.txt"
    unset r
  done
  /usr/bin/python3 - "$way" "$out/$way.txt" <<'EOF'
import statistics, sys
way, path = sys.argv[1], sys.argv[2]
pairs = [tuple(map(float, l.split())) for l in open(path) if l.strip()]
ratios = sorted(a / b for a, b in pairs)
print(f"{way} / metrics off: median {statistics.median(ratios):.3f} over {len(ratios)} pairs "
      f"(quartiles {ratios[len(ratios) // 4]:.3f}-{ratios[(3 * len(ratios)) // 4]:.3f}); "
      f"metrics off {statistics.median(b for _, b in pairs):.0f} steps/s (median)")
EOF
done
