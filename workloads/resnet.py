"""resnet: a small residual CNN classifies synthetic oriented gratings.

The task is learnable and needs no download: each 3x16x16 image is a sinusoidal grating whose
orientation (one of `classes`, evenly spaced in [0, pi)) is the label, with a random phase,
frequency and colour per image, plus pixel noise. Labels follow from the pixels (not random), so
accuracy well above chance is reachable in a few hundred steps.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property

import torch
import torch.nn.functional as F
from torch import nn

Batch = tuple[torch.Tensor, ...]

DATA_SEED = 4321  # fixes the images: the task never depends on a trial


@dataclass(frozen=True)
class Config:
    width: int  # channels of the first stage (doubled per further stage)
    stages: int  # residual stages (each one block; every stage after the first halves H, W)
    image: int  # image side in pixels
    classes: int  # grating orientations
    train: int  # training images kept in memory
    eval: int  # held-out images


SIZES = {
    "tiny": Config(width=8, stages=2, image=16, classes=8, train=4096, eval=512),  # ~7k params
    "small": Config(width=16, stages=3, image=32, classes=8, train=8192, eval=1024),
    "medium": Config(width=64, stages=3, image=32, classes=8, train=32768, eval=2048),
    "large": Config(width=128, stages=4, image=64, classes=16, train=32768, eval=2048),
}


class Residual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.skip = (
            nn.Identity() if stride == 1 and cin == cout else nn.Conv2d(cin, cout, 1, stride)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + self.skip(x))


class ResNet(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, c.width, 3, 1, 1)
        blocks, cin = [], c.width
        for i in range(c.stages):
            cout = c.width * 2**i
            blocks.append(Residual(cin, cout, 1 if i == 0 else 2))
            cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(cin, c.classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(F.relu(self.stem(x)))
        return self.head(x.mean(dim=(2, 3)))


class ResNetWorkload:
    name = "resnet"
    default_lr = 3e-3
    unstable_lr = 0.3

    def __init__(self, size: str = "tiny") -> None:
        if size not in SIZES:
            raise ValueError(f"unknown size {size!r}; sizes are: {', '.join(SIZES)}")
        self.size = size
        self.config = SIZES[size]

    @cached_property
    def _data(self) -> tuple[torch.Tensor, torch.Tensor]:
        c = self.config
        g = torch.Generator().manual_seed(DATA_SEED)
        n = c.train + c.eval
        labels = torch.randint(0, c.classes, (n,), generator=g)
        theta = labels.float() * math.pi / c.classes
        freq = 0.6 + 0.6 * torch.rand(n, generator=g)
        phase = 2 * math.pi * torch.rand(n, generator=g)
        coords = torch.arange(c.image, dtype=torch.float32) - c.image / 2
        yy, xx = torch.meshgrid(coords, coords, indexing="ij")
        proj = (
            xx[None] * torch.cos(theta)[:, None, None] + yy[None] * torch.sin(theta)[:, None, None]
        )
        wave = torch.sin(freq[:, None, None] * proj + phase[:, None, None])
        colour = 0.5 + torch.rand(n, 3, generator=g)
        images = colour[:, :, None, None] * wave[:, None] + 1.5 * torch.randn(
            n, 3, c.image, c.image, generator=g
        )
        return images, labels

    def build_model(self) -> nn.Module:
        return ResNet(self.config)

    def batches(self, micro_batch: int, seed: int) -> Iterator[Batch]:
        x, y = self._data
        n = self.config.train
        g = torch.Generator().manual_seed(seed)
        while True:
            order = torch.randperm(n, generator=g)
            for i in range(0, n - micro_batch + 1, micro_batch):
                idx = order[i : i + micro_batch]
                yield x[idx], y[idx]

    def eval_batches(self, micro_batch: int) -> list[Batch]:
        x, y = self._data
        x, y = x[self.config.train :], y[self.config.train :]
        return [
            (x[i : i + micro_batch], y[i : i + micro_batch]) for i in range(0, len(x), micro_batch)
        ]

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(model(x).float(), y)

    def samples(self, batch: Batch) -> int:
        return int(batch[0].shape[0])

    def tokens(self, batch: Batch) -> int:
        return 0


def make(size: str = "tiny") -> ResNetWorkload:
    """The resnet workload at `size` (one of SIZES)."""
    return ResNetWorkload(size)
