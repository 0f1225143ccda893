# SPDX-License-Identifier: GPL-3.0-or-later
"""Generates sampler_table.json: the indices torch.utils.data.DistributedSampler gives each rank.

Run with Debian's interpreter (python3-torch): /usr/bin/python3 tests/data/make_sampler_table.py
The table is committed; the test suite only reads it.
"""
import json
import os

from torch.utils.data import DistributedSampler

CASES = [  # (n, world, seed, epoch, shuffle, drop_last)
    (100, 2, 0, 0, True, False),
    (100, 3, 0, 1, True, False),
    (10, 4, 7, 2, True, False),
    (10, 4, 7, 2, True, True),
    (11, 3, 0, 0, False, False),
    (11, 3, 0, 0, False, True),
    (5, 8, 3, 5, True, False),
    (1000, 7, 12345, 9, True, True),
]

rows = []
for n, world, seed, epoch, shuffle, drop_last in CASES:
    per_rank = []
    for rank in range(world):
        s = DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=shuffle, seed=seed, drop_last=drop_last)
        s.set_epoch(epoch)
        per_rank.append(list(iter(s)))
    rows.append({"n": n, "world": world, "seed": seed, "epoch": epoch, "shuffle": shuffle,
                 "drop_last": drop_last, "indices": per_rank})

with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "sampler_table.json"), "w") as f:
    json.dump(rows, f)
