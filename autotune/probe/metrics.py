"""Stability and speed metrics of a training probe, computed from per-optimizer-step series.

A probe records, per optimizer step: ``loss`` (mean over micro-batches), ``grad_norm`` (total
norm before clipping), ``clipped`` (whether clipping fired), ``scale`` (GradScaler scale),
``skipped`` (whether the optimizer step was skipped for inf/NaN gradients), ``lr`` and
``step_time`` (seconds of compute). The functions here turn those series into the summary
metrics a study optimises or constrains (``autotune.probe.divergence`` watches the same series
online, chunk by chunk, so that the probe can stop as soon as a trial diverges).

Conventions shared by every function:

* Inputs are 1-D array-likes (converted to ``float64``); ``n`` is the number of *recorded* steps,
  which is smaller than planned when the probe stopped early.
* Windows are chosen by step position in the recorded series (``_window_len`` below); non-finite
  values (NaN, ±inf) inside a window are then ignored. A metric that has no finite value to work
  with is ``float('nan')``.
* ``_window_len(n, f) = min(n, max(1, ceil(f * n)))`` (0 when ``n == 0``); ``f * n`` is rounded to
  9 decimals first so that a product like ``0.07 * 100 == 7.000000000000001`` counts as 7.

Pure numpy: this module must not import torch, ray, mlflow or optuna.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Final

import numpy as np
import numpy.typing as npt

from autotune.probe import safe_stats, timing
from autotune.probe.safe_stats import relative_drop

FloatArray = npt.NDArray[np.float64]

# --------------------------------------------------------------------------------------------
# Constants
# --------------------------------------------------------------------------------------------


FINAL_FRACTION: Final[float] = 0.10
"""Final loss = mean over the last ``max(1, ceil(0.10 n))`` steps."""

STABILITY_FRACTION: Final[float] = 0.5
"""The tail window of ``loss_cv`` and ``loss_range``: the last ``max(1, ceil(0.5 n))`` steps.

The first half of a short probe is dominated by the initial descent and by warmup; stability is
judged on the second half.
"""

TREND_WINDOW: Final[int] = 9
"""Width (odd) of the centred rolling median that estimates the loss trend in ``loss_cv``.

Wide enough that the median ignores a single spike or a short burst of noise, narrow enough
(a few percent of a probe of a few hundred steps) to follow the loss's decay.
"""

MIN_CV_POINTS: Final[int] = 3
"""``loss_cv`` is NaN when the tail window holds fewer finite losses than this."""

SPIKE_WINDOW: Final[int] = 32
"""Trailing window (steps) of the spike test.

