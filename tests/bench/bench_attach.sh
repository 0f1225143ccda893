#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# What attaching costs and how soon it shows (docs/follow.md, Note [Reattaching]); writes
# tests/bench/results/attach-<UTC time>.json and prints it. Each part has its baseline measured
# in the same run, in paired rounds (ROUNDS, default 2):
#
#   latency_local      record-to-chart latency, p50/p99 ms, of a window attached to a headless
#                      run of 2 script ranks (20 steps/s each): to the chart's series, and to its
#                      drawing (drawn_); baseline: the window running the same profile itself
#                      (bench_attach own)
#   latency_ssh        the same over ssh, the window in a network namespace and the runs
#                      directory reached as HOST:DIR through a namespace host's sshd
#                      (tests/multihost/netns_hosts.sh; root only, else null with the reason)
#   history            seconds until a window attached to an ended run of 1,000,000 stored
#                      step records (8 synthetic ranks x 125,000) has drawn all of them;
#                      baseline: `ptw follow --format frames` of it to /dev/null
#   follow_cost        steps/s of a 2-rank DDP run with a `ptw follow` beside it over the same
#                      run alone (the default profile, 20,000 steps), and the follower's CPU
#                      seconds over the run's wall time x the machine's cores
#
# Usage: tests/bench/bench_attach.sh [ROUNDS]
set -euo pipefail
rounds=${1:-2}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "bench_attach: ROUNDS must be a whole number >= 1, not '$rounds'" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
bin=${PTW_BIN_DIR:-$here/../../build/bin}
ptw=$bin/ptw bench=$bin/bench_attach
[ -x "$ptw" ] && [ -x "$bench" ] || { echo "bench_attach: build ptw and bench_attach first" >&2; exit 2; }
work=$(mktemp -d /tmp/ptw-bench-attach-XXXXXX)
tag=ba$$
cleanup() {
  [ -f "$work/hosts-up" ] && bash "$here/../multihost/netns_hosts.sh" down "$tag" "$work" > /dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
export QT_QPA_PLATFORM=offscreen
mkdir -p "$here/results"
out="$here/results/attach-$(date -u +%Y%m%dT%H%M%SZ).json"

# A script rank that writes a step every 50 ms, then when it wrote it: "step unix_seconds".
cat > "$work/script.py" << 'EOF'
import json, os, sys, time
rank = int(os.environ["RANK"])
ch = open(os.environ["PTW_METRICS"], "w", buffering=1)
times = open(os.path.join(sys.argv[1], "times.%d" % rank), "w", buffering=1)
for step in range(int(sys.argv[2])):
    ch.write(json.dumps({"step": step, "loss": 1.0 / (step + 1), "samples": 8}) + "\n")
    times.write("%d %.6f\n" % (step, time.time()))
    time.sleep(0.05)
EOF
profile() {  # profile TIMES_DIR FILE: 2 ranks of the script, 300 steps (15 s)
  mkdir -p "$1"
  /usr/bin/python3 - "$work" "$1" "$2" << 'EOF'
import json, sys
work, times, path = sys.argv[1:4]
p = {"name": "attach-bench", "strategy": {"kind": "command", "ranks": 2},
     "command": {"program": "/usr/bin/python3", "args": ["script.py", times, "300"], "cwd": work},
     "hyper": {"max_steps": 0}}
json.dump(p, open(path, "w"))
EOF
}

# One attached latency round: a headless run, the window attached as soon as it is recorded.
attached() {  # attached NAME [ns SSH_PROFILE HOST]
  local name=$1 runs=$work/$1-runs times=$work/$1-times
  profile "$times" "$work/$name.json"
  "$ptw" --headless -p "$work/$name.json" --runs-dir "$runs" > "$work/$name.log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 200); do [ -e "$runs/runs.sqlite" ] && break; sleep 0.05; done
  if [ $# -gt 1 ]; then
    ip netns exec "$2" "$bench" latency "$4:$runs" "$times" "$3" 2> "$work/$name.err" || true
  else
    "$bench" latency "$runs" "$times" 2> "$work/$name.err" || true
  fi
  wait "$pid" || true
}
own() {
  local name=$1 runs=$work/$1-runs times=$work/$1-times
  profile "$times" "$work/$name.json"
  "$bench" own "$work/$name.json" "$times" "$runs" 2> "$work/$name.err" || true
}

latency_local=()
for r in $(seq 1 "$rounds"); do
  latency_local+=("$(own own$r)")
  latency_local+=("$(attached local$r)")
done

latency_ssh=()
ssh_note=""
if reason=$(bash "$here/../multihost/netns_hosts.sh" check 2>&1); then
  if bash "$here/../multihost/netns_hosts.sh" up "$tag" "$work" > "$work/hosts.log" 2>&1; then
    touch "$work/hosts-up"
    printf '{"hosts": {"ssh_config": "%s", "alive_interval_s": 1}}\n' "$work/ssh_config" > "$work/ssh.json"
    for r in $(seq 1 "$rounds"); do
      latency_ssh+=("$(attached ssh$r "ptwt-ctl-$tag" "$work/ssh.json" 10.77.1.2)")
    done
  else
    ssh_note="the namespace hosts did not come up: $(tail -1 "$work/hosts.log")"
  fi
else
  ssh_note="$reason"
fi

# History: 1,000,000 step records (8 synthetic ranks x 125,000 steps), then attached after the end.
hist=$work/hist-runs
"$ptw" --headless --runs-dir "$hist" --set strategy.kind=synthetic --set strategy.ranks=8 \
  --set hyper.max_steps=125000 --set run.timeout_s=600 --worker-arg=--synthetic-rate=100000 > "$work/hist.log" 2>&1
history=()
for r in $(seq 1 "$rounds"); do
  start=$(date +%s%N)
  "$ptw" follow 1 --runs-dir "$hist" --format frames > /dev/null 2>&1
  follow_s=$(awk "BEGIN { print ($(date +%s%N) - $start) / 1e9 }")
  history+=("$("$bench" history "$hist" 1 125000 2> /dev/null | sed "s/}\$/, \"baseline_follow_s\": $follow_s}/")")
done

# Follow cost: the default DDP profile alone, then with a follower beside it, in pairs. Whole-run
# throughput on a shared 2-core machine swings more than 1%, so the follower's own CPU seconds
# (user + system, as its rusage says; the follower as the window's attach runs it: its steps as
# the step file is written, the store every 150 ms) over the CPU seconds the run had (its wall time x the cores)
# are kept too: on a machine the ranks fill, that is the most a follower can take from them.
cost=()
for r in $(seq 1 "$rounds"); do
  for with in 0 1; do
    runs=$work/cost$r-$with
    "$ptw" --headless --runs-dir "$runs" --set hyper.max_steps=20000 --summary "$runs.json" > /dev/null 2>&1 &
    pid=$!
    share=null
    if [ $with -eq 1 ]; then
      # Bounded: until the run is recorded (follow refuses a store without runs), at most 10 s.
      share=$(/usr/bin/python3 - "$ptw" "$runs" << 'PY'
import os, resource, subprocess, sys, time
ptw, runs = sys.argv[1:3]
end = time.time() + 10
while time.time() < end:
    start = time.time()
    code = subprocess.run([ptw, "follow", "latest", "--runs-dir", runs], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode
    if code != 2:
        used = resource.getrusage(resource.RUSAGE_CHILDREN)
        print(round((used.ru_utime + used.ru_stime) / ((time.time() - start) * os.cpu_count()), 5))
        break
    time.sleep(0.05)
else:
    print("null")
PY
)
    fi
    wait "$pid" || true
    cost+=("$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["throughput"]["steps_per_s"])' "$runs.json")" "$share")
  done
done

/usr/bin/python3 - "$out" "$ssh_note" "${#latency_local[@]}" "${latency_local[@]}" "${#latency_ssh[@]}" \
  "${latency_ssh[@]}" "${#history[@]}" "${history[@]}" "${cost[@]}" << 'EOF'
import json, statistics, subprocess, sys
args = sys.argv[1:]
out, note = args[0], args[1]
rest = args[2:]
def parse(x):  # a round whose program printed nothing (it found no run, or failed) is kept as such
    return json.loads(x) if x.strip() else {"what": "failed"}
def take(rest):
    n = int(rest[0]); return [parse(x) for x in rest[1:1 + n]], rest[1 + n:]
local, rest = take(rest)
ssh, rest = take(rest)
history, rest = take(rest)
cost = [json.loads(x) for x in rest]  # steps/s, follower CPU share (null without one), by turns
def med(rows, key):
    vals = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(vals) if vals else None
own = [r for r in local if r.get("what") == "own"]
att = [r for r in local if r.get("what") == "attached"]
alone, followed = cost[0::4], cost[2::4]
shares = [x for x in cost[3::4] if x is not None]
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
result = {
    "commit": commit,
    "latency_local": {"attached_p50_ms": med(att, "p50_ms"), "attached_p99_ms": med(att, "p99_ms"),
                      "attached_drawn_p50_ms": med(att, "drawn_p50_ms"),
                      "attached_drawn_p99_ms": med(att, "drawn_p99_ms"),
                      "own_p50_ms": med(own, "p50_ms"), "own_p99_ms": med(own, "p99_ms"), "rounds": local},
    "latency_ssh": {"attached_p50_ms": med(ssh, "p50_ms"), "attached_p99_ms": med(ssh, "p99_ms"),
                    "attached_drawn_p50_ms": med(ssh, "drawn_p50_ms"),
                    "attached_drawn_p99_ms": med(ssh, "drawn_p99_ms"), "rounds": ssh,
                    "not_run": note or None},
    "history": {"seconds": med(history, "seconds"), "baseline_follow_s": med(history, "baseline_follow_s"),
                "rounds": history},
    "follow_cost": {"steps_per_s_alone": alone, "steps_per_s_followed": followed,
                    "ratio": [f / a for a, f in zip(alone, followed)],
                    "follower_cpu_share": shares},
}
for part, a, b in (("latency_local", "attached_p50_ms", "own_p50_ms"),):
    if result[part][a] and result[part][b]:
        result[part]["p50_ratio_attached_over_own"] = result[part][a] / result[part][b]
if result["history"]["seconds"] and result["history"]["baseline_follow_s"]:
    result["history"]["ratio_window_over_follow"] = result["history"]["seconds"] / result["history"]["baseline_follow_s"]
json.dump(result, open(out, "w"), indent=2)
print(json.dumps(result, indent=2))
EOF
