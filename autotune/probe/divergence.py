"""Divergence of a training probe, judged online: :class:`DivergenceMonitor` watches the
per-step series (see ``autotune.probe.metrics`` for their conventions) chunk by chunk, so that
the probe can stop as soon as a trial diverges. A divergence is a result, not an error.

A step past a threshold is a *spike*: counted and recorded, never a verdict by itself. A run
is *diverged* when its loss is non-finite, its gradient is non-finite outside fp16, the fp16
scaler collapses, spikes persist for ``persist_steps`` consecutive steps, or the loss does not
recover after a spike (the median over the window after it stays above a multiple of the
median before it, and the loss is not coming down). The parameters were chosen from measurement:
``benchmarks/divergence_calibration.py`` and ``docs/design/divergence.md``.

Pure numpy: this module must not import torch, ray, mlflow or optuna.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import numpy.typing as npt

from autotune.probe.metrics import FloatArray, as_1d, check_precision
from autotune.probe.recovery import above, coming_back, halves_coming_back, median

GRAD_HISTORY_MIN: Final[int] = 5
"""A ``grad_explosion`` spike by ratio needs at least this many finite grad norms seen before."""

SKIPPED_MIN_STEPS: Final[int] = 20
"""The skipped-fraction test of ``scaler_collapse`` needs at least this many steps seen."""

PERSIST_STEPS: Final[int] = 75
"""k: spikes on this many consecutive steps are a divergence (docs/design/divergence.md)."""

RECOVERY_WINDOW: Final[int] = 300
"""W: the steps after a spike over which the loss's median must come back."""

RECOVERY_DESCENT: Final[float] = 2.0
"""R: a loss whose median over the last fifth of the window is at most 1/R of the highest
median of a fifth of it is coming back: judged again one window later, not called diverged."""

RECOVERY_FACTOR: Final[float] = 5.0
"""F: the median after a spike above F x the median before it is no recovery."""

END_STEPS: Final[int] = 5
"""A run that ends with a recovery check open is judged at its end (``DivergenceMonitor.at_end``)
only when at least this many losses followed the spike: one late jump is no verdict."""

SPIKES_KEPT: Final[int] = 10
"""The monitor records the first this many spikes (step, cause, loss over the reference)."""

RECOVERY_SIGMA: Final[float] = 6.0
"""The no-recovery level is at least the pre-spike median plus this many robust standard
deviations (1.4826 MAD) of the pre-spike losses: a noisy loss is not held to its median."""

DIVERGENCE_CAUSES: Final[tuple[str, ...]] = (
    "nonfinite_loss",
    "loss_explosion",
    "grad_explosion",
    "scaler_collapse",
    "no_recovery",
)
"""The causes ``DivergenceMonitor`` reports. ``loss_explosion`` and ``grad_explosion`` are
also the causes of spikes; as a verdict they mean the spikes persisted (``grad_explosion`` is
also a non-finite gradient norm outside fp16)."""

SPIKE_CAUSES: Final[tuple[str, ...]] = ("loss_explosion", "grad_explosion")


@dataclass(frozen=True)
class DivergenceThresholds:
    """When ``DivergenceMonitor`` calls a step a spike, and a run diverged (see its docstring).

    * ``loss_explosion_factor``: a loss spike is a loss > factor × initial loss (10).
    * ``grad_explosion_factor``: a grad spike is a grad norm > factor × median of the finite
      grad norms seen before (1e3), once ``grad_history_min`` (5) of them have been seen.
    * ``persist_steps``: spikes on this many consecutive steps are a divergence (k).
    * ``recovery_window``: the steps after a spike whose median loss must come back (W).
    * ``recovery_factor``: ... to at most this multiple of the median loss of the W steps
      before the spike (F; and at least 6 robust sigmas above it).
    * ``recovery_descent``: a loss still above that level but coming down by this factor from
      its worst since the spike is judged again a window later (R; at most 1: never).
    * ``scale_floor``: fp16 GradScaler scale below it (1e-4).
    * ``skipped_fraction``: more than this fraction of the steps seen were skipped (0.5), once
      ``skipped_min_steps`` (20) steps have been seen.
    """

    loss_explosion_factor: float = 10.0
    grad_explosion_factor: float = 1e3
    persist_steps: int = PERSIST_STEPS
    recovery_window: int = RECOVERY_WINDOW
    recovery_factor: float = RECOVERY_FACTOR
    recovery_descent: float = RECOVERY_DESCENT
    scale_floor: float = 1e-4
    skipped_fraction: float = 0.5
    grad_history_min: int = GRAD_HISTORY_MIN
    skipped_min_steps: int = SKIPPED_MIN_STEPS

    def __post_init__(self) -> None:
        if not self.loss_explosion_factor > 0 or not self.grad_explosion_factor > 0:
            raise ValueError("explosion factors must be positive")
        if not 0 <= self.skipped_fraction < 1:
            raise ValueError("skipped_fraction must be in [0, 1)")
        if self.grad_history_min < 1 or self.skipped_min_steps < 1:
            raise ValueError("grad_history_min and skipped_min_steps must be at least 1")
        if self.persist_steps < 1 or self.recovery_window < 1:
            raise ValueError("persist_steps and recovery_window must be at least 1")
        if not self.recovery_factor > 1:
            raise ValueError("recovery_factor must be above 1")
        if not self.recovery_descent >= 0:
            raise ValueError("recovery_descent must be at least 0 (at most 1: never deferred)")


