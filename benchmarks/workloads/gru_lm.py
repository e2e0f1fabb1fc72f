"""gru_lm: a GRU language model learns, byte by byte, a synthetic text of sums.

Use it by path: ``workload: {name: benchmarks/workloads/gru_lm.py:make, size: tiny}``.

The text is generated from a fixed seed (nothing is read or downloaded): lines such as
``417+86=503;`` with operands drawn log-uniformly, so short and long numbers mix. Predicting the
format and the digits' distribution is quick; predicting the digits of the sum needs the model to
carry the operands through its state, which is what a recurrent model is for. The vocabulary is
the 256 byte values: the untrained loss is about ln(256) = 5.5.

The model: byte embedding, a GRU (``layers`` deep), a linear head, PyTorch's initialisation.
At a high learning rate the loss climbs back up after its first drop and wanders; neither
clipping nor warm-up alone brings it back to what the default learning rate reaches.

Measured with autotune.probe (fp32, AdamW, one CPU thread, micro_batch 16, seeds 1-5, carried on
to the end whatever the divergence monitor said; benchmarks/false_divergence.py). "peak": the
largest loss after step 0 over the held-out initial loss (~5.55); "final": the mean loss of the
last 10% of steps.

    tiny, 500 steps                      peak           final
    defaults at default_lr 3e-3          0.99x          1.96 - 2.02
    defaults at unstable_lr 0.6          2.6x - 8.1x    4.20 - 20.1
    clip 1.0 at 0.6                      2.6x - 4.1x    4.39 - 5.79
    warm-up 50 at 0.6                    2.4x - 4.1x    2.53 - 7.92
    clip 0.3 + warm-up 50 at 0.6         1.6x - 3.3x    4.74 - 6.58

(At 250 steps: the defaults at 0.6 end at 2.47 - 4.73, the default rate at 2.02 - 2.07.)
None of these passes 10x the initial loss, so a loss-explosion rule never fires: the runs at 0.6
are unstable, some end above the untrained model's loss, without ever "diverging". A tiny step
takes 15-45 ms on one CPU thread of a busy 2-core machine.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property

import torch
import torch.nn.functional as F
from torch import nn

Batch = tuple[torch.Tensor, ...]

VOCAB = 256  # bytes
TEXT_SEED = 31415  # the text never depends on a trial


@dataclass(frozen=True)
class Config:
    embed: int  # byte embedding width
    hidden: int  # GRU state width
    layers: int  # stacked GRU layers
    block: int  # context length, in bytes
    text: int  # bytes of synthetic text (90% train, 10% held out)
    held_out: int  # windows of `block` bytes in the eval set


SIZES = {
    "tiny": Config(embed=32, hidden=64, layers=1, block=32, text=400_000, held_out=64),
    "small": Config(embed=64, hidden=256, layers=2, block=64, text=1_000_000, held_out=128),
}

# (default_lr, unstable_lr) per size; tiny is measured (module docstring), small by width.
LEARNING_RATES = {
    "tiny": (3e-3, 0.6),
    "small": (2e-3, 0.02),
}


class GRULanguageModel(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, c.embed)
        self.gru = nn.GRU(c.embed, c.hidden, num_layers=c.layers, batch_first=True)
        self.head = nn.Linear(c.hidden, VOCAB)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        states, _ = self.gru(self.embed(idx))
        logits: torch.Tensor = self.head(states)
        return logits


class GRUWorkload:
    name = "gru_lm"

    def __init__(self, size: str = "tiny") -> None:
        if size not in SIZES:
            raise ValueError(f"unknown size {size!r}; sizes are: {', '.join(SIZES)}")
        self.size = size
        self.config = SIZES[size]
        self.default_lr, self.unstable_lr = LEARNING_RATES[size]

    def build_model(self) -> nn.Module:
        return GRULanguageModel(self.config)

    @cached_property
    def text(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(train bytes, held-out bytes) as int64 tensors."""
        data = sums_text(self.config.text, TEXT_SEED)
        ids = torch.frombuffer(bytearray(data), dtype=torch.uint8).long()
        cut = int(0.9 * len(ids))
        return ids[:cut], ids[cut:]

    def batches(self, micro_batch: int, seed: int) -> Iterator[Batch]:
        if micro_batch < 1:
            raise ValueError(f"micro_batch must be at least 1, got {micro_batch}")
        train, _ = self.text
        return windows(train, micro_batch, self.config.block, seed)

    def eval_batches(self, micro_batch: int) -> list[Batch]:
        _, held = self.text
        c = self.config
        starts = torch.linspace(0, len(held) - c.block - 2, c.held_out).long().tolist()
        x = torch.stack([held[s : s + c.block] for s in starts])
        y = torch.stack([held[s + 1 : s + 1 + c.block] for s in starts])
        return [
            (x[i : i + micro_batch], y[i : i + micro_batch]) for i in range(0, len(x), micro_batch)
        ]

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        x, y = batch
        logits = model(x)
        return F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))

    def samples(self, batch: Batch) -> int:
        return int(batch[0].shape[0])

    def tokens(self, batch: Batch) -> int:
        return int(batch[1].numel())


def sums_text(n_bytes: int, seed: int) -> bytes:
    """`n_bytes` of lines ``a+b=c;`` with a and b log-uniform in [1, 10^4)."""
    rng = random.Random(seed)
    parts: list[str] = []
    size = 0
    while size < n_bytes:
        a = int(math.exp(rng.uniform(0.0, math.log(1e4))))
        b = int(math.exp(rng.uniform(0.0, math.log(1e4))))
        line = f"{a}+{b}={a + b};"
        parts.append(line)
        size += len(line)
    return "".join(parts).encode("ascii")[:n_bytes]


def windows(text: torch.Tensor, micro_batch: int, block: int, seed: int) -> Iterator[Batch]:
    """Endless random (input, next byte) windows of `block` bytes; the order is fixed by `seed`."""
    gen = torch.Generator().manual_seed(seed)
    offsets = torch.arange(block)
    while True:
        starts = torch.randint(len(text) - block - 1, (micro_batch, 1), generator=gen)
        idx = starts + offsets
        yield text[idx], text[idx + 1]


def make(size: str = "tiny") -> GRUWorkload:
    """The gru_lm workload at `size` (one of SIZES)."""
    return GRUWorkload(size)