OLMo-core flags a step at 6σ over a 128-step window. A probe lasts only a few hundred steps, so
a 128-step window would cover a large part of the run, including the steep early descent: the
trend inside the window would inflate the MAD (and the threshold), hiding the spikes of the
first half, and the test would only be fully armed after a third of the probe. 32 steps still
give a stable median/MAD estimate (30+ points) while the trend contributes little to the MAD.
"""

SPIKE_SIGMA: Final[float] = 6.0
"""A spike exceeds the trailing median by more than this many robust standard deviations."""

SPIKE_MIN_HISTORY: Final[int] = 8
"""Spikes are looked for from step ``min(SPIKE_WINDOW, 8)`` on, using whatever trailing window
is available (at least that many finite losses); earlier steps are never spikes."""

MAD_TO_SIGMA: Final[float] = 1.4826
"""Scale factor from the median absolute deviation to the standard deviation of a normal."""

SPIKE_MAD_REL_FLOOR: Final[float] = 1e-3
"""The MAD used by the spike test is at least ``1e-3 * |median|`` (no false spikes on a flat
series, where the MAD is 0)."""

SPIKE_MAD_ABS_FLOOR: Final[float] = 1e-12
"""... and at least ``1e-12`` (a series that is flat at exactly 0)."""

THROUGHPUT_WARMUP_FRACTION: Final[float] = 0.1
"""Throughput skips the first ``max(3, ceil(0.1 n))`` steps (compilation, allocator and cache
warm-up, autotuning of kernels)."""

THROUGHPUT_MIN_WARMUP_STEPS: Final[int] = 3
"""The minimum number of warm-up steps skipped by ``throughput``."""

PRECISIONS: Final[tuple[str, ...]] = ("fp32", "fp16", "bf16")
"""Accepted values of ``precision``."""

# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def as_1d(x: npt.ArrayLike, name: str) -> FloatArray:
    """``x`` as a 1-D float64 array (bools become 0/1); a ValueError for any other shape."""
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D series, got shape {arr.shape}")
    return arr


def finite_values(x: FloatArray) -> FloatArray:
    return x[np.isfinite(x)]


def _window_len(n: int, fraction: float) -> int:
    """``min(n, max(1, ceil(fraction * n)))``, 0 for an empty series."""
    if n <= 0:
        return 0
    return min(n, max(1, math.ceil(round(n * fraction, 9))))


def _final_window(loss: npt.ArrayLike) -> FloatArray:
    """The finite losses among the last ``max(1, ceil(FINAL_FRACTION * n))`` steps."""
    x = as_1d(loss, "loss")
    return finite_values(x[len(x) - _window_len(len(x), FINAL_FRACTION) :])


def check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")


# --------------------------------------------------------------------------------------------
# Loss level
# --------------------------------------------------------------------------------------------


def initial_loss(loss: npt.ArrayLike, reference: float | None = None) -> float:
    """Initial loss: `reference` when given and finite (the probe's: the untrained model's mean
    loss over the held-out set, `autotune.probe.reference`), else the first finite loss of the
    series (step 0's, unless it was not finite).

    Step 0's loss is computed before the first update: the loss of the untrained model, on one
    batch. It is not averaged with the next few steps on purpose: at a learning rate too high
    for the defaults, steps 1-10 can explode to several times that loss and recover, and a mean
    over them would inflate the reference, so that a run sitting at chance afterwards still
    showed a large ``loss_drop``. NaN when no loss is finite or the series is empty.
    """
    if reference is not None and math.isfinite(reference):
        return float(reference)
    f = finite_values(as_1d(loss, "loss"))
    return float(f[0]) if f.size else math.nan


def final_loss(loss: npt.ArrayLike) -> float:
    """Final loss: the mean of the finite losses among the last ``k`` steps.

    ``k = max(1, ceil(FINAL_FRACTION * n))`` (``FINAL_FRACTION = 0.10``). NaN when none of them is
    finite (e.g. a run whose last steps are NaN) or the series is empty.
    """
    window = _final_window(loss)
    return safe_stats.mean(window) if window.size else math.nan


def loss_drop(loss: npt.ArrayLike, reference: float | None = None) -> float:
    """Relative loss decrease: ``loss_drop = (initial_loss - final_loss) / |initial_loss|``
    (`initial_loss` of `loss` and `reference`; `safe_stats.relative_drop`), which is
    ``1 - final_loss / initial_loss`` for a positive initial loss.

    0 for a run that does not learn, 1 for a loss driven to 0, negative when the loss went up;
    a loss that is not positive (an NLL) has one too. NaN when either term is NaN or
    ``initial_loss == 0``.
    """
    return relative_drop(initial_loss(loss, reference), final_loss(loss))


# --------------------------------------------------------------------------------------------
# Loss stability
# --------------------------------------------------------------------------------------------


def rolling_median(x: npt.ArrayLike, window: int, *, exclude_center: bool = False) -> FloatArray:
    """Centred rolling median, truncated at the edges.

    ``out[i] = median(x[j] for j in [max(0, i-h), min(n-1, i+h)] if x[j] is finite)`` with
    ``h = window // 2``: a full window of ``window`` points in the interior, the available points
    near the edges (and everywhere when ``n < window``). With ``exclude_center=True`` the point
    ``i`` itself is left out (a leave-one-out median of its up to ``2h`` neighbours). ``out[i]``
    is NaN when the window holds no finite value.

    ``window`` must be a positive odd integer (ValueError otherwise).
    """
    if window < 1 or window % 2 == 0:
        raise ValueError(f"window must be a positive odd integer, got {window}")
    arr = as_1d(x, "x")
    n = len(arr)
    half = window // 2
    out = np.full(n, math.nan)
    for i in range(n):
        lo, hi = max(0, i - half), min(n, i + half + 1)
        window_values = arr[lo:hi]
        if exclude_center:
            window_values = np.delete(window_values, i - lo)
        values = finite_values(window_values)
        if values.size:
            out[i] = np.median(values)
    return out


def _tail(loss: npt.ArrayLike) -> FloatArray:
    """The finite losses among the last ``max(1, ceil(STABILITY_FRACTION * n))`` steps."""
    x = as_1d(loss, "loss")
    return finite_values(x[len(x) - _window_len(len(x), STABILITY_FRACTION) :])


def loss_cv(loss: npt.ArrayLike) -> float:
    """Fluctuation of the loss around its trend over the tail window (the stability objective).

    With ``tail`` = the finite losses among the last ``max(1, ceil(0.5 n))`` steps::

        trend[i]    = median of tail[j] for 0 < |j - i| <= 4   (TREND_WINDOW = 9, centre left out,
                                                                 truncated at the tail's edges)
        residual    = tail - trend
        loss_cv     = std(residual) / |mean(trend)|              (population std, ddof = 0)

    The centre is left out of the median on purpose: a centred median over an odd window of
    ``2h + 1`` points passes a period-2 oscillation (the signature of a too-high learning rate)
    through unchanged when ``h`` is even (``h + 1`` of the points share the centre's sign), so
    its residual would be ~0. Over the ``2h`` neighbours the two phases are balanced and the
    trend sits between them: ``c + a(-1)^t`` gives ``loss_cv = a / c``. A smooth decay gives
    ~0; a single spike does not move the trend, so it shows up fully in the residual.

    NaN when the tail holds fewer than ``MIN_CV_POINTS`` (3) finite losses or
    ``mean(trend) == 0``. The std does not overflow on a finite loss (`safe_stats.std`).
    """
    noise, level = _tail_noise(loss)
    if not (math.isfinite(level) and level != 0):
        return math.nan
    return noise / abs(level)


def _tail_noise(loss: npt.ArrayLike) -> tuple[float, float]:
    """``(std(residual), mean(trend))`` over the tail window as `loss_cv` defines them; NaNs when
    the tail holds fewer than ``MIN_CV_POINTS`` finite losses."""
    tail = _tail(loss)
    if tail.size < MIN_CV_POINTS:
        return math.nan, math.nan
    trend = rolling_median(tail, TREND_WINDOW, exclude_center=True)
    return safe_stats.std(tail - trend), safe_stats.mean(trend)


def final_train_level(loss: npt.ArrayLike) -> float:
    """The median of the finite losses in `final_loss`'s window (NaN when none): not their mean,
    which one outlier batch of heavy-tailed data (a loss 10^4 times the others) lifts past the
    initial loss, as if a run that learned 95% had learned nothing."""
    window = _final_window(loss)
    return float(np.median(window)) if window.size else math.nan


def noise_per_drop(loss: npt.ArrayLike, reference: float | None = None) -> float:
    """Fluctuation of the loss around its trend per unit of loss the run shed (the stability
    objective of the shipped spaces): ``std(residual) / (initial_loss - final_train_level)``,
    ``residual`` the tail window's residual of `loss_cv`, which divides the same noise by the
    loss level instead and so ranks a model stuck at chance stabler than one that learns. The
    drop ends at the median of the last losses: a one-step jump does not decide whether the run
    learned, while the residual counts it in full (the run is noisy). ``initial_loss`` is the
    held-out `reference`, common to every trial of a study (same weights, same batches). NaN
    (the worst value for an objective) when the tail holds fewer than ``MIN_CV_POINTS`` finite
    losses or the loss did not drop (``final_train_level >= initial_loss``).
    """
    noise, _ = _tail_noise(loss)
    drop = initial_loss(loss, reference) - final_train_level(loss)
    if not (math.isfinite(noise) and math.isfinite(drop)) or drop <= 0:
        return math.nan
    return noise / drop


def loss_range(loss: npt.ArrayLike) -> float:
    """``loss_range = max(tail) - min(tail)`` over the finite losses of the tail window.

    The tail window is the last ``max(1, ceil(STABILITY_FRACTION * n))`` steps (0.5). NaN when it
    holds no finite loss.
    """
    tail = _tail(loss)
    if not tail.size:
        return math.nan
    return float(np.max(tail) - np.min(tail))


def spike_count(loss: npt.ArrayLike) -> int:
    """Number of steps whose loss spikes above the trailing median.

    Step ``t`` is a spike when::

        H     = finite values of loss[max(0, t - W) : t]      (W = SPIKE_WINDOW = 32)
        m     = median(H)
        MAD   = max(median(|H - m|), 1e-3 * |m|, 1e-12)
        loss[t] > m + SIGMA * 1.4826 * MAD                     (SIGMA = SPIKE_SIGMA = 6)

    Only steps ``t >= min(W, 8)`` with a finite loss and at least ``min(W, 8)`` finite values in
    ``H`` are tested (the trailing window is shorter than ``W`` while ``t < W``). Every step over
    the threshold counts, so a spike lasting 3 steps counts 3. A non-finite loss is not a spike
    (it is the ``nonfinite_loss`` divergence). 0 for a series too short to test.

    See ``SPIKE_WINDOW`` for why the window is 32 steps and not OLMo-core's 128.
    """
    x = as_1d(loss, "loss")
    start = min(SPIKE_WINDOW, SPIKE_MIN_HISTORY)
    count = 0
    for t in range(start, len(x)):
        value = x[t]
        if not math.isfinite(value):
            continue
        history = finite_values(x[max(0, t - SPIKE_WINDOW) : t])
        if history.size < start:
            continue
        med = float(np.median(history))
        mad = float(np.median(np.abs(history - med)))
        mad = max(mad, SPIKE_MAD_REL_FLOOR * abs(med), SPIKE_MAD_ABS_FLOOR)
        if value > med + SPIKE_SIGMA * MAD_TO_SIGMA * mad:
            count += 1
    return count


# --------------------------------------------------------------------------------------------
# Gradients, clipping, speed
# --------------------------------------------------------------------------------------------


def grad_norm_stats(grad_norm: npt.ArrayLike) -> dict[str, float]:
    """``{"p50", "p99", "max"}`` of the finite gradient norms (pre-clipping).

    Percentiles use numpy's default linear interpolation between order statistics
    (``np.percentile(g, q)``). Non-finite norms (fp16 overflow steps) are left out; all three
    are NaN when no norm is finite.
    """
    g = finite_values(as_1d(grad_norm, "grad_norm"))
    if not g.size:
        return {"p50": math.nan, "p99": math.nan, "max": math.nan}
    return {
        "p50": float(np.percentile(g, 50)),
        "p99": float(np.percentile(g, 99)),
        "max": float(np.max(g)),
    }


def clip_fraction(clipped: npt.ArrayLike) -> float:
    """Fraction of steps at which clipping fired: ``mean(clipped != 0)``.

    ``clipped`` is a bool or 0/1 series; non-finite entries are left out. NaN when empty.
    """
    c = finite_values(as_1d(clipped, "clipped"))
    if not c.size:
        return math.nan
    return float(np.mean(c != 0))


def throughput_warmup_steps(n: int) -> int:
    """``max(3, ceil(0.1 n))``: the first steps of an ``n``-step series that ``throughput``
    leaves out. The probe checks for divergence at every one of them (it costs a device sync
    per step, which no measured step pays)."""
    return max(THROUGHPUT_MIN_WARMUP_STEPS, _window_len(n, THROUGHPUT_WARMUP_FRACTION))


def _steady_times(step_time_s: npt.ArrayLike) -> FloatArray:
    """The step times ``throughput`` reads: after the warm-up, the finite, positive ones, in
    order."""
    t = as_1d(step_time_s, "step_time_s")
    steady = t[throughput_warmup_steps(len(t)) :]
    return steady[np.isfinite(steady) & (steady > 0)]


def throughput(step_time_s: npt.ArrayLike, per_step: float) -> float:
    """Steady-state rate: ``per_step / median(step_time_s[w:])``.

    ``w = max(3, ceil(0.1 n))`` warm-up steps are skipped (``THROUGHPUT_WARMUP_FRACTION``,
    ``THROUGHPUT_MIN_WARMUP_STEPS``); only finite, positive step times are used. With
    ``per_step`` = samples per optimizer step this is samples/s, with tokens per step tokens/s.
    NaN when no steady step time is left (e.g. a probe of 3 steps or fewer).
    """
    steady = _steady_times(step_time_s)
    if not steady.size:
        return math.nan
    return float(per_step / np.median(steady))


def throughput_interval(step_time_s: npt.ArrayLike, per_step: float) -> tuple[float, float]:
    """``(low, high)``: the 95% interval of ``throughput`` from the probe's own step timings.

    ``per_step / (high, low)`` of ``autotune.probe.timing.median_interval`` over the same steady
    step times ``throughput`` reads: the order-statistic interval of the median over the medians
    of 10 contiguous batches of steps (so a burst of load on a shared machine widens it), which
    contains ``throughput``. NaNs when fewer than 6 steady step times are left.
    """
    lo, hi = timing.median_interval(_steady_times(step_time_s))
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return math.nan, math.nan
    return float(per_step / hi), float(per_step / lo)


# --------------------------------------------------------------------------------------------
# Summary
# --------------------------------------------------------------------------------------------

_REQUIRED_SERIES: Final[tuple[str, ...]] = ("loss", "grad_norm", "step_time")


def summarize(
    series: Mapping[str, npt.ArrayLike],
    *,
    samples_per_step: float,
    tokens_per_step: float = 0,
    precision: str = "fp32",
    reference: float | None = None,
    final_reference: float | None = None,
) -> dict[str, float]:
    """All summary metrics of one probe (`reference`: the initial loss, see `initial_loss`;
    `final_reference`: the trained model's loss on the same held-out set).

    ``series`` maps ``loss``, ``grad_norm``, ``step_time`` (required) and ``clipped``,
    ``scale``, ``skipped``, ``lr`` (optional) to per-step series of one common length ``n``
    (shorter than planned when the probe stopped early). Returns plain Python numbers:

    * ``steps_run`` (int) = n
    * ``initial_loss``, ``final_loss``, ``loss_drop``, ``loss_cv``, ``noise_per_drop``,
      ``loss_range``, ``spike_count`` (int): the functions of the same name on ``loss``, except
      that with a finite ``final_reference`` the final loss is that held-out loss (and
      ``loss_drop`` relative to it, `relative_drop`): a mean of the last training losses
      is decided by the few outlier batches of heavy-tailed data, a held-out set is the same for
      every run
    * ``final_train_loss``: ``final_loss(loss)``, the mean of the last 10% of training losses
    * ``grad_norm_p50``, ``grad_norm_p99``, ``grad_norm_max``: ``grad_norm_stats(grad_norm)``
    * ``clip_fraction``: ``clip_fraction(clipped)``; NaN (not known) when ``clipped`` is absent:
      a run that did not say whether it clipped is not a run that never clipped
    * ``skipped_steps`` (int): number of steps with ``skipped != 0``; 0 when absent
    * ``throughput``: ``throughput(step_time, samples_per_step)`` in samples/s, and
      ``throughput_low``, ``throughput_high``: its 95% interval (`throughput_interval`)
    * ``tokens_per_s`` (with ``tokens_per_s_low``, ``tokens_per_s_high``): the same in tokens/s,
      only if ``tokens_per_step > 0``
    * ``final_scale``: the last finite ``scale`` value, only if ``precision == "fp16"`` (NaN when
      ``scale`` is absent or has no finite value)

    ValueError for a missing required series, series of different lengths or an unknown
    precision.
    """
    check_precision(precision)
    missing = [key for key in _REQUIRED_SERIES if key not in series]
    if missing:
        raise ValueError(f"probe series lacks {', '.join(missing)}")
    arrays = {key: as_1d(value, key) for key, value in series.items()}
    lengths = {key: len(value) for key, value in arrays.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"probe series differ in length: {lengths}")

    loss = arrays["loss"]
    grads = grad_norm_stats(arrays["grad_norm"])
    first, train_last = initial_loss(loss, reference), final_loss(loss)
    held_out = final_reference is not None and math.isfinite(final_reference)
    last = float(final_reference) if held_out else train_last  # type: ignore[arg-type]
    out: dict[str, float] = {
        "steps_run": len(loss),
        "initial_loss": first,
        "final_loss": last,
        "final_train_loss": train_last,
        "loss_drop": relative_drop(first, last),
        "loss_cv": loss_cv(loss),
        "noise_per_drop": noise_per_drop(loss, reference),
        "loss_range": loss_range(loss),
        "spike_count": spike_count(loss),
        "grad_norm_p50": grads["p50"],
        "grad_norm_p99": grads["p99"],
        "grad_norm_max": grads["max"],
        "clip_fraction": clip_fraction(arrays["clipped"]) if "clipped" in arrays else math.nan,
        "skipped_steps": (
            int(np.count_nonzero(finite_values(arrays["skipped"]))) if "skipped" in arrays else 0
        ),
    }
    for name, per_step in (("throughput", samples_per_step), ("tokens_per_s", tokens_per_step)):
        if name == "throughput" or per_step > 0:
            out[name] = throughput(arrays["step_time"], per_step)
            out[f"{name}_low"], out[f"{name}_high"] = throughput_interval(
                arrays["step_time"], per_step
            )
    if precision == "fp16":
        scale = finite_values(arrays["scale"]) if "scale" in arrays else np.empty(0)
        out["final_scale"] = float(scale[-1]) if scale.size else math.nan
    return out


def own_timing(data_series: dict[str, np.ndarray], resumed: int) -> dict[str, np.ndarray]:
    """The series the summary metrics read: a continued probe's throughput is this process's
    own (the inherited step times ran in another process, under other load), after a warm-up
    of its own steps, as a probe from step 0 leaves out its first ones."""
    times = data_series.get("step_time")
    if not resumed or times is None:
        return data_series
    own = times.copy()
    own[: resumed + throughput_warmup_steps(len(times) - resumed)] = math.nan
    return {**data_series, "step_time": own}
