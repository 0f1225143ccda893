# SPDX-License-Identifier: GPL-3.0-or-later
"""An ordinary PyTorch DDP training script, as ptw's `command` strategy runs it.

A small MLP learns a seeded synthetic regression set (2048 samples x 10 features) with SGD,
DistributedDataParallel over gloo and a DistributedSampler: each of the WORLD_SIZE processes trains
on its share of every epoch, and DDP averages the gradients.

Every step each rank prints `step {step} loss {loss!r}` (its own batch loss, exactly: repr of the
float), which is what resources/profiles/script-ddp-pattern.json reads; with --ptw-metrics it also
reports the step with ptw_metrics.log(step, loss=..., samples=...) (resources/profiles/script-ddp.json).
Rank 0 ends with one line, the loss of the trained model on the whole set.

Under ptw (`ptw --headless --profile resources/profiles/script-ddp.json`) nothing needs to be set:
ptw starts one process per rank with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, PTW_METRICS and a
PYTHONPATH that finds ptw_metrics. By hand, two ranks in two shells (or with `&`):

    cd resources/examples
    export WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29511
    RANK=0 LOCAL_RANK=0 python3 ddp_train.py --steps 100 &
    RANK=1 LOCAL_RANK=1 python3 ddp_train.py --steps 100

With none of them set it runs as a single rank. For --ptw-metrics by hand, put resources/python on
PYTHONPATH; without PTW_METRICS the reports do nothing, and with PTW_METRICS naming a regular file
each rank appends its records to it. These are the variables torchrun sets, so a torchrun that
works runs it too (Debian 12's, of torch 1.13, fails under Python 3.11 before starting a rank).
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def synthetic_regression(samples, features, seed):
    """Inputs x ~ N(0, 1) and y = x.w + 0.5 tanh(x0 x1) + small noise: about unit variance."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, features, generator=generator)
    w = torch.randn(features, 1, generator=generator) / features ** 0.5
    noise = 0.01 * torch.randn(samples, 1, generator=generator)
    y = x @ w + 0.5 * torch.tanh(x[:, :1] * x[:, 1:2]) + noise
    return TensorDataset(x, y)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=32, help="samples per rank and step")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ptw-metrics", action="store_true", help="report each step with ptw_metrics")
    args = parser.parse_args()

    metrics = None
    if args.ptw_metrics:
        import ptw_metrics as metrics

    torch.set_num_threads(1)
    for name, value in (("RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29511")):
        os.environ.setdefault(name, value)  # a plain `python3 ddp_train.py` is one rank
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()

    dataset = synthetic_regression(2048, 10, args.seed)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, drop_last=True)

    torch.manual_seed(args.seed)  # the same initial model on every rank (DDP also broadcasts rank 0's)
    model = DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(10, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    loss_fn = torch.nn.MSELoss()

    start = time.monotonic()
    step, epoch = 0, 0
    while step < args.steps:
        sampler.set_epoch(epoch)
        for x, y in loader:
            step += 1
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()  # DDP averages the gradients over the ranks here
            optimizer.step()
            value = loss.item()
            print(f"step {step} loss {value!r}")
            if metrics:
                metrics.log(step, loss=value, samples=len(x))
            if step == args.steps:
                break
        epoch += 1

    with torch.no_grad():
        x, y = dataset.tensors
        full = loss_fn(model.module(x), y).item()
    if rank == 0:
        print(f"done: {world} ranks, {step} steps in {time.monotonic() - start:.2f} s; "
              f"loss on all {len(dataset)} samples {full!r}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
