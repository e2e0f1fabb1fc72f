"""The migration report's files and its op table.

- `migration.md` and `migration-curve.png` are written atomically (a temporary file renamed
  over the old one), not in place: a crash mid-write left half a report. Seen through a hard
  link to the previous report, which keeps its text where an in-place write changes it.
- A recipe that records no op audit (`not recorded`): the rows carry no recorded value, and an
  op that measured no error here (a non-finite fp16 output) shows none (`-`), not 0.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from assets.recipes import make_recipe

from autotune.migrate import migrate
from autotune.migrate.ops import compare_ops
from autotune.migrate.report import markdown, plot_curve
from autotune.repro import audit
from autotune.repro.compare import compare_series
from autotune.repro.record import compact_audit

OLD = "# the previous report\n"


@pytest.mark.integration
def test_migrate_replaces_its_report_and_never_writes_into_the_old_one(tmp_path: Path) -> None:
    path = make_recipe().save(tmp_path / "r.yaml")
    out = tmp_path / "out"
    out.mkdir()
    (out / "migration.md").write_text(OLD)
    (tmp_path / "kept.md").hardlink_to(out / "migration.md")  # the old report's inode
    result = migrate(
        path, out_dir=out, audit=False, steps=10, seeds=2, threads=1, quiet=True, force=True
    )
    assert result["report"] == str(out / "migration.md")
    assert (out / "migration.md").read_text().startswith("# Migration of recipe `t`")
    # the machine's load while it ran, in the result and the report
    load = result["load"]
    assert load["cores"] == os.cpu_count() and load["start"] >= 0 and load["end"] >= 0, load
    assert f"{load['start']:.2f} at the start of the check" in (out / "migration.md").read_text()
    assert (tmp_path / "kept.md").read_text() == OLD, "the report was written in place"
    assert sorted(p.name for p in out.iterdir()) == ["migration.md"], "a temporary file was left"


def test_the_curve_is_written_atomically_too(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    steps = np.arange(20)
    curve = {**compare_series(steps, np.ones(20), steps, np.ones(20) * 1.01), "status": "compared"}
    png = tmp_path / "migration-curve.png"
    png.write_bytes(b"old")
    (tmp_path / "kept.png").hardlink_to(png)
    assert plot_curve(curve, png) == png
    assert png.read_bytes().startswith(b"\x89PNG")
    assert (tmp_path / "kept.png").read_bytes() == b"old", "the plot was written in place"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.png", "migration-curve.png"]


@pytest.fixture(scope="module")
def here_fp16() -> dict[str, Any]:
    """This machine's compact fp16 audit of cross-entropy (CPU): its forward overflows."""
    (op,) = [op for op in audit.OPS if op.name == "cross_entropy"]
    return compact_audit(audit.run_audit(device="cpu", dtype="fp16", seed=0, ops=[op]))


def test_not_recorded_rows_carry_no_recorded_value_and_no_error_of_0(
    here_fp16: dict[str, Any],
) -> None:
    ops = compare_ops(None, here_fp16)
    assert ops["status"] == "not recorded"
    rows = {r["pass"]: r for r in ops["rows"]}
    assert all(r["a_max_abs"] is None and r["ratio"] is None for r in rows.values())
    assert rows["fwd"]["b_max_abs"] is None, rows["fwd"]  # non-finite here: not measured
    bwd = next(e for e in here_fp16["entries"] if e["pass"] == "bwd")
    assert rows["bwd"]["b_max_abs"] == audit.measured_max_abs(bwd)
    table = markdown(_result(ops))
    (line,) = [ln for ln in table.splitlines() if ln.startswith("| cross_entropy | fwd |")]
    assert line.split("|")[3:6] == [" - ", " - ", " - "], line


def _result(ops: dict[str, Any]) -> dict[str, Any]:
    """A migration's result around `ops`, with what `markdown` reads of the rest."""
    side = {"n": 1, "diverged_share": 0.0, "failed": 0, "metrics": {}}
    return {
        "recipe": "t",
        "verdict": "transfers",
        "why": "The recipe holds here.",
        "recorded_hash": "a",
        "here_hash": "a",
        "here_summary": "cpu",
        "differences": {"rows": [], "counts": {}, "not_recorded": []},
        "ops": ops,
        "holds": {
            "seeds": [0],
            "steps": 10,
            "threads": 1,
            "recipe_result": side,
            "baseline_result": side,
            "vs_baseline": {"verdict": "no detectable difference", "why": "noise", "metrics": {}},
            "problems": [],
            "curve": {"status": "not recorded"},
        },
        "knob_classes": {"hardware-bound": [], "portable": []},
        "inert_env": [],
        "retune": None,
        "compute": {"samples": 1, "probes": 1, "probe_wall_s": 1.0, "audit_wall_s": 1.0},
    }
