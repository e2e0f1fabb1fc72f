"""mlp: a small MLP learns a fixed random teacher network. Seconds-fast, for tests.

The task: inputs x ~ N(0, I); the targets are the outputs of a random two-layer tanh network (the
teacher), each scaled to unit variance, plus noise of std 0.1. Predicting zero scores a loss of
about 1.0. The task is the same on every machine and needs no download.

The model: (Linear, LayerNorm, ReLU) x depth, then a linear output; He initialisation. The
LayerNorms make the hidden weights scale-free, so a high learning rate is survivable once
training is under way; what breaks is the start, where Adam moves every weight by about the
full learning rate at once and the output overshoots.

Measured with autotune.probe on a CPU (fp32, AdamW; "peak" is the largest loss over the first
one, "final" the mean of the last 10% of steps), tiny, seeds 0-4, micro_batch 16 and 32:

    150 steps                                peak         final
    defaults at unstable_lr 0.3              22x - 64x    0.74 - 1.10   diverged 10/10
    clip 1.0 + warmup 40 at 0.3              1.00         0.25 - 0.41
    clip 0.5 + warmup 30 at 0.3              1.00         0.24 - 0.42
    defaults at default_lr 3e-3              <= 1.04      0.19 - 0.23

"defaults" is PyTorch's: no clipping, no warmup, eps 1e-8, weight decay 0.01, constant rate. At
200 steps the picture is the same (finals 0.74-1.04 / 0.23-0.37 / 0.18-0.21). small, seeds 0-2,
micro_batch 32: defaults at 0.15 peak at 120x-191x and end at 0.66-0.89; clip 1.0 + warmup 40
ends at 0.30-0.33; defaults at 2e-3 at 0.22. A tiny step takes about 1 ms on one CPU thread.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property

import torch
import torch.nn.functional as F
from torch import nn

Batch = tuple[torch.Tensor, ...]

DATA_SEED = 1234  # fixes the teacher and the samples: the task itself never depends on a trial


@dataclass(frozen=True)
class Config:
    inputs: int  # features per sample
    hidden: int  # width of each hidden layer
    depth: int  # hidden layers
    outputs: int  # regression targets per sample (several: a steadier per-batch loss)
    train: int  # training samples, generated once and kept in memory
    eval: int  # held-out samples


SIZES = {
    "tiny": Config(inputs=16, hidden=64, depth=2, outputs=8, train=4096, eval=512),  # 5.8k
    "small": Config(inputs=32, hidden=256, depth=2, outputs=16, train=16384, eval=1024),  # 78k
    "medium": Config(inputs=64, hidden=1024, depth=2, outputs=32, train=65536, eval=2048),  # 1.1M
    "large": Config(inputs=128, hidden=2048, depth=5, outputs=64, train=131072, eval=4096),  # 17M
}

# (default_lr, unstable_lr) per size. default_lr: AdamW with sensible knobs trains well.
# unstable_lr: PyTorch's defaults blow up, warmup and clipping cure it. tiny and small are
# measured (see the module docstring); medium and large are extrapolated by width, unmeasured.
LEARNING_RATES = {
    "tiny": (3e-3, 0.3),
    "small": (2e-3, 0.15),
    "medium": (1e-3, 0.05),
    "large": (5e-4, 0.03),
}


class MLPWorkload:
    name = "mlp"

    def __init__(self, size: str = "tiny") -> None:
        if size not in SIZES:
            raise ValueError(f"unknown size {size!r}; sizes are: {', '.join(SIZES)}")
        self.size = size
        self.config = SIZES[size]
        self.default_lr, self.unstable_lr = LEARNING_RATES[size]

    def build_model(self) -> nn.Module:
        c = self.config
        layers: list[nn.Module] = []
        width = c.inputs
        for _ in range(c.depth):
            layers += [nn.Linear(width, c.hidden), nn.LayerNorm(c.hidden), nn.ReLU()]
            width = c.hidden
        layers.append(nn.Linear(width, c.outputs))
        model = nn.Sequential(*layers)
        # He initialisation, the textbook choice for ReLU, is sharper at the start than PyTorch's
        # default (1/sqrt(3) as large): the first steps at a high learning rate overshoot.
        for layer in model:
            if isinstance(layer, nn.Linear):
                nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
                nn.init.zeros_(layer.bias)
        return model

    @cached_property
    def _data(self) -> tuple[torch.Tensor, torch.Tensor]:
        c = self.config
        g = torch.Generator().manual_seed(DATA_SEED)
        n = c.train + c.eval
        x = torch.randn(n, c.inputs, generator=g)
        w1 = torch.randn(c.inputs, 4 * c.inputs, generator=g) / c.inputs**0.5
        w2 = torch.randn(4 * c.inputs, c.outputs, generator=g) / (4 * c.inputs) ** 0.5
        y = torch.tanh(2 * x @ w1) @ w2
        y = (y - y.mean(0)) / y.std(0)
        y = y + 0.1 * torch.randn(n, c.outputs, generator=g)
        return x, y

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
        return F.mse_loss(model(x), y)

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


def make(size: str = "tiny") -> MLPWorkload:
    """The mlp workload at `size` (one of SIZES)."""
    return MLPWorkload(size)
