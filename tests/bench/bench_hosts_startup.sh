#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Start-up of many ranks on many hosts: HOSTS "hosts" (network namespaces, each with an sshd of
# its own, on one bridge in a control namespace where ptw runs) × PER ranks of a small DDP
# workload (the default profile, one step, Gloo), started by ptw's ssh launcher; the baseline,
# in the same run, is the same HOSTS × PER ranks on one host (ptw's local launcher, this
# machine). Each run's summary says when the first and the last rank sent their first record
# (`ranks_started_s`, from the launch of their processes); `wall_s` is the whole headless run,
# the check before it included. Every ssh ptw starts is counted by a stand-in first on ptw's
# PATH that notes its arguments and runs the real ssh: `connections_checks` are the check
# before the run's (ptw-worker --version, the paths, --check-port), `connections_ranks` the rest.
# Rounds alternate which side goes first. Root only. Writes
# tests/bench/results/hosts-startup-<UTC time>.json and prints it.
#   sudo tests/bench/bench_hosts_startup.sh [BUILD_DIR]     HOSTS=16 PER=4 ROUNDS=2
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
build=${1:-$src/build}
ptw=$build/bin/ptw
hosts=${HOSTS:-16} per=${PER:-4} rounds=${ROUNDS:-2}
[[ $hosts =~ ^[0-9]+$ ]] && [ "$hosts" -ge 1 ] && [ "$hosts" -le 200 ] || { echo "bench_hosts_startup: HOSTS must be 1-200, not '$hosts'" >&2; exit 2; }
[[ $per =~ ^[0-9]+$ ]] && [ "$per" -ge 1 ] || { echo "bench_hosts_startup: PER must be a whole number >= 1, not '$per'" >&2; exit 2; }
[[ $rounds =~ ^[0-9]+$ ]] && [ "$rounds" -ge 1 ] || { echo "bench_hosts_startup: ROUNDS must be a whole number >= 1, not '$rounds'" >&2; exit 2; }
[ -x "$ptw" ] || { echo "bench_hosts_startup: build ptw first (README)" >&2; exit 2; }
if ! why=$(bash "$src/tests/multihost/netns_hosts.sh" check); then echo "bench_hosts_startup: not run: $why" >&2; exit 77; fi
tag=$$
dir=$(mktemp -d /tmp/ptw-bench-hosts-startup-XXXXXX)
ctl=ptwb-ctl-$tag
names=()
for ((i = 1; i <= hosts; ++i)); do names+=("ptwb-h$i-$tag"); done

down() {
  local ns pids
  for ns in "$ctl" "${names[@]}"; do
    [ -e "/run/netns/$ns" ] || continue
    for _ in 1 2 3 4 5; do  # only the processes in the namespaces made here
      pids=$(ip netns pids "$ns" 2>/dev/null)
      [ -z "$pids" ] && break
      kill -9 $pids 2>/dev/null || true
      sleep 0.2
    done
    ip netns del "$ns" 2>/dev/null || true
  done
  rm -rf "$dir"
}
trap down EXIT

# The hosts: 10.78.0.(10+i) on a bridge in the control namespace (10.78.0.1), which carries ssh
# and the ranks' traffic alike; every address is on links only these namespaces hold.
ip netns add "$ctl"
ip -n "$ctl" link set lo up
ip -n "$ctl" link add br0 type bridge
ip -n "$ctl" addr add 10.78.0.1/24 dev br0
ip -n "$ctl" link set br0 up
ssh-keygen -q -t ed25519 -N '' -f "$dir/host_key"
ssh-keygen -q -t ed25519 -N '' -f "$dir/client_key"
cp "$dir/client_key.pub" "$dir/authorized_keys"
[ -d /run/sshd ] || install -d -m 0755 /run/sshd
printf 'Host *\n  User root\n  IdentityFile %s\n  IdentitiesOnly yes\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  ConnectTimeout 10\n' \
  "$dir/client_key" >"$dir/ssh_config"
addrs=()
for ((i = 1; i <= hosts; ++i)); do
  ns=${names[i - 1]} addr=10.78.0.$((10 + i))
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  ip -n "$ctl" link add "v$i" type veth peer name eth0 netns "$ns"
  ip -n "$ctl" link set "v$i" master br0 up
  ip -n "$ns" addr add "$addr/24" dev eth0
  ip -n "$ns" link set eth0 up
  printf 'ListenAddress %s\nHostKey %s\nPidFile %s\nAuthorizedKeysFile %s\nPermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nMaxStartups 100\nLogLevel ERROR\n' \
    "$addr" "$dir/host_key" "$dir/sshd$i.pid" "$dir/authorized_keys" >"$dir/sshd$i.conf"
  ip netns exec "$ns" /usr/sbin/sshd -f "$dir/sshd$i.conf" -E "$dir/sshd$i.log"
  addrs+=("$addr")
