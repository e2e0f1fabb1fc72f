"""resnet: a small residual CNN classifies synthetic images of coloured, oriented stripes.

The task is learnable and needs no download. Each class is a stripe orientation (one of
`angles`, evenly spaced over 180 degrees) paired with a palette (warm or cool), so the
label follows from the pixels; the stripes' spacing, phase and brightness vary per image, and
every pixel carries Gaussian noise.

The network normalises with GroupNorm, not BatchNorm: its gradient does not depend on how the
batch is split, so gradient accumulation over micro-batches is exactly a larger batch, and the
model behaves the same in train() and eval().

Measured: TODO
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
    "large": Config(width=96, stages=4, blocks=2, image=64, angles=8, train=16384, eval=2048),
}

# (default_lr, unstable_lr) per size. default_lr: AdamW with sensible knobs trains well.
# unstable_lr: PyTorch's defaults blow up, warmup and clipping cure it. Measured for tiny and
# small (see above); medium and large are scaled by 1/width, Adam's usual rule, unmeasured.
LEARNING_RATES = {
    "tiny": (3e-3, 0.1),
    "small": (2e-3, 0.05),
    "medium": (1e-3, 0.025),
    "large": (1e-3, 0.015),
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
