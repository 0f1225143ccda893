#!/usr/bin/python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""The data and models of the image example profiles, seeded (nothing is downloaded):

    /usr/bin/python3 tests/data/make_examples.py OUT

  OUT/cifar-tiny/data_batch_1.bin, test_batch.bin   600 32×32 RGB images in CIFAR-10's binary
                                                    format (500 + 100), 10 classes
  OUT/resnet18-cifar.scripted.pt                    torchvision's ResNet-18 for 10 classes, seeded
                                                    weights, as TorchScript (11,181,642 parameters)
  OUT/shapes-folder/<class>/*.png                   240 16×16 RGB images, 3 classes, an ImageFolder
  OUT/cnn-shapes.scripted.pt                        a small CNN for them, as TorchScript

resources/profiles/ddp-resnet18-cifar.json and dataparallel-image-folder.json read them from
resources/data/ (the build runs this script, CMakeLists.txt: ptw_example_data). A CIFAR class is a
colour and a shape, an image folder's class a shape of any colour and size, with noise: ResNet-18
learns the first in about 60 steps, the CNN the second in about 1,500, so that the examples' curves
converge within their runs.
Files are written under a temporary name and renamed, so that a build stopped halfway leaves
no partial file under the final name.
"""
import os
import sys

import numpy as np
import torch
import torchvision
from PIL import Image

OUT = sys.argv[1]
rng = np.random.default_rng(2024)


def replace(path, write):
    tmp = path + ".tmp"
    write(tmp)
    os.replace(tmp, path)


def class_image(label, classes, side, kind=None):
    """A shape on a dark background at a random place, with noise. With `kind` None the class's
    colour and shape (square, disc, cross, bar by label) tell it apart; with a kind, the shape
    alone does (of a random colour and size), which takes a CNN longer to learn."""
    hue = label / classes if kind is None else rng.uniform()
    colour = np.array([np.cos(2 * np.pi * (hue + k / 3)) * 0.5 + 0.5 for k in range(3)])
    img = rng.normal(0.15, 0.08 if kind is None else 0.15, (side, side, 3))
    r = side // 4 if kind is None else int(rng.integers(side // 5, side // 3 + 1))
    cy, cx = rng.integers(r, side - r, 2)
    yy, xx = np.mgrid[:side, :side]
    kind = label % 4 if kind is None else kind
    if kind == 0:
        mask = (abs(yy - cy) <= r) & (abs(xx - cx) <= r)
    elif kind == 1:
        mask = (yy - cy) ** 2 + (xx - cx) ** 2 <= r * r
    elif kind == 2:
        mask = ((abs(yy - cy) <= r // 3) & (abs(xx - cx) <= r)) | ((abs(xx - cx) <= r // 3) & (abs(yy - cy) <= r))
    else:
        mask = (abs(yy - cy) <= r // 2) & (abs(xx - cx) <= 2 * r)
    img[mask] = colour * rng.uniform(0.7, 1.0) + rng.normal(0, 0.08, (mask.sum(), 3))
    return (np.clip(img, 0, 1) * 255).astype(np.uint8)


def cifar(folder, batches):
    os.makedirs(folder, exist_ok=True)
    for name, n in batches:
        labels = rng.integers(0, 10, n, dtype=np.uint8)
        rows = [np.concatenate([[l], class_image(int(l), 10, 32).transpose(2, 0, 1).reshape(-1)]) for l in labels]
        data = np.stack(rows).astype(np.uint8).tobytes()

        def write(tmp, data=data):
            with open(tmp, "wb") as f:
                f.write(data)

        replace(os.path.join(folder, name), write)


def shapes_folder(root, classes, per_class, side):
    kinds = {"square": 0, "disc": 1, "cross": 2, "bar": 3}
    for c, name in enumerate(classes):
        os.makedirs(os.path.join(root, name), exist_ok=True)
        for i in range(per_class):
            img = Image.fromarray(class_image(c, len(classes), side, kinds[name]))
            replace(os.path.join(root, name, "%03d.png" % i), lambda tmp, img=img: img.save(tmp, format="PNG"))


class SmallCnn(torch.nn.Module):
    def __init__(self, classes):
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1))
        self.head = torch.nn.Linear(32, classes)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


def script(model, path):
    replace(path, lambda tmp: torch.jit.script(model).save(tmp))


torch.manual_seed(0)
cifar(os.path.join(OUT, "cifar-tiny"), [("data_batch_1.bin", 500), ("test_batch.bin", 100)])
script(torchvision.models.resnet18(num_classes=10), os.path.join(OUT, "resnet18-cifar.scripted.pt"))
shapes_folder(os.path.join(OUT, "shapes-folder"), ["cross", "disc", "square"], 80, 16)
script(SmallCnn(3), os.path.join(OUT, "cnn-shapes.scripted.pt"))
