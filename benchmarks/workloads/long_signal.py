"""long_signal: regression from a long 1-D signal, whose activations grow with the micro-batch.

Use it by path: ``workload: {name: benchmarks/workloads/long_signal.py:make, size: tiny}``.

Each sample is a signal of `length` positions with `channels` channels; the target is a fixed
nonlinear function (a random softplus feature map) of the sample's latent point, which every
position carries under unit noise. The model
is a per-position MLP (Linear, ReLU) x depth over the channels, then a mean over the positions
and a linear head. Every hidden layer keeps `length x hidden` values per sample for the backward
pass, so the memory a step needs grows with the micro-batch (about 1 MB a sample at tiny) while
its compute stays small: the workload the migration benchmark (`benchmarks/migrate_retune.py`)
runs under a memory limit, where the largest micro-batch no longer fits. The data is generated
from a fixed seed, in memory, the same on every machine.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property

import torch
import torch.nn.functional as F
from torch import nn

Batch = tuple[torch.Tensor, ...]

DATA_SEED = 4242


@dataclass(frozen=True)
class Config:
    length: int  # positions per signal
    channels: int  # values per position
    hidden: int  # width of each per-position hidden layer
    depth: int  # per-position hidden layers
    train: int  # training samples, in memory
    eval: int  # held-out samples


SIZES = {
    "tiny": Config(length=1024, channels=4, hidden=16, depth=2, train=2048, eval=128),
    # 4x the activations a sample: micro-batches 16, 32 and 64 need memory ~100 MiB apart, so
    # a limit between two of them is clear of both (at tiny they were ~20 MiB apart, and a
    # limit between them let the larger fit on some runs and not on others).
    "wide": Config(length=1024, channels=4, hidden=64, depth=2, train=2048, eval=128),
}
LEARNING_RATES = {"tiny": (3e-3, 0.3), "wide": (3e-3, 0.3)}  # (default_lr, unstable_lr)


class PerPosition(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = c.channels
        for _ in range(c.depth):
            layers += [nn.Linear(width, c.hidden), nn.ReLU()]
            width = c.hidden
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x).mean(dim=1))


class LongSignalWorkload:
    name = "long_signal"

    def __init__(self, size: str = "tiny") -> None:
        if size not in SIZES:
            raise ValueError(f"unknown size {size!r}; sizes are: {', '.join(SIZES)}")
        self.size = size
        self.config = SIZES[size]
        self.default_lr, self.unstable_lr = LEARNING_RATES[size]

    def build_model(self) -> nn.Module:
        return PerPosition(self.config)

    @cached_property
    def data(self) -> tuple[torch.Tensor, torch.Tensor]:
        c = self.config
        gen = torch.Generator().manual_seed(DATA_SEED)
        n = c.train + c.eval
        # Each signal is its sample's latent point z plus noise at every position; the target
        # is a nonlinear function of z, which the model recovers by pooling over the positions.
        z = torch.randn(n, 1, c.channels, generator=gen)
        x = torch.randn(n, c.length, c.channels, generator=gen).add_(z)  # in place: no copy
        w = torch.randn(c.channels, 8, generator=gen) / c.channels**0.5
        y = F.softplus(2.0 * z[:, 0] @ w).sum(dim=1, keepdim=True)
        return x, (y - y.mean()) / y.std()

    def batches(self, micro_batch: int, seed: int) -> Iterator[Batch]:
        x, y = self.data
        x, y = x[: self.config.train], y[: self.config.train]
        if not 1 <= micro_batch <= len(x):
            raise ValueError(f"micro_batch must be in [1, {len(x)}], got {micro_batch}")
        gen = torch.Generator().manual_seed(seed)
        while True:
            perm = torch.randperm(len(x), generator=gen)
            for start in range(0, len(x) - micro_batch + 1, micro_batch):
                pick = perm[start : start + micro_batch]
                yield x[pick], y[pick]

    def eval_batches(self, micro_batch: int) -> list[Batch]:
        x, y = self.data
        x, y = x[self.config.train :], y[self.config.train :]
        starts = range(0, len(x), micro_batch)
        return [(x[s : s + micro_batch], y[s : s + micro_batch]) for s in starts]

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        x, y = batch
        return F.mse_loss(model(x), y)

    def samples(self, batch: Batch) -> int:
        return int(batch[0].shape[0])

    def tokens(self, batch: Batch) -> int:
        return 0


def make(size: str = "tiny") -> LongSignalWorkload:
    """The long_signal workload at `size` (one of SIZES)."""
    return LongSignalWorkload(size)
