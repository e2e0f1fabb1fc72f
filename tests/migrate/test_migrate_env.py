"""`autotune migrate` across two real environments: a recipe exported here (this torch, the
study's thread count) is migrated by a second Python environment with another torch, at another
thread count, end to end: the report names the differences, the ops and the verdict.

The second environment is named by AUTOTUNE_SECOND_ENV (a virtual environment's folder or its
python; `.ci/run` makes one with another CPU torch and numpy, pydantic, pyyaml, typer, rich and
matplotlib; this repository is put on its PYTHONPATH). Unset outside CI, the test is skipped;
unset or unusable under CI (AUTOTUNE_REQUIRE_SERVICES=1), it fails.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from assets import studies as h

from autotune import Recipe

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy"),
    pytest.mark.filterwarnings("ignore:For backward compatibility, 'str' dtypes"),
]

REPO = Path(__file__).resolve().parents[2]
VAR = "AUTOTUNE_SECOND_ENV"
WHICH = """\
import torch
print(torch.__version__)
try:
    import matplotlib
except Exception:
    print("no-matplotlib")
else:
    print("matplotlib")
"""


def second_python() -> Path:
    where = os.environ.get(VAR)
    required = os.environ.get("AUTOTUNE_REQUIRE_SERVICES") == "1"
    if not where:
        reason = f"{VAR} is not set (a second Python environment with another torch)"
        if required:
            pytest.fail(reason + " and AUTOTUNE_REQUIRE_SERVICES=1")
        pytest.skip(reason)
    path = Path(where)
    python = path / "bin" / "python" if path.is_dir() else path
    if not python.is_file():
        pytest.fail(f"{VAR}={where}: no python there")
    return python


def run_in(python: Path, args: list[str], cwd: Path, timeout: float = 600) -> Any:
    env = h.cli_env(PYTHONPATH=str(REPO))
    return h.run_to_end([str(python), *args], cwd, env, timeout, f"{python} {' '.join(args)}")


def test_a_recipe_migrates_to_another_torch_and_thread_count(
    shared: h.FinishedStudy, tmp_path: Path
) -> None:
    import torch

    python = second_python()
    # its torch, and whether it has matplotlib (the curve's PNG), in one process
    probe = run_in(python, ["-c", WHICH], tmp_path)
    assert probe.returncode == 0, probe.stderr[-3000:]
    other_torch, mpl = probe.stdout.split()
    assert other_torch != str(torch.__version__), f"{VAR} has this torch: {other_torch}"

    # Exported here, with this machine's op audit and the trial's loss curve.
    recipe_path = tmp_path / "recipe.yaml"
    done = h.autotune(
        ["export", str(shared.study_dir), "--pick", "trial 1", "--audit", "-o", str(recipe_path)],
        shared.folder,
    )
    assert done.returncode == 0, h.explain(done)
    recipe = Recipe.load(recipe_path)
    assert recipe.recorded["audit"]["entries"] and recipe.recorded["curve"]["seed"] == 0
    assert "numerics" in (recipe.fingerprint or {})
    recorded_threads = int(recipe.fingerprint["env"]["torch_threads"])  # type: ignore[index]
    threads = 2 if recorded_threads == 1 else 1

    # The cheap check: the recorded run (seed 0, the decided length) reproduces here within
    # 1e-3 at every step (measured 1.4e-7 for this migration), so the study's verdict stands
    # after one probe, not 2 x seeds; the baseline is not re-run.
    args = ["-m", "autotune", "migrate", str(recipe_path), "--seeds", "2", "--no-audit"]
    args += ["--threads", str(threads), "-o", str(tmp_path / "fast"), "--json"]
    fast = run_in(python, args, tmp_path)
    assert fast.returncode == 0, fast.stderr[-4000:]
    quick = json.loads(fast.stdout)
    assert quick["holds"]["path"] == "reproduced", quick["holds"].get("not_reproduced")
    assert quick["verdict"] == "transfers" and "reproduces here" in quick["why"]
    assert quick["holds"]["baseline_result"] is None and quick["holds"]["seeds"] == [0]
    assert quick["compute"]["samples"] == shared.steps * h.MICRO_BATCH  # one probe
    assert "study's verification stands" in Path(quick["report"]).read_text()

    # The whole check (--full): the recipe and the baseline over the seeds, the op audit.
    out = tmp_path / "report"
    args = ["-m", "autotune", "migrate", str(recipe_path), "--seeds", "2", "--full"]
    args += ["--threads", str(threads), "-o", str(out), "--json"]
    mig = run_in(python, args, tmp_path)
    assert mig.returncode in (0, 1), mig.stderr[-4000:]
    result = json.loads(mig.stdout)

    # What differs: the torch version and the thread count, both able to change the numerics.
    rows = {r["field"]: r for r in result["differences"]["rows"]}
    assert rows["versions.torch"]["recorded"] == str(torch.__version__)
    assert rows["versions.torch"]["here"] == other_torch
    assert rows["versions.torch"]["class"] == "numerics"
    assert rows["env.torch_threads"]["here"] == threads
    assert rows["env.torch_threads"]["class"] == "numerics"
    # Which ops: every op of the recorded audit compared with this environment's.
    ops = result["ops"]
    assert ops["status"] == "compared"
    assert len(ops["rows"]) == len(recipe.recorded["audit"]["entries"])
    assert all(r["b_max_abs"] is not None or r["why"] for r in ops["rows"])
    # Does it hold: both sides at the decided length over seeds 0 and 1, the paired verdict.
    holds = result["holds"]
    assert holds["seeds"] == [0, 1] and holds["threads"] == threads
    assert holds["recipe_result"]["n"] == 2 and holds["baseline_result"]["n"] == 2
    assert holds["vs_baseline"]["seeds"] == [0, 1]
    assert holds["curve"]["status"] == "compared"
    assert holds["curve"]["common_steps"] == shared.steps
    holds_here = not holds["problems"]
    assert result["verdict"].startswith("transfers") == holds_here, result["verdict"]
    assert mig.returncode == (0 if holds_here else 1)
    # The report: the verdict first, then the differences, the ops, the curve, the compute.
    text = Path(result["report"]).read_text()
    heads = [
        "**Verdict:",
        "## What differs",
        "`env.torch_threads`",  # numerics rows first, by field
        "`versions.torch`",
        "## Which ops differ",
        "## Loss curve",
        "## Compute spent",
    ]
    at = [text.find(x) for x in heads]
    assert all(i >= 0 for i in at) and at == sorted(at), at
    assert result["verdict"] in text
    assert result["compute"]["samples"] == 2 * 2 * shared.steps * h.MICRO_BATCH
    if mpl == "matplotlib":
        assert result["png"] and Path(result["png"]).stat().st_size > 1000
        assert "![recorded and here](migration-curve.png)" in text