done
for addr in "${addrs[@]}"; do  # bounded: each sshd answers within 10 s
  for _ in $(seq 1 50); do
    ip netns exec "$ctl" ssh -F "$dir/ssh_config" -o BatchMode=yes -T "$addr" true 2>/dev/null && continue 2
    sleep 0.2
  done
  echo "bench_hosts_startup: sshd on $addr does not answer; see $dir/sshd*.log" >&2
  exit 1
done

# The stand-in ssh: one line of arguments a connection, then the real one.
mkdir -p "$dir/bin"
printf '#!/bin/sh\nprintf "%%s\\n" "$*" >> "%s/ssh.calls"\nexec /usr/bin/ssh "$@"\n' "$dir" >"$dir/bin/ssh"
chmod +x "$dir/bin/ssh"

mkdir -p "$here/results"
out="$here/results/hosts-startup-$(date -u +%Y%m%dT%H%M%SZ).json"
load=$(cut -d" " -f1-3 /proc/loadavg)  # before the rounds: theirs would count ours
PTW_LOAD=$load /usr/bin/python3 - "$ptw" "$dir" "$ctl" "$per" "$rounds" "$out" "${addrs[@]}" <<'PY'
import json, os, statistics, subprocess, sys, time
ptw, work, ctl, per, rounds, out, addrs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6], sys.argv[7:]
ranks = per * len(addrs)
base = ["--set", "strategy.kind=ddp", "--set", f"strategy.ranks={ranks}", "--set", "strategy.backend=gloo",
        "--set", "hyper.max_steps=1", "--set", "run.timeout_s=600"]
across = ["--set", "hosts.launcher=ssh", "--set", "hosts.hosts=" + json.dumps([f"{a}:{per}" for a in addrs]),
          "--set", "hosts.interface=eth0", "--set", f"hosts.address={addrs[0]}",
          "--set", f"hosts.ssh_config={work}/ssh_config"]

def run(remote, i):
    summary = f"{work}/summary-{'hosts' if remote else 'one'}-{i}.json"
    calls = f"{work}/ssh.calls"
    if os.path.exists(calls):
        os.remove(calls)
    cmd = [ptw, "--headless", "--runs-dir", f"{work}/runs", "--summary", summary] + base + (across if remote else [])
    env = dict(os.environ, PATH=f"{work}/bin:/usr/bin:/bin")
    start = time.monotonic()
    p = subprocess.run((["ip", "netns", "exec", ctl] if remote else []) + cmd, capture_output=True, text=True, env=env)
    wall = time.monotonic() - start
    if p.returncode != 0:
        sys.exit(f"bench_hosts_startup: ptw exited {p.returncode} ({'hosts' if remote else 'one host'}):\n"
                 f"{p.stdout[-2000:]}{p.stderr[-2000:]}")
    s = json.load(open(summary))["ranks_started_s"]
    lines = open(calls).read().splitlines() if os.path.exists(calls) else []
    checks = sum(1 for l in lines if "--version" in l or "--check-port" in l or "for p in" in l)
    return {"first_s": s["first"], "last_s": s["last"], "wall_s": round(wall, 3),
            "connections_checks": checks, "connections_ranks": len(lines) - checks}

many, one = [], []
for i in range(rounds):  # alternating, so that a burst of load from elsewhere falls on both
    if i % 2 == 0:
        one.append(run(False, i)); many.append(run(True, i))
    else:
        many.append(run(True, i)); one.append(run(False, i))
    print(f"round {i + 1}: {len(addrs)} hosts {many[-1]}  one host {one[-1]}", file=sys.stderr)
med = lambda rows, k: round(statistics.median(r[k] for r in rows), 3)
result = {"hosts": len(addrs), "ranks_per_host": per, "ranks": ranks, "rounds": rounds,
          "hosts_first_s": med(many, "first_s"), "hosts_last_s": med(many, "last_s"), "hosts_wall_s": med(many, "wall_s"),
          "one_host_first_s": med(one, "first_s"), "one_host_last_s": med(one, "last_s"), "one_host_wall_s": med(one, "wall_s"),
          "last_over_one_host": round(med(many, "last_s") / med(one, "last_s"), 2),
          "wall_over_one_host": round(med(many, "wall_s") / med(one, "wall_s"), 2),
          "ssh_connections_ranks": many[-1]["connections_ranks"], "ssh_connections_checks": many[-1]["connections_checks"],
          "load_before": os.environ["PTW_LOAD"],
          "commit": subprocess.run(["git", "-C", os.path.dirname(out), "rev-parse", "--short", "HEAD"],
                                   capture_output=True, text=True).stdout.strip()}
with open(out, "w") as f:
    json.dump(result, f, indent=2)
    f.write("\n")
print(json.dumps(result, indent=2))
print(f"ssh connections for the ranks: {result['ssh_connections_ranks']} "
      f"(and {result['ssh_connections_checks']} for the check before the run)")
print(f"bench_hosts_startup: written to {out}", file=sys.stderr)
PY
