"""This machine's op audit against the one the recipe recorded where it was tuned.

Both are compact audits (`repro.record`). Side by side through `repro.audit.compare_audits`
(the recorded audit is `a`, this machine's `b`): an op whose max-abs error differs by more than
`factor` is marked. An op *grew* when this machine's error is the larger by more than `factor`,
or it is non-finite or raised only here; it is *beyond tolerance* when it is flagged here
(`max_scaled` above the dtype's tolerance, non-finite, raised) and was not there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune.repro.audit import compare_audits, measured_max_abs

FACTOR = 10.0


def compare_ops(
    recorded: Mapping[str, Any] | None, here: Mapping[str, Any], factor: float = FACTOR
) -> dict[str, Any]:
    """`{status, factor, rows, grew, beyond_tolerance, flagged_here, flagged_recorded}`;
    `status`: `compared`, or `not recorded` (then the rows are this machine's alone)."""
    flagged_here = list(here.get("flagged") or [])
    if not recorded or not recorded.get("entries"):
        # Nothing recorded to set beside: no recorded value, no ratio; this machine's error as
        # `compare_audits` shows it (None, not 0, for an op that raised or measured none).
        rows = [
            {
                "op": e["op"],
                "pass": e["pass"],
                "a_max_abs": None,
                "b_max_abs": measured_max_abs(e),
                "ratio": None,
                "differs": False,
                "why": None,
            }
            for e in here.get("entries") or []
        ]
        return {
            "status": "not recorded",
            "factor": factor,
            "rows": rows,
            "grew": [],
            "beyond_tolerance": flagged_here,
            "flagged_here": flagged_here,
            "flagged_recorded": [],
        }
    cmp = compare_audits(recorded, here, factor)
    grew = [
        f"{r['op']}.{r['pass']}"
        for r in cmp["rows"]
        if r["differs"] and str(r["why"]) in ("max_abs b larger", "non-finite in b", "raised in b")
    ]
    before = set(recorded.get("flagged") or [])
    return {
        "status": "compared",
        "factor": factor,
        "rows": cmp["rows"],
        "grew": grew,
        "beyond_tolerance": [name for name in flagged_here if name not in before],
        "flagged_here": flagged_here,
        "flagged_recorded": sorted(before),
        "dtype": here.get("dtype"),
        "recorded_dtype": recorded.get("dtype"),
    }
