"""tiny_gpt: a small causal transformer learns the bytes of the Python standard library.

The text is real and already on every machine: the source files of the running Python's standard
library, read in a fixed order up to a cap (nothing is downloaded, nothing copied into this
repository). It depends on the Python version only. The first 90% is for training, the rest is
held out. The model is GPT-2 shaped: pre-LN blocks, causal self-attention through
scaled_dot_product_attention, learned positions, an untied output head; the vocabulary is the
256 byte values, so the untrained loss is about ln(256) = 5.5.

It starts from PyTorch's default initialisation rather than GPT-2's std 0.02, which makes the
first steps at a high learning rate as fragile in a tiny model as they are in a large one.
QK-norm keeps attention trainable afterwards (see Block).

Measured with autotune.probe on a CPU (fp32, AdamW; "peak" is the largest loss over the first
one, "final" the mean of the last 10% of steps), tiny, seeds 0-4, micro_batch 16 and 32:

    150 steps                                peak         final
    defaults at unstable_lr 0.5              5.6x - 8.0x  3.25 - 18.7, 8 of 10 above 5.5
    clip 1.0 + warmup 40 at 0.5              1.00         2.66 - 3.31
    clip 0.5 + warmup 30 at 0.5              1.00         2.86 - 3.23
    defaults at default_lr 3e-3              1.00         2.27 - 2.46

"defaults" is PyTorch's: no clipping, no warmup, eps 1e-8, weight decay 0.01, constant rate. At
200 steps: 3.05-21.1 / 2.59-3.17 / 2.71-3.24 / 2.22-2.41. small, seed 0, micro_batch 16:
defaults at 0.2 peak at 4.3x and end at 3.14; clip 1.0 + warmup 40 ends at 2.67; defaults at
2e-3 at 2.34. A tiny step takes about 12 ms (micro_batch 8) to 15 ms (16) on one CPU thread.
"""

from __future__ import annotations

import os
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

Batch = tuple[torch.Tensor, ...]

VOCAB = 256  # bytes
# Folders of the standard library that are not its source: third-party packages, caches, and
# the test suite (which holds deliberately odd files).
SKIP_FOLDERS = {"site-packages", "dist-packages", "__pycache__", "test", "tests", "idlelib"}


@dataclass(frozen=True)
class Config:
    layers: int  # transformer blocks
    heads: int  # attention heads per block
    width: int  # embedding width (d_model)
    block: int  # context length, in bytes
    text: int  # bytes of standard-library source to read
    held_out: int  # windows of `block` bytes in the eval set


SIZES = {
    "tiny": Config(layers=2, heads=2, width=48, block=48, text=1_000_000, held_out=64),
    "small": Config(layers=4, heads=4, width=128, block=128, text=2_000_000, held_out=128),
    "medium": Config(layers=6, heads=6, width=384, block=256, text=8_000_000, held_out=256),
    "large": Config(layers=12, heads=12, width=768, block=512, text=8_000_000, held_out=256),
}

# (default_lr, unstable_lr) per size. default_lr: AdamW with sensible knobs trains well.
# unstable_lr: PyTorch's defaults blow up, warmup and clipping cure it. tiny and small are
# measured (see the module docstring); medium and large are extrapolated by width, unmeasured.
LEARNING_RATES = {
    "tiny": (3e-3, 0.5),
    "small": (2e-3, 0.2),
    "medium": (1e-3, 0.06),
    "large": (6e-4, 0.03),
}


