"""The initial loss a probe is measured against: the untrained model on the held-out set.

`loss_drop`, `noise_per_drop` and the `loss_explosion` test compare the run with its loss
before any update. Step 0's training loss is that of one batch: on a workload whose batches are
heavy-tailed (noisy regression targets, rare long documents) it is a noisy reference, and it
changes with the seed, so each verification seed would be judged against a different draw. The
reference is instead the untrained model's mean loss over the workload's held-out set
(`Workload.eval_batches`, the same on every call whatever the seed), weighted by the tokens (else
the samples) of each batch, over at most `MAX_BATCHES` of them.

It is measured as the training loop measures its losses (train mode, the probe's autocast), with
no gradient, and leaves the run as it found it: the model's buffers (BatchNorm's running
statistics) and every RNG (Python, NumPy, torch, each GPU) are put back, so the training that
follows is, step for step, the one that would have run without it. Where there is no usable
held-out set (an empty one, one that raises, a loss that is not one finite number) the probe
falls back to step 0's loss and says why (the training that follows judges the workload); a
training script (`probe.script`) has no held-out set and always uses step 0.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from autotune.probe.steps import to_device

if TYPE_CHECKING:
    import torch

MAX_BATCHES = 16  # enough for a robust mean; a large held-out set costs no more than this


@dataclass(frozen=True)
class Reference:
    """The initial loss (`loss`; None: step 0's loss is used) and where it came from."""

    loss: float | None
    source: str  # "held_out" or "step0"
    batches: int = 0
    why: str | None = None  # why step 0's loss is used

    def record(self) -> dict[str, Any]:
        """What the probe's summary says of it."""
        return {"source": self.source, "loss": self.loss, "batches": self.batches, "why": self.why}


STEP0 = Reference(None, "step0", why="a training script has no held-out set")


def held_out(
    model: torch.nn.Module,
    workload: Any,
    micro_batch: int,
    device: torch.device,
    amp_dtype: torch.dtype | None,
) -> Reference:
    """The untrained `model`'s mean loss over the first `MAX_BATCHES` of the workload's held-out
    batches, the run left as it was found. A held-out set that cannot be used (none, an error in
    `eval_batches()` or in `loss()` on it, a loss that is not one finite number) leaves step 0's
    loss as the reference, with the reason: the training that follows judges the workload."""
    import torch

    total = torch.zeros((), dtype=torch.float64, device=device)
    weight, n = 0, 0
    try:
        # islice, not a list: a workload may hand back an endless stream (its own batches())
        batches = list(itertools.islice(workload.eval_batches(micro_batch), MAX_BATCHES))
        n = len(batches)
        if not batches:
            return Reference(None, "step0", why="the workload's eval_batches() returned no batch")
        with (
            _untouched(model),
            torch.no_grad(),
            torch.autocast(device.type, dtype=amp_dtype or torch.float32, enabled=bool(amp_dtype)),
        ):
            for batch in batches:
                on_device = to_device(batch, device)
                out = workload.loss(model, on_device)
                if not isinstance(out, torch.Tensor) or out.numel() != 1:
                    return Reference(
                        None, "step0", n, "loss() on a held-out batch is not a one-element tensor"
                    )
                w = int(workload.tokens(on_device) or workload.samples(on_device) or 1)
                total += out.detach().double().reshape(()) * w
                weight += w
        loss = float(total) / weight  # the one host sync
    except Exception as e:  # the workload's code: training will say what is wrong with it
        why = f"the held-out set could not be used: {type(e).__name__}: {str(e)[:200]}"
        return Reference(None, "step0", n, why)
    if not math.isfinite(loss):
        return Reference(None, "step0", n, "the untrained model's held-out loss is not finite")
    return Reference(loss, "held_out", n)


@contextlib.contextmanager
def _untouched(model: torch.nn.Module) -> Iterator[None]:
    """Put back the model's buffers and every RNG after the block."""
    import torch

    buffers = [(b, b.detach().clone()) for b in model.buffers()]
    py, np_state, cpu = random.getstate(), np.random.get_state(), torch.get_rng_state()
    gpus = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []
    try:
        yield
    finally:
        with torch.no_grad():
            for live, saved in buffers:
                live.copy_(saved)
        random.setstate(py)
        np.random.set_state(np_state)
        torch.set_rng_state(cpu)
        if gpus:
            torch.cuda.set_rng_state_all(gpus)
