"""Study -> verified candidates -> `autotune export` -> `autotune verify` -> `--warm-start`, with
real Ray, Optuna (SQLite) and MLflow (SQLite), all under the session's temp folder.

The export of a study without a feasible trial (its baseline diverged) is checked on the
diverged study tests/integrations/test_examples.py runs anyway
(`test_a_divergent_baseline_is_diverged_with_its_cause`): it had a study of its own here, one
trial of the mlp at lr 5 that diverged as that one does."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
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


def export(args: Sequence[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """`autotune export ARGS` in-process (`assets.cli.in_process`)."""
    from assets.cli import in_process

    return in_process(["export", *args], cwd)


def optuna_study(s: h.FinishedStudy, name: str | None = None) -> Any:
    import optuna

    return optuna.load_study(
        study_name=name or s.name, storage=f"sqlite:///{s.study_dir / 'optuna.db'}"
    )


def verification_runs(uri: str, experiment: str) -> list[Any]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None
    runs = client.search_runs([exp.experiment_id], "tags.`autotune.role` = 'verification'")
    return list(runs)


def test_the_study_verifies_its_best_candidate(shared: h.FinishedStudy) -> None:
    study = optuna_study(shared)
    verified = {
        int(k.rsplit(".", 1)[1]): v
        for k, v in study.user_attrs.items()
        if k.startswith("autotune.verified.")
    }
    summary = shared.summary
    first = summary["pick"]["first_choice"]  # the balanced pick before the paired verdict
    # The best searched candidate (verify.top_k 1: the baseline takes no place among them), and
    # the baseline beside it, the yardstick of the paired verdict.
    assert 0 in verified and first in verified and len(verified) == 2, verified.keys()
    for result in verified.values():
        assert result["seeds"] == [1, 2] and result["n"] == 2
        assert result["metrics"]["loss_cv"]["n"] + round(result["diverged_share"] * 2) <= 2
    # The per-seed records are on disk (a resumed study does not run them again).
    assert sorted(p.name for p in (shared.study_dir / "verify").glob("*.json")) == sorted(
        f"{n:04d}-s{shared.steps}-seed{s}.json" for n in verified for s in (1, 2)
    )
    runs = verification_runs(shared.tracking_uri, shared.name)
    assert len(runs) == len(verified)
    by_trial = {int(r.data.tags["autotune.verified_trial"]): r for r in runs}
    assert by_trial[first].info.run_id == verified[first]["run_id"]
    run = by_trial[first]
    assert run.data.tags["autotune.fp.hash"]
    assert "loss_cv.mean" in run.data.metrics and "diverged_share" in run.data.metrics
    assert first in [v["number"] for v in summary["verified"]]
    # The pick: the first choice when it is better than the defaults over the same seeds (or
    # a trade-off), else the defaults, said so.
    pick, vs = summary["pick"], summary["vs_baseline"]
    if first == 0:
        assert pick["number"] == 0 and vs["verdict"] == "not compared"
    elif vs["verdict"] in ("no detectable difference", "worse"):
        assert pick["number"] == 0 and pick["defaults_preferred"], summary
    else:
        assert pick["number"] == first and not pick["defaults_preferred"], summary
    assert pick["verified"] and pick["verdict"] == vs["verdict"]


def test_export_writes_a_recipe_with_the_verified_numbers(shared: h.FinishedStudy) -> None:
    out = shared.folder / "recipe.yaml"
    r = export([shared.name, "-o", str(out)], shared.folder)
    assert r.returncode == 0, h.explain(r)
    recipe = Recipe.load(out)
    study = optuna_study(shared)
    number = shared.summary["pick"]["number"]
    trial = study.trials[number]
    verified = study.user_attrs[f"autotune.verified.{number}"]
    assert recipe.source["trial"] == number and recipe.source["pick"] == "balanced"
    knobs = trial.user_attrs["autotune.knobs"]  # the baseline's too (it may be the pick)
    assert recipe.knobs["clip_norm"] == pytest.approx(knobs["clip_norm"])
    assert recipe.knobs["warmup_steps"] == knobs["warmup_steps"]
    assert recipe.achieved["loss_cv"]["value"] == pytest.approx(trial.values[0])
    assert recipe.achieved["loss_cv"]["verified"]["mean"] == pytest.approx(
        verified["metrics"]["loss_cv"]["mean"]
    )
    assert recipe.fingerprint_hash == trial.user_attrs["autotune.fp_hash"]
    assert recipe.source["mlflow"]["trial_run_id"]
    assert recipe.source["mlflow"]["verification_run_id"] == verified["run_id"]
    assert recipe.micro_batch == h.MICRO_BATCH and recipe.workload["name"] == "mlp"

    # The other formats, from the same study.
    for fmt in ("hf", "lightning"):
        r = export([shared.name, "--format", fmt], shared.folder)
        assert r.returncode == 0, h.explain(r)
        assert json.loads(r.stdout)
    r = export([shared.name, "--format", "python"], shared.folder)
    assert r.returncode == 0, h.explain(r)
    compile(r.stdout, "recipe.py", "exec")
    r = export([shared.name, "--pick", "trial 99"], shared.folder)
    assert r.returncode == 2 and "has no trial 99" in r.stderr, h.explain(r)


def first_choice(shared: h.FinishedStudy) -> str:
    """--pick for the balanced pick before the paired verdict (it may have given way to the
    defaults): a recipe to verify beside the baseline, unless it is the baseline itself."""
    return f"trial {shared.summary['pick']['first_choice']}"


def test_verify_a_recipe_on_this_machine(shared: h.FinishedStudy) -> None:
    path = shared.folder / "recipe-verify.yaml"
    pick = ["--pick", first_choice(shared)]
    r = export([shared.name, *pick, "-o", str(path)], shared.folder)
    assert r.returncode == 0, h.explain(r)
    r = h.autotune(
        ["verify", str(path), "--seeds", "2", "--tracking-uri", shared.tracking_uri],
        shared.folder,
    )
    assert r.returncode == 0, h.explain(r)
    if shared.summary["pick"]["first_choice"] == 0:  # the defaults: nothing to compare with
        assert "recipe vs baseline: NOT COMPARED: it is the baseline" in r.stdout, r.stdout
        return
    assert "baseline: mean [95% interval]" in r.stdout
    assert "recipe vs baseline (paired over seeds [1, 2]): " in r.stdout
    assert "against the recipe's promise" in r.stdout
    assert "same hardware as the recipe" in r.stdout  # tuned here: no drift
    runs = [
        run
        for run in verification_runs(shared.tracking_uri, shared.name)
        if run.data.tags.get("autotune.recipe")
    ]
    assert len(runs) == 1, "the verification is a run in the study's experiment"
    m = runs[0].data.metrics
    assert "loss_cv.mean" in m and "baseline.loss_cv.mean" in m
    assert runs[0].data.tags["autotune.fp_drift"] == "none"


def test_verify_at_another_length_runs_both_sides_that_long(shared: h.FinishedStudy) -> None:
    path = shared.folder / "recipe-verify-long.yaml"
    pick = ["--pick", first_choice(shared)]
    r = export([shared.name, *pick, "-o", str(path)], shared.folder)
    assert r.returncode == 0, h.explain(r)
    longer = 2 * shared.steps
    args = ["verify", str(path), "--seeds", "1", "--steps", str(longer), "--json"]
    r = h.autotune([*args, "--tracking-uri", shared.tracking_uri], shared.folder)
    assert r.returncode == 0, h.explain(r)
    report = json.loads(r.stdout)
    assert (report["steps"], report["promised_steps"]) == (longer, shared.steps)
    sides = ["recipe_result"] + (["baseline_result"] if "baseline_result" in report else [])
    assert len(sides) == 2 or shared.summary["pick"]["first_choice"] == 0
    for side in sides:
        assert [run["steps_run"] for run in report[side]["runs"]] == [longer], side
    assert report["vs_baseline"]["verdict"] != "worse", report["vs_baseline"]
    assert report["promise"] == [], "a promise made at the probe length is not compared"
    from autotune.recipe import verify as vf

    assert f"measured at {shared.steps} steps: not compared at {longer}" in vf.format_report(report)


def test_a_recipe_edited_after_export_is_not_judged_by_its_promise(
    shared: h.FinishedStudy,
) -> None:
    """A review: a recipe edited by hand (here a knob) verified "as promised" against what the
    exported configuration promised. Export records each section's digest; verify sees the
    edit, says so, and compares no promise (the paired check with the baseline still runs)."""
    path = shared.folder / "recipe-edited.yaml"
    r = export([shared.name, "-o", str(path)], shared.folder)
    assert r.returncode == 0, h.explain(r)
    exported = Recipe.load(path)
    assert exported.edited_sections() == [] and exported.achieved
    data = exported.to_dict()
    data["knobs"]["adam_eps"] = 3e-7  # a user's own tweak
    Recipe.from_dict(data).save(path)
    args = ["verify", str(path), "--seeds", "1", "--no-baseline", "--json"]
    r = h.autotune([*args, "--tracking-uri", shared.tracking_uri], shared.folder)
    assert r.returncode == 0, h.explain(r)
    report = json.loads(r.stdout)
    assert report["edited"] == ["knobs"] and report["promise"] == []
    from autotune.recipe import verify as vf

    text = vf.format_report(report)
    assert "the recipe was changed since its export (`knobs`)" in text
    assert "against the recipe's promise" not in text


def test_warm_start_enqueues_the_source_configs_first(shared: h.FinishedStudy) -> None:
    space = h.write(shared.folder, h.mlp_space("warm", trials=2), "warm.yaml")
    r = h.autotune(
        ["study", "--space", str(space), "--warm-start", shared.name, "--quiet"],
        shared.folder,
        timeout=400,
    )
    assert r.returncode == 0, h.explain(r)
    assert f"warm start from {shared.name}" in r.stdout
    import optuna

    warm = optuna.load_study(
        study_name="warm",
        storage=f"sqlite:///{shared.folder / 'autotune-studies' / 'warm' / 'optuna.db'}",
    )
    first = warm.trials[1]  # trial 0 is the baseline
    picked = optuna_study(shared).trials[shared.summary["pick"]["first_choice"]]
    knobs = picked.user_attrs["autotune.knobs"]
    # The source's values, clamped into this space's domains (clip_norm 0 = off lies below 0.1).
    assert first.params["clip_norm"] == pytest.approx(min(max(knobs["clip_norm"], 0.1), 5.0))
    assert first.params["warmup_steps"] == knobs["warmup_steps"]
    assert shared.name in first.user_attrs["autotune.source"]
    assert first.user_attrs["autotune.source_fp"]


def test_warm_start_from_a_recipe_file(shared: h.FinishedStudy, tmp_path: Path) -> None:
    from autotune import study as st

    path = shared.folder / "recipe-warm.yaml"
    r = export([shared.name, "-o", str(path)], shared.folder)
    assert r.returncode == 0, h.explain(r)
    ws = st.load_warm_start(str(path))
    recipe = Recipe.load(path)
    assert ws.configs[0]["knobs"] == recipe.knobs and ws.fp_hash == recipe.fingerprint_hash
    from autotune import space as sp

    space = sp.loads(h.mlp_space("w", trials=2))
    params = st.warm_params(ws.configs[0], space.searched())
    assert params == {
        "clip_norm": pytest.approx(min(max(recipe.knobs["clip_norm"], 0.1), 5.0)),
        "warmup_steps": recipe.knobs["warmup_steps"],
    }
    outside = {"knobs": {"clip_norm": 50.0, "warmup_steps": -3, "adam_eps": 1e-6}}
    assert st.warm_params(outside, space.searched()) == {"clip_norm": 5.0, "warmup_steps": 0}
