"""Loss statistics that hold for any finite loss (`autotune.probe.metrics`): a loss that is not
positive (a Gaussian NLL, a negative ELBO offset by a constant) and a finite loss so large that
a plain sum of squares overflows (one 1e300 step) both give a number where one exists.

For an ordinary series (positive, far from float64's range) every function here returns exactly
what the plain numpy expression returns: the overflow-free path is taken only when the plain
one overflowed.

Pure numpy: this module must not import torch, ray, mlflow or optuna.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


def relative_drop(first: float, last: float) -> float:
    """``(first - last) / |first|``: the loss shed relative to the initial loss's size.

    For a positive ``first`` this is ``1 - last / first`` (computed so, bit for bit): 0 for a
    run that does not learn, 1 for a loss driven to 0, negative when the loss went up. A loss
    that starts negative (``-2.51`` to ``-2.99``) shed ``0.48 / 2.51 = 0.19``: the same sign
    convention, a drop is positive. NaN unless both are finite and ``first != 0`` (a loss that
    starts at exactly 0 has no size to be relative to).
    """
    if not (math.isfinite(first) and math.isfinite(last)) or first == 0:
        return math.nan
    if first > 0:
        return 1.0 - last / first
    return (first - last) / -first


def _scaled(x: FloatArray) -> tuple[FloatArray, float] | None:
    """``(x / s, s)`` with ``s = max |x|`` for a non-empty, all-finite ``x`` with ``s > 0``;
    None otherwise (nothing to rescale)."""
    if not x.size or not np.isfinite(x).all():
        return None
    scale = float(np.max(np.abs(x)))
    return (x / scale, scale) if scale > 0 else None


def mean(x: FloatArray) -> float:
    """``mean(x)``, without overflow when the values are finite but their sum is not."""
    with np.errstate(over="ignore", invalid="ignore"):
        out = float(np.mean(x))
    scaled = None if math.isfinite(out) else _scaled(x)
    return out if scaled is None else float(np.mean(scaled[0])) * scaled[1]


def std(x: FloatArray) -> float:
    """``std(x)`` (population, ddof 0), without overflow when the values are finite but their
    squares are not: one finite 1e300 loss gives a std near ``1e300 / sqrt(n)``, the noise it
    is, not ``inf``."""
    with np.errstate(over="ignore", invalid="ignore"):
        out = float(np.std(x))
    scaled = None if math.isfinite(out) else _scaled(x)
    return out if scaled is None else float(np.std(scaled[0])) * scaled[1]
