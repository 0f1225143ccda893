#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# What the window's process costs a record while ranks train, against another build of ptw
# measured in the same run.
#
#   tests/bench/window_cpu.sh BASELINE_PTW [ROUNDS] [SECONDS]
#
# Each round starts the window offscreen (`ptw --start`, the default profile: 2 DDP ranks
# over shared memory, the seed workload, tens of thousands of records a second) once with BASELINE_PTW and
# once with this build's build/bin/ptw, both with this build's ptw-worker, lets the ranks
# train for 7 s, then reads each thread's CPU time (/proc/PID/task/*/schedstat) and the
# records stored (the run store's rows, step blocks and step files) over SECONDS (default 12)
# and stops the run. It prints CPU microseconds a record per thread and in all, and the
# ratio of this build to the baseline for each round and in the median. CPU time, not
# throughput: the machine's load moves a run's rate far more than the window does, while
# what the window spends on a record moves much less.
set -euo pipefail
base=${1:?usage: window_cpu.sh BASELINE_PTW [ROUNDS] [SECONDS]}
rounds=${2:-3}
secs=${3:-12}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
new=$root/build/bin/ptw
worker=$root/build/bin/ptw-worker
[ -x "$new" ] && [ -x "$worker" ] || { echo "window_cpu: build ptw first (README)" >&2; exit 2; }
[ -x "$base" ] || { echo "window_cpu: $base is not a ptw to compare with" >&2; exit 2; }
out=$(mktemp -d)
trap 'pkill -P $$ 2>/dev/null || true; rm -rf "$out"' EXIT

# Records stored so far in a runs directory, in whichever form they are.
records() {
  /usr/bin/python3 - "$1" <<'EOF'
import glob, os, sqlite3, struct, sys
runs = sys.argv[1]
n = 0
try:
    db = sqlite3.connect(f"file:{runs}/runs.sqlite?mode=ro", uri=True)
    tables = {t for (t,) in db.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}
    if "steps" in tables:  # the forms of earlier builds: only in their stores
        n += db.execute("SELECT count(*) FROM steps").fetchone()[0]
    if "step_blocks" in tables:
        n += db.execute("SELECT ifnull(sum(count), 0) FROM step_blocks").fetchone()[0]
    n += db.execute("SELECT ifnull(sum(count), 0) FROM step_chunks").fetchone()[0]
except sqlite3.Error:
    pass
for path in glob.glob(f"{runs}/runs.blocks/*"):
    with open(path, "rb") as f:
        data = f.read()
    at = 0
    while at + 40 <= len(data):
        magic, count, fields = struct.unpack_from("<4sHH", data, at)
        size = 8 * (fields or 11) * count
        if magic != b"PTWB" or at + 40 + size > len(data):
            break
        n += count
        at += 40 + size
print(n)
EOF
}

# CPU nanoseconds of each thread of PID: "tid name ns" lines (the supervisor's thread is
# named ptw-supervisor; SQLite's checkpoints had a thread of their own before step files).
threads() {
  local t name
  for t in /proc/"$1"/task/*; do
    name=$(tr ' ' _ < "$t/comm")
    [ "$(basename "$t")" = "$1" ] && name="main_thread"
    echo "$(basename "$t") $name $(cut -d' ' -f1 "$t/schedstat")"
  done
}

measure() {  # ptw label -> prints "label total_us_per_record" last
  local ptw=$1 label=$2 dir pid r0 r1
  dir=$(mktemp -d "$out/run.XXXX")
  (cd "$dir" && PTW_WORKER=$worker QT_QPA_PLATFORM=offscreen PTW_RUNS_DIR=$dir/runs \
     exec "$ptw" --start --set hyper.max_steps=1000000000 > "$dir/log" 2>&1) &
  pid=$!
  sleep 7
  r0=$(records "$dir/runs"); threads $pid > "$dir/a"; sleep "$secs"; threads $pid > "$dir/b"; r1=$(records "$dir/runs")
  kill $pid; wait $pid 2>/dev/null || true  # its ranks end with it (Note [Worker lifetime])
  sleep 1
  join "$dir/a" "$dir/b" | awk -v n=$((r1 - r0)) -v label="$label" -v s="$secs" '
    { ns = $5 - $3; total += ns; if (ns > 1e6) printf "    %-18s %7.3f us a record\n", $2, ns / 1e3 / n }
    END { printf "  %s: %d records/s, the window'"'"'s process %.3f us a record (%.1f%% of one core)\n", label, n / s, total / 1e3 / n, total / 1e7 / s; print "TOTAL", total / 1e3 / n }'
}

ratios=()
for r in $(seq "$rounds"); do
  echo "round $r"
  measure "$base" "baseline  " > "$out/base.txt"
  measure "$new" "this build" > "$out/new.txt"
  grep -hv '^TOTAL' "$out/base.txt" "$out/new.txt"
  ratios+=("$(awk '/^TOTAL/ { v[FILENAME] = $2 } END { printf "%.3f", v[ARGV[2]] / v[ARGV[1]] }' "$out/base.txt" "$out/new.txt")")
  echo "  this build / baseline: ${ratios[-1]}"
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '{ v[NR] = $1 } END { printf "median ratio of CPU a record, this build / baseline, over %d rounds: %s\n", NR, v[int((NR + 1) / 2)] }'
