"""resnet: a small residual CNN classifies synthetic images of coloured, oriented stripes.

The task is learnable and needs no download. Each class is a stripe orientation (one of
`angles`, evenly spaced over 180 degrees) paired with a palette (warm or cool), so the label
follows from the pixels; the stripes' spacing, phase and brightness vary per image, and every
pixel carries Gaussian noise. Chance is a loss of ln(classes): 2.08 for tiny's 8 classes.

The network normalises with GroupNorm, not BatchNorm: its gradient does not depend on how the
batch is split, so gradient accumulation over micro-batches is exactly a larger batch, and the
model behaves the same in train() and eval(). Its failure at a high learning rate without
warmup is the classic one: the first full-size Adam steps spike the loss and leave the ReLUs
dead, and the network stays at chance.

Measured with autotune.probe on a CPU (fp32, AdamW; "peak" is the largest loss over the first
one, "final" the mean of the last 10% of steps), tiny, seeds 0-4, micro_batch 16 and 32:

    150 steps                                peak         final
    defaults at unstable_lr 0.1              1.5x - 3.8x  2.07 - 2.10 (9 of 10), 0.99
    clip 1.0 + warmup 40 at 0.1              <= 1.44      0.15 - 0.76
    clip 0.5 + warmup 30 at 0.1              <= 1.16      0.17 - 1.40
    defaults at default_lr 3e-3              <= 1.16      0.15 - 0.78

"defaults" is PyTorch's: no clipping, no warmup, eps 1e-8, weight decay 0.01, constant rate. At
200 steps: 0.76-2.11 / 0.14-0.75 / 0.09-1.21 / 0.06-0.32. small (12 classes, chance 2.48),
seeds 0-1, micro_batch 32: defaults at 0.03 peak at 2.9x-3.3x and stay at chance (2.37-2.49);
clip 1.0 + warmup 40 reaches 1.42-1.50; defaults at 2e-3 reach 0.78-1.23. A tiny step takes
about 12 ms (micro_batch 16) to 14 ms (32) on one CPU thread.
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

DATA_SEED = 4242  # fixes the images: the task itself never depends on a trial
NOISE = 1.0  # pixel noise, relative to a stripe amplitude of about 1


@dataclass(frozen=True)
class Config:
    width: int  # channels of the first stage; each further stage doubles them
    stages: int  # stages after the stem; each one after the first halves the image side
    blocks: int  # residual blocks per stage
    image: int  # image side, in pixels
    angles: int  # stripe orientations; classes = 2 palettes x angles
    train: int  # training images, generated once and kept in memory
    eval: int  # held-out images


SIZES = {
    "tiny": Config(width=16, stages=2, blocks=1, image=16, angles=4, train=4096, eval=512),
    "small": Config(width=32, stages=3, blocks=1, image=32, angles=6, train=8192, eval=1024),
    "medium": Config(width=64, stages=3, blocks=2, image=32, angles=8, train=16384, eval=2048),
    "large": Config(width=96, stages=4, blocks=2, image=32, angles=8, train=16384, eval=2048),
}

# (default_lr, unstable_lr) per size. default_lr: AdamW with sensible knobs trains well.
# unstable_lr: PyTorch's defaults blow up, warmup and clipping cure it. tiny and small are
# measured (see the module docstring); medium and large are extrapolated by width, unmeasured.
LEARNING_RATES = {
    "tiny": (3e-3, 0.1),
    "small": (2e-3, 0.03),
    "medium": (1e-3, 0.015),
    "large": (5e-4, 0.005),
}


def _norm(channels: int) -> nn.GroupNorm:
    return nn.GroupNorm(min(8, channels // 4), channels)


class Residual(nn.Module):
    """conv-norm-relu-conv-norm plus a shortcut (a strided 1x1 conv where the shape changes)."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.norm1 = _norm(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.norm2 = _norm(cout)
        self.shortcut = (
            nn.Identity() if stride == 1 and cin == cout else nn.Conv2d(cin, cout, 1, stride)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.norm1(self.conv1(x)))
        return F.relu(self.norm2(self.conv2(y)) + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, c.width, 3, 1, 1, bias=False), _norm(c.width))
        layers: list[nn.Module] = []
        cin = c.width
        for stage in range(c.stages):
            cout = c.width * 2**stage
            for block in range(c.blocks):
                stride = 2 if stage > 0 and block == 0 else 1
                layers.append(Residual(cin, cout, stride))
                cin = cout
        self.layers = nn.Sequential(*layers)
        self.head = nn.Linear(cin, 2 * c.angles)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(F.relu(self.stem(x)))
        return self.head(x.mean(dim=(2, 3)))  # global average pool, then class logits