class DivergenceMonitor:
    """Online divergence detection over chunks of per-step telemetry.

    The probe fetches its telemetry from the device every few steps and passes each chunk to
    :meth:`update`, which returns ``(cause, index_in_chunk)`` for the first step of the chunk
    where a divergence verdict holds, or None. Steps are numbered globally from 0 (``g``) in
    the order they are fed. Every test is per step, so a series fed in chunks of any size
    leaves the monitor in the same state.

    **Spikes.** Step ``g`` is a spike when

    * ``loss_explosion``: ``g >= 1`` (no update precedes step 0) and ``loss[g] >
      loss_explosion_factor × L0``, ``L0`` the initial loss: the ``initial_loss`` argument if
      given (the probe's held-out reference), else the first finite loss fed (a negative ``L0``:
      ``loss[g] > L0 + (factor - 1) × |L0|``, the same distance in units of its size, `above`;
      ``L0 = 0``: no scale, no test); or
    * ``grad_explosion``: ``grad_norm[g]`` is finite and ``> grad_explosion_factor × median``
      of the finite grad norms of steps ``< g``, once ``grad_history_min`` (5) exist, unless
      ``clipping`` (the run clips: a huge norm before clipping is what clipping bounds).

    Spikes are counted (``spike_count``), the first ``SPIKES_KEPT`` recorded (``spikes``),
    and ``max_loss_ratio`` is the largest ``loss[g] / L0`` over steps ``g >= 1``.

    **Verdicts**, tested at each step in this order (the first that holds is reported):

    1. ``nonfinite_loss``: ``loss[g]`` is NaN or ±inf (every precision).
    2. ``grad_explosion``: ``grad_norm[g]`` is non-finite and precision is fp32 or bf16. In
       fp16 a non-finite grad norm is the GradScaler's normal overflow (the step is skipped,
       the scale backs off) and neither a spike, a verdict nor part of the history.
    3. ``scaler_collapse``: fp16 only, ``scale[g]`` finite and ``< scale_floor``; or, in any
       precision, ``N = g + 1 >= skipped_min_steps`` and ``S / N > skipped_fraction`` (``S``
       the skipped steps up to and including ``g``).
    4. ``loss_explosion`` / ``grad_explosion`` (the cause of step ``g``'s spike): steps
       ``g - persist_steps + 1 .. g`` are all spikes.
    5. ``no_recovery``: a spike at step ``s`` opened a recovery check (when none was open);
       at ``g = s + recovery_window`` the median ``m_post`` of the finite losses of steps
       ``s+1 .. g`` is compared with ``m_pre``, the median of the finite losses of the
       ``recovery_window`` steps before ``s`` (``L0`` if there are none), and their MAD:
       diverged when ``m_post > max(recovery_factor × m_pre, m_pre + 6 × 1.4826 × MAD)``
       (``recovery_factor × m_pre`` sign-aware: `above`),
       unless the loss is coming back: the window cut in fifths (``q = W // 5`` steps, at
       least 1), the median of its last ``q`` losses times ``recovery_descent`` is at most the
       highest median of its consecutive ``q``-step chunks. Then the same check (same spike,
       same level) is judged again over the next ``recovery_window`` steps. Otherwise the
       check closes; a later spike opens the next one.

    6. ``no_recovery`` at the end (``at_end``, asked by a probe that ran to the end of its LR
       schedule: the length the user trains): the check of 5 is still open, at least
       ``END_STEPS`` finite losses followed its spike, their median is above the check's level
       and they are not coming back. The run ended inside a spike it had not recovered from.

    ``step`` (``diverged_at_step`` in a probe's summary) is the step where the verdict was
    reached; ``onset`` is the step where what led to it began (the first of the persisting
    spikes, the spike that did not recover; the step itself for 1-3).

    ``grad_norm``, ``scale`` and ``skipped`` may be omitted (None): their tests are then not run
    for that chunk (omitted ``skipped`` counts as not skipped). The whole chunk is always
    consumed, so the state stays consistent if the caller keeps going after a verdict; ``cause``,
    ``step`` and ``onset`` keep the first verdict ever reported; ``nonfinite_step`` is the first
    step with a non-finite loss (``stop_early: nonfinite`` stops there); ``grad_event_step`` the
    first gradient spike or non-finite gradient outside fp16 (the probe's anomaly report).
    """

    def __init__(
        self,
        precision: str = "fp32",
        *,
        initial_loss: float | None = None,
        thresholds: DivergenceThresholds | None = None,
        clipping: bool = False,
    ) -> None:
        check_precision(precision)
        self.precision = precision
        self.clipping = clipping
        self.thresholds = t = thresholds if thresholds is not None else DivergenceThresholds()
        self._initial: float | None = initial_loss
        self._grad_history: list[float] = []  # sorted
        self._steps = 0
        self._skipped = 0
        self._streak = 0  # consecutive spikes up to the last step fed
        self._recent: deque[float] = deque(maxlen=t.recovery_window)  # finite losses, last W
        self._check: tuple[int, int, float] | None = None  # (spike, window start, level)
        self._post: list[float] = []  # finite losses since the open check's spike
        self.spike_count = 0
        self.spikes: list[dict[str, Any]] = []
        self.max_loss_ratio: float | None = None
        self.cause: str | None = None
        self.step: int | None = None
        self.onset: int | None = None
        self.nonfinite_step: int | None = None
        self.grad_event_step: int | None = None  # first grad spike or non-finite grad (not fp16)
        self._level: float | None = None  # the level of the last recovery check opened
        self._verdict_level: float | None = None  # ... when a trend verdict was reached
        self._after: deque[float] = deque(maxlen=max(1, t.recovery_window // 5))
        self.withdrawn: dict[str, Any] | None = None  # a trend verdict the run's end undid

    @property
    def diverged(self) -> bool:
        """Whether any divergence verdict has been reached."""
        return self.cause is not None

    @property
    def steps_seen(self) -> int:
        """Number of steps fed so far."""
        return self._steps

    @property
    def skipped_steps(self) -> int:
        """Number of skipped steps fed so far."""
        return self._skipped

    @property
    def initial_loss(self) -> float | None:
        """The initial loss ``L0``, or None until it is known."""
        return self._initial

    @property
    def grad_norm_median(self) -> float | None:
        """Median of the finite grad norms seen so far, or None when none was seen."""
        h = self._grad_history
        if not h:
            return None
        mid = len(h) // 2
        return h[mid] if len(h) % 2 else 0.5 * (h[mid - 1] + h[mid])

    def should_stop(self, mode: bool | str) -> bool:
        """Whether a probe with ``divergence.stop_early`` = `mode` stops now."""
        if mode == "nonfinite":
            return self.nonfinite_step is not None
        return bool(mode) and self.cause is not None

    def at_end(self, held_out: Callable[[], float | None] | None = None) -> tuple[str, int] | None:
        """The verdict of a run that ends after the steps fed, at the length it is judged at
        (verdict 6 of the class): ``("no_recovery", step)``, recorded as the first verdict; None
        when it had one already or ends recovered. With fewer than ``END_STEPS`` losses after
        the spike, the trained model's held-out loss (`held_out`, asked then) above the level
        too is the verdict: one late jump alone is not."""
        if self.cause is not None or self._check is None:
            return None
        s, _, level = self._check
        post = self._post
        if post and median(post) <= level:
            return None
        if len(post) < END_STEPS:
            final = held_out() if held_out is not None else None
            if final is None or final <= level:  # (a NaN is above every level)
                return None
        elif halves_coming_back(post, self.thresholds.recovery_descent):
            return None
        self.cause, self.step, self.onset = "no_recovery", self._steps - 1, s
        return self.cause, self.step

    def recovered_at_end(
        self, held_out: Callable[[], float | None] | None = None
    ) -> dict[str, Any] | None:
        """Undo a trend verdict (spikes that persisted, a loss that did not recover) of a run
        carried on to the end of its LR schedule past it (``stop_early`` false), whose loss came
        back: no non-finite loss, at least ``END_STEPS`` finite losses after the verdict, no
        spike on the last step, the median of the last ``W // 5`` of them (fewer if fewer
        followed) at most the level of the verdict's recovery check, and so is the trained
        model's held-out loss when `held_out` measures one (asked last, once). The verdict is
        kept as ``withdrawn`` (cause, step, onset, level, end median, held-out loss); None when
        there is nothing to undo."""
        if self.cause is None or self._verdict_level is None:  # none, or not of a trend
            return None
        tail = list(self._after)
        if self.nonfinite_step is not None or len(tail) < END_STEPS or self._streak > 0:
            return None
        end, level = median(tail), self._verdict_level
        if end > level:
            return None
        final = held_out() if held_out is not None else None
        if final is not None and not final <= level:  # up, or not a number
            return None
        self.withdrawn = {
            "cause": self.cause,
            "step": self.step,
            "onset": self.onset,
            "level": round(level, 6),
            "end_median": round(end, 6),
            "held_out": None if final is None else round(final, 6),
        }
        self.cause = self.step = self.onset = None
        return self.withdrawn

    def record(self) -> dict[str, Any]:
        """The spikes for a probe's summary (keys ``divergence_spike_count``,
        ``divergence_max_loss_ratio``, ``divergence_spikes``, ``divergence_onset_step``)."""
        ratio = self.max_loss_ratio
        return {
            "divergence_spike_count": self.spike_count,
            "divergence_max_loss_ratio": ratio if ratio is None else round(ratio, 6),
            "divergence_spikes": [dict(s) for s in self.spikes],
            "divergence_onset_step": self.onset,
            "divergence_withdrawn": self.withdrawn,
        }

    def update(
        self,
        loss: npt.ArrayLike,
        grad_norm: npt.ArrayLike | None = None,
        scale: npt.ArrayLike | None = None,
        skipped: npt.ArrayLike | None = None,
    ) -> tuple[str, int] | None:
        """Feed one chunk of steps; ``(cause, index_in_chunk)`` of its first step where a
        divergence verdict holds (a spike alone is none).

        All given arrays must have the length of ``loss`` (ValueError otherwise).
        """
        losses = as_1d(loss, "loss")
        m = len(losses)
        grads = self._optional(grad_norm, "grad_norm", m)
        scales = self._optional(scale, "scale", m)
        skips = self._optional(skipped, "skipped", m)
        first: tuple[str, int] | None = None
        for i in range(m):
            g = self._steps
            self._steps += 1
            if skips is not None and math.isfinite(skips[i]) and skips[i] != 0:
                self._skipped += 1
            grad = None if grads is None else float(grads[i])
            sc = None if scales is None else float(scales[i])
            loss_g = float(losses[i])
            if self.cause is not None and math.isfinite(loss_g):
                self._after.append(loss_g)
            verdict = self._step(g, loss_g, grad, sc, skips is not None)
            if verdict is not None and first is None:
                first = (verdict[0], i)
                if self.cause is None:
                    self.cause, self.step, self.onset = verdict[0], g, verdict[1]
                    self._verdict_level = self._level if _trend(verdict[0], grad) else None
        return first

    @staticmethod
    def _optional(x: npt.ArrayLike | None, name: str, m: int) -> FloatArray | None:
        if x is None:
            return None
        arr = as_1d(x, name)
        if len(arr) != m:
            raise ValueError(f"{name} has {len(arr)} steps, loss has {m}")
        return arr

    def _step(
        self, g: int, loss: float, grad: float | None, scale: float | None, has_skips: bool
    ) -> tuple[str, int] | None:
        """Step `g`: record its spike, update the state; (cause, onset) of a verdict."""
        spike = self._spike(g, loss, grad)
        self._streak = self._streak + 1 if spike is not None else 0
        verdict = self._immediate(g, loss, grad, scale, has_skips)
        if verdict is None and spike is not None and self._streak >= self.thresholds.persist_steps:
            verdict = (spike, g - self._streak + 1)
        late = self._recovery(g, loss, spike)
        if verdict is None and late is not None:
            verdict = late
        if not math.isfinite(loss) and self.nonfinite_step is None:
            self.nonfinite_step = g
        nonfinite_grad = verdict is not None and verdict[0] == "grad_explosion"
        if (spike == "grad_explosion" or nonfinite_grad) and self.grad_event_step is None:
            self.grad_event_step = g
        if self._initial is None and math.isfinite(loss):
            self._initial = loss
        if grad is not None and math.isfinite(grad):
            bisect.insort(self._grad_history, grad)
        return verdict

    def _spike(self, g: int, loss: float, grad: float | None) -> str | None:
        thr, l0 = self.thresholds, self._initial
        ratio, exploded = None, False
        if g > 0 and l0 is not None and math.isfinite(l0) and l0 != 0 and math.isfinite(loss):
            exploded = loss > above(l0, thr.loss_explosion_factor)
            if l0 > 0:  # a ratio to a negative loss says nothing
                ratio = loss / l0
                if self.max_loss_ratio is None or ratio > self.max_loss_ratio:
                    self.max_loss_ratio = ratio
        cause = None
        if exploded:
            cause = "loss_explosion"
        elif grad is not None and math.isfinite(grad) and not self.clipping:
            median = self.grad_norm_median
            if (
                median is not None
                and len(self._grad_history) >= thr.grad_history_min
                and grad > thr.grad_explosion_factor * median
            ):
                cause = "grad_explosion"
        if cause is not None:
            self.spike_count += 1
            if len(self.spikes) < SPIKES_KEPT:
                r = None if ratio is None else round(ratio, 6)
                self.spikes.append({"step": g, "cause": cause, "loss_ratio": r})
        return cause

    def _immediate(
        self, g: int, loss: float, grad: float | None, scale: float | None, has_skips: bool
    ) -> tuple[str, int] | None:
        thr = self.thresholds
        if not math.isfinite(loss):
            return ("nonfinite_loss", g)
        if grad is not None and not math.isfinite(grad) and self.precision != "fp16":
            return ("grad_explosion", g)
        if (
            self.precision == "fp16"
            and scale is not None
            and math.isfinite(scale)
            and scale < thr.scale_floor
        ):
            return ("scaler_collapse", g)
        if (
            has_skips
            and self._steps >= thr.skipped_min_steps
            and self._skipped / self._steps > thr.skipped_fraction
        ):
            return ("scaler_collapse", g)
        return None

    def _recovery(self, g: int, loss: float, spike: str | None) -> tuple[str, int] | None:
        """Open a check at a spike, feed it, judge it at its window's end; keep the last W."""
        out = None
        if self._check is not None:
            s, start, level = self._check
            if math.isfinite(loss):
                self._post.append(loss)
            if g - start >= self.thresholds.recovery_window:
                self._check, post, self._post = None, self._post, []
                if post and median(post) > level:
                    if coming_back(post, self.thresholds.recovery_descent):
                        self._check = (s, g, level)
                    else:
                        out = ("no_recovery", s)
        elif spike is not None:
            self._open(g)
        if math.isfinite(loss):
            self._recent.append(loss)
        return out

    def _open(self, s: int) -> None:
        pre = list(self._recent)
        if not pre:
            l0 = self._initial
            if l0 is None or not math.isfinite(l0):
                return  # nothing to compare with
            pre = [l0]
        m_pre = median(pre)
        mad = median([abs(x - m_pre) for x in pre])
        level = max(
            above(m_pre, self.thresholds.recovery_factor), m_pre + RECOVERY_SIGMA * 1.4826 * mad
        )
        self._check, self._post, self._level = (s, s, level), [], level


def _trend(cause: str, grad: float | None) -> bool:
    """Whether a verdict of `cause` at a step with gradient norm `grad` is one of a trend
    (spikes that persisted, a loss that did not recover), not of the step alone (a non-finite
    loss or gradient, the fp16 scaler's collapse): only a trend can be undone by what follows."""
    if cause == "grad_explosion":
        return grad is not None and math.isfinite(grad)
    return cause in ("loss_explosion", "no_recovery")
