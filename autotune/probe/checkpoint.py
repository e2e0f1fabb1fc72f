"""A probe's state after its last step, so that a longer probe of the same configuration can
continue from it instead of starting over (a study's promoted probes: `autotune.study.rungs`).

What is kept: the model's and optimizer's state dicts, the GradScaler's, every RNG (Python,
NumPy, torch, each GPU), the step series so far (the summary metrics of the longer probe cover
every step from 0, and the divergence monitor is fed them again), and the number of optimizer
steps run (the data iterator is advanced past the micro-batches they took). Every probe of a study
schedules its learning rate over the target (`ProbeConfig.schedule_steps`), so on the CPU a
continued probe is, step for step, the probe that ran from 0.

A state is used only by a probe of the same configuration (workload, knobs, micro-batch,
precision, seed, schedule, environment, divergence thresholds, device type: `identity`), with at
least as many steps. Otherwise, or when the file is missing (another node ran the shorter probe) or
unreadable, the probe starts from step 0 and says why (`Continuation.why`). The file is read with
`torch.load(weights_only=True)`: tensors and plain containers, no pickled code.

Probes of the built-in loop, one process or DDP ranks (each rank keeps its own file, `rank_path`:
its RNGs and its shard's position; the ranks continue only if every one of them can). A training
script (`probe.script`) continues through its state hook (`autotune.probe.script_state`, the
script's `trial.resume(...)`); one without it restarts. An OOM retry and a scaling timing restart
(`unsupported`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from autotune.probe import rng
from autotune.probe.config import ProbeConfig

if TYPE_CHECKING:
    import torch

FORMAT = 1
DISK_HEADROOM = 1 << 30  # bytes left free after writing a state (1 GiB)


class NoRoom(OSError):
    """Not enough free disk for a state: the longer probe will start over instead."""


def room_for(nbytes: int, free: int, copies: int = 1) -> str | None:
    """Why `copies` states of `nbytes` each (a DDP probe's ranks each write one, at once) do
    not fit in `free` bytes (with `DISK_HEADROOM` and twice each state, for its temporary
    file); None when they do."""
    if free >= 2 * copies * nbytes + DISK_HEADROOM:
        return None
    each = f"{copies} x {nbytes / 2**20:.0f} MiB, one per rank" if copies > 1 else ""
    return (
        f"not enough free disk for the state ({each or f'{nbytes / 2**20:.0f} MiB'}; "
        f"{free / 2**20:.0f} MiB free)"
    )


@dataclass
class Continuation:
    """Where a probe starts: `step` optimizer steps inherited (0: from scratch) with their
    `series`; `why` it did not continue when it was asked to (None otherwise)."""

    step: int = 0
    series: dict[str, np.ndarray] = field(default_factory=dict)
    why: str | None = None
    per_step: tuple[int, int] = (0, 0)  # samples and tokens per optimizer step, as they ran
    # the samples and tokens of those steps, summed (a script's steps differ: a short last
    # batch); None: not saved (the built-in loop's steps are alike: per_step x step)
    seen: tuple[Any, Any] | None = None
    # What continued differently from the run from step 0 (a script's framework says it: its
    # batches drawn afresh by a loader Lightning cannot put at its position).
    note: str | None = None

    def record(self, source: str | None) -> dict[str, Any] | None:
        """What the summary says of it (None: the probe was not asked to continue)."""
        if source is None:
            return None
        out = {"from": source, "step": self.step, "why": self.why}
        return {**out, "note": self.note} if self.note else out


def unsupported(cfg: ProbeConfig) -> str | None:
    """Why a probe of `cfg` cannot save or continue a state (None: it can)."""
    if cfg.script is not None and cfg.world_size > 1:
        return "a training script of several processes restarts"
    if cfg.oom_retry or cfg.measure_scaling:
        return "a probe with oom_retry or measure_scaling restarts"
    return None


def rank_path(path: str, rank: int | None) -> str:
    """The file of one DDP rank's state (`path` itself for a one-process probe)."""
    return path if rank is None else f"{path}.rank{rank}"


def identity(
    cfg: ProbeConfig,
    knobs: dict[str, Any],
    device: torch.device,
    total: int,
    model: torch.nn.Module,
    script_sha256: str | None = None,
) -> str:
    """What two probes must share for one to continue the other (JSON, sorted); the model's
    tensor names and shapes too (a workload edited since does not load into this one); a
    script's path, arguments and `script_sha256` (an edited script does not continue)."""
    shapes = {name: list(t.shape) for name, t in model.state_dict().items()}
    own = {} if cfg.script is None else {"script": [cfg.script, list(cfg.args), script_sha256]}
    return json.dumps(
        {
            **own,
            "format": FORMAT,
            "workload": cfg.workload,
            "size": cfg.size,
            "micro_batch": cfg.micro_batch,
            "precision": cfg.precision,
            "seed": cfg.seed,
            "schedule_steps": total,
            "deterministic": cfg.deterministic,
            "divergence": cfg.divergence,
            "knobs": knobs,
            "env": cfg.env,
            "world_size": cfg.world_size,
            "device": device.type,
            "shapes": shapes,
        },
        sort_keys=True,
        default=str,
    )


def save(
    path: str,
    ident: str,
    step: int,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: Any,
    series: dict[str, np.ndarray],
    per_step: tuple[int, int] = (0, 0),
    copies: int = 1,
) -> dict[str, Any]:
    """Write the built-in loop's state after `step` optimizer steps to `path` (`saved`)."""
    state = {
        "identity": ident,
        "step": step,
        "per_step": list(per_step),
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scaler": scaler.state_dict(),
        "rng": rng.capture(),
        "series": series_tensors(series),
    }
    return saved(path, state, copies)


def series_tensors(series: Mapping[str, Any]) -> dict[str, Any]:
    """A probe's step series as the tensors a state file holds (`torch.load` gives them back)."""
    import torch

    return {name: torch.from_numpy(np.array(arr)) for name, arr in series.items()}


def saved(path: str, state: dict[str, Any], copies: int = 1) -> dict[str, Any]:
    """`write` `state`, and what became of it, as a probe's summary says it (`path`, `saved`,
    `why`): a state that could not be written costs the longer probe a restart, not this probe
    its result (no room, a disk error, a part torch cannot save)."""
    try:
        write(path, state, copies)
    except NoRoom as e:
        return {"path": path, "saved": False, "why": str(e)}
    except (OSError, RuntimeError, TypeError) as e:
        return {"path": path, "saved": False, "why": f"{type(e).__name__}: {str(e)[:200]}"}
    return {"path": path, "saved": True, "why": None}


def write(path: str, state: dict[str, Any], copies: int = 1) -> None:
    """`torch.save` `state` to `path` atomically (a temporary file, then a rename), refused
    (`NoRoom`) unless the disk has room for `copies` of it."""
    import torch

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    why = room_for(_nbytes(state), shutil.disk_usage(target.parent).free, copies)
    if why is not None:
        raise NoRoom(why)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        torch.save(state, tmp)
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def load(path: str, ident: str, steps: int) -> dict[str, Any] | str:
    """The state at `path` if a probe of identity `ident` and `steps` steps may continue it;
    else why not (a sentence)."""
    import torch

    if not Path(path).is_file():
        return f"no state at {path} (the shorter probe ran elsewhere, or failed)"
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # a truncated or foreign file: start over, do not fail the probe
        return f"unreadable state {path}: {type(e).__name__}"
    if not isinstance(state, dict) or state.get("identity") != ident:
        return f"the state at {path} is of another configuration"
    if not 0 < int(state.get("step", 0)) < steps:
        return f"the state at {path} is after step {state.get('step')}, not before {steps}"
    return state


def restore(
    state: dict[str, Any],
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: Any,
    data: Any,
    accum: int,
) -> Continuation:
    """Load `state` into the built-in loop's run (`continue_from`; the data iterator is advanced
    past the micro-batches already trained on). A part that does not load raises as it is."""

    def skip(step: int) -> None:
        for _ in range(step * accum):
            next(data)

    return continue_from(state, {"model": model, "optimizer": optimizer, "scaler": scaler}, skip)


def continue_from(
    state: dict[str, Any],
    parts: Mapping[str, Any],
    position: Callable[[int], None],
    mismatch: Callable[[str, Exception], Exception] | None = None,
) -> Continuation:
    """The one restore of a probe's state, the loop's (`restore`) and a training script's
    (`autotune.probe.script_state`): each of `parts` (name -> an object with `load_state_dict`;
    None: not given) gets its saved state dict back, in the order given (a part saved empty is
    left as it is); `position(step)` puts the data where the shorter probe left it; the RNGs
    are restored last, after anything that draws from them. A part whose state does not load
    raises `mismatch(name, error)` when given, else the error itself."""
    step = int(state["step"])
    for name, obj in parts.items():
        part = state.get(name)
        if obj is None or not part:
            continue
        try:
            obj.load_state_dict(part)
        except Exception as e:
            if mismatch is None:
                raise
            raise mismatch(name, e) from None
    position(step)
    rng.restore(state["rng"])
    return continued(state)


def continued(state: dict[str, Any]) -> Continuation:
    """Where a probe continuing `state` starts: its step, series and per-step counts."""
    series = {name: t.numpy() for name, t in state["series"].items()}
    samples, tokens = (int(x) for x in state.get("per_step") or (0, 0))
    seen = state.get("seen")
    return Continuation(
        step=int(state["step"]),
        series=series,
        per_step=(samples, tokens),
        seen=None if seen is None else (seen[0], seen[1]),
    )


def _nbytes(value: Any) -> int:
    """The bytes of the tensors in a (nested) state."""
    import torch

    if isinstance(value, torch.Tensor):
        return int(value.element_size() * value.nelement())
    if isinstance(value, dict):
        return sum(_nbytes(v) for v in value.values())
    if isinstance(value, list | tuple):
        return sum(_nbytes(v) for v in value)
    return 0
