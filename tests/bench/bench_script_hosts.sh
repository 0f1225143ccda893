#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# A user's PyTorch DDP script across two hosts: ptw's ssh launcher (strategy.kind "command")
# against torchrun itself (Debian's torch.distributed.run, --nnodes 2, a static rendezvous on the
# first host, started on each host through ssh), on the same two "hosts" (network namespaces
# with an sshd each, tests/multihost/netns_hosts.sh), one rank a host over Gloo on their `data` link. The script is
# resources/examples/ddp_train.py; under ptw it reports every step through ptw_metrics, which
# ptw stores, under torchrun it only prints. The rate is rank 0's own "N steps in X s" (training
# time, start-up left out) times the global batch: samples/s. Rounds alternate which side goes
# first; each prints both and ptw / torchrun, then the median over rounds. Root only.
#   sudo tests/bench/bench_script_hosts.sh [BUILD_DIR]     ROUNDS=5 STEPS=3000 BATCH=32 OUT=results.json
# PTW_SETS="--set KEY=VALUE ..." adds to ptw's side (to see what a setting costs).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
build=${1:-$src/build}
ptw=$build/bin/ptw
rounds=${ROUNDS:-5} steps=${STEPS:-3000} batch=${BATCH:-32}
nh=$src/tests/multihost/netns_hosts.sh
if ! why=$(bash "$nh" check); then echo "bench_script_hosts: not run: $why" >&2; exit 77; fi
tag=bsh$$
dir=$(mktemp -d /tmp/ptw-bench-script-hosts-XXXXXX)
trap 'bash "$nh" down "$tag" "$dir"; rm -rf "$dir"' EXIT
bash "$nh" up "$tag" "$dir" >/dev/null
ctl=ptwt-ctl-$tag
examples=$src/resources/examples
args=(ddp_train.py --lr 0.05 --steps "$steps" --batch-size "$batch" --seed 0)

cat >"$dir/profile.json" <<JSON
{
  "name": "script-hosts-bench",
  "strategy": {"kind": "command", "ranks": 2},
  "hyper": {"lr": 0.05, "max_steps": $steps, "batch_size": $batch, "seed": 0},
  "run": {"timeout_s": 60},
  "command": {"program": "/usr/bin/python3", "cwd": "$examples",
              "args": ["ddp_train.py", "--lr", "{hyper.lr}", "--steps", "{hyper.max_steps}",
                       "--batch-size", "{hyper.batch_size}", "--seed", "{hyper.seed}", "--ptw-metrics"]},
  "hosts": {"launcher": "ssh", "hosts": ["10.77.1.2:1", "10.77.2.2:1"], "interface": "data",
            "address": "10.77.3.1", "ssh_config": "$dir/ssh_config"}
}
JSON

# samples/s from rank 0's "done: W ranks, N steps in X s" line in file $1.
rate() { sed -n 's/^\(\[default0\]:\)\{0,1\}done: \([0-9]*\) ranks, \([0-9]*\) steps in \([0-9.]*\) s.*/\2 \3 \4/p' "$1" |
           awk -v b="$batch" '{ printf "%.1f\n", $1 * $2 * b / $3 }'; }

ptw_side() {
  rm -rf "$dir/runs"
  # shellcheck disable=SC2086  # PTW_SETS is words for ptw's command line
  ip netns exec "$ctl" "$ptw" --headless -p "$dir/profile.json" --runs-dir "$dir/runs" ${PTW_SETS:-} >/dev/null 2>"$dir/ptw.err" ||
    { cat "$dir/ptw.err" >&2; return 1; }
  rate "$(ls "$dir"/runs/*/rank0.log)"
}

port=29711
torchrun_side() {
  port=$((port + 1))
  rm -rf "$dir/tr"
  local n pids=()
  for n in 0 1; do
    # Started on each host through ssh, as one starts torchrun on the nodes of a cluster (and as
    # ptw starts its ranks): a process of an ssh session is scheduled as its session, not as this
    # script's. --redirects and --tee: their default 0 fails in torch 1.13 under Python 3.11
    # before a rank starts; stdout goes to a file (read below), stderr to the console as well.
    ip netns exec "$ctl" ssh -F "$dir/ssh_config" -o BatchMode=yes -T "10.77.$((n + 1)).2" \
      "cd '$examples' && GLOO_SOCKET_IFNAME=data timeout 120 /usr/bin/python3 -m torch.distributed.run" \
      "--nnodes 2 --node_rank $n --nproc_per_node 1 --rdzv_backend static --master_addr 10.77.3.1" \
      "--master_port $port --redirects 1 --tee 2 --log_dir '$dir/tr/node$n' ${args[*]}" >"$dir/tr$n.out" 2>&1 &
    pids+=($!)
  done
  wait "${pids[@]}" || { cat "$dir/tr0.out" "$dir/tr1.out" >&2; return 1; }
  rate "$(ls "$dir"/tr/node0/*/attempt_0/0/stdout.log)"
}

load=$(cut -d' ' -f1-3 /proc/loadavg)  # before the rounds: theirs would count ours
echo "round ptw_samples_per_s torchrun_samples_per_s ratio"
results=()
for ((i = 1; i <= rounds; ++i)); do
  if ((i % 2)); then p=$(ptw_side); q=$(torchrun_side); else q=$(torchrun_side); p=$(ptw_side); fi
  r=$(/usr/bin/python3 -c "print(round($p / $q, 3))")
  echo "$i $p $q $r"
  results+=("{\"round\": $i, \"ptw\": $p, \"torchrun\": $q, \"ratio\": $r}")
done
median=$(printf '%s\n' "${results[@]}" | /usr/bin/python3 -c "import json,sys,statistics; print(statistics.median(json.loads(l)['ratio'] for l in sys.stdin))")
echo "median ratio ptw / torchrun, a script across 2 namespace hosts (samples/s): $median"
out=${OUT:-$here/results/script-hosts-$(date -u +%Y%m%dT%H%M%SZ).json}
commit=$(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo unknown)
printf '{"bench": "script-hosts", "commit": "%s", "steps": %s, "batch": %s, "ranks": 2, "hosts": 2, "cpu": "%s", "load_before": "%s", "torchrun_started": "ssh", "rounds": [%s], "median_ratio": %s}\n' \
  "$commit" "$steps" "$batch" "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" "$load" \
  "$(IFS=,; echo "${results[*]}")" "$median" >"$out"
echo "wrote $out"
