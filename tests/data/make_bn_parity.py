# SPDX-License-Identifier: GPL-3.0-or-later
"""The BatchNorm parity fixture of test_ddp (Note [Buffers]): a ResNet-18 (torchvision's, for
16x16 images: conv1 3x3 stride 1, no max-pool) as TorchScript that takes flat [N, 3*16*16]
rows, a small seeded image-like CSV data set (768 pixel columns and a label), and what
PyTorch's own DistributedDataParallel (gloo, 2 processes, broadcast_buffers on, the ranks'
DistributedSampler shards) trains from that model in STEPS steps: rank 0's model, as
TorchScript, with its parameters and buffers. The same for ShiftedMlp, whose gradients
depend on the buffers every rank starts a step from.

Usage: make_bn_parity.py OUT_DIR [STEPS] [BATCH] [SAMPLES] [SEED] [LR] [MOMENTUM]
Writes OUT_DIR/images.csv and, for NAME resnet and shift, OUT_DIR/NAME.scripted.pt (the model)
and OUT_DIR/NAME.python-ddp.scripted.pt (what PyTorch's DDP made of it).
Nothing is downloaded (weights are seeded, not pretrained)."""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torchvision

SIDE, CHANNELS, CLASSES = 16, 3, 10


class FlatResNet(torch.nn.Module):
    """torchvision's resnet18 on rows of CHANNELS*SIDE*SIDE pixels (ptw's data is 2-D)."""

    def __init__(self):
        super().__init__()
        net = torchvision.models.resnet18(num_classes=CLASSES)
        net.conv1 = torch.nn.Conv2d(CHANNELS, 64, kernel_size=3, stride=1, padding=1, bias=False)
        net.maxpool = torch.nn.Identity()
        self.net = net

    def forward(self, x):
        return self.net(x.reshape(-1, 3, 16, 16))  # CHANNELS, SIDE, SIDE


class ShiftedMlp(torch.nn.Module):
    """An MLP whose training forward reads a buffer it has just updated from its batch: its
    gradients, not only its buffers, depend on starting each step from rank 0's buffers."""

    def __init__(self):
        super().__init__()
        self.hidden = torch.nn.Linear(CHANNELS * SIDE * SIDE, 16)
        self.out = torch.nn.Linear(16, CLASSES)
        self.register_buffer("shift", torch.zeros(16))

    def forward(self, x):
        h = self.hidden(x)
        if self.training:
            self.shift.mul_(0.5).add_(h.detach().mean(0))
        return self.out(torch.tanh(h - self.shift))


MODELS = {"resnet": FlatResNet, "shift": ShiftedMlp}


def images_csv(path, n, seed):
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, CLASSES, (n,), generator=g)
    # Each class a brightness pattern plus noise, so that the batches' statistics differ.
    base = torch.rand(CLASSES, CHANNELS * SIDE * SIDE, generator=g)
    x = base[labels] + 0.5 * torch.randn(n, CHANNELS * SIDE * SIDE, generator=g)
    with open(path, "w") as f:
        f.write(",".join([f"p{i}" for i in range(CHANNELS * SIDE * SIDE)] + ["label"]) + "\n")
        for row, label in zip(x.tolist(), labels.tolist()):
            f.write(",".join(f"{v:.6f}" for v in row) + f",{label}\n")


def rank_main(rank, world, name, out, steps, batch, samples, seed, lr, momentum, store):
    torch.set_num_threads(1)
    # Each process its own model, from the file ptw trains (a model handed to mp.spawn would
    # be one in shared memory that both ranks write).
    model = MODELS[name]()
    model.load_state_dict(torch.jit.load(os.path.join(out, name + ".scripted.pt")).state_dict())
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=world)
    data = []
    with open(os.path.join(out, "images.csv")) as f:
        next(f)
        for line in f:
            cells = [float(c) for c in line.split(",")]
            data.append((cells[:-1], int(cells[-1])))
    x = torch.tensor([d[0] for d in data], dtype=torch.float32)
    y = torch.tensor([d[1] for d in data], dtype=torch.int64)
    ds = torch.utils.data.TensorDataset(x, y)
    ddp = torch.nn.parallel.DistributedDataParallel(model)  # broadcast_buffers=True
    opt = torch.optim.SGD(ddp.parameters(), lr=lr, momentum=momentum)
    sampler = torch.utils.data.DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=True, seed=seed)
    done, epoch = 0, 0
    while done < steps:
        sampler.set_epoch(epoch)
        for xb, yb in torch.utils.data.DataLoader(ds, batch_size=batch, sampler=sampler):
            if done == steps:
                break
            opt.zero_grad()
            torch.nn.functional.cross_entropy(ddp(xb), yb).backward()
            opt.step()
            done += 1
        epoch += 1
    if rank == 0:
        torch.jit.script(ddp.module).save(os.path.join(out, name + ".python-ddp.scripted.pt"))
    dist.barrier()
    dist.destroy_process_group()


def main():
    out = sys.argv[1]
    steps, batch, samples, seed = (int(v) for v in (sys.argv[2:6] + ["3", "4", "24", "0"][len(sys.argv[2:6]) :]))
    lr = float(sys.argv[6]) if len(sys.argv) > 6 else 0.05
    momentum = float(sys.argv[7]) if len(sys.argv) > 7 else 0.9
    os.makedirs(out, exist_ok=True)
    images_csv(os.path.join(out, "images.csv"), samples, seed + 1)
    for name, make in MODELS.items():
        torch.manual_seed(seed)
        torch.jit.script(make()).save(os.path.join(out, name + ".scripted.pt"))
        store = os.path.join(out, name + ".python-ddp.store")
        mp.spawn(rank_main, args=(2, name, out, steps, batch, samples, seed, lr, momentum, store), nprocs=2)


if __name__ == "__main__":
    main()
