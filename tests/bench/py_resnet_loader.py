#!/usr/bin/python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Python peer of the loader benchmark (resnet_loader.sh): PyTorch's DistributedDataParallel (gloo)
training the CIFAR ResNet-18 of tests/data/make_resnet_images.py on its PNG folder, read by
torchvision's ImageFolder through a DataLoader with one worker process per rank and a
DistributedSampler, with the augmentation and normalisation ptw's profile asks for.

    RANK=r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=p py_resnet_loader.py FOLDER STEPS WARMUP BATCH

Rank 0 prints one JSON line: samples/s over the STEPS timed steps (all ranks' samples over rank 0's
wall time between two barriers) and the data share: the time spent waiting for the next batch over
the step time, summed over steps and ranks."""
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torchvision
from torchvision import transforms

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data"))
from make_resnet_images import cifar_resnet18  # noqa: E402

folder, steps, warmup, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
MEAN, STD = [0.5, 0.5, 0.5], [0.25, 0.25, 0.25]
torch.set_num_threads(1)
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(cifar_resnet18())
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
lossf = torch.nn.CrossEntropyLoss()
data = torchvision.datasets.ImageFolder(folder, transforms.Compose([
    transforms.RandomCrop(32, padding=4), transforms.RandomHorizontalFlip(), transforms.ToTensor(),
    transforms.Normalize(MEAN, STD)]))
sampler = torch.utils.data.distributed.DistributedSampler(data, num_replicas=world, rank=rank, seed=0)
loader = torch.utils.data.DataLoader(data, batch_size=batch, sampler=sampler, num_workers=1, persistent_workers=True)


def batches():
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        yield from loader
        epoch += 1


it = batches()
waited = total = 0.0
for step in range(warmup + steps):
    if step == warmup:
        dist.barrier()
        t0 = time.perf_counter()
    a = time.perf_counter()
    x, y = next(it)
    b = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss = lossf(model(x), y)
    loss.backward()
    opt.step()
    c = time.perf_counter()
    if step >= warmup:
        waited += b - a
        total += c - a
dist.barrier()
wall = time.perf_counter() - t0
sums = torch.tensor([waited, total], dtype=torch.float64)
dist.all_reduce(sums)
if rank == 0:
    print(json.dumps({"impl": "python-ddp", "world": world, "samples_per_s": round(steps * batch * world / wall, 2),
                      "data_share": round(float(sums[0] / sums[1]), 4), "step_ms": round(1000 * total / steps, 1),
                      "final_loss": float(loss)}))
dist.destroy_process_group()
