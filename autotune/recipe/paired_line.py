"""The paired verdict's one line: `pick vs baseline (paired over seeds [..]): VERDICT: why`, then
the figure of the final loss (or of the metric that decided, where the final loss did not) and
the level each metric was judged at (`paired.compare` makes the verdict)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def format_line(verdict: Mapping[str, Any] | None, label: str = "pick") -> str:
    """`pick vs baseline (paired over N seeds): VERDICT: why` and the final loss difference, or
    the difference of the metric that decided it when the final loss did not (`_shown`)."""
    if not verdict:
        return f"{label} vs baseline: not compared"
    text = f"{label} vs baseline"
    seeds = verdict.get("seeds") or []
    compared = verdict.get("compared_seeds")
    if seeds and compared is not None and list(compared) != list(seeds):
        text += (
            f" (paired over seeds {list(compared)} of {list(seeds)}: the others did not run whole)"
        )
    elif seeds:
        text += f" (paired over seeds {seeds})"
    text += f": {verdict['verdict'].upper()}"
    if verdict.get("why"):
        text += f": {verdict['why']}"
    name = _shown(verdict)
    fl = (verdict.get("metrics") or {}).get(name) or {}
    d, r = fl.get("difference") or {}, fl.get("ratio") or {}
    if r.get("mean") is not None:  # judged on the ratio: it comes first
        text += f"; {name} x{r['mean']:.3g} the baseline's"
        text += f" [x{r['low']:.3g}, x{r['high']:.3g}]" if r.get("low") is not None else ""
        text += f" (difference {d['mean']:+.4g})" if d.get("mean") is not None else ""
        if r.get("low") is None:
            text += " (1 pair: no interval)"
    elif d.get("mean") is not None:
        if d.get("low") is not None:
            text += f"; {name} difference {d['mean']:+.4g} [{d['low']:+.4g}, {d['high']:+.4g}]"
        else:
            text += f"; {name} difference {d['mean']:+.4g} (1 pair: no interval)"
    judged = int(verdict.get("judged_metrics") or 0)
    if judged > 1 and any(x.get("low") is not None for x in (r, d)):
        text += f" (each metric's interval at {verdict['level']:.1%}: {_family_text(verdict)})"
    return text


def _shown(verdict: Mapping[str, Any]) -> str:
    """The metric whose figure the verdict's line gives: the final loss, unless another metric
    decided a `better` or `worse` the final loss did not (`better ...: noise_per_drop` beside
    a final-loss interval that held no change read as a figure that did not back it)."""
    rows = verdict.get("metrics") or {}
    decided = ("better", "worse")
    if (rows.get("final_loss") or {}).get("verdict") in decided:
        return "final_loss"
    wanted = [verdict.get("verdict")] if verdict.get("verdict") in decided else list(decided)
    for metric, row in rows.items():
        if row.get("verdict") in wanted and (row.get("ratio") or row.get("difference")):
            return str(metric)
    return "final_loss"


def _family_text(verdict: Mapping[str, Any]) -> str:
    """`3 metrics compared`; with a timed metric timed apart, which the level counts all the
    same (`family`), `3 metrics measured on both sides, 2 compared`."""
    judged = int(verdict.get("judged_metrics") or 0)
    rows = (verdict.get("metrics") or {}).values()
    apart = sum(
        1 for row in rows if row.get("apart_seeds") and row.get("verdict") == "not compared"
    )
    if not apart:
        return f"{judged} metrics compared"
    return f"{judged} metrics measured on both sides, {judged - apart} compared"
