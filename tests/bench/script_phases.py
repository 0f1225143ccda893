# SPDX-License-Identifier: GPL-3.0-or-later
"""What reporting through ptw_metrics costs a DDP script, measured within one run.

resources/examples/ddp_train.py's workload (its data and model, 2 DDP ranks over Gloo), run by ptw
as a `command` profile, steps for --seconds. Time is cut into phases of --phase-ms by the monotonic
clock, the same on every rank: in even phases each step is reported with ptw_metrics.log (the
channel ptw reads), in odd phases it is not; every step prints its line either way, as the example
does. Each rank counts its steps per phase; rank 0 prints, for each reporting phase between two
silent ones, its rate over the mean of theirs, and the median of those ratios. Within one run, the
machine's drift over minutes (larger than the cost here) is the same on both sides of a phase edge.

The rates move with whatever else the machine runs, by more than the cost measured here; the
cost's parts do not. Each rank also times its ptw_metrics.log calls (their CPU time), and charges the CPU time of
its parent (the ptw rank that reads its channel and output) and of its grandparent (ptw itself,
shared by the ranks, so split by the world size) to the phase it was spent in. Per reported step,
the calls' time plus what the reader and ptw spend beyond a silent phase, over the step's time in
silent phases, is the share of the script's throughput that watching takes when the ranks fill the
cores. Each rank prints it.
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


def cpu_seconds(pid):
    """User plus system CPU time of process `pid`, all its threads, from /proc (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def parent_of(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def no_report(step, loss=None, samples=None, **scalars):
    """What a step costs without the report, timed as the report is."""


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
    # phase -> [reader, ptw] CPU seconds spent in it
    shim = os.getppid()
    ptw = parent_of(shim)
    cpu = {}
    clocks = lambda: [cpu_seconds(shim), cpu_seconds(ptw) / world]  # noqa: E731
    log_ns, empty_ns, empty_calls = 0, 0, 0
    last_phase, last_clocks = None, None
    phase_ns = args.phase_ms * 1_000_000
    end = time.monotonic() + args.seconds
    step, epoch, done = 0, 0, False
    while not done:
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
            # CPU time, so that a preemption is not counted as the call's. The silent phases time
            # an empty call the same way at the same point of the step: reading the clock right
            # after a training step costs more than reading it twice in a row, and the difference
            # of the two is what the report itself costs.
            if phase % 2 == 0:
                t0 = time.thread_time_ns()
                ptw_metrics.log(step, loss=value, samples=len(x))
                log_ns += time.thread_time_ns() - t0
            else:
                t0 = time.thread_time_ns()
                no_report(step, loss=value, samples=len(x))
                empty_ns += time.thread_time_ns() - t0
                empty_calls += 1
            steps[phase] = steps.get(phase, 0) + 1
            if phase != last_phase:
                now = clocks()
                if last_phase is not None:
                    cpu[last_phase] = [a - b for a, b in zip(now, last_clocks)]
                last_phase, last_clocks = phase, now
            # The ranks agree on the last step, every 64 steps: a rank that stopped on its own
            # clock would leave the other in its last step's all-reduce.
            if step % 64 == 0:
                flag = torch.tensor([1 if time.monotonic() >= end else 0])
                dist.all_reduce(flag, op=dist.ReduceOp.MAX)
                done = bool(flag.item())
                if done:
                    break
        epoch += 1

    # Over whole phases only (the first is cut short, the last is not closed).
    whole = sorted(cpu)[1:]
    n = {parity: sum(steps[p] for p in whole if p % 2 == parity) for parity in (0, 1)}
    spent = {parity: [sum(cpu[p][k] for p in whole if p % 2 == parity) / max(n[parity], 1) for k in range(2)]
             for parity in (0, 1)}
    reported = sum(steps[p] for p in steps if p % 2 == 0)
    empty = empty_ns / 1e9 / max(empty_calls, 1)
    call = log_ns / 1e9 / max(reported, 1) - empty
    extra = [spent[0][k] - spent[1][k] for k in range(2)]
    silent_phases = sum(1 for p in whole if p % 2 == 1)
    step_s = silent_phases * args.phase_ms / 1e3 / max(n[1], 1)
    # Each rank prints its own: a collective here could meet the other rank's last DDP step.
    print(f"cost: rank {rank}: per reported step, log call {call * 1e6:.2f} us (less an empty call's "
          f"{empty * 1e6:.2f} us), reading rank {extra[0] * 1e6:+.2f} "
          f"us, ptw {extra[1] * 1e6:+.2f} us CPU; a silent step {step_s * 1e6:.0f} us: "
          f"{(call + extra[0] + extra[1]) / step_s * 100:.2f}% of it ({reported} steps reported)", flush=True)
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
