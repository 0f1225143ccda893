#!/usr/bin/python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""The loader benchmark's inputs (tests/bench/resnet_loader.sh): a seeded ImageFolder tree of PNGs
and a CIFAR-style ResNet-18 as TorchScript. Nothing is downloaded; weights are seeded, not pretrained.

    /usr/bin/python3 tests/data/make_resnet_images.py OUT [IMAGES=640]

  OUT/images/c<k>/img<i>.png   IMAGES 3x32x32 RGB PNGs in 10 class folders (noise over a faint
                               per-class tint, so the labels can be learnt, slowly)
  OUT/resnet18.pt              torchvision's resnet18(num_classes=10) with the CIFAR stem: conv1 3x3
                               stride 1 and no max-pool; takes [N, 3, 32, 32]
"""
import os
import sys

import numpy as np
import torch
import torchvision
from PIL import Image

CLASSES, SIDE = 10, 32


def cifar_resnet18():
    """torchvision's resnet18 for 32x32 inputs, as CIFAR ResNets build it."""
    net = torchvision.models.resnet18(num_classes=CLASSES)
    net.conv1 = torch.nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
    net.maxpool = torch.nn.Identity()
    return net


def main():
    out = sys.argv[1]
    images = int(sys.argv[2]) if len(sys.argv) > 2 else 640
    rng = np.random.default_rng(18)
    tints = rng.integers(96, 160, (CLASSES, 3))
    for i in range(images):
        c = i % CLASSES
        folder = os.path.join(out, "images", "c%d" % c)
        os.makedirs(folder, exist_ok=True)
        noise = rng.integers(-96, 96, (SIDE, SIDE, 3))
        pixels = np.clip(tints[c] + noise, 0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(os.path.join(folder, "img%04d.png" % i))
    torch.manual_seed(0)
    torch.jit.script(cifar_resnet18()).save(os.path.join(out, "resnet18.pt"))


if __name__ == "__main__":
    main()
