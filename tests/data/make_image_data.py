#!/usr/bin/python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Writes small seeded image data sets, and what Python reads from them, into a folder.

    /usr/bin/python3 tests/data/make_image_data.py OUT

tests/core/test_data.cpp runs it into a temporary folder (nothing is committed or downloaded):

  OUT/cifar/data_batch_1.bin, data_batch_2.bin, test_batch.bin   CIFAR-10 binary records
  OUT/folder/<class>/*.png|jpg                                   an ImageFolder tree, 3 classes
  OUT/npy/x.npy, y.npy, img.npy, imgy.npy                        features, labels, images
  OUT/bad/...                                                    one broken input per case
  OUT/conv.pt         a TorchScript CNN on 3×H×W batches (a Conv2d, then the mean over H, W)
  OUT/expected.json   per set: labels, sample shape, the sum of all inputs and selected values,
                      as numpy, PIL and torchvision's ImageFolder read them
"""
import io
import json
import os
import sys

import numpy as np
import torch
from PIL import Image
from torchvision import datasets

OUT = sys.argv[1]
rng = np.random.default_rng(31)


def cifar(folder, batches):
    os.makedirs(folder, exist_ok=True)
    xs, ys = [], []
    for name, n in batches:
        labels = rng.integers(0, 10, n, dtype=np.uint8)
        pixels = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
        with open(os.path.join(folder, name), "wb") as f:
            f.write(np.concatenate([labels[:, None], pixels], axis=1).tobytes())
        xs.append(pixels)
        ys.append(labels)
    return np.concatenate(xs).astype(np.float32) / 255, np.concatenate(ys).astype(np.int64)


def image_folder(root, classes, per_class, size=(12, 10), jpegs=2):
    for c, name in enumerate(classes):
        os.makedirs(os.path.join(root, name), exist_ok=True)
        for i in range(per_class):
            a = rng.integers(0, 256, (size[0], size[1], 3), dtype=np.uint8)
            ext = "jpg" if i < jpegs else "png"
            Image.fromarray(a).save(os.path.join(root, name, "img%03d.%s" % (i, ext)))
    ds = datasets.ImageFolder(root)  # the order and labels ptw must reproduce
    xs = [np.asarray(ds.loader(p), dtype=np.float32).transpose(2, 0, 1).reshape(-1) / 255 for p, _ in ds.samples]
    return np.stack(xs), np.array(ds.targets, dtype=np.int64), ds.classes


def summary(x, y, shape):
    picks = [(int(i), int(j)) for i, j in zip(rng.integers(0, x.shape[0], 40), rng.integers(0, x.shape[1], 40))]
    return {"n": int(x.shape[0]), "shape": list(shape), "labels": y.tolist(), "sum": float(x.astype(np.float64).sum()),
            "picks": [[i, j, float(x[i, j])] for i, j in picks]}


expected = {}
x, y = cifar(os.path.join(OUT, "cifar"), [("data_batch_1.bin", 120), ("data_batch_2.bin", 100), ("test_batch.bin", 80)])
expected["cifar10"] = summary(x, y, (3, 32, 32))

# Class names chosen so that sorting matters (and differs from creation order and case-folding).
x, y, classes = image_folder(os.path.join(OUT, "folder"), ["zebra", "Apple", "mango"], 70)
expected["image-folder"] = summary(x, y, (3, 12, 10))
expected["image-folder"]["classes"] = classes

os.makedirs(os.path.join(OUT, "npy"), exist_ok=True)
fx = rng.standard_normal((50, 6))
fy = rng.integers(0, 4, 50).astype(np.int64)
np.save(os.path.join(OUT, "npy", "x.npy"), fx)  # float64
np.save(os.path.join(OUT, "npy", "y.npy"), fy)
expected["npy"] = summary(fx.astype(np.float32), fy, ())
ix = rng.random((30, 2, 5, 4), dtype=np.float32)
np.save(os.path.join(OUT, "npy", "img.npy"), ix)
np.save(os.path.join(OUT, "npy", "imgy.npy"), rng.integers(0, 3, 30).astype(np.int64))
expected["npy-images"] = summary(ix.reshape(30, -1), np.load(os.path.join(OUT, "npy", "imgy.npy")), (2, 5, 4))

# Broken inputs, one per case.
bad = os.path.join(OUT, "bad")


def tree(name, files):
    for rel, data in files.items():
        path = os.path.join(bad, name, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)


def png(a):
    b = io.BytesIO()
    Image.fromarray(a).save(b, "PNG")
    return b.getvalue()


def jpeg(a):
    b = io.BytesIO()
    Image.fromarray(a).save(b, "JPEG")
    return b.getvalue()


def npy(a):
    b = io.BytesIO()
    np.save(b, a)
    return b.getvalue()


rgb = lambda h, w: rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
tree("truncated-png", {"a/0.png": png(rgb(8, 8)), "a/1.png": png(rgb(8, 8))[:60]})
tree("truncated-jpeg", {"a/0.png": png(rgb(8, 8)), "a/1.jpg": jpeg(rgb(8, 8))[:200]})
tree("wrong-size", {"a/0.png": png(rgb(8, 8)), "b/0.png": png(rgb(9, 8))})
tree("wrong-channels", {"a/0.png": png(rgb(8, 8)), "b/0.png": png(rng.integers(0, 256, (8, 8), dtype=np.uint8))})
tree("empty-class", {"a/0.png": png(rgb(8, 8)), "b/readme.txt": b"no images"})
tree("cifar-length", {"data_batch_1.bin": bytes(3073 * 2 + 5)})
tree("npy-dtype", {"x.npy": npy(np.zeros((4, 3), np.uint8)), "y.npy": npy(np.zeros(4, np.int64))})
tree("npy-fortran", {"x.npy": npy(np.asfortranarray(np.zeros((4, 3), np.float32))), "y.npy": npy(np.zeros(4, np.int64))})



class Conv(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 10, 3)

    def forward(self, x):
        return self.conv(x).mean((2, 3))


torch.jit.script(Conv()).save(os.path.join(OUT, "conv.pt"))

with open(os.path.join(OUT, "expected.json"), "w") as f:
    json.dump(expected, f)
