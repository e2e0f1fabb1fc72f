"""A plain PyTorch training loop, tunable by autotune: a byte-level causal LM learns the bytes of
the Python standard library (already on every machine; nothing is downloaded).

Standalone:            python train.py
With a tuned recipe:   AUTOTUNE_RECIPE=recipe.yaml python train.py
Tuned:                 autotune study --space space.yaml
"""

import argparse
import sysconfig
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import autotune


def read_stdlib(limit: int = 1_000_000) -> torch.Tensor:
    """The first `limit` bytes of the standard library's .py files, in sorted order."""
    out, size = [], 0
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        data = path.read_bytes()
        out.append(data)
        size += len(data)
        if size >= limit:
            break
    return torch.frombuffer(bytearray(b"".join(out)[:limit]), dtype=torch.uint8).long()


def byte_windows(text: torch.Tensor, batch: int, block: int, seed: int):
    """Endless random (input, next-byte target) windows of `block` bytes."""
    g = torch.Generator().manual_seed(seed)
    while True:
        i = torch.randint(len(text) - block - 1, (batch,), generator=g)
        x = torch.stack([text[j : j + block] for j in i.tolist()])
        y = torch.stack([text[j + 1 : j + 1 + block] for j in i.tolist()])
        yield x, y


class TinyLM(nn.Module):
    def __init__(self, width: int, block: int = 48, layers: int = 2, heads: int = 2) -> None:
        super().__init__()
        self.embed, self.pos = nn.Embedding(256, width), nn.Embedding(block, width)
        layer = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, batch_first=True)
        self.body = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(width, 256)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(t, device=x.device)
        h = self.embed(x) + self.pos(torch.arange(t, device=x.device))
        return self.head(self.body(h, mask=mask, is_causal=True))


parser = argparse.ArgumentParser()
parser.add_argument("--width", type=int, default=48)
args = parser.parse_args()

# --- the tunable part: a dozen lines -------------------------------------------------------
trial = autotune.trial(steps=200, micro_batch=16, lr=3e-3)  # before the model and the data
r, dev = trial.recipe, trial.device
model = TinyLM(args.width).to(dev)
opt, scaler = r.optimizer(model.parameters()), r.scaler(dev.type)
sched = r.scheduler(opt, trial.schedule_steps)  # in a study: over the target length
data = byte_windows(read_stdlib(), trial.micro_batch, block=48, seed=trial.seed)
# The state hook: a study's promoted probe continues its shorter probe from here (0 otherwise).
start = trial.resume(model, opt, sched, scaler, data=data)
for step in range(start, trial.steps):
    total = torch.zeros((), device=dev)
    for x, y in (next(data) for _ in range(r.accum_steps)):
        with r.autocast(dev.type):
            loss = F.cross_entropy(model(x.to(dev)).flatten(0, 1), y.to(dev).flatten())
        scaler.scale(loss / r.accum_steps).backward()
        total += loss.detach() / r.accum_steps
    grad_norm = r.clip_and_step(opt, scaler)
    sched.step()
    trial.report(step, loss=total, grad_norm=grad_norm)
    if trial.should_stop:  # diverged: autotune records the cause
        break
