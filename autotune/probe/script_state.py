"""A training script's state hook, so that a study's promoted script probe continues the same
trial's probe at the rung below instead of starting over (as the built-in loop's do:
`autotune.probe.checkpoint`).

The script hands its trial what it trains with, once built and before its first step
(`trial.resume(model, optimizer, scheduler, scaler, data=...)` in `autotune.recipe.trial`):

- asked to continue (`ProbeConfig.resume_from`) from a state of the same configuration
  (`checkpoint.identity`, with the script's path, arguments and SHA-256) and fewer steps, the
  hook loads it: the model's, optimizer's, scheduler's and scaler's state dicts; the data's
  position (an object with `state_dict`/`load_state_dict` gets its own back; an iterator is
  advanced by `next()` past the micro-batches the shorter probe took: `batches_per_step` per
  optimizer step, the recipe's accum_steps unless said); the RNGs last, as they were at the
  shorter probe's last report. It returns the optimizer steps already run, where the script's
  loop starts; the session takes the shorter probe's series (the summary covers every step from
  0 and the divergence monitor is fed them again).
- asked to save (`ProbeConfig.save_state`), a run that made all its steps writes its state at
  its end (`checkpoint.saved`: atomic, refused without disk room).

An integration whose framework checkpoints itself (`autotune.integrations.hf`, `.lightning`)
hands its model and the framework's name instead (`Parts.framework`): the framework writes its
own checkpoint into the folder `framework_dir(save_state)` and resumes from
`framework_dir(resume_from)` (model, optimizer, scheduler, scaler, RNGs, data position, its way);
the state file keeps the identity, the step and the series.

A script without the hook restarts from step 0, and its summary says why (`NO_HOOK`). A state
that is missing, unreadable or of another configuration is a restart too, with its reason; a
state that matches but does not load into the script's objects (another optimizer) fails the
trial with a message naming the part, rather than train a half-loaded model.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from autotune.probe import checkpoint, rng
from autotune.probe.checkpoint import Continuation
from autotune.probe.config import ProbeConfig

NO_HOOK = (
    "the script gave no state hook (trial.resume(model, optimizer, ...)), so it restarts "
    "from step 0"
)
_EXTRA = "metric."  # a script's own reported metrics, among the saved series


class StateMismatch(Exception):
    """A state of this configuration that does not load into the script's objects."""

    cause = "bad_state"


@dataclass
class Parts:
    """What a script trains with, as its `trial.resume` gave them (None: not given)."""

    model: Any
    optimizer: Any
    scheduler: Any = None
    scaler: Any = None
    data: Any = None
    batches_per_step: int = 1
    framework: str | None = None  # checkpointed by its framework (hf, lightning): `framework_dir`


def framework_dir(path: str) -> str:
    """The folder of a framework's own checkpoint beside the state file `path`."""
    return path + ".d"


