#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# The manual page and the bash completion know every option ptw has: each long option of
# `ptw --help` and of each subcommand's --help is in packaging/ptw.1 (as roff writes it) and
# in packaging/bash-completion/ptw, and the completion offers for --set exactly the fields
# docs/profiles.md lists. Usage: man_page.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$(cd "$1" && pwd)
ptw="$2/bin/ptw"
man="$src/packaging/ptw.1"
completion="$src/packaging/bash-completion/ptw"
fail=0

# Long options of a --help text (CLI11 lists them as "  -p,--profile TEXT ..." or "  --set TEXT ...").
options() { grep -oE '(^|[ ,])--[a-z][a-z0-9-]*' | sed 's/^[ ,]*//' | sort -u; }

check() {  # check WHERE OPTION...
  local where=$1
  shift
  for o in "$@"; do
    if ! grep -qF -- "$(printf '%s' "$o" | sed 's/-/\\-/g')" "$man"; then
      echo "FAIL: $where: $o is not in packaging/ptw.1"
      fail=1
    fi
    if ! grep -qE -- "(^|[ \"])$o( |\"|$)" "$completion"; then
      echo "FAIL: $where: $o is not in packaging/bash-completion/ptw"
      fail=1
    fi
  done
}

mapfile -t top < <("$ptw" --help | options)
[ ${#top[@]} -gt 5 ] || { echo "FAIL: ptw --help lists too few options: ${top[*]}"; exit 1; }
check "ptw --help" "${top[@]}"
n=${#top[@]}
for sub in runs export sweep follow stop stacks submit; do
  grep -qE "^\.B $sub$" "$man" || { echo "FAIL: the subcommand $sub has no entry in packaging/ptw.1"; fail=1; }
  grep -qE "\b$sub\b" "$completion" || { echo "FAIL: the subcommand $sub is not completed"; fail=1; }
  mapfile -t opts < <("$ptw" "$sub" --help | options)
  check "ptw $sub --help" "${opts[@]}"
  n=$((n + ${#opts[@]}))
done

# --set completes exactly the fields of docs/profiles.md.
documented=$(grep -oE '^\| `[a-z_.]+`' "$src/docs/profiles.md" | tr -d '|` ' | sort)
completed=$(sed -n '/local fields="/,/="$/p' "$completion" | sed 's/local fields="//' | grep -oE '[a-z_.]+=' | tr -d '=' |
  sort)
if [ "$documented" != "$completed" ]; then
  echo "FAIL: --set completes other fields than docs/profiles.md lists (< docs, > completion):"
  diff <(echo "$documented") <(echo "$completed") || true
  fail=1
fi
[ $fail -eq 0 ] || exit 1
echo "man page and completion: all $n options of ptw and its subcommands, and $(echo "$documented" | wc -l) profile fields"
