"""A small regression workload as a factory module's source (`workload: {name: FILE:make}`),
with the parts a test changes given as code: what `build_model` runs, the seed its data is
drawn with, and how many micro-batches `batches` yields."""

from __future__ import annotations

_TEMPLATE = """\
import torch
from torch import nn


class W:
    name = "{name}"
    default_lr = 3e-3
    unstable_lr = 1.0

    def __init__(self, size):
        self.size = size
        self.w = torch.randn(8, 1, generator=torch.Generator().manual_seed(1))

    def build_model(self):
        {build}

    def batches(self, micro_batch, seed):
        g = torch.Generator().manual_seed({data_seed})
        for _ in range({count}):
            x = torch.randn(micro_batch, 8, generator=g)
            yield x, x @ self.w

    def eval_batches(self, micro_batch):
        g = torch.Generator().manual_seed(9)
        return [(x, x @ self.w) for x in [torch.randn(micro_batch, 8, generator=g)]]

    def loss(self, model, batch):
        return nn.functional.mse_loss(model(batch[0]) + 0 * batch[0].sum(), batch[1])

    def samples(self, batch):
        return batch[0].shape[0]

    def tokens(self, batch):
        return 0


def make(size="tiny"):
    return W(size)
"""

LINEAR = "nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))"


def source(
    name: str, *, build: str = f"return {LINEAR}", data_seed: str = "seed", count: str = "10**9"
) -> str:
    """The module's text (`build`: `build_model`'s one-line body; `data_seed`: an expression
    for the generator's seed, `seed` being the probe's; `count`: micro-batches yielded)."""
    return _TEMPLATE.format(name=name, build=build, data_seed=data_seed, count=count)
