# SPDX-License-Identifier: GPL-3.0-or-later
# Copy of the reference peer (PyTorch Python DDP) so the benchmark runs from a clone.
"""Reference peer: PyTorch's own Python DistributedDataParallel (gloo) on a fixed synthetic workload.

Prints one JSON line on rank 0: {"impl": "python-ddp"|"python-single", "world": W, "samples_per_s": ...}.
Without RANK in the environment it trains in one process (the single-device baseline).
Workload, from the environment: IN, HID, OUTD (defaults 784, 512, 10: the MLP 784-512-512-10);
HID=0 gives a single Linear(IN, OUTD) (IN=10 HID=0 OUTD=2 with batch 16 is the seed's tiny workload).
Arguments: [steps] [batch_per_rank]. Launch W ranks with run_py_ddp.sh (Debian's torchrun 1.13 fails on Python 3.11)."""
import json, os, sys, time
import torch, torch.distributed as dist, torch.nn as nn

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 300
batch = int(sys.argv[2]) if len(sys.argv) > 2 else 128
distributed = "RANK" in os.environ
if distributed:
    dist.init_process_group("gloo")
rank = dist.get_rank() if distributed else 0
world = dist.get_world_size() if distributed else 1
torch.manual_seed(0)
IN = int(os.environ.get("IN", 784)); HID = int(os.environ.get("HID", 512)); OUTD = int(os.environ.get("OUTD", 10))
model = nn.Sequential(nn.Linear(IN, HID), nn.ReLU(), nn.Linear(HID, HID), nn.ReLU(), nn.Linear(HID, OUTD)) if HID > 0 else nn.Linear(IN, OUTD)
if distributed:
    model = nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
g = torch.Generator().manual_seed(rank)
x = torch.randn(batch, IN, generator=g)
y = torch.randint(0, OUTD, (batch,), generator=g)
lossf = nn.CrossEntropyLoss()
def step():
    opt.zero_grad(set_to_none=True)
    loss = lossf(model(x), y)
    loss.backward()
    opt.step()
    return loss
for _ in range(20):
    step()
if distributed:
    dist.barrier()
t0 = time.perf_counter()
for _ in range(steps):
    loss = step()
if distributed:
    dist.barrier()
dt = time.perf_counter() - t0
if rank == 0:
    print(json.dumps({"impl": "python-ddp" if distributed else "python-single", "world": world,
                      "samples_per_s": round(steps * batch * world / dt, 1), "final_loss": float(loss)}))
