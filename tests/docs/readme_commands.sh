#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Runs the commands the README shows, as written, so that the README cannot drift from ptw:
# every ```sh block after "## A first run headless", and the minimal profile's JSON block
# headless. The two set-up commands at the top are what .ci/run runs, so they are checked by
# CI itself; only their agreement with .ci/run is checked here.
# Shortening: the minimal profile runs with --set hyper.max_steps=20 (the documented default
# run takes longer than the suite should). Usage: readme_commands.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$(cd "$1" && pwd)
build=$(cd "$2" && pwd)
readme="$src/README.md"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The commands refer to ./build/bin and resources/ from the repository's root.
ln -s "$build" "$work/build"
ln -s "$src/resources" "$work/resources"
export PTW_RUNS_DIR="$work/runs"
cd "$work"

fail() { echo "FAIL: $*" >&2; exit 1; }

# The README's test command is .ci/run's, verbatim.
ci_cmd=$(grep -v '^#' "$src/.ci/run" | grep -v '^set \|^cd \|^$' | tail -n 1)
grep -qxF "$ci_cmd" "$readme" || fail "README does not show .ci/run's command verbatim: $ci_cmd"

# The sh blocks of the headless section.
awk '/^## A first run headless/{on=1; next} /^## /{on=0} on && /^```sh/{b=1; next} b && /^```/{b=0; next} b' \
  "$readme" > commands.sh
[ -s commands.sh ] || fail "no sh block under '## A first run headless'"
echo "--- running the README's headless commands:"; cat commands.sh
bash -euo pipefail commands.sh > out.txt 2>&1 || { cat out.txt; fail "a README command failed"; }
[ -s summary.json ] || fail "the headless example wrote no summary.json"
grep -q '"status": *"finished"' summary.json || fail "summary.json does not say finished"
grep -q '<testsuite' junit.xml || fail "the headless example wrote no JUnit XML"
[ -s run1.csv ] || fail "ptw export wrote no run1.csv"
ls tb/rank0/events.out.tfevents.* > /dev/null 2>&1 || fail "ptw export --format tensorboard wrote no tb/rank0"
grep -q 'finished' out.txt || fail "ptw runs lists no finished run"

# The minimal profile parses and runs.
awk '/^## A minimal profile/{on=1; next} /^## /{on=0} on && /^```json/{b=1; next} b && /^```/{b=0; next} b' \
  "$readme" > minimal.json
[ -s minimal.json ] || fail "no json block under '## A minimal profile'"
./build/bin/ptw --headless -p minimal.json --set hyper.max_steps=20 > minimal.txt 2>&1 ||
  { cat minimal.txt; fail "the README's minimal profile did not run"; }
echo "README commands: every one ran as written"
