"""The initial loss a probe is measured against: the untrained model on the held-out set.

`loss_drop`, `noise_per_drop` and the `loss_explosion` test compare the run with its loss
before any update. Step 0's training loss is that of one batch: on a workload whose batches are
heavy-tailed (noisy regression targets, rare long documents) it is a noisy reference, and it
changes with the seed, so each verification seed would be judged against a different draw. The
reference is instead the untrained model's mean loss over the workload's held-out set
(`Workload.eval_batches`, the same on every call whatever the seed), weighted by the tokens (else
the samples) of each batch.

It is one number for every trial of a seed in a study, whatever the trial's accumulation or
micro-batch: the held-out set is read in chunks of `ProbeConfig.reference_batch` samples (the
same for the whole study: with BatchNorm in train mode the loss depends on the chunk size, not
only on the samples), up to `ProbeConfig.reference_samples` samples. A `ProbeConfig` made by hand
leaves both unset: chunks of its micro-batch, `REFERENCE_CHUNKS` of them.

It is measured as the training loop measures its losses (train mode, the probe's autocast), with
no gradient, and leaves the run as it found it: the model's buffers (BatchNorm's running
statistics) and every RNG (Python, NumPy, torch, each GPU) are put back, so the training that
follows is, step for step, the one that would have run without it. Where there is no usable
held-out set (an empty one, one that raises, a loss that is not one finite number) the probe
falls back to step 0's loss and says why (the training that follows judges the workload). A
training script (`probe.script`) gives its own through `trial.reference()` (`given`), else
step 0's loss is its reference.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune.probe import rng
from autotune.probe.config import REFERENCE_CHUNKS, ProbeConfig, Rank
from autotune.probe.steps import to_device

if TYPE_CHECKING:
    import torch

MAX_BATCHES = REFERENCE_CHUNKS  # the chunks of a reference whose samples are not set
MAX_CHUNKS = 10_000  # a held-out stream whose batches hold no samples ends here


@dataclass(frozen=True)
class Reference:
    """The initial loss (`loss`; None: step 0's loss is used) and where it came from."""

    loss: float | None
    source: str  # "held_out", "script" (a training script's own callable) or "step0"
    batches: int = 0
    why: str | None = None  # why step 0's loss is used
    samples: int = 0  # held-out samples it was measured on
    chunk: int | None = None  # the samples per held-out chunk it read

    def record(self) -> dict[str, Any]:
        """What the probe's summary says of it."""
        return {
            "source": self.source,
            "loss": self.loss,
            "batches": self.batches,
            "samples": self.samples,
            "chunk": self.chunk,
            "why": self.why,
        }


STEP0 = Reference(
    None, "step0", why="the training script gave no held-out set (trial.reference(...))"
)


def held_out(
    model: torch.nn.Module,
    workload: Any,
    chunk: int,
    device: torch.device,
    amp_dtype: torch.dtype | None,
    samples: int | None = None,
) -> Reference:
    """The untrained `model`'s mean loss over the first `samples` (default `MAX_BATCHES` x
    `chunk`) of the workload's held-out samples, read as `eval_batches(chunk)`, the run left as
    it was found. A held-out set that cannot be used (none, an error in `eval_batches()` or in
    `loss()` on it, a loss that is not one finite number) leaves step 0's loss as the
    reference, with the reason: the training that follows judges the workload."""
    n = 0
    try:
        # up to the samples, not a list: a workload may hand back an endless stream
        batches = _first_samples(
            workload.eval_batches(chunk), workload.samples, samples or MAX_BATCHES * chunk
        )
        n = len(batches)
        if not batches:
            return Reference(
                None, "step0", why="the workload's eval_batches() returned no batch", chunk=chunk
            )
        read = _Read(workload.loss, _weigh(workload), lambda b: to_device(b, device))
        return _mean(model, batches, read, device, amp_dtype, chunk)
    except Exception as e:  # the workload's code: training will say what is wrong with it
        why = f"the held-out set could not be used: {type(e).__name__}: {str(e)[:200]}"
        return Reference(None, "step0", n, why, chunk=chunk)


def of_probe(
    model: torch.nn.Module,
    workload: Any,
    cfg: ProbeConfig,
    device: torch.device,
    amp_dtype: torch.dtype | None,
    rank: Rank | None,
) -> Reference:
    """The training loop's held-out reference (`held_out`), read in the study's chunks
    (`cfg.reference_chunk`), not the trial's micro-batch; the ranks of a DDP probe (each reads
    the same held-out set in the same chunks) take their mean, so that each judges its steps
    against the same number (a rank without one, all of them step 0's)."""
    import numpy as np

    chunk, samples = cfg.reference_chunk, cfg.reference_total
    ref = held_out(model, workload, chunk, device, amp_dtype, samples)
    if rank is None or rank.world_size == 1:
        return ref
    mean = float(rank.mean(np.array([math.nan if ref.loss is None else ref.loss]))[0])
    if not math.isfinite(mean):
        why = ref.why or "another rank's is not"
        return Reference(None, "step0", ref.batches, why, ref.samples, chunk)
    return Reference(mean, "held_out", ref.batches, None, ref.samples, chunk)


def given(
    model: torch.nn.Module,
    held_out: Any,
    loss: Any,
    evaluate: Any,
    chunk: int,
    samples: int,
    device: torch.device,
    amp_dtype: torch.dtype | None,
) -> Reference:
    """A training script's reference (`trial.reference`), the run left as it was found:
    `held_out`, a tensor or a tuple of tensors whose first dimension is the samples, read in
    chunks of `chunk` up to `samples` samples with `loss(model, batch)` (a chunk is a tuple
    when `held_out` is one), as the probe reads a workload's held-out set (source `held_out`);
    or the number `evaluate()` returns (source `script`). A loss that cannot be had (an
    error, not one finite number) leaves step 0's loss, with the reason."""
    import torch

    try:
        if evaluate is not None:
            with _untouched(model), torch.no_grad():
                value = _one_number(evaluate(), "trial.reference(evaluate=...) returned")
            if not math.isfinite(value):
                return Reference(None, "step0", why="evaluate() returned a non-finite loss")
            return Reference(value, "script")
        tensors = held_out if isinstance(held_out, tuple) else (held_out,)
        total = min(samples, len(tensors[0]))
        batches = [
            tuple(t[i : i + chunk] for t in tensors)
            if isinstance(held_out, tuple)
            else held_out[i : i + chunk]
            for i in range(0, total, chunk)
        ]
        if not batches:
            return Reference(None, "step0", why="the held-out set given has no sample", chunk=chunk)
        at = next(model.parameters(), torch.empty(0, device=device)).device
        read = _Read(loss, lambda b: (_first_dim(b),) * 2, lambda b: _to(b, at))
        return _mean(model, batches, read, at, amp_dtype, chunk)
    except Exception as e:  # the script's code: its training will say more
        why = f"the script's held-out loss could not be had: {type(e).__name__}: {str(e)[:200]}"
        return Reference(None, "step0", why=why, chunk=None if evaluate else chunk)


def check_given(model: Any, held_out: Any, loss: Any, evaluate: Any) -> None:
    """`trial.reference()`'s arguments: a model, and a held-out set with its loss, or
    `evaluate`; one clear error for anything else."""
    import torch

    if not isinstance(model, torch.nn.Module):
        raise TypeError(
            f"trial.reference(model, ...): model must be a torch.nn.Module, got {model!r}"
        )
    if (held_out is None) == (evaluate is None):
        raise TypeError(
            "trial.reference(model, held_out, loss) or trial.reference(model, evaluate=fn): "
            "give a held-out set with its loss, or evaluate, not both"
        )
    if evaluate is not None:
        if not callable(evaluate):
            raise TypeError(f"trial.reference(evaluate=...) must be callable, got {evaluate!r}")
        return
    tensors = held_out if isinstance(held_out, tuple) else (held_out,)
    if not tensors or not all(isinstance(t, torch.Tensor) and t.dim() for t in tensors):
        raise TypeError(
            "trial.reference(model, held_out, loss): held_out is a tensor or a tuple of tensors "
            "whose first dimension is the samples (e.g. (x_val, y_val))"
        )
    if len({len(t) for t in tensors}) != 1:
        raise TypeError(
            "trial.reference(): the tensors of held_out hold different numbers of samples: "
            f"{[len(t) for t in tensors]}"
        )
    if not callable(loss):
        raise TypeError(
            "trial.reference(model, held_out, loss): loss(model, batch) -> the batch's mean "
            "loss is needed with held_out"
        )


def _first_samples(stream: Any, count: Any, samples: int) -> list[Any]:
    """The batches of `stream` up to the one that brings the samples to `samples`."""
    out, seen = [], 0
    for batch in itertools.islice(stream, MAX_CHUNKS):
        out.append(batch)
        seen += int(count(batch))
        if seen >= samples:
            break
    return out


@dataclass(frozen=True)
class _Read:
    """How a held-out batch is read: its loss, its (weight, samples), its move to the device."""

    loss: Any  # (model, batch) -> a one-element tensor
    weigh: Any  # batch -> (weight, samples)
    move: Any  # batch -> the batch on the model's device


def _weigh(workload: Any) -> Any:
    """Tokens (else samples) weigh a workload's batch."""

    def weigh(batch: Any) -> tuple[int, int]:
        n = int(workload.samples(batch))
        return int(workload.tokens(batch) or n or 1), n

    return weigh


def _first_dim(batch: Any) -> int:
    return len(batch[0] if isinstance(batch, tuple) else batch)


def _to(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, tuple):
        return tuple(t.to(device) for t in batch)
    return batch.to(device)


def _mean(
    model: torch.nn.Module,
    batches: list[Any],
    read: _Read,
    device: torch.device,
    amp_dtype: torch.dtype | None,
    chunk: int,
) -> Reference:
    """The weighted mean loss over `batches` (train mode, no gradient, the probe's autocast),
    the run left as it was (`_untouched`)."""
    import torch

    total = torch.zeros((), dtype=torch.float64, device=device)
    weight, samples, n = 0, 0, len(batches)
    with (
        _untouched(model),
        torch.no_grad(),
        torch.autocast(device.type, dtype=amp_dtype or torch.float32, enabled=bool(amp_dtype)),
    ):
        model.train()
        for batch in batches:
            on_device = read.move(batch)
            out = read.loss(model, on_device)
            if not isinstance(out, torch.Tensor) or out.numel() != 1:
                why = "loss() on a held-out batch is not a one-element tensor"
                return Reference(None, "step0", n, why, chunk=chunk)
            w, k = read.weigh(on_device)
            total += out.detach().double().reshape(()) * max(1, w)
            weight, samples = weight + max(1, w), samples + k
    loss = float(total) / weight  # the one host sync
    if not math.isfinite(loss):
        why = "the untrained model's held-out loss is not finite"
        return Reference(None, "step0", n, why, samples, chunk)
    return Reference(loss, "held_out", n, None, samples, chunk)


def _one_number(value: Any, what: str) -> float:
    import torch

    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"{what} a tensor of shape {tuple(value.shape)}, not one number")
        return float(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{what} {value!r}, not a number")
    return float(value)


@contextlib.contextmanager
def _untouched(model: torch.nn.Module) -> Iterator[None]:
    """Put back the model's buffers, its modules' train/eval modes and every RNG after the
    block."""
    import torch

    buffers = [(b, b.detach().clone()) for b in model.buffers()]
    modes = [(m, m.training) for m in model.modules()]
    rngs = rng.capture()
    try:
        yield
    finally:
        with torch.no_grad():
            for live, saved in buffers:
                live.copy_(saved)
        for m, training in modes:
            m.training = training
        rng.restore(rngs)