class ScriptState:
    """One script run's continuation: the hook's parts, where the run started, its end."""

    def __init__(self, cfg: ProbeConfig, device: Any, script_sha256: str | None) -> None:
        self.cfg, self.device, self.sha256 = cfg, device, script_sha256
        self.parts: Parts | None = None
        self.ident = ""
        self.start = Continuation()
        self.rng_at_end: dict[str, Any] | None = None
        self.origin = 0  # the script's first step number (0, or 1 for a 1-based loop)
        self.resume_dir: str | None = None  # a framework's checkpoint to resume from
        # The shorter probe's initial-loss reference (`Reference.record()`): the untrained model's,
        # which a script that gives its reference after `resume` can no longer measure.
        self.saved_reference: dict[str, Any] | None = None

    def hook(self, parts: Parts, knobs: dict[str, Any], total: int) -> Continuation:
        """Keep `parts` to save at the end; continue the state at `resume_from` when there is
        one this run may continue (`total`: the schedule's length)."""
        if parts.data is not None and not _positionable(parts.data):
            raise TypeError(
                "trial.resume(data=...): give an iterator (taken with next()) or an object "
                "with state_dict()/load_state_dict(); for a DataLoader, data=iter(loader)"
            )
        self.parts = parts
        self.ident = checkpoint.identity(
            self.cfg, knobs, self.device, total, parts.model, self.sha256
        )
        if self.cfg.resume_from is None:
            return self.start
        state = checkpoint.unsupported(self.cfg) or checkpoint.load(
            self.cfg.resume_from, self.ident, self.cfg.steps
        )
        if isinstance(state, str):
            self.start = Continuation(why=state)
            return self.start
        self.start = self._restore(state, parts)
        return self.start

    def _restore(self, state: dict[str, Any], parts: Parts) -> Continuation:
        if parts.framework is not None:  # the framework loads its own checkpoint, RNGs too
            folder = framework_dir(str(self.cfg.resume_from))
            if not Path(folder).is_dir():
                return Continuation(why=f"no {parts.framework} checkpoint at {folder}")
            self.resume_dir = folder
            return self._continued(state, checkpoint.continued(state))
        names = ("model", "optimizer", "scheduler", "scaler")
        return self._continued(
            state,
            checkpoint.continue_from(
                state,
                {name: getattr(parts, name) for name in names},
                lambda step: _position(
                    parts.data, state.get("data"), step * parts.batches_per_step
                ),
                self._mismatch,
            ),
        )

    def _mismatch(self, part: str, e: Exception) -> StateMismatch:
        return StateMismatch(
            f"trial.resume(): the state at {self.cfg.resume_from} does not load into "
            f"the script's {part}: {type(e).__name__}: {str(e)[:200]}"
        )

    def _continued(self, state: dict[str, Any], start: Continuation) -> Continuation:
        """`start`, with what a script's state adds: its first step number and its reference."""
        self.origin = int(state.get("origin", 0))
        self.saved_reference = state.get("reference")
        return start

    def at_last_report(self) -> None:
        """The RNGs as the last step left them: what a longer probe continues with (the
        script's code after its loop, and the final loss's measure, may draw more)."""
        self.rng_at_end = rng.capture()

    def record(self) -> dict[str, Any] | None:
        """What the summary says of the continuation (None: not asked to continue)."""
        if self.cfg.resume_from is None:
            return None
        if self.parts is None:
            return {"from": self.cfg.resume_from, "step": 0, "why": NO_HOOK}
        return self.start.record(self.cfg.resume_from)

    def save(
        self,
        series: dict[str, np.ndarray],
        extra: dict[str, list[float]],
        per_step: tuple[int, int],
        steps_run: int,
        reference: dict[str, Any] | None = None,
        seen: tuple[Any, Any] | None = None,
    ) -> dict[str, Any] | None:
        """Write the state after the run's last step when asked to (`save_state`) and the run
        made all its steps; what became of it (None: not asked, or the run ended early).
        `reference`: the run's initial-loss reference (`Reference.record()`), kept with it;
        `seen`: the samples and tokens its steps processed (their own counts, summed)."""
        path = self.cfg.save_state
        if not path or steps_run != self.cfg.steps:
            return None
        if self.parts is None or self.rng_at_end is None:
            return {"path": path, "saved": False, "why": NO_HOOK}
        p = self.parts
        if p.framework is not None and not Path(framework_dir(path)).is_dir():
            why = f"the {p.framework} checkpoint was not written at {framework_dir(path)}"
            return {"path": path, "saved": False, "why": why}
        saved = {name: np.asarray(arr) for name, arr in series.items()}
        saved.update({_EXTRA + n: np.asarray(v, dtype=np.float64) for n, v in extra.items()})
        state: dict[str, Any] = {
            "identity": self.ident,
            "step": steps_run,
            "origin": self.origin,
            "per_step": list(per_step),
            "seen": None if seen is None else list(seen),
            "series": checkpoint.series_tensors(saved),
            "reference": reference,
        }
        if p.framework is None:
            state.update(
                model=p.model.state_dict(),
                optimizer=p.optimizer.state_dict(),
                scheduler=p.scheduler.state_dict() if p.scheduler is not None else None,
                scaler=p.scaler.state_dict() if p.scaler is not None else None,
                data=_data_state(p.data),
                rng=self.rng_at_end,
            )
        return checkpoint.saved(path, state)


def split_extra(series: dict[str, np.ndarray]) -> tuple[dict[str, Any], dict[str, list[float]]]:
    """A saved state's series, split into the telemetry and the script's own metrics."""
    telemetry = {n: a for n, a in series.items() if not n.startswith(_EXTRA)}
    extra = {n[len(_EXTRA) :]: a.tolist() for n, a in series.items() if n.startswith(_EXTRA)}
    return telemetry, extra


def _positionable(data: Any) -> bool:
    stateful = callable(getattr(data, "state_dict", None)) and callable(
        getattr(data, "load_state_dict", None)
    )
    return stateful or (hasattr(data, "__next__") and iter(data) is data)


def _data_state(data: Any) -> Any:
    """The data's own state, when it keeps one (None: an iterator, positioned by skipping)."""
    if data is not None and callable(getattr(data, "state_dict", None)):
        return data.state_dict()
    return None


def _position(data: Any, saved: Any, batches: int) -> None:
    """Put `data` where the shorter probe left it: its own state back, or `batches` taken."""
    if data is None:
        return
    if saved is not None and callable(getattr(data, "load_state_dict", None)):
        data.load_state_dict(saved)
        return
    with contextlib.suppress(StopIteration):
        for _ in range(batches):
            next(data)
