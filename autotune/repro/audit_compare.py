"""Two op audits side by side (`audit --compare`, and `migrate` with the audit a recipe
recorded): per op and pass, whether their max-abs errors differ by more than a factor.

An op that only one audit has is *missing* from the other: counted apart from the ops whose
errors differ (an audit cut short is not one whose kernels are 10x apart). Each side's header
names what changes the numbers: device, dtype, platform, hardware, torch, CPU threads (a
reduction splits its sum by thread) and the inputs' seed; a note says when dtypes, threads or
seeds differ.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from autotune.errors import ReproError
from autotune.repro.ops import DTYPES

__all__ = [
    "compare_audits",
    "factor_text",
    "format_comparison",
    "measured",
    "measured_max_abs",
]


def measured(e: Mapping[str, Any]) -> bool:
    """Whether entry `e` measured an error: some output element and its reference are both
    finite. An output that is non-finite wherever its reference is finite (a scalar loss that
    overflowed) measured none: its errors are None (an audit logged before they were, or a
    recipe's compact record, holds 0 there, which is not an error of 0). A compact entry
    (`repro.record`: no element counts) with non-finite outputs measured none when its error
    and the reference's rms are both 0."""
    if e.get("error") or e.get("max_abs", 0) is None:
        return False
    if not e.get("nonfinite"):
        return True
    if "numel" in e and "ref_nonfinite" in e:
        return int(e["numel"]) - int(e["nonfinite"]) - int(e["ref_nonfinite"]) > 0
    return bool(e.get("max_abs")) or bool(e.get("ref_rms"))


def compare_audits(
    a: Mapping[str, Any], b: Mapping[str, Any], factor: float = 10.0
) -> dict[str, Any]:
    """Two audits side by side; rows whose max-abs errors differ by more than `factor` are marked.

    The ratio is the larger max-abs error over the smaller, both floored at 1e-3 ulp of the
    reference's rms (in the coarser of the two dtypes): an exact result and one off by a
    fraction of a rounding are alike. A row
    where only one side is non-finite or raised is marked too. A row only one side has is
    not compared: its `missing` names the side that lacks it, and the result lists such ops
    apart (`missing`: {"a": [...], "b": [...]}), not among those that `differs`.
    """
    if not factor > 1.0:  # NaN too
        raise ReproError(f"the comparison factor must be > 1, got {factor_text(factor)}")
    rows_a = {(e["op"], e["pass"]): e for e in a["entries"]}
    rows_b = {(e["op"], e["pass"]): e for e in b["entries"]}
    keys = list(rows_a) + [k for k in rows_b if k not in rows_a]
    rows: list[dict[str, Any]] = []
    for key in keys:
        ea, eb = rows_a.get(key), rows_b.get(key)
        row: dict[str, Any] = {
            "op": key[0],
            "pass": key[1],
            "a_max_abs": measured_max_abs(ea),
            "b_max_abs": measured_max_abs(eb),
            "ratio": None,
            "differs": False,
            "why": None,
            "missing": None,
        }
        if ea is None or eb is None:
            row.update(
                missing="a" if ea is None else "b", why="only in " + ("b" if ea is None else "a")
            )
        elif ea.get("error") or eb.get("error"):
            if bool(ea.get("error")) != bool(eb.get("error")):
                row.update(differs=True, why="raised in " + ("a" if ea.get("error") else "b"))
        elif bool(ea["nonfinite"]) != bool(eb["nonfinite"]):
            row.update(differs=True, why="non-finite in " + ("a" if ea["nonfinite"] else "b"))
        elif not (measured(ea) and measured(eb)):
            pass  # non-finite on both sides, and no error measured on one: nothing to divide
        else:
            floor = max(_floor(ea, a["dtype"]), _floor(eb, b["dtype"]))
            va, vb = max(ea["max_abs"], floor), max(eb["max_abs"], floor)
            ratio = max(va, vb) / min(va, vb)
            row["ratio"] = ratio
            if ratio > factor:
                row.update(differs=True, why=f"max_abs {'a' if va > vb else 'b'} larger")
        rows.append(row)
    return {
        "factor": factor,
        "a": _side(a),
        "b": _side(b),
        "rows": rows,
        "differs": [f"{r['op']}.{r['pass']}" for r in rows if r["differs"]],
        "missing": {
            side: [f"{r['op']}.{r['pass']}" for r in rows if r["missing"] == side]
            for side in ("a", "b")
        },
    }


def factor_text(factor: float) -> str:
    """`factor` with the digits it has (`:g` would print 1.0000001 as 1)."""
    return f"{factor:.15g}"


def measured_max_abs(e: Mapping[str, Any] | None) -> float | None:
    """Entry `e`'s max-abs error; None when there is no entry or it measured none
    (`measured`: it raised, or no output element was finite beside a finite reference)."""
    if e is None or not measured(e):
        return None
    return float(e["max_abs"])


def _floor(e: Mapping[str, Any], dtype: str) -> float:
    eps = torch.finfo(DTYPES.get(dtype, torch.float32)).eps
    return max(1e-3 * eps * float(e.get("ref_rms") or 0.0), 1e-300)


def _side(r: Mapping[str, Any]) -> dict[str, Any]:
    fp = r.get("fingerprint") or {}
    devices = fp.get("devices") or []
    return {
        "device": r.get("device"),
        "dtype": r.get("dtype"),
        "torch": r.get("torch"),
        # a compact audit records its threads; a logged one has them in its fingerprint
        "threads": r.get("threads") or (fp.get("env") or {}).get("torch_threads"),
        "seed": r.get("seed"),
        "platform": fp.get("platform"),
        "hardware": devices[0].get("name") if devices else (fp.get("host") or {}).get("cpu_model"),
        "fingerprint": fp.get("hash"),
        "run_id": r.get("run_id"),
    }


def format_comparison(cmp: Mapping[str, Any]) -> str:
    """The comparison of two audits as a table."""
    a, b = cmp["a"], cmp["b"]

    def side(s: Mapping[str, Any]) -> str:
        run = f" run {s['run_id']}" if s.get("run_id") else ""
        threads = "?" if s.get("threads") is None else s["threads"]
        seed = "?" if s.get("seed") is None else s["seed"]
        where = (
            f"{s['platform']}, {s['hardware']}, torch {s['torch']}, {threads} threads, seed {seed}"
        )
        return f"{s['device']} {s['dtype']} ({where}){run}"

    lines = [f"a: {side(a)}", f"b: {side(b)}"]
    for key, what in (
        ("dtype", "in different dtypes"),
        ("threads", "at different CPU thread counts (a reduction splits its sum by thread)"),
        ("seed", "on inputs of different seeds"),
    ):
        if a.get(key) != b.get(key):
            lines.append(f"note: the two audits ran {what}")
    lines += [
        "",
        f"{'op':<29}{'pass':<5}{'a max_abs':>11}{'b max_abs':>11}{'ratio':>9}  differs",
    ]

    def num(v: float | None) -> str:
        return "-" if v is None else f"{v:.2e}"

    for r in cmp["rows"]:
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.3g}"
        mark = f"MISSING from {r['missing']}" if r.get("missing") else ""
        mark = f"DIFFERS ({r['why']})" if r["differs"] else mark
        lines.append(
            f"{r['op']:<29}{r['pass']:<5}{num(r['a_max_abs']):>11}{num(r['b_max_abs']):>11}"
            f"{ratio:>9}  {mark}"
        )
    differs, factor = cmp["differs"], factor_text(cmp["factor"])
    lines.append("")
    lines.append(
        f"{len(differs)} differ by more than {factor}x: {', '.join(differs)}"
        if differs
        else f"no op differs by more than {factor}x"
        + (" (of those both audits have)" if any(cmp["missing"].values()) else "")
    )
    for lacks, has in (("a", "b"), ("b", "a")):
        gone = cmp["missing"][lacks]
        if gone:
            lines.append(
                f"{len(gone)} missing from {lacks} (only in {has}, not compared): "
                + ", ".join(gone)
            )
    return "\n".join(lines)
