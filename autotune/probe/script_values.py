"""The values of a training script's `trial.report`, checked (`autotune.probe.script`): a
number is a finite (or NaN/inf, for the loss) Python, NumPy real (a scalar or 0-d array) or
one-element tensor value; a step is an int (or a NumPy integer); a count of
samples or tokens is a finite number from 0 to MAX_COUNT; a gradient norm is never negative.
What cannot be used raises `BadReport` with the reason. Nothing is trusted: a trial's numbers
are checked before they become a throughput or a verdict."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from autotune.probe.script_errors import BadReport


def type_name(v: Any) -> str:
    """`v`'s type as a refusal names it: `str`, `numpy.ndarray`, `torch.Tensor`."""
    t = type(v)
    module = t.__module__.split(".")[0]
    return t.__qualname__ if module == "builtins" else f"{module}.{t.__qualname__}"


def numpy_real(v: Any) -> float | None:
    """`v` as a float when it is a NumPy real number: a scalar (`np.float32(0.5)`,
    `np.int64(3)`, what `.mean()` and `.item()`-less code hand over) or a 0-d array of one;
    None for anything else (a NumPy bool is no number: a flag reported by mistake)."""
    if isinstance(v, np.ndarray) and v.ndim == 0:
        v = v[()]
    if isinstance(v, (np.floating, np.integer)):
        return float(v)
    return None


def number(v: Any, name: str) -> float:
    """`v` as a float: a Python int/float, a NumPy real scalar (or 0-d array) or a one-element
    tensor (BadReport otherwise, naming its type)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        n = numpy_real(v)
        if n is not None:
            return n
        try:
            import torch

            if isinstance(v, torch.Tensor) and v.numel() == 1:
                return float(v)
        except ImportError:  # pragma: no cover
            pass
        raise BadReport(f"trial.report: {name}={v!r} is not a number (a {type_name(v)})")
    return float(v)


def metrics(extra: dict[str, Any]) -> dict[str, float]:
    """A report's other metrics by name, each a number (`number`). An empty or blank name is
    refused: it names no series a user could find again (MLflow has no key for it)."""
    for name in extra:
        if not name.strip():
            raise BadReport(
                f"trial.report: a metric name is empty or blank ({name!r}): give each "
                "metric passed by name a name with a letter, digit or sign in it"
            )
    return {k: number(v, k) for k, v in extra.items()}


def step_number(step: Any) -> int:
    """The optimizer step a report names, as an int: a Python int, a NumPy integer scalar or a
    0-d integer array (BadReport otherwise, naming its type: a float step, a bool, a tensor)."""
    if isinstance(step, np.ndarray) and step.ndim == 0:
        step = step[()]
    if isinstance(step, np.integer):
        return int(step)
    if isinstance(step, bool) or not isinstance(step, int):
        raise BadReport(
            f"trial.report(step={step!r}): step must be an int, the optimizer step 0, 1, 2, "
            f"..., not a {type_name(step)}"
        )
    return int(step)


def at_step(e: BadReport, step: Any) -> BadReport:
    """`e` naming the step it was reported at, as the other report failures do:
    `trial.report: loss='0.5' is not a number` becomes `trial.report(step=3): ...`."""
    head = "trial.report: "
    text = str(e)
    if not text.startswith(head):
        return e
    return BadReport(f"trial.report(step={step!r}): {text[len(head) :]}")


#: The most samples or tokens one optimizer step may report: 10^12, orders of magnitude past
#: any machine's step (the largest LLM batches are ~10^7 tokens). A count above it is a bug of
#: the script (a total, a wrong unit), and would become a throughput objective as it is.
MAX_COUNT = 1e12


def count(v: Any, name: str) -> Any:
    """A per-step count (`samples=`, `tokens=`): None (not reported), else a finite number from
    0 to MAX_COUNT, kept as given when it is a Python number (BadReport otherwise)."""
    if v is None:
        return None
    n = number(v, name)
    if not math.isfinite(n) or n < 0:
        raise BadReport(
            f"trial.report: {name}={v!r} is not a count: give the {name} of this optimizer "
            "step, a finite number >= 0"
        )
    if n > MAX_COUNT:
        raise BadReport(
            f"trial.report: {name}={v!r} is not the {name} of one optimizer step (more than "
            f"{MAX_COUNT:.0e}, past what any machine processes in a step): give this step's "
            f"{name}, not a total or another unit; it is the throughput's numerator"
        )
    return v if isinstance(v, (int, float)) else n


def scalar(v: Any, name: str, device: Any) -> Any:
    """A 0-d float tensor on `device` (NaN for a missing value): float64 for a Python number
    (a finite 1e308 stays finite; float32 where the device has no float64) and for a float64
    tensor, float32 for other tensors. A Python number that is negative where it cannot be
    (`grad_norm`) is refused here; a tensor's is at its chunk's fetch (`negative_grad_norm`)."""
    import torch

    wide = torch.float32 if getattr(device, "type", "cpu") == "mps" else torch.float64
    if v is None:
        return torch.full((), math.nan, device=device)
    if isinstance(v, torch.Tensor):
        if v.numel() != 1:
            raise BadReport(f"trial.report: {name} must be one number, got shape {v.shape}")
        dtype = wide if v.dtype == torch.float64 else torch.float32
        return v.detach().reshape(()).to(device, dtype)
    n = number(v, name)
    if name == "grad_norm" and n < 0:
        raise BadReport(f"trial.report: grad_norm={v!r} is negative: a gradient norm is >= 0")
    return torch.tensor(n, dtype=wide, device=device)


def nonfinite_now(v: Any) -> bool:
    """Whether `v` (a reported loss) is known now, without a device sync, not to be finite: a
    Python number, or a tensor on the CPU. A loss on an accelerator is judged at its chunk's
    fetch, as the built-in loop's are."""
    if isinstance(v, (int, float)):
        return not math.isfinite(v)
    n = numpy_real(v)
    if n is not None:
        return not math.isfinite(n)
    try:
        import torch
    except ImportError:  # pragma: no cover
        return False
    if isinstance(v, torch.Tensor) and v.device.type == "cpu" and v.numel() == 1:
        return not bool(torch.isfinite(v.detach()).all())
    return False


def negative_grad_norm(grads: Any, first: int, origin: int) -> BadReport | None:
    """The failure of a fetched chunk (its host `grad_norm`s, the chunk's first report index
    `first`, the script's first step number `origin`) that holds a negative gradient norm."""
    import numpy as np

    bad = np.flatnonzero(np.asarray(grads) < 0)
    if not len(bad):
        return None
    i = int(bad[0])
    return BadReport(
        f"trial.report(step={origin + first + i}): grad_norm={float(grads[i])!r} is negative: "
        "a gradient norm is >= 0"
    )


def short_run(reports: int, planned: int) -> BadReport:
    """The failure of a script that ended after `reports` of its `planned` steps, unasked.
    What ended it is not known here: a plain loop's or a framework's (a Trainer's epochs, its
    data, a callback that stops it), so both are advised; the Lightning integration names the
    cause itself when it knows it (`autotune.integrations.lightning.ended_short`)."""
    return BadReport(
        f"the script reported {reports} of {planned} steps and stopped without being asked "
        "(no divergence, trial.should_stop not set): a probe is judged at its planned length. "
        "A plain loop: loop over range(trial.steps) and stop only on trial.should_stop. A "
        "Trainer (Hugging Face, Lightning): let the trial's max_steps end it, with no epoch "
        "limit (num_train_epochs, max_epochs), no data that runs out first and no callback "
        "that stops training (should_training_stop, should_stop)"
    )
