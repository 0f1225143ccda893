# SPDX-License-Identifier: GPL-3.0-or-later
"""Data-parallel SGD with mpi4py and numpy, in Horovod's shape, as ptw's `command` strategy runs it.

Every MPI rank holds its own shard of a seeded synthetic regression set (4096 samples x 10 features,
y = x.w + noise), computes the mean-squared-error gradient of a linear model on a batch of its
shard, and `comm.Allreduce` sums the ranks' gradients, which each divides by the number of ranks:
every rank then takes the same SGD step, so the models stay identical (rank 0's initial model is
broadcast first, as Horovod's broadcast_parameters does).

Every step each rank prints `step {step} loss {loss!r}` (its own batch loss, exactly) and reports it
with ptw_metrics.log(step, loss=..., samples=...); rank 0 ends with the loss on the whole set.

ptw starts it through mpirun (resources/profiles/script-mpi.json): one launcher process, whose
children report as ranks 0 and 1 because ptw_metrics takes the rank from OMPI_COMM_WORLD_RANK before
RANK. By hand:

    cd resources/examples
    mpirun -np 2 --oversubscribe python3 mpi_train.py --steps 200

(as root, add --allow-run-as-root or set OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1).
Outside ptw (no PTW_METRICS) the reports do nothing. It needs mpi4py and numpy (Debian:
python3-mpi4py, python3-numpy).
"""

import argparse
import os
import sys
import time

import numpy as np
from mpi4py import MPI

try:
    import ptw_metrics
except ImportError:  # run by hand from the source tree, without PYTHONPATH
    sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import ptw_metrics


def shard(samples, features, seed, rank, world):
    """This rank's contiguous share of the data set (every rank builds the same set from the seed)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((samples, features))
    w = rng.standard_normal(features) / np.sqrt(features)
    y = x @ w + 0.5 + 0.01 * rng.standard_normal(samples)
    part = np.array_split(np.arange(samples), world)[rank]
    return x[part], y[part]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=32, help="samples per rank and step")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    comm = MPI.COMM_WORLD
    rank, world = comm.Get_rank(), comm.Get_size()
    x, y = shard(4096, 10, args.seed, rank, world)
    order = np.random.default_rng(args.seed + 1 + rank).permutation(len(x))

    params = np.random.default_rng(args.seed).standard_normal(x.shape[1] + 1) * 0.1  # weights, then bias
    comm.Bcast(params, root=0)
    grad = np.empty_like(params)

    start = time.monotonic()
    for step in range(1, args.steps + 1):
        at = (step - 1) * args.batch_size % len(x)
        batch = order[np.arange(at, at + args.batch_size) % len(x)]
        xb, yb = x[batch], y[batch]
        error = xb @ params[:-1] + params[-1] - yb
        loss = float(np.mean(error ** 2))
        grad[:-1] = 2.0 * xb.T @ error / len(batch)
        grad[-1] = 2.0 * error.mean()
        comm.Allreduce(MPI.IN_PLACE, grad, op=MPI.SUM)
        params -= args.lr * grad / world
        # One write per line: mpirun merges the ranks' output as it arrives, so a line written in
        # parts (print() writes the newline separately) or left in a buffer could be cut by another's.
        sys.stdout.write(f"step {step} loss {loss!r}\n")
        sys.stdout.flush()
        ptw_metrics.log(step, loss=loss, samples=len(batch))

    sums = np.array([np.sum((x @ params[:-1] + params[-1] - y) ** 2), len(x)])
    comm.Allreduce(MPI.IN_PLACE, sums, op=MPI.SUM)
    if rank == 0:
        sys.stdout.write(f"done: {world} ranks, {args.steps} steps in {time.monotonic() - start:.2f} s; "
                         f"loss on all {int(sums[1])} samples {sums[0] / sums[1]!r}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
