"""A study that searches the batch: every trial sees the same samples (real Ray, Optuna on
SQLite, MLflow on SQLite), and the recipe of a small-batch trial replays them."""

from __future__ import annotations

from pathlib import Path

import pytest
from assets import studies as h

from autotune import Recipe

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy"),
    pytest.mark.filterwarnings("ignore:For backward compatibility, 'str' dtypes"),
]

SPACE = """\
name: batch-eq
workload: {name: mlp, size: tiny}
probe: {steps: 20, batch: 16, device: cpu, telemetry_every: 10}
budget: {trials: 3, trial_timeout_s: 120}
sampler: {name: grid, seed: 0}
verify: {top_k: 0}
knobs:
  lr: 0.003
  batch: {choices: [8, 16]}
"""


def test_trials_that_search_the_batch_see_equal_samples(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from autotune import space as sp
    from autotune import study as st

    folder = tmp_path
    path = h.write(folder, SPACE)
    monkeypatch.chdir(folder)
    for var in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI"):
        monkeypatch.delenv(var, raising=False)
    result = st.run(
        st.StudyOptions(space=sp.load(path), tracking_uri=h.sqlite_uri(folder), quiet=True)
    )
    assert not result.interrupted
    runs = {}
    for n in range(3):
        outcome = st.read_outcome(result.study_dir, n)
        assert outcome is not None and outcome["outcome"] == "complete", outcome
        s = outcome["summary"]
        runs[n] = (s["knobs"]["batch"], s["steps_run"], s["samples_seen"])
    assert sorted(runs.values()) == [(8, 40, 320), (16, 20, 320), (16, 20, 320)], runs
    assert runs[0] == (16, 20, 320)  # the baseline runs the reference batch

    small = next(n for n, (b, _, _) in runs.items() if b == 8)
    out = folder / "recipe.yaml"
    r = h.autotune(["export", "batch-eq", "--pick", f"trial {small}", "-o", str(out)], folder)
    assert r.returncode == 0, h.explain(r)
    recipe = Recipe.load(out)
    assert (recipe.knobs["batch"], recipe.micro_batch, recipe.effective_batch) == (8, 8, 8)
    assert (recipe.probe["steps"], recipe.probe["batch"]) == (20, 16)