class ResNetWorkload:
    name = "resnet"

    def __init__(self, size: str = "tiny") -> None:
        if size not in SIZES:
            raise ValueError(f"unknown size {size!r}; sizes are: {', '.join(SIZES)}")
        self.size = size
        self.config = SIZES[size]
        self.default_lr, self.unstable_lr = LEARNING_RATES[size]

    def build_model(self) -> nn.Module:
        return ResNet(self.config)

    @cached_property
    def _data(self) -> tuple[torch.Tensor, torch.Tensor]:
        """All images and labels, train first: (N, 3, H, W) float32 and (N,) int64."""
        c = self.config
        g = torch.Generator().manual_seed(DATA_SEED)
        n = c.train + c.eval
        labels = torch.randint(2 * c.angles, (n,), generator=g)
        angle = (labels % c.angles).float() * math.pi / c.angles
        warm = labels // c.angles  # 0: cool palette, 1: warm palette
        # Stripes: sin(2 pi f (x cos a + y sin a) + phase), 2 to 5 pixels per period.
        freq = 1 / (2 + 3 * torch.rand(n, generator=g))
        phase = 2 * math.pi * torch.rand(n, generator=g)
        pos = torch.arange(c.image, dtype=torch.float32)
        y, x = torch.meshgrid(pos, pos, indexing="ij")
        along = x * angle.cos()[:, None, None] + y * angle.sin()[:, None, None]
        stripes = torch.sin(2 * math.pi * freq[:, None, None] * along + phase[:, None, None])
        palettes = torch.tensor([[0.3, 0.6, 1.2], [1.2, 0.6, 0.3]])  # (R, G, B) gains
        brightness = 0.7 + 0.6 * torch.rand(n, 1, generator=g)
        colour = palettes[warm] * brightness
        images = colour[:, :, None, None] * stripes[:, None]
        images += NOISE * torch.randn(n, 3, c.image, c.image, generator=g)
        return images, labels

    def batches(self, micro_batch: int, seed: int) -> Iterator[Batch]:
        x, y = self._data
        x, y = x[: self.config.train], y[: self.config.train]
        if not 1 <= micro_batch <= len(x):
            raise ValueError(f"micro_batch must be in [1, {len(x)}], got {micro_batch}")
        return _epochs(x, y, micro_batch, seed)

    def eval_batches(self, micro_batch: int) -> list[Batch]:
        x, y = self._data
        x, y = x[self.config.train :], y[self.config.train :]
        return [
            (x[i : i + micro_batch], y[i : i + micro_batch]) for i in range(0, len(x), micro_batch)
        ]

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(model(x), y)

    def samples(self, batch: Batch) -> int:
        return batch[0].shape[0]

    def tokens(self, batch: Batch) -> int:
        return 0


def _epochs(x: torch.Tensor, y: torch.Tensor, micro_batch: int, seed: int) -> Iterator[Batch]:
    """Shuffled epochs without end; the order depends on `seed` alone."""
    g = torch.Generator().manual_seed(seed)
    while True:
        order = torch.randperm(len(x), generator=g)
        for i in range(0, len(x) - micro_batch + 1, micro_batch):
            idx = order[i : i + micro_batch]
            yield x[idx], y[idx]


def make(size: str = "tiny") -> ResNetWorkload:
    """The resnet workload at `size` (one of SIZES)."""
    return ResNetWorkload(size)
