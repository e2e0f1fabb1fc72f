"""A searched knob that the trial's clipping policy or schedule leaves unread is recorded and
exported at the value the probe ran it with (its default: clip_norm 0 = off), not at the
space's midpoint or a sampled value that would read as chosen: in a real study (Ray, Optuna
on SQLite, MLflow on SQLite), and in the export of a study recorded before (made-up records)."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from assets import studies as h

from autotune import Recipe
from autotune import space as sp
from autotune import study as st
from autotune.study import attrs as ua
from autotune.study import export as ex

SPACE = """\
name: inactive
workload: {name: mlp, size: tiny}
probe: {steps: 10, batch: 16, device: cpu, telemetry_every: 10}
budget: {trials: 5, trial_timeout_s: 120}
sampler: {name: random, seed: 0}
verify: {top_k: 0}
knobs:
  lr: 0.003
  clip_policy: {choices: [norm, agc]}
  clip_norm: {low: 0.1, high: 5.0, log: true}
  agc_lambda: {low: 0.02, high: 0.1, log: true}
  schedule: {choices: [constant, cosine]}
  min_lr_ratio: {low: 0.1, high: 0.5}
"""


@pytest.mark.integration
@pytest.mark.filterwarnings("ignore")
def test_an_unread_knob_is_recorded_and_exported_at_the_value_it_ran_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = h.write(tmp_path, SPACE)
    monkeypatch.chdir(tmp_path)
    for var in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI"):
        monkeypatch.delenv(var, raising=False)
    opts = st.StudyOptions(space=sp.load(path), tracking_uri=h.sqlite_uri(tmp_path), quiet=True)
    result = st.run(opts)
    storage = f"sqlite:///{result.study_dir / 'optuna.db'}"
    trials = optuna.load_study(study_name="inactive", storage=storage).get_trials()
    knobs = {t.number: ua.knobs(t) for t in trials if t.number > 0}
    agc = [n for n, k in knobs.items() if k["clip_policy"] == "agc"]
    constant = [n for n, k in knobs.items() if k["schedule"] == "constant"]
    assert agc and constant, knobs  # the seed draws both
    assert all(knobs[n]["clip_norm"] == 0.0 for n in agc), knobs
    assert all(knobs[n]["min_lr_ratio"] == 0.0 for n in constant), knobs
    # not asked of Optuna either: its records (and its dashboard) show no value chosen
    params = {t.number: t.params for t in trials}
    assert all("min_lr_ratio" not in params[n] for n in constant), params
    assert all("min_lr_ratio" in params[n] for n in knobs if n not in constant), params
    out = tmp_path / "recipe.yaml"
    r = h.autotune(["export", "inactive", "--pick", f"trial {agc[0]}", "-o", str(out)], tmp_path)
    assert r.returncode == 0, h.explain(r)
    recipe = Recipe.load(out)
    assert (recipe.knobs["clip_policy"], recipe.knobs["clip_norm"]) == ("agc", 0.0)


def test_an_older_record_of_an_unread_knob_is_exported_at_its_default(tmp_path: Path) -> None:
    study_dir = h.recorded_study(tmp_path, "old", trials=2, finished=0)
    study = optuna.load_study(study_name="old", storage=f"sqlite:///{study_dir / 'optuna.db'}")
    space = sp.loads(h.mlp_space("old", trials=2), source="old")
    midpoint = {"clip_policy": "autoclip", "clip_norm": 0.7071067811865476, "lr": 0.1}
    for knobs in ({"lr": 0.1}, {**midpoint, "schedule": "constant", "min_lr_ratio": 0.3}):
        frozen = study._storage.get_trial(study.ask()._trial_id)
        m = {"loss_cv": 0.1, "throughput": 100.0, "loss_drop": 0.5}
        summary = {"metrics": m, "knobs": knobs, "series": {"loss": [2.0, 1.0]}}
        st.tell(
            study,
            frozen,
            st.complete_outcome(space, frozen, {"outcome": "complete", "summary": summary}),
        )
    recipe = ex.recipe_from_study(str(study_dir), "trial 1")
    assert recipe.knobs["clip_policy"] == "autoclip"
    assert (recipe.knobs["clip_norm"], recipe.knobs["min_lr_ratio"]) == (0.0, 0.0)


def test_min_lr_ratio_is_asked_only_of_a_trial_whose_schedule_decays() -> None:
    # listed before the schedule in the file: still asked after it
    s = sp.loads(
        "name: s\nworkload: mlp\nknobs:\n  min_lr_ratio: {low: 0.1, high: 0.5}\n"
        "  schedule: {choices: [constant, linear, cosine]}\n  warmup_steps: {low: 0, high: 5}\n"
    )
    searched = sp.condition(s, platform="cpu").searched
    study = optuna.create_study(sampler=st.make_sampler(s, searched))
    seen = set()
    for _ in range(12):
        trial = study.ask()
        params = st.suggest(trial, s, searched)
        seen.add(params["schedule"])
        assert ("min_lr_ratio" in params) == (params["schedule"] != "constant"), params
        assert set(trial.params) == set(params)
        study.tell(trial, 1.0)
    assert seen == {"constant", "linear", "cosine"}
