"""What reporting through ptw_metrics costs a DDP script, measured within one run.

resources/examples/ddp_train.py's workload (its data and model, 2 DDP ranks over Gloo), run by ptw
as a `command` profile, steps for --seconds. Time is cut into phases of --phase-ms by the monotonic
clock, the same on every rank: in even phases each step is reported with ptw_metrics.log (the
channel ptw reads), in odd phases it is not; every step prints its line either way, as the example
does. Each rank counts its steps per phase; rank 0 prints, for each reporting phase between two
silent ones, its rate over the mean of theirs, and the median of those ratios. Within one run, the
machine's drift over minutes (larger than the cost here) is the same on both sides of a phase edge.

    tests/bench/script_phases.sh [seconds=60] [phase_ms=1000] [batch=8]
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "resources", "examples"))
from ddp_train import synthetic_regression  # noqa: E402

import ptw_metrics  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--phase-ms", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    dataset = synthetic_regression(2048, 10, 0)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(10, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = torch.nn.MSELoss()

    steps = {}  # phase -> steps
    phase_ns = args.phase_ms * 1_000_000
    end = time.monotonic() + args.seconds
    step, epoch = 0, 0
    while time.monotonic() < end:
        sampler.set_epoch(epoch)
        for x, y in loader:
            step += 1
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            value = loss.item()
            print(f"step {step} loss {value!r}")
            phase = time.monotonic_ns() // phase_ns
            if phase % 2 == 0:
                ptw_metrics.log(step, loss=value, samples=len(x))
            steps[phase] = steps.get(phase, 0) + 1
            if time.monotonic() >= end:
                break
        epoch += 1

    if rank == 0:
        phases = sorted(steps)[1:-1]  # the first and last are cut short
        ratios = [steps[p] / ((steps[p - 1] + steps[p + 1]) / 2) for p in phases
                  if p % 2 == 0 and p - 1 in steps and p + 1 in steps and p - 1 >= phases[0] and p + 1 <= phases[-1]]
        quartiles = statistics.quantiles(ratios, n=4) if len(ratios) >= 2 else [float("nan")] * 3
        print(f"phases: {len(ratios)} reporting phases of {args.phase_ms} ms; reporting / silent: median "
              f"{statistics.median(ratios):.4f}, quartiles {quartiles[0]:.4f}-{quartiles[2]:.4f}; "
              f"{step} steps; dropped {ptw_metrics.dropped()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
