"""A LightningModule, tunable by autotune: a byte-level causal LM learns the bytes of the Python
standard library (already on every machine; nothing is downloaded).

Standalone:            python train.py
With a tuned recipe:   AUTOTUNE_RECIPE=recipe.yaml python train.py
Tuned:                 autotune study --space space.yaml
"""

import argparse
import sysconfig
from pathlib import Path

import lightning
import torch
import torch.nn.functional as F
from torch import nn

import autotune
from autotune.integrations import lightning as lt


def read_stdlib(limit: int = 1_000_000) -> torch.Tensor:
    """The first `limit` bytes of the standard library's .py files, in sorted order."""
    out, size = [], 0
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        out.append(path.read_bytes())
        size += len(out[-1])
        if size >= limit:
            break
    return torch.frombuffer(bytearray(b"".join(out)[:limit]), dtype=torch.uint8).long()


class ByteWindows(torch.utils.data.IterableDataset):
    """Endless batches of random (input, next-byte target) windows of `block` bytes."""

    def __init__(self, text: torch.Tensor, batch: int, block: int, seed: int) -> None:
        self.text, self.batch, self.block, self.seed = text, batch, block, seed

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed)
        while True:
            i = torch.randint(len(self.text) - self.block - 1, (self.batch,), generator=g).tolist()
            yield (
                torch.stack([self.text[j : j + self.block] for j in i]),
                torch.stack([self.text[j + 1 : j + 1 + self.block] for j in i]),
            )


class TinyLM(lightning.LightningModule):
    def __init__(self, trial, width: int, block: int = 48, layers: int = 2, heads: int = 2):
        super().__init__()
        self.trial = trial
        self.embed, self.pos = nn.Embedding(256, width), nn.Embedding(block, width)
        layer = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, batch_first=True)
        self.body = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(width, 256)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(t, device=x.device)
        h = self.embed(x) + self.pos(torch.arange(t, device=x.device))
        return self.head(self.body(h, mask=mask, is_causal=True))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self(x).flatten(0, 1), y.flatten())

    def configure_optimizers(self):
        # the trial's AdamW and its schedule, stepped after each optimizer step
        return lt.configure_optimizers(self.trial, self.parameters())


parser = argparse.ArgumentParser()
parser.add_argument("--width", type=int, default=48)
args = parser.parse_args()

trial = autotune.trial(steps=200, micro_batch=16, lr=3e-3)  # before the model and the data
model = TinyLM(trial, args.width)
data = ByteWindows(read_stdlib(), trial.micro_batch, block=48, seed=trial.seed)
trainer = lightning.Trainer(
    **lt.trainer_kwargs(trial, logger=False, enable_checkpointing=False, enable_progress_bar=False)
)
# ckpt_path: a study's promoted probe continues its shorter probe's checkpoint (None otherwise)
loader = torch.utils.data.DataLoader(data, batch_size=None)
trainer.fit(model, loader, ckpt_path=lt.ckpt_path(trial, model))
