"""How a paired comparison's seeds ended where no pair completed: the reason a metric is not
compared (`paired.compare`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from autotune.probe.outcome import Outcome


def none_completed(
    a: Mapping[Any, Mapping[str, Any]], b: Mapping[Any, Mapping[str, Any]], seeds: Sequence[Any]
) -> str | None:
    """Why no metric but the final loss has a pair, when no seed completed on both sides (`the
    baseline diverged on every seed`); None when one did."""
    done = Outcome.COMPLETE
    if any(a[s].get("outcome") == done and b[s].get("outcome") == done for s in seeds):
        return None
    for rows, who in ((b, "the baseline"), (a, "this configuration")):
        if all(rows[s].get("outcome") == Outcome.DIVERGED for s in seeds):
            return f"{who} diverged on every seed"
    return "no seed completed on both sides (" + unfinished(a, b, seeds) + ")"


def unfinished(
    a: Mapping[Any, Mapping[str, Any]], b: Mapping[Any, Mapping[str, Any]], seeds: Sequence[Any]
) -> str:
    """`this configuration failed on 2 of 2 seeds; the baseline failed on 2 of 2 seeds`: how
    the seeds ended where no pair ran whole."""

    def ended(rows: Mapping[Any, Mapping[str, Any]]) -> str:
        counts: dict[str, int] = {}
        for s in seeds:
            how = str(rows[s].get("outcome") or "did not run")
            counts[how] = counts.get(how, 0) + 1
        return ", ".join(f"{k} on {n} of {len(seeds)} seeds" for k, n in counts.items())

    return f"this configuration {ended(a)}; the baseline {ended(b)}"
