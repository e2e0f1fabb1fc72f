"""bb4 F16: what `audit` and `compare` print when there is nothing to measure. An op whose
output is non-finite has no error (not an error of 0); `--factor 1` is not called infinite;
runs identical at step 0 do not diverge there; no divergence prints `none`, not Python's None."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from assets.cli import invoke, one_line_error

from autotune.repro import audit, compare
from autotune.repro.record import compact_audit


@pytest.fixture(scope="module")
def fp16_cross_entropy() -> dict[str, Any]:
    """The real fp16 audit of cross-entropy on the CPU: its forward sum overflows (inf)."""
    (op,) = [op for op in audit.OPS if op.name == "cross_entropy"]
    return audit.run_audit(device="cpu", dtype="fp16", seed=0, ops=[op])


def _line(text: str, op: str, which: str) -> str:
    (line,) = [ln for ln in text.splitlines() if ln.split()[:2] == [op, which]]
    return line


def test_a_non_finite_output_shows_no_error_rather_than_zero(
    fp16_cross_entropy: dict[str, Any],
) -> None:
    (fwd,) = [e for e in fp16_cross_entropy["entries"] if e["pass"] == "fwd"]
    assert fwd["nonfinite"] >= 1 and fwd["flagged"], fwd
    assert not audit.measured(fwd)
    line = _line(audit.format_audit(fp16_cross_entropy), "cross_entropy", "fwd")
    assert "0.00e+00" not in line, line
    assert line.split()[2:6] == ["-", "-", "-", "-"], line
    assert "FLAGGED" in line


def test_compare_shows_no_max_abs_for_a_non_finite_output(
    fp16_cross_entropy: dict[str, Any],
) -> None:
    b = copy.deepcopy(fp16_cross_entropy)
    for a in (fp16_cross_entropy, compact_audit(fp16_cross_entropy)):  # as logged, as recorded
        cmp = audit.compare_audits(a, b)
        (row,) = [r for r in cmp["rows"] if r["pass"] == "fwd"]
        assert row["a_max_abs"] is None and row["b_max_abs"] is None and row["ratio"] is None
        assert not row["differs"]  # non-finite on both sides alike
        line = _line(audit.format_comparison(cmp), "cross_entropy", "fwd")
        assert "0.00e+00" not in line, line


def test_a_finite_output_keeps_its_errors(fp16_cross_entropy: dict[str, Any]) -> None:
    (bwd,) = [e for e in fp16_cross_entropy["entries"] if e["pass"] == "bwd"]
    if bwd.get("error") or bwd["nonfinite"]:
        pytest.skip("this platform's fp16 cross-entropy backward is not finite")
    assert audit.measured(bwd)
    line = _line(audit.format_audit(fp16_cross_entropy), "cross_entropy", "bwd")
    assert line.split()[2] == f"{bwd['max_abs']:.2e}"


@pytest.mark.parametrize("factor", ["1", "0.5", "nan"])
def test_factor_of_one_is_not_called_infinite(tmp_path: Path, factor: str) -> None:
    line = one_line_error(invoke("audit", "--compare", "a", "b", "--factor", factor))
    assert "--factor must be a finite number > 1, got" in line
    assert "infinite" not in line


def test_an_infinite_factor_still_says_why() -> None:
    line = one_line_error(invoke("audit", "--compare", "a", "b", "--factor", "inf"))
    assert "(an infinite one compares nothing), got inf" in line


def test_runs_identical_at_step_0_diverge_from_step_1_not_0() -> None:
    steps = np.arange(10)
    a = np.full(10, 2.43471097946167)
    b = np.where(steps == 0, a, a * 1.5)  # the same at step 0, 50% apart from step 1 on
    r = compare.compare_series(steps, a, steps, b, rtol=0.05, window=5)
    assert r["series"]["rel_diff"][0] == 0.0
    assert r["first_divergence_step"] == 1, r["verdict"]
    assert r["verdict"].startswith("diverge from step 1")
    assert not r["agree"]


def test_a_lasting_departure_is_still_found_where_it_starts_past_a_spike() -> None:
    steps = np.arange(30)
    a = np.ones(30)
    b = np.where(steps >= 12, 2.0, 1.0)
    b[5] = 3.0  # one noisy step does not count
    r = compare.compare_series(steps, a, steps, b, rtol=0.05, window=5)
    assert r["first_divergence_step"] == 12


def test_no_divergence_prints_none_not_python_none() -> None:
    steps = np.arange(10)
    r = compare.compare_series(steps, np.ones(10), steps, np.ones(10))
    assert r["agree"] and r["first_divergence_step"] is None
    text = compare.format_compare(r)
    assert "None" not in text
    assert "first divergence   none" in text
