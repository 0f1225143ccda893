#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Where the machine's CPU goes while two lock-step ranks train with and without being watched:
# what monitoring costs, counted rather than timed.
#
#   tests/bench/monitoring_cpu.sh [seconds=15] [way=window]
#
# way is `window` (the window offscreen, `ptw --start`: every record stored, the charts live),
# `stored` (a headless run storing every record), or `phases`: one headless stored run whose
# ranks send their records in every other 2 s phase (the worker's --metrics-phases, Note [Metrics in
# phases] in core/engine/worker.cpp), its samples split by phase, leaving out each phase's
# first 300 ms, so that both sides are the same stretch of the same run. The other ways run
# the default profile (seed workload, 2 DDP ranks over shared memory) once as asked and once
# with run.metrics false; while
# the ranks train, `perf record -a` samples every CPU for `seconds` and each sample is put in
# one of:
#   ranks: training          the ranks' own work, their waits for each other included
#   ranks: writing metrics   the ranks' record writer: grouping, packing and checksumming step
#                            records, and their write(2) calls (step file and records pipe)
#   ptw's process            the window or the headless launcher, all its threads
#   kernel threads           writeback, journalling, softirqs
#   other                    everything else on the machine (perf itself included)
#   idle                     no sample: a CPU with nothing to run
# The ranks own every core, so whatever else runs takes its time from a rank, and a rank that
# is held up holds up its peer at the next step: what monitoring's CPU alone costs throughput
# is about that CPU in cores (its share of the machine times the number of CPUs; compare a
# burner's cost in monitoring_pairs.sh). Timed pairs find the window costing more than that
# (BENCHMARKS.md, "Monitoring"): this counts the CPU, not every cost. Unlike an on/off
# throughput ratio it is a share within one stretch of one run, so the machine's drift from
# minute to minute does not enter it. Needs perf (Debian: linux-perf) and
# permission to sample every CPU (root, or kernel.perf_event_paranoid <= 0).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ptw=${PTW:-$here/../../build/bin/ptw}
secs=${1:-15}
way=${2:-window}
[ -x "$ptw" ] || { echo "monitoring_cpu: build ptw first (README)" >&2; exit 2; }
case $way in window | stored | phases) ;; *) echo "monitoring_cpu: way must be window, stored or phases, not '$way'" >&2; exit 2 ;; esac
[[ $secs =~ ^[0-9]+$ ]] && [ "$secs" -ge 1 ] || { echo "monitoring_cpu: seconds must be a whole number >= 1, not '$secs'" >&2; exit 2; }
command -v perf > /dev/null || { echo "monitoring_cpu: needs perf (apt-get install linux-perf)" >&2; exit 2; }
out=$(mktemp -d)
trap 'pkill -P $$ 2>/dev/null || true; rm -rf "$out"' EXIT
perf record -a -e cpu-clock -o "$out/probe.data" -- true > /dev/null 2>&1 ||
  { echo "monitoring_cpu: perf cannot sample every CPU here (run as root or lower kernel.perf_event_paranoid)" >&2; exit 2; }
hz=999
common=(--set hyper.max_steps=1000000000 --set data.samples=4096)

