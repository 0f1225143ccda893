#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Installs the Debian/Ubuntu packages ptw builds and tests with. Idempotent:
# packages already present are skipped, and nothing is fetched when all are.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  qt6-base-dev libqt6sql6-sqlite libqcustomplot-dev
  libtorch-dev libgloo-dev libopenblas0-pthread
  nlohmann-json3-dev libcli11-dev libsqlite3-dev sqlite3 libxxhash-dev libzstd-dev libpcre2-dev
  libpng-dev libjpeg62-turbo-dev
  clang clang-format libclang-rt-14-dev
  xvfb xauth
  debootstrap lintian desktop-file-utils appstream shared-mime-info librsvg2-bin
  python3 python3-torch python3-numpy python3-protobuf python3-crc32c python3-torchvision python3-pil
  openmpi-bin python3-mpi4py
  iproute2 openssh-client openssh-server gdb
  slurmctld slurmd slurm-client munge
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: not root and no sudo; install as root: ${missing[*]}" >&2; exit 1; }
  SUDO="sudo"
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# openssh-server is for the multi-host test, which starts sshd itself in network namespaces, and
# slurmctld, slurmd and munge for the SLURM test, which starts its own daemons with their own
# configuration; the packages' services are not started (a policy-rc.d that denies them, for the
# install only).
policy=/usr/sbin/policy-rc.d
made_policy=""
services=" openssh-server slurmctld slurmd munge "
needs_policy=""
for p in "${missing[@]}"; do
  if [[ $services == *" $p "* ]]; then needs_policy=1; fi
done
if [[ -n $needs_policy && ! -e $policy ]]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
  $SUDO chmod 755 "$policy"
  made_policy=1
fi
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
if [ -n "$made_policy" ]; then $SUDO rm -f "$policy"; fi
