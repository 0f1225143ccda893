#!/usr/bin/python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""What reading a script's output costs it, and whether a pattern loses any line.

Runs a `command` profile of RANKS processes, each printing RATE lines a second for SECONDS seconds
(one ImageNet-style "Epoch: [e][i/N] Time ... step N loss X" line a step, printed as print() does
under ptw, unbuffered), each keeping its core busy between lines as a training rank does, under ptw
with command.pattern reading the lines. Two numbers, both from one run:

- lost: lines printed minus step records stored, per rank (the target: 0);
- cost: the CPU time ptw and the reading ranks (ptw-worker) spent while the scripts ran, over
  the scripts' own CPU time in the same span: the share of a training core that watching takes
  (the target: <= 1%). Read from /proc for every process of the run, from 3 s after the start to
  1 s before the scripts' end, so start-up (loading LibTorch, the store) and the end (packing
  the records) are left out: they cost a run the same whatever it prints. CPU time is counted,
  not wall time, so what else the machine runs moves it little.

A baseline in the same round: the same scripts under ptw with no pattern (the output only goes to
the rank logs), whose cost is what any run pays for its logs; the pattern's own cost is the
difference.

    tests/bench/pattern_lines.py [--rate 10000] [--seconds 20] [--ranks 2] [--rounds 3]

