"""`autotune export`'s core: from a real recorded study (SQLite, told through the study's own
code) to a recipe — the pick, the knobs of the picked trial, what it achieved, its source — and
the file written atomically in each format."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import optuna
import pytest
import yaml
from assets import studies as h

from autotune.errors import RecipeError
from autotune.probe.loop import schedule_length
from autotune.recipe import Recipe
from autotune.study import export as ex

# Trial 0 is the baseline. Trial 1 is the stablest, trial 3 the fastest, trial 2 in between
# (the knee); trial 4 is dominated by trial 2.
METRICS = [
    {"loss_cv": 0.50, "throughput": 50.0, "loss_drop": 0.5},
    {"loss_cv": 0.01, "throughput": 60.0, "loss_drop": 0.5},
    {"loss_cv": 0.03, "throughput": 190.0, "loss_drop": 0.5},
    {"loss_cv": 0.30, "throughput": 200.0, "loss_drop": 0.5},
    {"loss_cv": 0.05, "throughput": 150.0, "loss_drop": 0.5},
]


@pytest.fixture
def study_dir(tmp_path: Path) -> Path:
    return h.recorded_study(tmp_path, "exp", trials=5, finished=5, metrics=METRICS)


def _params(study_dir: Path, number: int) -> dict:
    study = optuna.load_study(study_name="exp", storage=f"sqlite:///{study_dir}/optuna.db")
    return study.trials[number].params


@pytest.mark.parametrize(("how", "number"), [("balanced", 2), ("stablest", 1), ("fastest", 3)])
def test_the_pick_is_the_trial_its_rule_names(study_dir: Path, how: str, number: int) -> None:
    r = ex.recipe_from_study(str(study_dir), how)
    assert r.source["trial"] == number and r.source["pick"] == how
    assert r.name == f"exp-trial{number}"
    # The picked trial's searched values, the space's fixed ones, and what it achieved.
    for knob, value in _params(study_dir, number).items():
        assert r.knobs[knob] == pytest.approx(value)
    assert r.achieved["loss_cv"]["value"] == pytest.approx(METRICS[number]["loss_cv"])
    assert r.achieved["throughput"]["value"] == pytest.approx(METRICS[number]["throughput"])
    assert r.achieved["loss_cv"]["verified"] is None  # this study verified nothing
    assert set(r.source["searched"]) == {"clip_norm", "warmup_steps"}


def test_a_trial_picked_by_number_and_one_that_is_no_candidate(study_dir: Path) -> None:
    assert ex.recipe_from_study(str(study_dir), "trial 4").source["trial"] == 4
    with pytest.raises(RecipeError, match=r"study exp has no trial 9 \(its trials are 0 to 4\)"):
        ex.recipe_from_study(str(study_dir), "trial 9")


@pytest.mark.parametrize(
    "text",
    ['{"summary": "x", "outcome": 5}', "[1, 2", '{"outcome": "complete", "fingerprint": []}'],
    ids=["wrong-kinds", "not-json", "fingerprint-list"],
)
def test_a_damaged_trial_record_is_named_not_a_traceback(study_dir: Path, text: str) -> None:
    # export read the picked trial's trials/NNNN.json as it was and raised AttributeError
    (study_dir / "trials").mkdir(exist_ok=True)
    damaged = study_dir / "trials" / "0002.json"
    damaged.write_text(text)
    with pytest.raises(RecipeError, match=r"0002\.json: trial 2's record is damaged"):
        ex.recipe_from_study(str(study_dir))
    assert ex.recipe_from_study(str(study_dir), "trial 4").source["trial"] == 4  # another


def test_a_study_with_no_feasible_trial_names_the_closest(tmp_path: Path) -> None:
    flat = [{"loss_cv": 0.01, "throughput": 100.0, "loss_drop": d} for d in (0.0, 0.04)]
    folder = h.recorded_study(tmp_path, "flat", trials=2, finished=2, metrics=flat)
    with pytest.raises(RecipeError, match=r"no feasible trial.*Closest: trial 1: broke loss_drop"):
        ex.recipe_from_study(str(folder))


@pytest.mark.parametrize("fmt", ["yaml", "env", "python", "hf", "lightning"])
def test_write_is_atomic_and_the_yaml_loads_back(study_dir: Path, fmt: str) -> None:
    r = ex.recipe_from_study(str(study_dir))
    out = study_dir / f"recipe.{fmt}"
    ex.write(r, fmt, str(out))
    assert out.is_file() and out.read_text()
    assert not list(study_dir.glob("*.tmp*"))  # no temporary file left beside it
    if fmt == "yaml":
        back = Recipe.load(out)
        assert back.knobs == r.knobs and back.source["trial"] == r.source["trial"]
    assert ex.write(r, fmt, None) == out.read_text()  # stdout gets the same text


def test_the_recipe_schedules_over_the_target_the_study_scheduled_every_probe_over(
    tmp_path: Path,
) -> None:
    # Decided at the screen (no rung ran), below the target: every probe scheduled its linear
    # decay over the 400-step target, so verify and the exports must too.
    sets = ["budget.target_steps=400", "knobs.schedule=linear"]
    folder = h.recorded_study(tmp_path, "tgt", trials=3, finished=3, overrides=sets)
    r = ex.recipe_from_study(str(folder))
    assert r.probe["steps"] < 400 and r.probe["schedule_steps"] == 400
    out = tmp_path / "recipe.yaml"
    ex.write(r, "yaml", str(out))
    back = Recipe.load(out)
    assert back.probe["schedule_steps"] == 400 and back.schedule_steps == 400
    cfg = back.probe_config()
    assert cfg.steps == r.probe["steps"] and schedule_length(cfg) == 400
    assert schedule_length(back.probe_config(steps=600)) == 600  # a longer run: over it
    assert "SCHEDULE_STEPS = 400 " in ex.write(back, "python", None)
    hf = json.loads(ex.write(back, "hf", None))
    assert hf["training_arguments"]["max_steps"] == 400
    assert any("max_steps" in n and "400" in n for n in hf["notes"])
    lightning = json.loads(ex.write(back, "lightning", None))
    assert lightning["trainer"]["max_steps"] == lightning["lr_schedule"]["total_steps"] == 400
    assert any("make_scheduler(opt, 400)" in n for n in lightning["notes"])


def test_a_recipe_without_the_schedule_length_schedules_over_its_probe_steps(
    tmp_path: Path,
) -> None:
    r = ex.recipe_from_study(str(h.recorded_study(tmp_path, "old", trials=2, finished=2)))
    probe = {k: v for k, v in r.probe.items() if k != "schedule_steps"}  # as older autotune wrote
    old = Recipe.loads(replace(r, probe=probe).dump())
    assert "schedule_steps" not in old.probe and old.schedule_steps == old.probe["steps"]
    assert schedule_length(old.probe_config()) == old.probe["steps"]
    assert schedule_length(old.probe_config(steps=30)) == 30  # as before: over --steps
    assert f"SCHEDULE_STEPS = {old.probe['steps']} " in ex.write(old, "python", None)


@pytest.mark.parametrize("value", [5, "long", True])
def test_a_schedule_shorter_than_the_probe_or_not_a_number_is_refused(
    tmp_path: Path, value: object
) -> None:
    r = ex.recipe_from_study(str(h.recorded_study(tmp_path, "bad", trials=2, finished=2)))
    data = yaml.safe_load(r.dump())
    data["probe"]["schedule_steps"] = value
    with pytest.raises(RecipeError, match=r"recipe\.yaml: probe\.schedule_steps: .*at least"):
        Recipe.loads(yaml.safe_dump(data), source="recipe.yaml")


@pytest.mark.integration
@pytest.mark.parametrize(
    ("limit", "sets", "asked", "ran"),
    [
        ("16", [], (32, 1), (16, 2)),
        ("10", ["probe.micro_batch=15", "knobs.batch=15"], (15, 1), (7, 2)),  # loses a sample
    ],
    ids=["even", "odd"],
)
def test_an_oom_retried_trial_exports_the_layout_it_ran_with_and_says_so(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    limit: str,
    sets: list[str],
    asked: tuple[int, int],
    ran: tuple[int, int],
) -> None:
    from typer.testing import CliRunner

    from autotune import space as sp
    from autotune import study as st
    from autotune.cli import app
    from autotune.process.launcher import run_trial_process
    from autotune.process.ranks import OOM_ENV

    # The probe's test hook: a micro-batch above `limit` "runs out of memory".
    monkeypatch.setenv(OOM_ENV, limit)
    text = h.mlp_space("oom", trials=1)
    space = sp.loads(text, source="oom", overrides=["probe.oom_retry=1", *sets])
    folder = st.study_dir_for("oom", tmp_path)
    folder.mkdir(parents=True)
    opts = st.StudyOptions(space=space, study_dir=folder)
    url = st.storage_url(opts, folder)
    study = st.open_study(opts, st.open_storage(url), sp.condition(space, platform="cpu"))
    trial = study.ask()  # the baseline, run as a real probe process, recorded as a study does
    knobs, env = st.trial_setup(space, {}, True)
    cfg = sp.probe_config(space, knobs=knobs, env=env)
    result = run_trial_process(cfg.to_dict(), env, timeout_s=300, threads=1)
    assert result["outcome"] == "complete", result.get("error")
    summary = result["summary"]
    assert summary["oom_retried"] and (summary["micro_batch"], summary["accum_steps"]) == ran
    frozen = study._storage.get_trial(trial._trial_id)
    outcome = st.complete_outcome(space, frozen, result)
    st.write_outcome(folder, outcome)
    st.tell(study, frozen, outcome)
    meta = {"name": "oom", "storage": url, "tracking_uri": None, "experiment_id": None}
    (folder / "study.json").write_text(json.dumps(meta))

    r = ex.recipe_from_study(str(folder), "trial 0")
    assert (r.micro_batch, r.accum_steps, r.knobs["batch"]) == (*ran, ran[0] * ran[1])
    layout = {"micro_batch": 0, "accum_steps": 0}
    assert r.source["oom_retry"] == {
        "asked": dict(zip(layout, asked, strict=True)),
        "ran": dict(zip(layout, ran, strict=True)),
    }
    monkeypatch.chdir(tmp_path)
    out = CliRunner().invoke(app, ["export", "oom", "--pick", "trial 0", "-o", "r.yaml"])
    assert out.exit_code == 0, out.output
    warning = f"warning: trial 0 ran out of memory at micro_batch {asked[0]} x accum_steps 1"
    assert warning in out.stderr
    back = Recipe.load(tmp_path / "r.yaml")
    assert back.source["oom_retry"] == r.source["oom_retry"] and back.micro_batch == ran[0]
