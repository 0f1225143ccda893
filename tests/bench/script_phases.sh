#!/bin/bash
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
grep -hE '^(phases|cost):' "$work"/runs/*/rank[0-9]*.log
