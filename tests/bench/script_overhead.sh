#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# What watching a user's script costs its throughput: resources/examples/ddp_train.py (2 DDP
# ranks over Gloo) at its fastest step, under ptw with and without reporting each step through
# ptw_metrics (the metrics channel). Runs alternate within a round, so the machine's drift over
# minutes cancels:
#   off, on, off'   the same run, reporting only in `on`
# The rate is rank 0's own "N steps in X s" (training time, start-up left out). It prints the
# median over rounds of on ÷ mean(off, off'), and of off ÷ off': two runs that differ in
# nothing, whose spread is what the machine's noise alone gives (the resolution of the first).
#
#   tests/bench/script_overhead.sh [rounds=10] [steps=1500] [batch=8]
#
# Results: tests/bench/results/script-overhead-<UTC time>.json (bench_table.py prints them).
set -euo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"
ptw="${PTW_BIN:-$src/build/bin/ptw}"
rounds="${1:-10}" steps="${2:-1500}" batch="${3:-8}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export PATH="/usr/bin:/bin:$PATH"  # Debian's python3, with python3-torch

rate() {  # $1: on|off; prints rank 0's steps/s
  local args='["ddp_train.py", "--lr", "0.05", "--steps", "'"$steps"'", "--batch-size", "'"$batch"'"'
  [ "$1" = on ] && args="$args"', "--ptw-metrics"'
  rm -rf "$work/runs"
  "$ptw" --headless --runs-dir "$work/runs" --profile "$src/resources/profiles/script-ddp.json" \
    --set "command.args=$args]" --set "hyper.max_steps=$steps" >/dev/null 2>&1
  sed -n 's/^done: .* \([0-9]*\) steps in \([0-9.]*\) s.*/\1 \2/p' "$work"/runs/*/rank0.log |
    awk '{ printf "%.3f\n", $1 / $2 }'
}

on_off=() off_off=() samples=()
for ((i = 1; i <= rounds; i++)); do
  a="$(rate off)" b="$(rate on)" c="$(rate off)"
  on_off+=("$(awk -v a="$a" -v b="$b" -v c="$c" 'BEGIN { printf "%.4f", b / ((a + c) / 2) }')")
  off_off+=("$(awk -v a="$a" -v c="$c" 'BEGIN { printf "%.4f", a / c }')")
  samples+=("{\"off\": $a, \"on\": $b, \"off2\": $c}")
  echo "round $i: off $a  on $b  off' $c steps/s"
done
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
m_on="$(median "${on_off[@]}")" m_off="$(median "${off_off[@]}")"
echo "on / off  median $m_on  (range $(printf '%s\n' "${on_off[@]}" | sort -g | sed -n '1p;$p' | paste -sd' '))"
echo "off / off' median $m_off  (range $(printf '%s\n' "${off_off[@]}" | sort -g | sed -n '1p;$p' | paste -sd' '))"
out="$src/tests/bench/results/script-overhead-$(date -u +%Y%m%dT%H%M%SZ).json"
{
  echo "{\"target\": \"script-overhead\", \"machine\": \"$(nproc) cores, $(uname -m), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')\","
  echo " \"method\": \"ddp_train.py, 2 ranks, batch $batch, $steps steps; on = reporting every step via ptw_metrics\","
  echo " \"median_on_over_off\": $m_on, \"median_off_over_off2\": $m_off,"
  echo " \"rounds\": [$(IFS=,; echo "${samples[*]}")]}"
} >"$out"
echo "wrote $out"
