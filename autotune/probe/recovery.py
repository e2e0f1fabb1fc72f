"""The loss-level arithmetic of the divergence monitor's recovery checks: medians, "a loss coming
back" over a window (in fifths) or at a run's end (in halves), and a level `factor` times above
another, for losses of either sign. Pure numpy."""

from __future__ import annotations

import numpy as np


def median(values: list[float]) -> float:
    return float(np.median(values))


def coming_back(post: list[float], descent: float) -> bool:
    """Whether the losses `post` (a recovery window's, in step order) are coming back: cut in
    consecutive chunks of ``q = max(1, len(post) // 5)`` from the start (a shorter remainder
    at the end is no chunk), the median of the last ``q`` losses times `descent` is at most the
    highest chunk median. Never for ``descent <= 1`` (the test off) or an empty window."""
    if not descent > 1 or not post:
        return False
    q = max(1, len(post) // 5)
    chunks = [median(post[i : i + q]) for i in range(0, len(post) - q + 1, q)]
    return median(post[-q:]) * descent <= max(chunks)


def halves_coming_back(post: list[float], descent: float) -> bool:
    """At a run's end: whether the losses since the spike are coming back, the median of their
    second half times `descent` at most that of their first (never for ``descent <= 1``).
    Halves, not the window's fifths: a few dozen losses at the end cut in fifths of a handful
    each would call a noisy plateau coming back on one seed and not on the next."""
    if not descent > 1 or len(post) < 2:
        return False
    h = len(post) // 2
    return median(post[h:]) * descent <= median(post[:h])


def above(level: float, factor: float) -> float:
    """`factor` x `level` for a level >= 0, and as far above a negative one (`level +
    (factor - 1) x |level|`): a loss that can go below 0 (a log-likelihood of a density, an
    ELBO) explodes or fails to recover by the same distance, in units of its own size."""
    return level + (factor - 1.0) * abs(level)
