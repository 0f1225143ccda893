#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# What watching many ranks costs ptw: RANKS synthetic ranks (Note [Synthetic ranks] in
# core/engine/synthetic_ranks.h), each stepping RATE times a second for SECONDS, run
# headless and stored, or with "window" watched live in the window (tests/bench/bench_window.cpp,
# offscreen, 1600×1000); writes tests/bench/results/scale-<UTC time>[-window].json and prints it:
#
#   ranks, rate                 as asked
#   records_sent                step records the synthetic ranks sent, as their processes counted
#                               them ("sent N step records" in the run folder's rank logs)
#   records_stored              step records in the store once the run ended (step_chunks)
#   supervisor_cpu_share        ptw's own CPU seconds (user + system, its threads, not the
#                               worker processes) over its wall seconds: a share of one core
#   supervisor_cpu_us_per_record  those CPU seconds over records_stored, in microseconds
#   window_fps                  null headless; in the window, the frames it painted a second while
#                               the run went on, asked for one every 16 ms (a 60 Hz screen)
#   window                      in the window only: idle_fps (the same before the run, the
#                               baseline), fps_ratio, redraws_per_s, redraw_ms_mean and
#                               redraw_budget_use (the redraws' time over what Note [Redraw
#                               budget] allows them: at most 1), redraw_cpu_ms_mean and
#                               redraw_budget_use_cpu (the same of the window thread's CPU time
#                               in the redraws: the time it waited for a core left out;
#                               redraw_cpu_ms_by_part, by part),
#                               redraw_ms_max (the longest redraw) and
#                               redraw_ms_by_part (each part of the live view's
#                               milliseconds over the run: where the redraws' time went),
#                               reset_ms (the new run's empty charts laid out and drawn as it
#                               starts, outside the redraws)
#   rss_mib                     ptw's peak resident set (VmHWM)
#   store_bytes_per_record      the runs directory's database (and any step file left) over
#                               records_stored
#
# ptw's CPU is read from /proc/PID/stat after it exited and before it is reaped (its times
# are then final, and hold none of its children's); its peak resident set from
# /proc/PID/status every 50 ms while it runs.
# ptw here is the window's process in window mode: its supervisor and its window together.
# Usage: tests/bench/bench_scale.sh RANKS RATE SECONDS [window]
set -euo pipefail
usage() { echo "usage: $0 RANKS RATE SECONDS [window] (e.g. 1024 10 30)" >&2; exit 2; }
[ $# -eq 3 ] || [ $# -eq 4 ] || usage
ranks=$1 rate=$2 secs=$3 mode=${4:-headless}
[ "$mode" = headless ] || [ "$mode" = window ] || { echo "bench_scale: the 4th argument must be 'window', not '$mode'" >&2; exit 2; }
[[ $ranks =~ ^[0-9]+$ ]] && [ "$ranks" -ge 1 ] || { echo "bench_scale: RANKS must be a whole number >= 1, not '$ranks'" >&2; exit 2; }
[[ $rate =~ ^[0-9]+([.][0-9]+)?$ ]] || { echo "bench_scale: RATE must be steps a second (> 0), not '$rate'" >&2; exit 2; }
[[ $secs =~ ^[0-9]+$ ]] && [ "$secs" -ge 1 ] || { echo "bench_scale: SECONDS must be a whole number >= 1, not '$secs'" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
ptw=${PTW:-$here/../../build/bin/ptw}
[ -x "$ptw" ] || { echo "bench_scale: build ptw first (README)" >&2; exit 2; }
bench_window=${BENCH_WINDOW:-$here/../../build/bin/bench_window}
if [ "$mode" = window ]; then
  [ -x "$bench_window" ] || { echo "bench_scale: build bench_window first (cmake --build build --target bench_window)" >&2; exit 2; }
fi
command -v sqlite3 > /dev/null || { echo "bench_scale: needs sqlite3 (apt-get install sqlite3)" >&2; exit 2; }
runs=$(mktemp -d)
trap 'rm -rf "$runs"' EXIT
mkdir -p "$here/results"
suffix=$([ "$mode" = window ] && echo -window || true)
out="$here/results/scale-$(date -u +%Y%m%dT%H%M%SZ)$suffix.json"

/usr/bin/python3 - "$ptw" "$runs" "$ranks" "$rate" "$secs" "$out" "$mode" "$bench_window" <<'EOF'
import glob, json, math, os, re, subprocess, sys, time
ptw, runs, ranks, rate, secs, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
mode, bench_window = sys.argv[7], sys.argv[8]
steps = max(1, int(round(rate * secs)))
args = [ptw, "--headless", "--runs-dir", runs, "--summary", runs + "/summary.json",
        "--set", "strategy.kind=synthetic", "--set", f"strategy.ranks={ranks}", "--set", f"hyper.max_steps={steps}",
        "--worker-arg", f"--synthetic-rate={rate:g}", "--set", "run.timeout_s=600"]
env = dict(os.environ)
if mode == "window":
    args = [bench_window, str(ranks), f"{rate:g}", str(secs), runs]
    env["QT_QPA_PLATFORM"] = "offscreen"
    env["XDG_CONFIG_HOME"] = runs + "/config"  # the window's saved view would differ from one machine to another
tick = os.sysconf("SC_CLK_TCK")

def cpu_seconds(pid):  # utime + stime: the process's own threads, not its children
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / tick

def peak_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0

log = open(runs + "/ptw.log", "w")
start = time.monotonic()
p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
peak = cpu = 0
while True:
    # waitid with WNOWAIT: returns once ptw exited, leaving it unreaped (its /proc/PID/stat final)
    r = os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    if r is not None:
        break
    peak = max(peak, peak_kib(p.pid))
    try:
        cpu = cpu_seconds(p.pid)
    except OSError:
        pass
    time.sleep(0.05)
wall = time.monotonic() - start
try:
    cpu = cpu_seconds(p.pid)
except OSError:
    pass
code = p.wait()
log.close()
if code != 0:
    sys.stderr.write(open(runs + "/ptw.log").read()[-3000:])
    sys.exit(f"bench_scale: ptw exited {code}")

window = None
if mode == "window":
    lines = [l for l in open(runs + "/ptw.log", errors="replace") if l.startswith("{\"window_fps\"")]
    if not lines:
        sys.exit("bench_scale: bench_window printed no result")
    window = json.loads(lines[-1])
sent = 0
for path in glob.glob(runs + "/*/rank*.log"):
    for m in re.finditer(r"sent (\d+) step records", open(path, errors="replace").read()):
        sent += int(m.group(1))
db = runs + "/runs.sqlite"
subprocess.run(["sqlite3", db, "PRAGMA wal_checkpoint(TRUNCATE);"], check=True, capture_output=True)
stored = int(subprocess.run(["sqlite3", db, "SELECT coalesce(sum(count), 0) FROM step_chunks"], check=True,
                            capture_output=True, text=True).stdout.strip() or 0)
store_bytes = os.path.getsize(db) + sum(os.path.getsize(f) for f in glob.glob(runs + "/runs.blocks/*"))
result = {
    "ranks": ranks,
    "rate": rate,
    "records_sent": sent,
    "records_stored": stored,
    "supervisor_cpu_share": round(cpu / wall, 4),
    "supervisor_cpu_us_per_record": round(cpu / stored * 1e6, 2) if stored else None,
    "window_fps": window["window_fps"] if window else None,
    "rss_mib": round(peak / 1024, 1),
    "store_bytes_per_record": round(store_bytes / stored, 2) if stored else None,
}
if window:
    result["window"] = {k: v for k, v in window.items() if k not in ("window_fps", "status")}
with open(out, "w") as f:
    json.dump(result, f, indent=2)
    f.write("\n")
print(json.dumps(result, indent=2))
print(f"bench_scale: {steps} steps a rank in {wall:.1f} s wall, ptw {cpu:.2f} s CPU; written to {out}", file=sys.stderr)
if stored != sent:
    sys.exit(f"bench_scale: the store holds {stored} step records of the {sent} sent")
EOF
