#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Two "hosts" for the multi-host test, as Linux network namespaces on this machine:
#
#   ptwt-ctl-TAG  (ptw runs here)   m1 10.77.1.1 ---- mgmt 10.77.1.2  ptwt-h1-TAG  (sshd on 10.77.1.2)
#                                   m2 10.77.2.1 ---- mgmt 10.77.2.2  ptwt-h2-TAG  (sshd on 10.77.2.2)
#                                        h1 data 10.77.3.1 ---- data 10.77.3.2 h2   (the ranks' network)
#
# Every link is made inside the namespaces (never in this machine's own), every address is in
# 10.77.0.0/16 on links only these namespaces hold, and each host runs its own sshd with a
# throwaway host key that admits a throwaway client key. The namespaces share the filesystem,
# as a cluster with shared storage does.
#
#   netns_hosts.sh up TAG DIR     make them (DIR: keys, configs, logs); on any failure, undo
#   netns_hosts.sh down TAG DIR   kill every process in them, remove them (safe to repeat)
#   netns_hosts.sh check          exit 0 when the tools are here and we may use them, else say why
set -uo pipefail

cmd=${1:-}
tag=${2:-}
dir=${3:-}
ctl=ptwt-ctl-$tag
hosts=(ptwt-h1-$tag ptwt-h2-$tag)

check() {
  [ "$(id -u)" -eq 0 ] || { echo "needs root (CAP_NET_ADMIN) to make network namespaces; run as root, as CI does"; return 1; }
  for tool in ip /usr/sbin/sshd ssh ssh-keygen; do
    command -v "$tool" >/dev/null || { echo "$tool not found; install iproute2, openssh-server, openssh-client (packaging/install-deps.sh)"; return 1; }
  done
  local probe=ptwt-probe-$$
  ip netns add "$probe" 2>/dev/null || { echo "cannot create a network namespace (ip netns add failed: no CAP_NET_ADMIN or CAP_SYS_ADMIN here)"; return 1; }
  # `ip netns exec` remounts / as a slave in a new mount namespace; in a chroot whose / is not a
  # mount point (a debootstrap tree) that fails with "Invalid argument", so try it before relying on it.
  local why
  if ! why=$(ip netns exec "$probe" true 2>&1); then
    ip netns del "$probe"
    echo "cannot enter a network namespace (ip netns exec failed: ${why:-no reason given}; in a chroot, / must be a mount point: mount --bind the tree onto itself)"
    return 1
  fi
  ip netns del "$probe"
  return 0
}

down() {
  for ns in "$ctl" "${hosts[@]}"; do
    [ -e "/run/netns/$ns" ] || continue
    # Only the processes inside the namespaces this script made: sshd, its sessions, ranks.
    for round in 1 2 3 4 5; do
      pids=$(ip netns pids "$ns" 2>/dev/null)
      [ -z "$pids" ] && break
      kill -9 $pids 2>/dev/null
      sleep 0.2
    done
    ip netns del "$ns" 2>/dev/null
  done
  return 0
}

# Namespaces an earlier test left when it was killed outright (SIGKILL, a CTest timeout): ours by
# name, with a tag ending in the pid of a process that is gone. Their keys were in its temporary
# folder, which no longer matters; the processes inside them are killed as `down` does.
sweep_stale() {
  local ns owner
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^ptwt-(ctl|h1|h2)-[a-z]*[0-9]+$'); do
    owner=$(echo "$ns" | grep -oE '[0-9]+$')
    [ -d "/proc/$owner" ] && continue
    echo "netns_hosts: removing $ns, left by process $owner" >&2
    for round in 1 2 3 4 5; do
      pids=$(ip netns pids "$ns" 2>/dev/null)
      [ -z "$pids" ] && break
      kill -9 $pids 2>/dev/null
      sleep 0.2
    done
    ip netns del "$ns" 2>/dev/null
  done
  return 0
}

up() {
  [ -n "$tag" ] && [ -d "$dir" ] || { echo "usage: $0 up TAG DIR" >&2; return 2; }
  sweep_stale
  trap 'echo "netns_hosts: setup failed at line $LINENO; removing what was made" >&2; down; exit 1' ERR
  set -e
  for ns in "$ctl" "${hosts[@]}"; do
    ip netns add "$ns"
    ip -n "$ns" link set lo up
  done
  local i=1
  for ns in "${hosts[@]}"; do
    ip -n "$ctl" link add "m$i" type veth peer name mgmt netns "$ns"
    ip -n "$ctl" addr add "10.77.$i.1/24" dev "m$i"
    ip -n "$ctl" link set "m$i" up
    ip -n "$ns" addr add "10.77.$i.2/24" dev mgmt
    ip -n "$ns" link set mgmt up
    i=$((i + 1))
  done
  ip -n "${hosts[0]}" link add data type veth peer name data netns "${hosts[1]}"
  ip -n "${hosts[0]}" addr add 10.77.3.1/24 dev data
  ip -n "${hosts[1]}" addr add 10.77.3.2/24 dev data
  ip -n "${hosts[0]}" link set data up
  ip -n "${hosts[1]}" link set data up

  rm -f "$dir/host_key" "$dir/host_key.pub" "$dir/client_key" "$dir/client_key.pub"
  ssh-keygen -q -t ed25519 -N '' -C ptwt-host -f "$dir/host_key"
  ssh-keygen -q -t ed25519 -N '' -C ptwt-client -f "$dir/client_key"
  cp "$dir/client_key.pub" "$dir/authorized_keys"
  chmod 600 "$dir/host_key" "$dir/client_key" "$dir/authorized_keys"
  # sshd refuses to start without its privilege separation folder, which only its service makes.
  [ -d /run/sshd ] || install -d -m 0755 /run/sshd
  cat > "$dir/ssh_config" <<CONF
Host *
  User root
  IdentityFile $dir/client_key
  IdentitiesOnly yes
  StrictHostKeyChecking no
  UserKnownHostsFile /dev/null
  ConnectTimeout 5
CONF
  i=1
  for ns in "${hosts[@]}"; do
    cat > "$dir/sshd_h$i.conf" <<CONF
ListenAddress 10.77.$i.2
Port 22
HostKey $dir/host_key
PidFile $dir/sshd_h$i.pid
AuthorizedKeysFile $dir/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
ClientAliveInterval 1
ClientAliveCountMax 3
LogLevel ERROR
CONF
    ip netns exec "$ns" /usr/sbin/sshd -f "$dir/sshd_h$i.conf" -E "$dir/sshd_h$i.log"
    i=$((i + 1))
  done
  # Bounded: each sshd answers within 10 s, or the setup fails (and is undone).
  i=1
  for ns in "${hosts[@]}"; do
    ok=0
    for try in $(seq 1 50); do
      if ip netns exec "$ctl" ssh -F "$dir/ssh_config" -o BatchMode=yes -T "10.77.$i.2" true 2>/dev/null; then ok=1; break; fi
      sleep 0.2
    done
    [ "$ok" -eq 1 ] || { echo "netns_hosts: sshd in $ns does not answer; see $dir/sshd_h$i.log" >&2; false; }
    i=$((i + 1))
  done
  trap - ERR
  echo "netns_hosts: up: $ctl ${hosts[*]}"
}

case "$cmd" in
  check) check ;;
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down TAG DIR | check" >&2; exit 2 ;;
esac
