#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Every source file says its licence in one SPDX line among its first three (after a shebang):
# C++, Python, shell and CMake files of the project's own folders. Usage: spdx_lines.sh SOURCE_DIR
set -euo pipefail
src=$(cd "$1" && pwd)
tag="SPDX-License-Identifier: GPL-3.0-or-later"
missing=()
count=0
while IFS= read -r -d '' f; do
  count=$((count + 1))
  head -n 3 "$f" | grep -qF "$tag" || missing+=("${f#"$src"/}")
done < <(find "$src/core" "$src/ui" "$src/app" "$src/tests" "$src/packaging" "$src/resources" "$src/.ci" \
  -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.h.in' -o -name '*.py' -o -name '*.sh' \
  -o -name CMakeLists.txt -o -path "$src/.ci/run" -o -path "$src/packaging/bash-completion/ptw" \) \
  -not -path '*/__pycache__/*' -print0)
[ -f "$src/CMakeLists.txt" ] && { count=$((count + 1)); head -n 3 "$src/CMakeLists.txt" | grep -qF "$tag" || missing+=(CMakeLists.txt); }
if [ ${#missing[@]} -gt 0 ]; then
  printf 'FAIL: no "%s" line in:\n' "$tag"
  printf '  %s\n' "${missing[@]}"
  exit 1
fi
[ "$count" -gt 100 ] || { echo "FAIL: only $count source files found under $src"; exit 1; }
echo "spdx_lines: all $count source files carry the licence line"