sample() {  # sample WAY: starts a run that way, samples it, stops it; writes $out/WAY.txt
  local w=$1 runs=$out/runs-$1 pid
  rm -rf "$runs"
  case $w in
    window) QT_QPA_PLATFORM=offscreen "$ptw" --start --runs-dir "$runs" "${common[@]}" > "$out/$w.log" 2>&1 & ;;
    stored) "$ptw" --headless --runs-dir "$runs" "${common[@]}" > "$out/$w.log" 2>&1 & ;;
    off) "$ptw" --headless --runs-dir "$runs" "${common[@]}" --set run.metrics=false > "$out/$w.log" 2>&1 & ;;
    phases) "$ptw" --headless --worker-arg="--metrics-phases=2000:$out/notes" --runs-dir "$runs" "${common[@]}" > "$out/$w.log" 2>&1 & ;;
  esac
  pid=$!
  for _ in $(seq 1 300); do
    grep -qs "world 2" "$runs"/*/rank1.log && break
    kill -0 "$pid" 2> /dev/null || { echo "monitoring_cpu: the $w run ended before its ranks started:" >&2; tail -5 "$out/$w.log" >&2; exit 3; }
    sleep 0.1
  done
  sleep 4  # past rendezvous, warm-up and the first point
  perf record -a -g -k CLOCK_MONOTONIC -e cpu-clock -F "$hz" -o "$out/$w.data" -- sleep "$secs" > /dev/null 2>&1
  kill -INT "$pid" 2> /dev/null || true
  [ "$w" = window ] && kill "$pid" 2> /dev/null || true
  wait "$pid" 2> /dev/null || true
  perf script -i "$out/$w.data" -F comm,pid,time,ip,sym 2> /dev/null > "$out/$w.txt"
  echo "$pid" > "$out/$w.pid"
}

sample "$way"
[ "$way" = phases ] || sample off
if pgrep -x ptw-worker > /dev/null; then echo "monitoring_cpu: ranks left running after the runs stopped" >&2; exit 4; fi

/usr/bin/python3 - "$out" "$way" "$secs" "$hz" "$(nproc)" <<'EOF'
import re, sys
out, way, secs, hz, cpus = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
writer = re.compile(r"RecordWriter|StepFile|packStep|blockChecksum|finishBlock|encodeRecord|StepGroup")
kwrite = re.compile(r"^(ksys_write|vfs_write|__x64_sys_write)$")
kthread = re.compile(r"^(kworker|jbd2|ksoftirqd|kswapd|kcompactd|rcu_|migration|flush-|irq/)")
rows = ["ranks: training", "ranks: writing metrics", "ptw's process", "kernel threads", "other", "idle"]

def shares(name, keep=None):
    """Shares of the machine's time; with `keep`, of the samples whose time keep() accepts."""
    watcher = open(f"{out}/{name}.pid").read().strip()
    counts = dict.fromkeys(rows, 0)
    for block in open(f"{out}/{name}.txt", errors="replace").read().split("\n\n"):
        lines = block.strip().splitlines()
        if not lines:
            continue
        head = lines[0].split()
        comm, pid, at = " ".join(head[:-2]), head[-2].split("/")[0], float(head[-1].rstrip(":"))
        if keep and not keep(at):
            continue
        syms = [l.split(None, 1)[1] if len(l.split(None, 1)) > 1 else "" for l in lines[1:]]
        if pid == watcher:
            counts["ptw's process"] += 1
        elif comm == "ptw-worker":
            metric = any(writer.search(s) or kwrite.match(s) for s in syms)
            counts["ranks: writing metrics" if metric else "ranks: training"] += 1
        elif kthread.match(comm):
            counts["kernel threads"] += 1
        else:
            counts["other"] += 1
    if keep:  # the ranks own every core: the samples are the machine's time
        total = max(1, sum(counts.values()))
        return {k: 100.0 * v / total for k, v in counts.items()}
    expected = secs * hz * cpus
    counts["idle"] = max(0, expected - sum(counts.values()))
    total = max(expected, sum(counts.values()))
    return {k: 100.0 * v / total for k, v in counts.items()}

if way == "phases":
    sending = lambda t: t % 2.0 >= 0.3 and int(t // 2.0) % 2 == 0
    passing = lambda t: t % 2.0 >= 0.3 and int(t // 2.0) % 2 == 1
    on, off = shares(way, sending), shares(way, passing)
    rows.remove("idle")
    print(f"CPU samples of the machine ({cpus} CPUs) while 2 DDP shm ranks train the seed workload in a headless "
          f"stored run, {secs} s sampled by perf at {hz} Hz, split by phase (2 s, the first 300 ms left out)")
    print(f"{'':26}{'records sent':>14}{'passed over':>14}")
    for r in rows:
        print(f"{r:26}{on[r]:13.2f}%{off[r]:13.2f}%")
    extra = sum(max(0.0, on[r] - off[r]) for r in ("ranks: writing metrics", "ptw's process", "kernel threads"))
    print(f"monitoring: {extra:.2f}% of the samples more where records are sent (the ranks' writer, ptw's process, "
          f"kernel threads)")
    sys.exit(0)

on, off = shares(way), shares("off")
print(f"CPU time of the machine ({cpus} CPUs) while 2 DDP shm ranks train the seed workload, "
      f"{secs} s sampled by perf at {hz} Hz")
print(f"{'':26}{way:>12}{'metrics off':>14}")
for r in rows:
    print(f"{r:26}{on[r]:11.2f}%{off[r]:13.2f}%")
own = "ptw's process"
watch = on["ranks: writing metrics"] + on[own] + max(0.0, on["kernel threads"] - off["kernel threads"])
print(f"monitoring ({way}): {watch:.2f}% of the machine, {watch * cpus:.2f}% of one core; "
      f"ptw's process with metrics off: {off[own]:.2f}% of the machine")
print(f"what that CPU alone costs the ranks' throughput: about {watch * cpus:.1f}% (each ms taken from a rank "
      f"holds up both); other costs are not counted here")
EOF
