"""student_t: tabular regression with heavy-tailed (Student-t, 2 degrees of freedom) noise on the
targets. A measurement workload for the divergence monitor (benchmarks/divergence_calibration.py
and tests/probe/test_divergence.py), not a built-in: its per-batch MSE loss jumps far above its
typical value whenever a batch holds an outlier target, and those jumps are gone a step later.

The task: inputs x ~ N(0, I) (24 features); the target is a fixed random linear map of x plus a
tanh term, scaled to unit variance, plus 0.5 * t(2) noise (infinite variance). A 2-layer MLP
(width 64, ReLU) fits it with MSE. Seeds change the data order, never the data.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cached_property

import torch
import torch.nn.functional as F
from torch import nn

Batch = tuple[torch.Tensor, ...]
DATA_SEED = 4321
SIZES = ("tiny",)
FEATURES, TRAIN, EVAL = 24, 8192, 1024


class StudentTWorkload:
    name = "student_t"
    size = "tiny"
    default_lr = 3e-3
    unstable_lr = 0.1  # PyTorch's defaults: outlier batches kick the loss past 10x its start

    @cached_property
    def _data(self) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(DATA_SEED)
        n = TRAIN + EVAL
        x = torch.randn(n, FEATURES, generator=g)
        w = torch.randn(FEATURES, 1, generator=g) / FEATURES**0.5
        v = torch.randn(FEATURES, 1, generator=g) / FEATURES**0.5
        y = x @ w + torch.tanh(2 * x @ v)
        y = (y - y.mean()) / y.std()
        # t(2) = N(0, 1) / sqrt(chi2(2) / 2); chi2(2) / 2 is Exp(1)
        z = torch.randn(n, 1, generator=g)
        e = torch.empty(n, 1).exponential_(1.0, generator=g)
        return x, y + 0.5 * z / e.sqrt()

    def build_model(self) -> nn.Module:
        return nn.Sequential(
            nn.Linear(FEATURES, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1)
        )

    def batches(self, micro_batch: int, seed: int) -> Iterator[Batch]:
        x, y = self._data
        x, y = x[:TRAIN], y[:TRAIN]
        g = torch.Generator().manual_seed(seed)
        while True:
            order = torch.randperm(TRAIN, generator=g)
            for i in range(0, TRAIN - micro_batch + 1, micro_batch):
                idx = order[i : i + micro_batch]
                yield x[idx], y[idx]

    def eval_batches(self, micro_batch: int) -> list[Batch]:
        x, y = self._data
        x, y = x[TRAIN:], y[TRAIN:]
        step = micro_batch
        return [(x[i : i + step], y[i : i + step]) for i in range(0, EVAL, step)]

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        x, y = batch
        return F.mse_loss(model(x), y)

    def samples(self, batch: Batch) -> int:
        return int(batch[0].shape[0])

    def tokens(self, batch: Batch) -> int:
        return 0


def make(size: str = "tiny") -> StudentTWorkload:
    if size != "tiny":
        raise ValueError(f"student_t has one size, tiny; not {size!r}")
    return StudentTWorkload()