Results: tests/bench/results/pattern-lines-<UTC time>.json.
"""
import argparse
import datetime
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time

SRC = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", ".."))
PTW = os.environ.get("PTW_BIN", os.path.join(SRC, "build", "bin", "ptw"))

SCRIPT = r'''import os, sys, time
rate, seconds = float(sys.argv[1]), float(sys.argv[2])
rank = int(os.environ["RANK"])
out = sys.stdout
n = int(rate * seconds)
start = time.monotonic()
clock = time.monotonic
for step in range(1, n + 1):
    until = start + step / rate
    while clock() < until:  # the step's work: a training rank keeps its core busy
        pass
    print("Epoch: [0][%6d/%d]\tTime  0.001 ( 0.001)\tstep %d loss %r" % (step, n, step, 1.0 / step))
t = os.times()
with open("cpu.%d" % rank, "w") as f:
    f.write("%d %.6f %.6f\n" % (n, t.user + t.system + t.children_user + t.children_system, time.monotonic() - start))
'''


def cpu_ticks(root):
    """(ptw and its workers, the scripts): CPU clock ticks of the processes under `root`."""
    parent, ticks, name = {}, {}, {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % pid) as f:
                stat = f.read()
        except OSError:
            continue
        close = stat.rindex(")")
        fields = stat[close + 2:].split()
        name[int(pid)] = stat[stat.index("(") + 1:close]
        parent[int(pid)] = int(fields[1])
        ticks[int(pid)] = int(fields[11]) + int(fields[12])  # utime, stime
    watch = scripts = 0
    for pid, t in ticks.items():
        p = pid
        while p in parent and p != root:
            p = parent[p]
        if p != root:
            continue
        if name[pid].startswith("python"):
            scripts += t
        else:
            watch += t
    return watch, scripts


def run(work, rate, seconds, ranks, pattern):
    runs = os.path.join(work, "runs-%s" % ("pattern" if pattern else "plain"))
    profile = {
        "name": "pattern-lines",
        "strategy": {"kind": "command", "ranks": ranks},
        "hyper": {"max_steps": 0},  # the scripts end themselves
        "run": {"timeout_s": 120},
        "command": {"program": "/usr/bin/python3", "cwd": work, "pattern": pattern,
                    "args": ["lines.py", str(rate), str(seconds)]},
    }
    path = os.path.join(work, "profile.json")
    with open(path, "w") as f:
        json.dump(profile, f)
    for r in range(ranks):
        if os.path.exists(os.path.join(work, "cpu.%d" % r)):
            os.remove(os.path.join(work, "cpu.%d" % r))
    ptw = subprocess.Popen([PTW, "--headless", "--runs-dir", runs, "--profile", path],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(3)
    w0, s0 = cpu_ticks(ptw.pid)
    time.sleep(seconds - 4)
    w1, s1 = cpu_ticks(ptw.pid)
    out, _ = ptw.communicate(timeout=300)
    if ptw.returncode != 0:
        sys.exit("ptw failed:\n" + out[-3000:])
    printed = {}
    for r in range(ranks):
        with open(os.path.join(work, "cpu.%d" % r)) as f:
            printed[r] = int(f.read().split()[0])
    stored = {r: 0 for r in range(ranks)}
    db = sqlite3.connect(os.path.join(runs, "runs.sqlite"))
    run_id = db.execute("SELECT max(id) FROM runs").fetchone()[0]
    db.close()
    if pattern:  # the rows the export writes are the step records stored
        csv = os.path.join(work, "out.csv")
        subprocess.run([PTW, "export", "--runs-dir", runs, str(run_id), csv], check=True, capture_output=True)
        with open(csv) as f:
            next(f)
            for line in f:
                stored[int(line.split(",", 1)[0])] += 1
    tick = os.sysconf("SC_CLK_TCK")
    return {"printed": printed, "stored": stored, "script_cpu_s": (s1 - s0) / tick, "watch_cpu_s": (w1 - w0) / tick,
            "cost_percent": 100.0 * (w1 - w0) / max(1, s1 - s0)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rate", type=float, default=10000, help="lines a second per rank")
    ap.add_argument("--seconds", type=float, default=20, help="at least 8")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    pattern = r"Epoch: \[{epoch}\]\[\s*\d+/\d+\]\s+Time\s+{step_s} \(.*?\)\s+step {step} loss {loss}"
    rounds = []
    with tempfile.TemporaryDirectory() as work:
        with open(os.path.join(work, "lines.py"), "w") as f:
            f.write(SCRIPT)
        for i in range(a.rounds):
            plain = run(work, a.rate, a.seconds, a.ranks, "")
            read = run(work, a.rate, a.seconds, a.ranks, pattern)
            lost = {r: read["printed"][r] - read["stored"][r] for r in read["printed"]}
            rounds.append({"plain": plain, "pattern": read, "lost": lost})
            print("round %d: lost %s; watching costs %.2f%% with the pattern, %.2f%% without (scripts' CPU %.1f s)"
                  % (i + 1, lost, read["cost_percent"], plain["cost_percent"], read["script_cpu_s"]))
    costs = sorted(r["pattern"]["cost_percent"] for r in rounds)
    plains = sorted(r["plain"]["cost_percent"] for r in rounds)
    median = lambda v: v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2
    lost = sum(sum(r["lost"].values()) for r in rounds)
    print("median cost: %.2f%% with the pattern, %.2f%% without; %d line(s) lost in all" %
          (median(costs), median(plains), lost))
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=SRC).stdout.strip()
    now = datetime.datetime.now(datetime.timezone.utc)
    kept = {"target": "pattern-lines", "date": now.strftime("%Y-%m-%dT%H:%M:%SZ"), "commit": commit,
            "machine": "%d cores, %s" % (os.cpu_count(), cpu), "load_average": os.getloadavg()[0],
            "method": "%d ranks printing %g lines/s each for %g s, read by command.pattern; cost = CPU of ptw and "
                      "its ranks over the scripts' CPU, from 3 s in to 1 s before the end" % (a.ranks, a.rate, a.seconds),
            "median_cost_percent": median(costs), "median_plain_cost_percent": median(plains), "lines_lost": lost,
            "rounds": rounds}
    results = os.path.join(SRC, "tests", "bench", "results")
    os.makedirs(results, exist_ok=True)
    name = os.path.join(results, "pattern-lines-%s.json" % now.strftime("%Y%m%dT%H%M%SZ"))
    with open(name, "w") as f:
        json.dump(kept, f, indent=1)
    print("bench: kept as %s" % os.path.relpath(name, SRC))


if __name__ == "__main__":
    main()
