#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Runs tests/bench/script_phases.py under ptw (2 ranks, a `command` profile) and prints rank 0's
# result: what reporting every step through ptw_metrics costs the DDP example, within one run.
#
#   tests/bench/script_phases.sh [seconds=60] [phase_ms=1000] [batch=8]
set -euo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"
ptw="${PTW_BIN:-$src/build/bin/ptw}"
seconds="${1:-60}" phase="${2:-1000}" batch="${3:-8}"
work="$(mktemp -d)"
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
export PATH="/usr/bin:/bin:$PATH"  # Debian's python3, with python3-torch
cat >"$work/phases.json" <<JSON
{"name": "script-phases", "strategy": {"kind": "command", "ranks": 2}, "run": {"timeout_s": 60},
 "command": {"program": "python3", "cwd": "$src/tests/bench",
             "args": ["script_phases.py", "--seconds", "$seconds", "--phase-ms", "$phase", "--batch-size", "$batch"]}}
JSON
"$ptw" --headless --runs-dir "$work/runs" --profile "$work/phases.json" >"$work/out.txt" 2>&1 || {
  tail -5 "$work/out.txt"
  tail -20 "$work"/runs/*/rank0.log
  exit 1
}
grep -hE '^(phases|cost):' "$work"/runs/*/rank[0-9]*.log | tee "$work/lines.txt"
# Kept as tests/bench/results/script-phases-<date>-<commit>.json with its machine.
/usr/bin/python3 - "$work/lines.txt" "$src/tests/bench/results" "$seconds" "$phase" "$batch" <<'PY'
import datetime, json, os, re, subprocess, sys
lines, results, seconds, phase, batch = sys.argv[1:]
costs = []
for line in open(lines):
    m = re.match(r"cost: rank (\d+): per reported step, log call ([-\d.]+) us \(less an empty call's ([-\d.]+) us\), "
                 r"reading rank ([-+\d.]+) us, ptw ([-+\d.]+) us CPU; a silent step (\d+) us: ([-\d.]+)%", line)
    if m:
        keys = ["rank", "log_call_us", "empty_call_us", "reading_rank_us", "ptw_us", "silent_step_us", "cost_percent"]
        costs.append({k: (int(v) if k == "rank" else float(v)) for k, v in zip(keys, m.groups())})
phases = next((l.strip() for l in open(lines) if l.startswith("phases:")), "")
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "")
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=results).stdout.strip()
now = datetime.datetime.now(datetime.timezone.utc)
kept = {"target": "script-phases", "date": now.strftime("%Y-%m-%dT%H:%M:%SZ"), "commit": commit,
        "machine": "%d cores, %s" % (os.cpu_count(), cpu), "load_average": os.getloadavg()[0],
        "method": "tests/bench/script_phases.py under ptw, 2 ranks, %s s in %s ms phases, batch %s; every other "
                  "phase reports each step through ptw_metrics" % (seconds, phase, batch),
        "costs": costs, "phases": phases}
os.makedirs(results, exist_ok=True)
name = os.path.join(results, "script-phases-%s-%s.json" % (now.strftime("%Y%m%dT%H%M%SZ"), commit))
with open(name, "w") as f:
    json.dump(kept, f, indent=1)
print("bench: kept as %s" % os.path.relpath(name), file=sys.stderr)
PY
