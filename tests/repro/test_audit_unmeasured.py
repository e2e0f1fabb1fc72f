"""bb4 F16 (audit): an op whose output is non-finite measured no error, and every form of the
audit says so: `audit --json` carries null (it carried `max_abs` 0), the MLflow run logs no
error metric for it, `audit --compare` of the logged runs shows `-` and compares nothing, and a
recipe's compact record keeps its "nothing measured" mark that `measured` reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from autotune.recipe import Recipe
from autotune.repro import audit
from autotune.repro.record import compact_audit

ERRORS = ("max_abs", "mean_abs", "max_rel", "max_scaled")


@pytest.fixture(scope="module")
def fp16_cross_entropy() -> dict[str, Any]:
    """The real fp16 audit of cross-entropy on the CPU: its forward sum overflows (inf)."""
    (op,) = [op for op in audit.OPS if op.name == "cross_entropy"]
    return audit.run_audit(device="cpu", dtype="fp16", seed=0, ops=[op])


def _fwd(result: dict[str, Any]) -> dict[str, Any]:
    (fwd,) = [e for e in result["entries"] if e["pass"] == "fwd"]
    return fwd


def test_the_json_carries_null_for_an_error_not_measured(
    fp16_cross_entropy: dict[str, Any],
) -> None:
    fwd = _fwd(json.loads(json.dumps(fp16_cross_entropy)))  # as `audit --json` prints it
    assert fwd["nonfinite"] >= 1 and fwd["flagged"], fwd
    assert {key: fwd[key] for key in ERRORS} == dict.fromkeys(ERRORS), fwd
    assert not audit.measured(fwd)
    line = next(ln for ln in audit.format_audit(fp16_cross_entropy).splitlines() if " fwd " in ln)
    assert line.split()[2:6] == ["-", "-", "-", "-"], line


def test_logged_and_compared_it_is_not_comparable(
    fp16_cross_entropy: dict[str, Any], tmp_path: Path
) -> None:
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_a = audit.log_audit(fp16_cross_entropy, uri)
    run_b = audit.log_audit(fp16_cross_entropy, uri)
    metrics = MlflowClient(tracking_uri=uri).get_run(run_a).data.metrics
    assert "cross_entropy.fwd.nonfinite" in metrics
    assert not [k for k in metrics if k.startswith("cross_entropy.fwd.") and k.endswith(ERRORS)]
    a, b = audit.load_audit(run_a, uri), audit.load_audit(run_b, uri)
    assert _fwd(a)["max_abs"] is None
    cmp = audit.compare_audits(a, b)
    (row,) = [r for r in cmp["rows"] if r["pass"] == "fwd"]
    assert (row["a_max_abs"], row["b_max_abs"], row["ratio"], row["differs"]) == (
        None,
        None,
        None,
        False,
    )
    line = next(ln for ln in audit.format_comparison(cmp).splitlines() if " fwd " in ln)
    assert line.split()[2:5] == ["-", "-", "-"], line


def test_a_recipe_records_it_as_measured_none_and_still_loads(
    fp16_cross_entropy: dict[str, Any], tmp_path: Path
) -> None:
    from dataclasses import replace

    from assets.recipes import make_recipe

    compact = compact_audit(fp16_cross_entropy)
    fwd = _fwd(compact)
    assert (fwd["max_abs"], fwd["ref_rms"]) == (0.0, 0.0) and not audit.measured(fwd)
    path = replace(make_recipe(), recorded={"audit": compact}).save(tmp_path / "r.yaml")
    assert not audit.measured(_fwd(Recipe.load(path).recorded["audit"]))
