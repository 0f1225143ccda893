#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# How long `ptw stacks RUN` takes for many ranks (Note [Native stacks] in
# core/engine/native_stacks.h), against gdb reading one rank in the same run. Two runs:
#
#   synthetic   RANKS synthetic ranks (Note [Synthetic ranks]: 512 a process, so one process
#               here) stepping on, stacks asked ROUNDS times
#   native      RANKS of ptw's own DDP ranks on this machine, rank 0 hung after step 2
#               (--fault hang-at-step) so that every other rank waits for it in a collective, as
#               in a stall; stacks asked ROUNDS times; then `gdb -batch` on rank 1 alone, twice,
#               as ptw took native stacks before ranks answered for themselves
#
# Before the first request, each run's answering threads (ptw-stacks, one a worker) are watched
# for 5 s: their CPU time and wake-ups from schedstat, which are 0 when nothing is collected
# while nobody asks. Each time is the wall time of one `ptw stacks latest` (the request through the run folder,
# every rank's frames, the file written and printed). Prints and writes
# tests/bench/results/stacks-<UTC time>.json: per run the ranks, the idle threads' CPU and
# wake-ups, the median and largest time, how many ranks' sections came from the ranks themselves, and for native the gdb
# time and the ratio of the median to it.
# Usage: tests/bench/bench_stacks.sh [RANKS [ROUNDS]]   (default 64 5)
set -euo pipefail
ranks=${1:-64} rounds=${2:-5}
[[ $ranks =~ ^[0-9]+$ ]] && [ "$ranks" -ge 2 ] || { echo "bench_stacks: RANKS must be a whole number >= 2, not '$ranks'" >&2; exit 2; }
[[ $rounds =~ ^[0-9]+$ ]] && [ "$rounds" -ge 1 ] || { echo "bench_stacks: ROUNDS must be a whole number >= 1, not '$rounds'" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
ptw=${PTW:-$here/../../build/bin/ptw}
[ -x "$ptw" ] || { echo "bench_stacks: build ptw first (README)" >&2; exit 2; }
command -v gdb > /dev/null || { echo "bench_stacks: needs gdb for its baseline (apt-get install gdb)" >&2; exit 2; }
runs=$(mktemp -d)
trap 'rm -rf "$runs"' EXIT
mkdir -p "$here/results"
out="$here/results/stacks-$(date -u +%Y%m%dT%H%M%SZ).json"

/usr/bin/python3 - "$ptw" "$runs" "$ranks" "$rounds" "$out" <<'EOF'
import json, os, re, signal, statistics, subprocess, sys, time
ptw, runs, ranks, rounds, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
SIG = signal.SIGRTMIN + 6  # stacksSignal() in core/common/command.cpp

def workers(parent):
    found = []
    for e in os.listdir("/proc"):
        if not e.isdigit():
            continue
        try:
            with open(f"/proc/{e}/status") as f:
                status = f.read()
        except OSError:
            continue
        fields = dict(l.split(":", 1) for l in status.splitlines() if ":" in l)
        if fields.get("Name", "").strip() == "ptw-worker" and int(fields.get("PPid", "0")) == parent:
            found.append((int(e), int(fields["SigCgt"].strip(), 16) >> (SIG - 1) & 1))
    return found

def start(name, processes, args, settle):
    folder = os.path.join(runs, name)
    p = subprocess.Popen([ptw, "--headless", "--runs-dir", folder, "--set", "run.timeout_s=900"] + args,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    until = time.time() + 600
    while time.time() < until:  # every worker catches the stacks signal
        w = workers(p.pid)
        if len(w) == processes and all(c for _, c in w):
            break
        if p.poll() is not None:
            sys.exit(f"bench_stacks: the {name} run ended early (code {p.returncode})")
        time.sleep(0.2)
    else:
        sys.exit(f"bench_stacks: the {name} run's {processes} workers were not all up within 600 s")
    time.sleep(settle)
    return p, folder

def answering_thread(pid):  # the CPU ns and wake-ups of a worker's ptw-stacks thread (schedstat)
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/comm") as f:
            if f.read().strip() == "ptw-stacks":
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    cpu, _, slices = f.read().split()
                return int(cpu), int(slices)
    sys.exit(f"bench_stacks: worker {pid} has no ptw-stacks thread")

def idle_cost(parent, seconds):  # what the answering threads of a run took while nobody asked
    pids = [pid for pid, _ in workers(parent)]
    before = [answering_thread(pid) for pid in pids]
    time.sleep(seconds)
    after = [answering_thread(pid) for pid in pids]
    return {"idle_seconds": seconds, "answering_threads_cpu_ns": sum(a[0] - b[0] for a, b in zip(after, before)),
            "answering_threads_wakeups": sum(a[1] - b[1] for a, b in zip(after, before))}

def ask(folder):
    times, own = [], 0
    for _ in range(rounds):
        t = time.perf_counter()
        r = subprocess.run([ptw, "stacks", "latest", "--runs-dir", folder], capture_output=True, text=True)
        times.append(time.perf_counter() - t)
        if r.returncode != 0:
            sys.exit("bench_stacks: ptw stacks failed: " + r.stderr.strip())
        own = len(re.findall(r": native frames \(ptw-worker\) ==", r.stdout))
    return {"median_s": round(statistics.median(times), 4), "max_s": round(max(times), 4),
            "sections_from_the_ranks": own}

def stop(p, folder):
    subprocess.run([ptw, "stop", "latest", "--runs-dir", folder], capture_output=True)
    try:
        p.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()

result = {"rounds": rounds}
p, folder = start("synthetic", 1, ["--set", "strategy.kind=synthetic", "--set", f"strategy.ranks={ranks}",
                                   "--set", "hyper.max_steps=100000000"], 1)
idle = idle_cost(p.pid, 5)
result["synthetic"] = {"ranks": ranks, "processes": 1, **idle, **ask(folder)}
stop(p, folder)

p, folder = start("native", ranks, ["--set", f"strategy.ranks={ranks}", "--set", "hyper.max_steps=100000000",
                                    "--worker-arg=--fault=hang-at-step:0:2"], 5)
native = {"ranks": ranks, **idle_cost(p.pid, 5), **ask(folder)}
rank1 = sorted(pid for pid, _ in workers(p.pid))[1]
gdb = []
for _ in range(2):
    t = time.perf_counter()
    subprocess.run(["gdb", "-nx", "-batch", "-iex", "set debuginfod enabled off", "-p", str(rank1),
                    "-ex", "set pagination off", "-ex", "thread apply all bt"], capture_output=True)
    gdb.append(time.perf_counter() - t)
native["gdb_one_rank_s"] = round(min(gdb), 4)
native["median_over_gdb_one_rank"] = round(native["median_s"] / min(gdb), 4)
result["native"] = native
stop(p, folder)

text = json.dumps(result, indent=2)
with open(out, "w") as f:
    f.write(text + "\n")
print(text)
print(f"bench_stacks: {ranks} native ranks' stacks in {native['median_s']} s (median of {rounds}), "
      f"{native['median_over_gdb_one_rank']}x the {native['gdb_one_rank_s']} s gdb takes for one rank; written to {out}")
EOF
