"""Divergence of a training probe, judged online: :class:`DivergenceMonitor` watches the
per-step series (see ``autotune.probe.metrics`` for their conventions) chunk by chunk, so that
the probe can stop as soon as a trial diverges. A divergence is a result, not an error.

Pure numpy: this module must not import torch, ray, mlflow or optuna.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Final

import numpy.typing as npt

from autotune.probe.metrics import FloatArray, as_1d, check_precision

GRAD_HISTORY_MIN: Final[int] = 5
"""``grad_explosion`` by ratio needs at least this many finite grad norms seen before."""

SKIPPED_MIN_STEPS: Final[int] = 20
"""The skipped-fraction test of ``scaler_collapse`` needs at least this many steps seen."""

DIVERGENCE_CAUSES: Final[tuple[str, ...]] = (
    "nonfinite_loss",
    "loss_explosion",
    "grad_explosion",
    "scaler_collapse",
)
"""The causes ``DivergenceMonitor`` reports, in the order they are tested at one step."""


@dataclass(frozen=True)
class DivergenceThresholds:
    """When ``DivergenceMonitor`` calls a step divergent (see its docstring for the exact tests).

    * ``loss_explosion_factor``: loss > factor × initial loss (10).
    * ``grad_explosion_factor``: grad norm > factor × median of the finite grad norms seen
      before (1e3), once ``grad_history_min`` (5) of them have been seen.
    * ``scale_floor``: fp16 GradScaler scale below it (1e-4).
    * ``skipped_fraction``: more than this fraction of the steps seen were skipped (0.5), once
      ``skipped_min_steps`` (20) steps have been seen.
    """

    loss_explosion_factor: float = 10.0
    grad_explosion_factor: float = 1e3
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


class DivergenceMonitor:
    """Online divergence detection over chunks of per-step telemetry.

    The probe fetches its telemetry from the device every few steps and passes each chunk to
    :meth:`update`, which returns ``(cause, index_in_chunk)`` for the first divergent step of the
    chunk, or None. Steps are numbered globally from 0 (``g``) in the order they are fed.

    State kept across chunks: the initial loss, the sorted finite grad norms seen so far, the
    number of steps and of skipped steps seen, and the first divergence (``cause``, ``step``).

    At step ``g`` the causes are tested in this order; the first that holds is reported:

    1. ``nonfinite_loss``: ``loss[g]`` is NaN or ±inf (every precision).
    2. ``loss_explosion``: ``loss[g] > loss_explosion_factor × L0``, where ``L0`` is the initial
       loss: the ``initial_loss`` argument if given (the probe's held-out reference), else the
       first finite loss fed (the same ``initial_loss`` as the summary). Tested from step 1 (no
       update precedes step 0: an unusual first batch is not an explosion) and only if ``L0``
       is finite and positive.
    3. ``grad_explosion``: ``grad_norm[g]`` is finite and ``> grad_explosion_factor × median``
       of the finite grad norms of steps ``< g``, once at least ``grad_history_min`` (5) such
       norms exist, unless ``clipping`` (the run clips its gradients: a huge norm before
       clipping is what clipping bounds, and the loss tests judge whether the run suffered);
       or ``grad_norm[g]`` is non-finite and precision is fp32 or bf16. In fp16 a
       non-finite grad norm is the GradScaler's normal overflow (the step is skipped and the
       scale backs off) and is neither divergence nor part of the history; a skipped fp16 step
       (finite loss, inf grad norm) is therefore never a divergence by itself.
    4. ``scaler_collapse``: fp16 only, ``scale[g]`` is finite and ``< scale_floor`` (1e-4);
       or, in any precision, with ``N = g + 1`` steps and ``S`` skipped steps seen up to and
       including ``g``: ``N >= skipped_min_steps`` (20) and ``S / N > skipped_fraction`` (0.5).

    ``grad_norm``, ``scale`` and ``skipped`` may be omitted (None): their tests are then not run
    for that chunk (omitted ``skipped`` counts as not skipped). The whole chunk is always
    consumed, so the state stays consistent if the caller keeps going after a divergence; the
    attributes ``cause`` and ``step`` keep the first divergence ever reported.
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
        self.thresholds = thresholds if thresholds is not None else DivergenceThresholds()
        self._initial: float | None = initial_loss
        self._grad_history: list[float] = []  # sorted
        self._steps = 0
        self._skipped = 0
        self.cause: str | None = None
        self.step: int | None = None

    @property
    def diverged(self) -> bool:
        """Whether any divergence has been reported."""
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

    def update(
        self,
        loss: npt.ArrayLike,
        grad_norm: npt.ArrayLike | None = None,
        scale: npt.ArrayLike | None = None,
        skipped: npt.ArrayLike | None = None,
    ) -> tuple[str, int] | None:
        """Feed one chunk of steps; ``(cause, index_in_chunk)`` of its first divergent step.

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
            cause = self._test(g, float(losses[i]), grad, sc, skips is not None)
            if cause is not None and first is None:
                first = (cause, i)
                if self.cause is None:
                    self.cause, self.step = cause, g
            self._record(g, float(losses[i]), grad)
        return first

    @staticmethod
    def _optional(x: npt.ArrayLike | None, name: str, m: int) -> FloatArray | None:
        if x is None:
            return None
        arr = as_1d(x, name)
        if len(arr) != m:
            raise ValueError(f"{name} has {len(arr)} steps, loss has {m}")
        return arr

    def _test(
        self, g: int, loss: float, grad: float | None, scale: float | None, has_skips: bool
    ) -> str | None:
        thr = self.thresholds
        if not math.isfinite(loss):
            return "nonfinite_loss"
        l0 = self._initial
        if (
            g > 0  # step 0 runs before any update
            and l0 is not None  # known after the first finite loss (before step 0 when given)
            and math.isfinite(l0)
            and l0 > 0
            and loss > thr.loss_explosion_factor * l0
        ):
            return "loss_explosion"
        if grad is not None:
            if math.isfinite(grad):
                median = self.grad_norm_median
                if (
                    not self.clipping
                    and median is not None
                    and len(self._grad_history) >= thr.grad_history_min
                    and grad > thr.grad_explosion_factor * median
                ):
                    return "grad_explosion"
            elif self.precision != "fp16":
                return "grad_explosion"
        if (
            self.precision == "fp16"
            and scale is not None
            and math.isfinite(scale)
            and scale < thr.scale_floor
        ):
            return "scaler_collapse"
        if (
            has_skips
            and self._steps >= thr.skipped_min_steps
            and self._skipped / self._steps > thr.skipped_fraction
        ):
            return "scaler_collapse"
        return None

    def _record(self, g: int, loss: float, grad: float | None) -> None:
        if self._initial is None and math.isfinite(loss):
            self._initial = loss
        if grad is not None and math.isfinite(grad):
            bisect.insort(self._grad_history, grad)
