#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# A two-node SLURM cluster for the SLURM test, on this machine: munged, slurmctld and a slurmd for
# each node from Debian's slurm-wlm packages, each with its own key, socket, configuration, state and
# logs in DIR, talking over 127.0.0.1 only, on ports picked free. The second node's slurmd, and so
# every job step on it, has a mount namespace of its own where DIR/hidden is an empty tmpfs: a path
# that node cannot see. The daemons run in a PID namespace of their
# own, so that everything they start (job steps, the ranks in them) ends with it; a guard kills
# the namespace when the process that made it (OWNER) is gone, also when it was killed outright.
#
#   slurm_node.sh check            exit 0 when the tools are here and we may use them, else say why
#   slurm_node.sh up OWNER DIR     start them; DIR/slurm.conf is the cluster's (SLURM_CONF)
#   slurm_node.sh down DIR         end them and everything they started (safe to repeat)
set -uo pipefail

nodes=(ptwnode1 ptwnode2)

check() {
  [ "$(id -u)" -eq 0 ] || { echo "needs root: slurmd starts job steps as their users, and the test's SlurmUser is root; run as root, as CI does"; return 1; }
  for tool in /usr/sbin/munged /usr/sbin/slurmctld /usr/sbin/slurmd srun sbatch squeue scancel sinfo unshare python3; do
    command -v "$tool" >/dev/null || { echo "$tool not found; install slurmctld, slurmd, slurm-client and munge (packaging/install-deps.sh)"; return 1; }
  done
  # Fails without CAP_SYS_ADMIN, and in a chroot whose / is not a mount point (unshare cannot
  # change its propagation: "Invalid argument"); the message says which.
  local why
  why=$(unshare --pid --fork --kill-child --mount-proc true 2>&1) ||
    { echo "cannot make a PID namespace (unshare --pid --mount-proc failed: ${why:-no reason given}; it needs CAP_SYS_ADMIN, and in a chroot / must be a mount point)"; return 1; }
  return 0
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# Runs as PID 1 of the namespace: the daemons, in the foreground, until they end or it is killed.
inside() {
  export SLURM_CONF=$dir/slurm.conf
  /usr/sbin/munged --force --key-file="$dir/munge.key" --socket="$dir/munge.sock" --pid-file="$dir/munged.pid" \
    --log-file="$dir/munged.log" --seed-file="$dir/munged.seed" || exit 1
  /usr/sbin/slurmctld -D -i >>"$dir/slurmctld.out" 2>&1 &
  /usr/sbin/slurmd -D -N "${nodes[0]}" >>"$dir/slurmd-${nodes[0]}.out" 2>&1 &
  unshare --mount --propagation private bash -c \
    'mount -t tmpfs -o size=1m ptw-hidden "$1/hidden" && exec /usr/sbin/slurmd -D -N "$2"' \
    hide "$dir" "${nodes[1]}" >>"$dir/slurmd-${nodes[1]}.out" 2>&1 &
  wait
}

up() {
  local owner=$1
  [ -n "$owner" ] && [ -d "$dir" ] || { echo "usage: $0 up OWNER DIR" >&2; return 2; }
  mkdir -p "$dir/state" "$dir/spool" "$dir/hidden"
  head -c 1024 /dev/urandom >"$dir/munge.key"
  chmod 400 "$dir/munge.key"
  cat >"$dir/slurm.conf" <<CONF
ClusterName=ptwtest
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmctldPort=$(free_port)
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge.sock
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
MailProg=/bin/true
InactiveLimit=0
KillWait=2
MinJobAge=2
NodeName=${nodes[0]} NodeAddr=127.0.0.1 NodeHostname=${nodes[0]} Port=$(free_port) CPUs=4 RealMemory=1000 State=UNKNOWN
NodeName=${nodes[1]} NodeAddr=127.0.0.1 NodeHostname=${nodes[1]} Port=$(free_port) CPUs=4 RealMemory=1000 State=UNKNOWN
PartitionName=ptw Nodes=${nodes[0]},${nodes[1]} Default=YES MaxTime=10 State=UP
CONF
  setsid unshare --pid --fork --kill-child --mount-proc bash "$0" inside "$dir" </dev/null >"$dir/ns.out" 2>&1 &
  local ns=$!
  echo "$ns" >"$dir/ns.pid"
  # The guard: when OWNER is gone, so is the cluster.
  setsid bash -c "while kill -0 $owner 2>/dev/null && kill -0 $ns 2>/dev/null; do sleep 1; done; kill -9 $ns 2>/dev/null" \
    </dev/null >/dev/null 2>&1 &
  # Bounded: the nodes are idle within 20 s, or the setup fails (and is undone).
  export SLURM_CONF=$dir/slurm.conf
  local state=""
  for try in $(seq 1 100); do
    state=$(sinfo -h -N -o %T 2>/dev/null | sort -u | tr '\n' ' ')
    [ "$state" = "idle " ] && { echo "slurm_node: up: ${nodes[*]} idle"; return 0; }
    kill -0 "$ns" 2>/dev/null || break
    sleep 0.2
  done
  echo "slurm_node: the nodes did not become idle within 20 s (state \"$state\"); logs:" >&2
  tail -n 5 "$dir"/munged.log "$dir"/slurmctld.log "$dir"/slurmd-*.log "$dir"/*.out >&2 2>/dev/null
  down
  return 1
}

down() {
  [ -f "$dir/ns.pid" ] || return 0
  local ns
  ns=$(cat "$dir/ns.pid")
  # Only our namespace's first process, unshare: with --kill-child its child, PID 1 of the
  # namespace, dies with it, and with that every process in the namespace.
  if [ "$(cat /proc/"$ns"/comm 2>/dev/null)" = unshare ]; then
    kill -9 "$ns" 2>/dev/null
    for try in $(seq 1 50); do
      kill -0 "$ns" 2>/dev/null || break
      sleep 0.1
    done
  fi
  rm -f "$dir/ns.pid"
  return 0
}

cmd=${1:-}
case "$cmd" in
  check) check ;;
  up) dir=${3:-}; up "${2:-}" ;;
  inside) dir=${2:-}; inside ;;
  down) dir=${2:-}; down ;;
  *) echo "usage: $0 check | up OWNER DIR | down DIR" >&2; exit 2 ;;
esac
