#!/usr/bin/python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Generates the small data files ptw ships for its example profiles and tests.

    /usr/bin/python3 tests/data/make_fixtures.py

Nothing is downloaded: the "digits" are seeded synthetic strokes, one pattern per class,
in the IDX format of the MNIST files; the CSV is a seeded linear problem; the TorchScript
models are a small MLP made with torch.jit.script, as a user would make one, the same MLP in
float64, and an MLP with a tied weight.
"""
import os
import struct

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def mnist_tiny(folder, n=200, seed=0):
    g = torch.Generator().manual_seed(seed)
    templates = torch.zeros(10, 28, 28)
    for c in range(10):  # a distinct bar pattern per class
        templates[c, 4 + 2 * c: 7 + 2 * c, 4:24] = 1.0
        templates[c, 4:24, 4 + 2 * (9 - c): 7 + 2 * (9 - c)] = 0.6
    labels = torch.arange(n) % 10
    images = templates[labels] + 0.3 * torch.rand(n, 28, 28, generator=g)
    images = (images.clamp(0, 1) * 255).to(torch.uint8)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "train-images-idx3-ubyte"), "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, 28, 28))
        f.write(images.numpy().tobytes())
    with open(os.path.join(folder, "train-labels-idx1-ubyte"), "wb") as f:
        f.write(struct.pack(">II", 0x801, n))
        f.write(labels.to(torch.uint8).numpy().tobytes())


def regression_csv(path, n=240, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    y = x @ torch.tensor([1.5, -2.0, 0.5, 3.0]) + 0.25 + 0.05 * torch.randn(n, generator=g)
    with open(path, "w") as f:
        f.write("x1,x2,x3,x4,y\n")
        for row, target in zip(x.tolist(), y.tolist()):
            f.write(",".join(f"{v:.6f}" for v in row + [target]) + "\n")


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = torch.nn.Linear(10, 16)
        self.out = torch.nn.Linear(16, 1)

    def forward(self, x):
        return self.out(torch.tanh(self.hidden(x)))


class Float64Mlp(torch.nn.Module):
    """The MLP above in float64, which DDP over shared memory does not reduce (strategy.backend
    auto then trains over Gloo)."""

    def __init__(self):
        super().__init__()
        self.net = Mlp().double()

    def forward(self, x):
        return self.net(x.double()).float()


class TiedMlp(torch.nn.Module):
    """An MLP that applies one hidden layer twice: a tied weight, which a model's parameters
    list once."""

    def __init__(self):
        super().__init__()
        self.hidden = torch.nn.Linear(10, 10)
        self.again = self.hidden
        self.out = torch.nn.Linear(10, 1)

    def forward(self, x):
        return self.out(torch.tanh(self.again(torch.tanh(self.hidden(x)))))


class BatchNormMlp(torch.nn.Module):
    """The MLP above with a BatchNorm layer: buffers (running mean, variance and batch count)
    that DDP broadcasts from rank 0 and checkpoints keep."""

    def __init__(self):
        super().__init__()
        self.hidden = torch.nn.Linear(10, 16)
        self.norm = torch.nn.BatchNorm1d(16)
        self.out = torch.nn.Linear(16, 1)

    def forward(self, x):
        return self.out(torch.tanh(self.norm(self.hidden(x))))


if __name__ == "__main__":
    torch.manual_seed(0)
    mnist_tiny(os.path.join(ROOT, "resources/data/mnist-tiny"))
    regression_csv(os.path.join(ROOT, "resources/data/regression.csv"))
    torch.jit.script(Mlp()).save(os.path.join(ROOT, "resources/data/mlp-10-16-1.scripted.pt"))
    torch.jit.script(Float64Mlp()).save(os.path.join(ROOT, "resources/data/mlp-10-16-1-float64.scripted.pt"))
    torch.jit.script(TiedMlp()).save(os.path.join(ROOT, "resources/data/tied-10-10-1.scripted.pt"))
    torch.jit.script(BatchNormMlp()).save(os.path.join(ROOT, "resources/data/bn-10-16-1.scripted.pt"))
