"""heavy_tail: tabular regression whose targets carry Student-t noise with few degrees of freedom.

Use it by path: ``workload: {name: benchmarks/workloads/heavy_tail.py:make, size: tiny}``.

The task: features x ~ N(0, I); the clean target is a smooth function of x (a random
one-hidden-layer softplus network, scaled to unit variance), and the observed target adds
``noise_scale`` x Student-t noise with ``dof`` degrees of freedom (2.5: the noise's variance is
finite, its higher moments are not). Most samples are ordinary; now and then one sits tens of
units away, and the mean squared error of the mini-batch that holds it is 10-18x the held-out
loss of the untrained model (5-8 such steps in 1000 at default_lr). Such a step is a property of
the data, not of the optimizer: the next batch's loss is back under 2x. The data is generated
from a fixed seed, in memory, the same on every machine.

The model: an MLP (Linear, ReLU) x depth with PyTorch's default initialisation and no
normalisation, so a learning rate that is too high does harm that does not wash out.

Measured with autotune.probe (fp32, AdamW, one CPU thread, micro_batch 16, seeds 1-5, carried on
to the end whatever the divergence monitor said; benchmarks/false_divergence.py). "peak": the
largest loss after step 0 over the held-out initial loss (~1.8); "final": the mean loss of the
last 10% of steps (its outlier batches included); "median": their median.

    tiny, 1000 steps                     peak            final         median
    defaults at default_lr 3e-3          17x - 18x       0.88 - 1.40   0.60 - 0.85
    defaults at unstable_lr 0.3          2300x - 4000x   0.99 - 1.52   0.70 - 0.99
    clip 1.0 at 0.3                      1600x - 5700x   1.91 - 2.38   1.60 - 2.01
    warm-up 50 at 0.3                    17x - 890x      1.90 - 2.40   1.61 - 1.99
    clip 0.3 + warm-up 50 at 0.3         18x - 48x       1.90 - 2.39   1.61 - 1.99

At 0.3 PyTorch's defaults explode at step 1 and recover; clipping and warm-up avoid the explosion
but end worse (a case where the defaults are right). Every run, at any learning rate, has batches
past 10x the initial loss: a rule that calls one such step a divergence calls all of them
diverged. A tiny step takes about 1 ms on one idle CPU thread.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property

import torch
import torch.nn.functional as F
from torch import nn

Batch = tuple[torch.Tensor, ...]

DATA_SEED = 2718  # the features, the teacher and the noise: the task never depends on a trial


@dataclass(frozen=True)
class Config:
    features: int  # inputs per sample
    hidden: int  # width of each hidden layer of the model
    depth: int  # hidden layers of the model
    dof: float  # degrees of freedom of the Student-t noise (<= 2: no finite variance)
    noise_scale: float  # the noise is noise_scale x a standard Student-t draw
    train: int  # training samples, in memory
    eval: int  # held-out samples


SIZES = {
    "tiny": Config(features=12, hidden=64, depth=2, dof=2.5, noise_scale=0.5, train=8192, eval=512),
    "small": Config(
        features=32, hidden=256, depth=3, dof=2.0, noise_scale=0.5, train=32768, eval=1024
    ),
}

# (default_lr, unstable_lr) per size; tiny is measured (module docstring), small by width.
LEARNING_RATES = {
    "tiny": (3e-3, 0.3),
    "small": (2e-3, 0.05),
}


class HeavyTailWorkload:
    name = "heavy_tail"

    def __init__(self, size: str = "tiny") -> None:
        if size not in SIZES:
            raise ValueError(f"unknown size {size!r}; sizes are: {', '.join(SIZES)}")
        self.size = size
        self.config = SIZES[size]
        self.default_lr, self.unstable_lr = LEARNING_RATES[size]

    def build_model(self) -> nn.Module:
        c = self.config
        layers: list[nn.Module] = []
        width = c.features
        for _ in range(c.depth):
            layers += [nn.Linear(width, c.hidden), nn.ReLU()]
            width = c.hidden
        layers.append(nn.Linear(width, 1))
        return nn.Sequential(*layers)

    @cached_property
    def data(self) -> tuple[torch.Tensor, torch.Tensor]:
        """All samples (features, targets): the first `train` for training, then `eval`."""
        c = self.config
        gen = torch.Generator().manual_seed(DATA_SEED)
        n = c.train + c.eval
        x = torch.randn(n, c.features, generator=gen)
        inner = torch.randn(c.features, 2 * c.features, generator=gen) / c.features**0.5
        outer = torch.randn(2 * c.features, 1, generator=gen) / (2 * c.features) ** 0.5
        clean = F.softplus(1.5 * x @ inner) @ outer
        clean = (clean - clean.mean()) / clean.std()
        # Student-t: a normal draw over the root of a chi-square per degree of freedom.
        chi2 = torch.distributions.Chi2(torch.tensor(c.dof))
        z = torch.randn(n, 1, generator=gen)
        with torch.random.fork_rng(devices=[]):  # Chi2 samples from the global generator
            torch.manual_seed(DATA_SEED + 1)
            v = chi2.sample((n, 1))
        t = z / torch.sqrt(v / c.dof)
        return x, clean + c.noise_scale * t

    def batches(self, micro_batch: int, seed: int) -> Iterator[Batch]:
        x, y = self.data
        x, y = x[: self.config.train], y[: self.config.train]
        if not 1 <= micro_batch <= len(x):
            raise ValueError(f"micro_batch must be in [1, {len(x)}], got {micro_batch}")
        return shuffled(x, y, micro_batch, seed)

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


def shuffled(x: torch.Tensor, y: torch.Tensor, micro_batch: int, seed: int) -> Iterator[Batch]:
    """Endless reshuffled passes over (x, y); the order is fixed by `seed` alone."""
    gen = torch.Generator().manual_seed(seed)
    while True:
        perm = torch.randperm(len(x), generator=gen)
        for start in range(0, len(x) - micro_batch + 1, micro_batch):
            pick = perm[start : start + micro_batch]
            yield x[pick], y[pick]


def make(size: str = "tiny") -> HeavyTailWorkload:
    """The heavy_tail workload at `size` (one of SIZES)."""
    return HeavyTailWorkload(size)
