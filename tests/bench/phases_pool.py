#!/usr/bin/python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Pools runs of `bench_monitoring phases` (as saved in tests/bench/monitoring-phases.txt).

    tests/bench/phases_pool.py [FILE] [SECTION...]

SECTION picks sections of FILE by a word of their heading (a commit, "first"); none: every
section whose phases are 2 s. Each phase with records is set against the mean of the phases
without on either side, as the bench does, and the pooled ratios get the bench's median (the
upper one) and 95% bootstrap interval, per kind (window, headless).
"""
import random
import re
import sys


def sections(path):
    heading, lines = None, []
    for line in open(path):
        if line.startswith("## "):
            if heading:
                yield heading, lines
            heading, lines = line[3:].strip(), []
        elif heading:
            lines.append(line)
    if heading:
        yield heading, lines


def ratios(lines, kind):
    out = []
    for line in lines:
        m = re.match(r"run \d+/\d+ \((\w+),[^)]*\):(.*)", line)
        if not m or m.group(1) != kind:
            continue
        words = m.group(2).split()
        phases = [(words[i], float(words[i + 1])) for i in range(0, len(words) - 1, 2)]
        for i, (what, rate) in enumerate(phases):
            if what != "on" or rate <= 0:
                continue
            beside = [phases[j][1] for j in (i - 1, i + 1) if 0 <= j < len(phases) and phases[j][0] == "off" and phases[j][1] > 0]
            if beside:
                out.append(rate / (sum(beside) / len(beside)))
    return out


def median(v):
    v = sorted(v)
    return v[len(v) // 2]


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "tests/bench/monitoring-phases.txt"
    picks = sys.argv[2:]
    chosen = [(h, l) for h, l in sections(path) if (any(p in h for p in picks) if picks else h.endswith(" 2000"))]
    if not chosen:
        sys.exit(f"phases_pool: no section of {path} matches {picks or 'phases of 2000 ms'}")
    for h, _ in chosen:
        print(f"section: {h}")
    for kind, name in (("window", "stored and in a live window"), ("headless", "stored, headless")):
        r = [x for _, lines in chosen for x in ratios(lines, kind)]
        if not r:
            continue
        rng = random.Random(1)
        boot = sorted(median(rng.choices(r, k=len(r))) for _ in range(4000))
        print(f"  {name}: median {median(r):.3f} (95% interval {boot[100]:.3f}-{boot[3899]:.3f}), "
              f"mean {sum(r) / len(r):.3f}, over {len(r)} on phases")


main()
