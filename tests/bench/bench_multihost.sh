#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# DDP across two hosts over Gloo: ptw's ssh launcher against PyTorch's Python DDP, on the same two
# "hosts" (network namespaces with an sshd each, tests/multihost/netns_hosts.sh), one rank a host,
# the mlp workload (MLP 784-512-512-10, batch 128 a rank, SGD momentum 0.9). Prints each side's
# samples/s per round and the ratio ptw / Python, the baseline measured in the same run; rounds
# alternate which side goes first. Root only (network namespaces). Traffic stays between the
# namespaces made here, which are removed at exit.
#   sudo tests/bench/bench_multihost.sh [BUILD_DIR]     ROUNDS=3 MLP_STEPS=400 OUT=results.json
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
build=${1:-$src/build}
ptw=$build/bin/ptw
rounds=${ROUNDS:-3}
steps=${MLP_STEPS:-400}
nh=$src/tests/multihost/netns_hosts.sh
if ! why=$(bash "$nh" check); then echo "bench_multihost: not run: $why" >&2; exit 77; fi
tag=bench$$
dir=$(mktemp -d /tmp/ptw-bench-multihost-XXXXXX)
trap 'bash "$nh" down "$tag" "$dir"; rm -rf "$dir"' EXIT
bash "$nh" up "$tag" "$dir" >/dev/null
ctl=ptwt-ctl-$tag h1=ptwt-h1-$tag h2=ptwt-h2-$tag

sets=(--set model.kind=mlp --set model.in_features=784 --set 'model.hidden=[512,512]' --set model.out_features=10
      --set data.kind=synthetic-classification --set data.samples=8192 --set hyper.batch_size=128
      --set hyper.momentum=0.9 --set hyper.lr=0.01 --set strategy.kind=ddp --set strategy.ranks=2
      --set strategy.backend=gloo --set run.timeout_s=60
      --set hosts.launcher=ssh --set 'hosts.hosts=["10.77.1.2:1","10.77.2.2:1"]' --set hosts.interface=data
      --set hosts.address=10.77.3.1 --set "hosts.ssh_config=$dir/ssh_config")

ptw_side() {
  ip netns exec "$ctl" "$ptw" --headless --runs-dir "$dir/runs" --summary "$dir/s.json" \
    --set hyper.max_steps="$((steps + 40))" "${sets[@]}" >/dev/null 2>"$dir/ptw.err" || { cat "$dir/ptw.err" >&2; return 1; }
  /usr/bin/python3 -c "import json; print(json.load(open('$dir/s.json'))['throughput']['samples_per_s'])"
}

port=29611
py_side() {
  port=$((port + 1))
  local env=(WORLD_SIZE=2 MASTER_ADDR=10.77.3.1 MASTER_PORT=$port GLOO_SOCKET_IFNAME=data OMP_NUM_THREADS=1)
  ip netns exec "$h2" env "${env[@]}" RANK=1 /usr/bin/python3 "$here/py_ddp_ref.py" "$steps" 128 >/dev/null &
  local peer=$!
  ip netns exec "$h1" env "${env[@]}" RANK=0 /usr/bin/python3 "$here/py_ddp_ref.py" "$steps" 128 >"$dir/py.json"
  wait "$peer"
  /usr/bin/python3 -c "import json; print(json.load(open('$dir/py.json'))['samples_per_s'])"
}

echo "round ptw_samples_per_s python_samples_per_s ratio"
results=()
for ((i = 1; i <= rounds; ++i)); do
  if ((i % 2)); then p=$(ptw_side); q=$(py_side); else q=$(py_side); p=$(ptw_side); fi
  r=$(/usr/bin/python3 -c "print(round($p / $q, 3))")
  echo "$i $p $q $r"
  results+=("{\"round\": $i, \"ptw\": $p, \"python\": $q, \"ratio\": $r}")
done
median=$(printf '%s\n' "${results[@]}" | /usr/bin/python3 -c "import json,sys,statistics; print(statistics.median(json.loads(l)['ratio'] for l in sys.stdin))")
echo "median ratio ptw / python DDP across 2 namespace hosts (gloo, mlp): $median"
if [ -n "${OUT:-}" ]; then
  commit=$(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo unknown)
  printf '{"bench": "multihost", "commit": "%s", "steps": %s, "cpu": "%s", "rounds": [%s], "median_ratio": %s}\n' \
    "$commit" "$steps" "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" "$(IFS=,; echo "${results[*]}")" "$median" >"$OUT"
fi
