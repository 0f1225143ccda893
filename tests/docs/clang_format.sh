#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# The tree follows .clang-format: every C++ file of core/, ui/, app/ and tests/ is as
# clang-format would write it. Usage: clang_format.sh SOURCE_DIR
set -euo pipefail
cd "$1"
if ! command -v clang-format >/dev/null; then
  echo "SKIP: clang-format is not installed (packaging/install-deps.sh installs it)"
  exit 0
fi
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files -- 'core/*.cpp' 'core/*.h' 'ui/*.cpp' 'ui/*.h' 'app/*.cpp' 'tests/*.cpp' 'tests/*.h')
else
  mapfile -t files < <(find core ui app tests -name '*.cpp' -o -name '*.h' | sort)
fi
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "not formatted as .clang-format says (run clang-format -i on them):"
  printf '  %s\n' "${bad[@]}"
  exit 1
fi
echo "clang-format: all ${#files[@]} files follow .clang-format"
