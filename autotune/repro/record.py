"""What a recipe records where it was tuned, so that `autotune migrate` on another machine has
something to compare with: a compact op audit and the trial's loss curve.

The audit (`audit_here`) is `run_audit` on the recipe's device and dtype at the thread count its
probes ran with, reduced to what a comparison reads (per op and pass: max_abs, max_scaled,
ref_rms, non-finite outputs, error, flagged); the error histograms and the fingerprint are left
out (the recipe carries its fingerprint). The curve (`curve_of`) is one step series of the
trial's own summary (step = index, as MLflow logs it) with its seed, at most `MAX_POINTS` points
(evenly thinned, the last step kept).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Mapping
from typing import Any

ENTRY_KEYS = (
    "op",
    "pass",
    "max_abs",
    "max_scaled",
    "ref_rms",
    "nonfinite",
    "error",
    "flagged",
    "reason",
    "tolerance",
)
MAX_POINTS = 200


def compact_audit(result: Mapping[str, Any], threads: int | None = None) -> dict[str, Any]:
    """The part of a `run_audit` result a comparison needs (`compare_audits` reads it)."""
    fp = result.get("fingerprint") or {}
    return {
        "device": result.get("device"),
        "dtype": result.get("dtype"),
        "torch": str(result.get("torch")),
        "seed": result.get("seed"),
        "tolerance": result.get("tolerance"),
        "threads": threads if threads is not None else (fp.get("env") or {}).get("torch_threads"),
        "fingerprint": {"hash": fp.get("hash"), "platform": fp.get("platform")},
        "flagged": list(result.get("flagged") or []),
        "entries": [_compact_entry(e) for e in result.get("entries") or []],
    }


def _compact_entry(e: Mapping[str, Any]) -> dict[str, Any]:
    """An entry's `ENTRY_KEYS`. An op that measured no error (no finite output beside a finite
    reference: its errors None) keeps the compact form's mark for it, `max_abs` 0 with
    `ref_rms` 0 and its non-finite outputs counted, which `audit.measured` reads as "no error
    measured" and every reader of recipe format 1 accepts (it requires a number there)."""
    out = {k: e.get(k) for k in ENTRY_KEYS}
    if out["max_abs"] is None and not out["error"]:
        out.update(max_abs=0.0, ref_rms=0.0)
    return out


@contextlib.contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """Run the block at `threads` intra-op threads (None: as it is), then put them back."""
    import torch

    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(int(threads))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def audit_here(device: str, precision: str, threads: int | None = None) -> dict[str, Any]:
    """The op audit of this machine on `device` in `precision` (fp32, fp16, bf16), compact."""
    from autotune.repro.audit import run_audit

    with torch_threads(threads):
        import torch

        used = torch.get_num_threads()
        result = run_audit(device=device, dtype=precision)
    return compact_audit(result, threads=used)


def curve_of(summary: Mapping[str, Any] | None, metric: str = "loss") -> dict[str, Any] | None:
    """One step series of a probe's summary, with its seed; None when it has none."""
    if not summary:
        return None
    values = (summary.get("series") or {}).get(metric)
    if not values:
        return None
    n = len(values)
    keep = (
        sorted({round(i * (n - 1) / (MAX_POINTS - 1)) for i in range(MAX_POINTS)})
        if n > MAX_POINTS
        else list(range(n))
    )
    return {
        "metric": metric,
        "seed": summary.get("seed"),
        "steps_run": summary.get("steps_run"),
        "step": keep,
        "value": [_finite(values[i]) for i in keep],
    }


def _finite(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None
