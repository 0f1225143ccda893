#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Runs the workbench window under Xvfb on short real runs and saves screenshots of the
# main window mid-run (the README shows resources/screenshots/window-ddp.png and
# window-64-ranks.png: 64 synthetic ranks, Note [Synthetic ranks], rank 13 slowed from step 100).
#
#   bash packaging/screenshot.sh [output folder, default resources/screenshots]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
out="${1:-$root/resources/screenshots}"
command -v xvfb-run >/dev/null || { echo "screenshot: xvfb-run not found (apt install xvfb xauth)" >&2; exit 1; }
[ -x "$build/bin/ptw" ] || { echo "screenshot: $build/bin/ptw not built (cmake --build --preset default)" >&2; exit 1; }
mkdir -p "$out"
runs="$(mktemp -d)"
trap 'rm -rf "$runs"' EXIT
# The window's saved view (splitters, chart options) would differ from one machine to another.
export XDG_CONFIG_HOME="$runs/config"

shoot() {  # name profile seconds overrides...
  local name="$1" profile="$2" after="$3"
  shift 3
  xvfb-run -a -s "-screen 0 1600x1000x24" \
    "$build/bin/ptw" --profile "$root/resources/profiles/$profile" --runs-dir "$runs" \
    --screenshot "$out/$name.png" --screenshot-after "$after" "$@"
}

shoot window-ddp ddp-csv-regression.json 6
shoot window-pool pool-sync-mlp.json 5
shoot window-64-ranks seed-ddp.json 9 --set strategy.kind=synthetic --set strategy.ranks=64 \
  --set strategy.device=cpu --set hyper.max_steps=3000 \
  --worker-arg=--synthetic-rate=40 --worker-arg=--fault=slow-at-step:13:100:2.5
echo "screenshot: saved in $out"
