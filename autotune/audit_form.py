"""The form of an op audit's record, checked wherever one is read back: a recipe's
`recorded.audit` (the compact audit `autotune export --audit` records, which `autotune migrate`
compares with this machine's) and a logged audit's `audit.json` (`autotune audit --compare`).
Both compare max-abs errors by ratio, so a malformed entry (a `max_abs` of "abc" or NaN, a
negative error, an entry without its `op`) is refused in one line naming the entry, not a
traceback or a ratio of NaN that compares as "no difference".

Here, below both the recipe and the repro layers, so that the two readers share one rule.
"""

from __future__ import annotations

import math
from typing import Any

#: Where a problem is (key path below the audit) and what it is.
Problem = tuple[list[Any], str]

#: Numbers of a recorded op audit's entry that are errors (>= 0), and the one it must have.
_AUDIT_ERRORS = ("max_abs", "max_scaled", "ref_rms")


def audit_problem(a: Any, unmeasured: bool = False) -> Problem | None:
    """What is wrong with a recipe's `recorded.audit` (None: absent or well formed): the compact
    op audit `autotune export --audit` records (`repro.record.compact_audit`): a mapping with
    its `dtype` and a list of `entries`, each a mapping of `op` and `pass` (once each) and,
    unless the op raised (`error`), its `max_abs` error and count of `nonfinite` outputs, every
    error a finite number >= 0 (`autotune migrate` compares them with this machine's).

    With `unmeasured`, the full audit `run_audit` logs: an entry that measured no error (no
    finite output beside a finite reference) holds None as its errors, where the compact
    record holds 0."""
    if a is None:
        return None
    if not isinstance(a, dict):
        return [], f"must be a mapping (the op audit `autotune export --audit` records), got {a!r}"
    entries = a.get("entries")
    if not isinstance(entries, list):
        return ["entries"], f"must be a list of the audit's op entries, got {entries!r}"
    if not isinstance(a.get("dtype"), str):
        return ["dtype"], f"must be the audit's dtype (fp32, fp16, bf16), got {a.get('dtype')!r}"
    flagged = a.get("flagged")
    if flagged is not None and not (
        isinstance(flagged, list) and all(isinstance(x, str) for x in flagged)
    ):
        return ["flagged"], f"must be a list of op.pass names, got {flagged!r}"
    tol = a.get("tolerance")
    if tol is not None and not (_is_finite(tol) and tol > 0):
        return ["tolerance"], f"must be a finite number > 0 (or null), got {tol!r}"
    seen: set[tuple[str, str]] = set()
    for i, e in enumerate(entries):
        at = f"entries[{i}]"
        if not isinstance(e, dict):
            return [at], f"must be a mapping (op, pass, max_abs, ...), got {e!r}"
        for key in ("op", "pass"):
            if not isinstance(e.get(key), str) or not e[key]:
                return [at, key], f"must be a name, got {e.get(key)!r}"
        if (e["op"], e["pass"]) in seen:
            return [at], f"{e['op']}.{e['pass']} is recorded twice"
        seen.add((e["op"], e["pass"]))
        error = e.get("error")
        if error is not None and not isinstance(error, str):
            return [at, "error"], f"must be the op's error message (or null), got {error!r}"
        for key in _AUDIT_ERRORS:
            x = e.get(key)
            if x is None and key == "max_abs" and not error and not unmeasured:
                return [at, key], "required (the op's largest error against float64)"
            if x is not None and not (_is_finite(x) and x >= 0):
                return [at, key], f"must be a finite number >= 0, got {x!r}"
        count: Any = e.get("nonfinite")
        if (count is not None or not error) and not (_is_int(count) and count >= 0):
            return [at, "nonfinite"], f"must be a count of outputs (>= 0), got {count!r}"
        if e.get("flagged") is not None and not isinstance(e["flagged"], bool):
            return [at, "flagged"], f"must be true or false, got {e['flagged']!r}"
        tol = e.get("tolerance")
        if tol is not None and not (_is_finite(tol) and tol > 0):
            return [at, "tolerance"], f"must be a finite number > 0 (or null), got {tol!r}"
    return None


def path_text(path: list[Any]) -> str:
    """A problem's key path as one name: `entries[3].max_abs`."""
    return ".".join(str(p) for p in path)


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_finite(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)