class Block(nn.Module):
    """Pre-LN transformer block: x + attention(ln(x)), then x + mlp(ln(x)).

    Queries and keys are layer-normalised per head (QK-norm, as in ViT-22B and OLMo 2): it stops
    attention logits from growing without bound, so once warmup is over a high learning rate
    trains. What is left to blow up at the start, without warmup, is the rest of the model.
    """

    def __init__(self, c: Config) -> None:
        super().__init__()
        self.heads = c.heads
        self.ln1 = nn.LayerNorm(c.width)
        self.qkv = nn.Linear(c.width, 3 * c.width)
        self.q_norm = nn.LayerNorm(c.width // c.heads)
        self.k_norm = nn.LayerNorm(c.width // c.heads)
        self.proj = nn.Linear(c.width, c.width)
        self.ln2 = nn.LayerNorm(c.width)
        self.fc = nn.Linear(c.width, 4 * c.width)
        self.out = nn.Linear(4 * c.width, c.width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(self.q_norm(q), self.k_norm(k), v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, c.width)
        self.position = nn.Embedding(c.block, c.width)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.layers))
        self.ln = nn.LayerNorm(c.width)
        self.head = nn.Linear(c.width, VOCAB, bias=False)
        # PyTorch's default initialisation, not GPT-2's std 0.02: it starts sharper, so that
        # a tiny model, like a large one, needs warmup to survive a high learning rate.

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.embed(idx) + self.position(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))  # logits, (batch, time, VOCAB)


class TinyGPTWorkload:
    name = "tiny_gpt"

    def __init__(self, size: str = "tiny") -> None:
        if size not in SIZES:
            raise ValueError(f"unknown size {size!r}; sizes are: {', '.join(SIZES)}")
        self.size = size
        self.config = SIZES[size]
        self.default_lr, self.unstable_lr = LEARNING_RATES[size]

    def build_model(self) -> nn.Module:
        return GPT(self.config)

    @cached_property
    def _text(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The bytes as int64 tensors: (train, eval)."""
        c = self.config
        data = read_stdlib(c.text)
        need = 20 * c.held_out * (c.block + 1)
        if len(data) < need:
            raise RuntimeError(
                f"tiny_gpt needs {need} bytes of standard-library source, found {len(data)} "
                f"under {sysconfig.get_paths()['stdlib']}"
            )
        text = torch.frombuffer(bytearray(data), dtype=torch.uint8).long()
        split = int(0.9 * len(text))
        return text[:split], text[split:]

    def batches(self, micro_batch: int, seed: int) -> Iterator[Batch]:
        if micro_batch < 1:
            raise ValueError(f"micro_batch must be at least 1, got {micro_batch}")
        return _windows(self._text[0], self.config.block, micro_batch, seed)

    def eval_batches(self, micro_batch: int) -> list[Batch]:
        held_out, block, n = self._text[1], self.config.block, self.config.held_out
        # Evenly spaced windows over the held-out text: the same on every call.
        starts = torch.linspace(0, len(held_out) - block - 1, n).long()
        idx = starts[:, None] + torch.arange(block + 1)
        windows = held_out[idx]
        return [(w[:, :-1], w[:, 1:]) for w in windows.split(micro_batch)]

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        x, y = batch
        logits = model(x)
        return F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))

    def samples(self, batch: Batch) -> int:
        return batch[0].shape[0]

    def tokens(self, batch: Batch) -> int:
        return batch[1].numel()  # every target byte is a token


def _windows(text: torch.Tensor, block: int, micro_batch: int, seed: int) -> Iterator[Batch]:
    """Random windows of block + 1 bytes without end; inputs and next-byte targets."""
    g = torch.Generator().manual_seed(seed)
    offsets = torch.arange(block + 1)
    while True:
        starts = torch.randint(len(text) - block - 1, (micro_batch, 1), generator=g)
        window = text[starts + offsets]
        yield window[:, :-1], window[:, 1:]


def read_stdlib(limit: int) -> bytes:
    """Up to `limit` bytes of the standard library's .py files, in a fixed sorted order."""
    root = sysconfig.get_paths()["stdlib"]
    chunks: list[bytes] = []
    total = 0
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_FOLDERS)  # walk in a fixed order
        for name in sorted(files):
            # _sysconfigdata_* records how this machine's Python was built: not the same text
            # on every machine with the same Python version.
            if not name.endswith(".py") or name.startswith("_sysconfigdata"):
                continue
            data = (Path(folder) / name).read_bytes()
            chunks.append(data)
            total += len(data)
            if total >= limit:
                return b"".join(chunks)[:limit]
    return b"".join(chunks)


def make(size: str = "tiny") -> TinyGPTWorkload:
    """The tiny_gpt workload at `size` (one of SIZES)."""
    return TinyGPTWorkload(size)
