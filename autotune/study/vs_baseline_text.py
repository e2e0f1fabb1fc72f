"""The study summary's "vs baseline" text of one metric: the baseline's value and the change,
how a verified change was paired or what noise one run against one run was measured against,
or why there is none (a baseline that diverged or broke a constraint, runs timed apart)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def vs_baseline(row: Mapping[str, Any], short: bool = False) -> str:
    """`  baseline 0.06  (-16.7%)`, or why there is no percentage."""
    d = row.get("baseline_diverged")
    b = row.get("baseline")
    on = row.get("baseline_diverged_seeds") or {}
    if (d and (not d.get("ran_whole") or b is None)) or (b is None and on):
        # No baseline value to compare with: say why, as the README promises.
        text = "  vs baseline: baseline diverged"
        text += f" at step {d.get('step')} ({d.get('cause')})" if d else ""
        if on:
            text += f"{', and' if d else ''} on {len(on['seeds'])} of {on['n']} verification"
            text += f" seeds {on['seeds']}: no value to compare with"
        return text
    if b is None:
        return ""
    text = f" vs baseline {b:.4g}" if short else f"  baseline {b:.4g}"
    if d:  # labelled diverged, but it ran its whole length: its value is real
        text += f" (labelled diverged at step {d.get('step')}, {d.get('cause')}; ran on)"
    if row.get("change_pct") is not None:
        pct = f"{row['change_pct']:+.1f}%" + paired_text(row) + noise_text(row)
        text += f" ({pct})" if short else f"  ({pct})"
    elif row.get("baseline_infeasible"):
        broken = row.get("baseline_broken") or []
        learn = any(b.startswith("loss_drop") for b in broken)
        why = "did not learn" if learn else "infeasible"
        text += f" (baseline {why}: {', '.join(broken) or 'a constraint'}; no percentage)"
    elif row.get("timed_apart"):  # the paired verdict does not compare them either
        text += "  (timed apart: not compared)"
    elif "paired_seeds" in row:
        text += "  (no seed with a value on both sides: no percentage)"
    return text


def noise_text(row: Mapping[str, Any]) -> str:
    """What a percentage of one run against one run is measured against (`one_run`): within
    the baseline's seed-to-seed spread (not a difference), beyond it, or nothing measured."""
    note = (row.get("baseline_noise") or {}).get("note")
    return f", {note}" if note else ""


def paired_text(row: Mapping[str, Any]) -> str:
    """How a verified percentage was paired (`paired_change`), when it is not plainly the
    printed means': the seeds it is over and the two means there, and the seeds left out."""
    seeds = row.get("paired_seeds")
    best, base = row.get("best_paired"), row.get("baseline_paired")
    apart, left = row.get("timed_apart") or [], row.get("left_out") or []
    if seeds is None or best is None or base is None:
        return ""
    same = math.isclose(best, row["best"], rel_tol=1e-9) and math.isclose(
        base, row["baseline"], rel_tol=1e-9
    )
    if same and not apart and not left:
        return ""
    text = f" paired over seed{'s' if len(seeds) > 1 else ''} {seeds}: pick {best:.4g} "
    text += f"baseline {base:.4g} there"
    if left:
        text += f"; seed{'s' if len(left) > 1 else ''} {left} left out (a side has no value there)"
    if apart:
        text += f"; seed{'s' if len(apart) > 1 else ''} {apart} left out (timed apart)"
    return text
