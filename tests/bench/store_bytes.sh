#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# What the run store keeps per step record: runs the default profile headless for STEPS steps
# (2 ranks) in a scratch runs directory and prints the compressed chunks' bytes per record and
# the whole database's. Usage: tests/bench/store_bytes.sh [STEPS] (default 20000)
set -euo pipefail
steps=${1:-20000}
root=$(cd "$(dirname "$0")/../.." && pwd)
runs=$(mktemp -d)
trap 'rm -rf "$runs"' EXIT
"$root/build/bin/ptw" --headless --runs-dir "$runs" --set hyper.max_steps="$steps" > /dev/null
sqlite3 "$runs/runs.sqlite" "PRAGMA wal_checkpoint(TRUNCATE);" > /dev/null
read -r records chunk < <(sqlite3 -separator ' ' "$runs/runs.sqlite" \
  "SELECT sum(count), sum(length(records)) FROM step_chunks")
db=$(stat -c %s "$runs/runs.sqlite")
awk -v n="$records" -v c="$chunk" -v d="$db" -v s="$steps" 'BEGIN {
  printf "steps %d, records %d: chunks %.2f bytes/record, whole database %.2f bytes/record\n", s, n, c / n, d / n }'
