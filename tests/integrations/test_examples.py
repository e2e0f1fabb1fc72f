"""The shipped examples as a user runs them: `autotune study` on a training script, with real Ray,
Optuna (SQLite) and MLflow (SQLite); the exported recipe applied back to the same script.

Each study here is checked by one test (a module-scoped study asserted on by two tests ran twice
when pytest-xdist gave them to two workers), and the studies of similar inputs are one: the HF
example's records and recipe are checked on the study whose promoted probes continue the
Trainer's checkpoint, and the export of a study without a feasible trial on the diverged plain
loop (it was a study of its own in tests/recipe/test_recipes_flow.py)."""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from assets import studies as h

from autotune import Recipe
from autotune.recipe import exporters

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy"),
    pytest.mark.filterwarnings("ignore:For backward compatibility, 'str' dtypes"),
]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
STEPS = 30
# The examples' own budget.target_steps promotes through longer rungs; these tests look at the
# screen and the recipe, so they decide at the probe length, as fast as before. At 30 steps a
# random trial may end above 1.05x the baseline's loss; the recipe tests export trial 1 whatever
# it is, so the constraints are lifted (the examples' constraints are tested in
# tests/space/test_space_find.py).
SHORT = (f"probe.steps={STEPS}", f"budget.target_steps={STEPS}", "constraints=[]")
# An explosion is a divergence once it persisted (default 20 steps): 5 here, within 30 steps.
PERSIST = ("probe.divergence.persist_steps=5",)


def assert_baseline_diverged(s: dict[str, Any]) -> None:
    """Trial 0 (the baseline) diverged with its cause, and ran on unless its loss went NaN/inf:
    the baseline stops early only on a non-finite loss (`stop_early: nonfinite`). Was: every
    divergent trial stopped early; the baseline now runs the length it is compared at."""
    assert s["divergence_cause"] in ("nonfinite_loss", "loss_explosion", "grad_explosion")
    loss = [math.nan if v is None else float(v) for v in s["series"]["loss"]]  # JSON: NaN is null
    if all(math.isfinite(v) for v in loss):
        assert s["steps_run"] == STEPS
    else:
        # it stops at the telemetry fetch (every 10 steps here) that saw the first one
        first = next(i for i, v in enumerate(loss) if not math.isfinite(v))
        assert first < s["steps_run"] <= min(STEPS, first + 10)


def study(tmp: Path, space: Path, *sets: str) -> subprocess.CompletedProcess[str]:
    args = ["study", "--space", str(space), "--tracking-uri", h.sqlite_uri(tmp)]
    args += ["--study-dir", str(tmp / "st"), "--set", "verify.top_k=0"]
    for s in sets:
        args += ["--set", s]
    return h.autotune(args, tmp, timeout=300)


def export(args: Sequence[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """`autotune export ARGS` in-process (`assets.cli.in_process`)."""
    from assets.cli import in_process

    return in_process(["export", *args], cwd)


def runs(tmp: Path, experiment: str) -> dict[str, Any]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=h.sqlite_uri(tmp))
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None
    found = client.search_runs([exp.experiment_id], "tags.`autotune.role` = 'trial'")
    out = {}
    for r in found:
        hist = sorted(client.get_metric_history(r.info.run_id, "loss"), key=lambda m: m.step)
        out[r.info.run_name] = (r, [m.value for m in hist])
    return out


def trial_record(tmp: Path, i: int) -> dict[str, Any]:
    return dict(json.loads((tmp / "st" / "trials" / f"{i:04d}.json").read_text()))


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("plain")
    space = EXAMPLES / "plain_loop" / "space.yaml"
    result = study(tmp, space, "budget.trials=2", *SHORT)
    assert result.returncode == 0, h.explain(result)
    return tmp


def test_plain_loop_records_each_steps_loss_and_its_recipe_reproduces_them(plain: Path) -> None:
    """The study records each step's loss in MLflow; the recipe exported from a trial, applied
    to the script, reproduces that trial's first steps. (One test: were they two, xdist could
    run the study once for each.)"""
    found = runs(plain, "plain_loop")
    assert len(found) == 2
    for run, losses in found.values():
        assert run.data.tags.get("autotune.outcome", "complete") == "complete"
        assert len(losses) == STEPS and losses[-1] < losses[0]
        assert run.data.params["workload"] == "script:train.py"

    recipe = plain / "r.yaml"
    result = export([str(plain / "st"), "-o", str(recipe), "--pick", "trial 1"], plain)
    assert result.returncode == 0, h.explain(result)
    summary = plain / "s.json"
    env = {**os.environ, "AUTOTUNE_RECIPE": str(recipe), "AUTOTUNE_SUMMARY": str(summary)}
    env["OMP_NUM_THREADS"] = "1"  # as the trial ran (probe.threads: 1)
    folder = EXAMPLES / "plain_loop"
    done = subprocess.run(
        [sys.executable, "train.py", "--width", "48"], cwd=folder, env=env, timeout=120
    )
    assert done.returncode == 0
    mine = json.loads(summary.read_text())["series"]["loss"][:5]
    _, trial_losses = found["trial-0001"]
    assert mine == pytest.approx(trial_losses[:5], rel=1e-6)

    verified = h.autotune(["verify", str(recipe), "--seeds", "1", "--steps", "20"], plain)
    assert verified.returncode in (0, 1), h.explain(verified)


def test_a_divergent_baseline_is_diverged_with_its_cause(tmp_path: Path) -> None:
    space = EXAMPLES / "plain_loop" / "space.yaml"
    result = study(tmp_path, space, "budget.trials=1", *SHORT, "knobs.lr=5", *PERSIST)
    assert result.returncode == 0, h.explain(result)
    rec = trial_record(tmp_path, 0)
    assert rec["outcome"] == "diverged", rec
    assert_baseline_diverged(rec["summary"])

    # A study without a feasible trial (its one trial diverged) exports nothing, saying why.
    r = export([str(tmp_path / "st"), "-o", "recipe.yaml"], tmp_path)
    assert r.returncode == 2
    assert "no feasible trial to export" in r.stderr
    assert "trial 0: diverged" in r.stderr, r.stderr
    assert not (tmp_path / "recipe.yaml").exists()


def test_a_script_that_never_reports_fails_and_its_baseline_stops_the_study(
    tmp_path: Path,
) -> None:
    (tmp_path / "train.py").write_text("import autotune\nautotune.trial()\n")
    space = h.write(
        tmp_path,
        "name: silent\nworkload: {script: train.py}\nprobe: {steps: 10, threads: 1}\n"
        "knobs: {lr: 0.01}\nbudget: {trials: 2, concurrency: 1}\n",
    )
    result = study(tmp_path, space)
    assert result.returncode == 1, h.explain(result)
    rec = trial_record(tmp_path, 0)
    assert rec["outcome"] == "failed" and rec.get("cause") == "no_reports", rec
    told = "the script called autotune.trial() but never trial.report(step, loss=...): call"
    assert rec["error"].startswith(told) and told in result.stderr
    assert not (tmp_path / "st" / "trials" / "0001.json").exists()  # the study stopped


def test_a_missing_script_exits_2_naming_it_before_any_trial(tmp_path: Path) -> None:
    space = h.write(tmp_path, "name: m\nworkload: {script: gone.py}\nknobs: {lr: 0.01}\n")
    result = study(tmp_path, space)
    assert result.returncode == 2
    assert f"{tmp_path}/gone.py: no such file" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "st").exists()


# The HF example's study: a screen of 10 steps and a rung at 30 (`budget.target_steps`), the
# constraints lifted as in SHORT. Was two studies: one of 2 trials at 30 steps for the records
# and the recipe, one with the rung for the continued probes; one checks both now.
HF_SCREEN = 10
HF_SETS = (
    "budget.trials=3",
    f"probe.steps={HF_SCREEN}",
    f"budget.target_steps={STEPS}",
    "constraints=[]",
    "rungs.min_promote=2",
)


def test_hf_trainer_study_records_loss_reproduces_from_its_recipe_and_continues_probes(
    tmp_path: Path,
) -> None:
    """The HF example's study records each screen step's loss; trial 1's recipe, applied to
    the script, reproduces its first steps; and every promoted probe (the example's
    `hf.attach` is its state hook) continues its screen probe through the Trainer's own
    checkpoint, pays only its new steps, and the states are gone once the study decided."""
    pytest.importorskip("transformers")
    space = EXAMPLES / "hf_trainer" / "space.yaml"
    result = study(tmp_path, space, *HF_SETS)
    assert result.returncode == 0, h.explain(result)

    found = runs(tmp_path, "hf_trainer")
    assert len(found) == 3
    assert all(len(losses) == HF_SCREEN for _, losses in found.values())
    recipe = tmp_path / "r.yaml"
    exported = export([str(tmp_path / "st"), "-o", str(recipe), "--pick", "trial 1"], tmp_path)
    assert exported.returncode == 0, h.explain(exported)
    script = EXAMPLES / "hf_trainer" / "train.py"
    digest = hashlib.sha256(script.read_bytes()).hexdigest()
    assert all(run.data.tags["autotune.script_sha256"] == digest for run, _ in found.values())
    assert_describes_an_hf_trainer(Recipe.load(recipe))
    summary = tmp_path / "s.json"
    env = {**os.environ, "AUTOTUNE_RECIPE": str(recipe), "AUTOTUNE_SUMMARY": str(summary)}
    env["OMP_NUM_THREADS"] = "1"
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "hf_trainer" / "train.py")],
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0
    mine = json.loads(summary.read_text())["series"]["loss"][:5]
    _, trial_losses = found["trial-0001"]
    assert mine == pytest.approx(trial_losses[:5], rel=1e-6)

    rung = sorted((tmp_path / "st" / "trials").glob("*-r1.json"))
    assert len(rung) >= 2, h.explain(result)
    for path in rung:
        s = json.loads(path.read_text())["summary"]
        assert s["resumed_from_step"] == HF_SCREEN, (path.name, s.get("continuation"))
        assert s["steps_run"] == STEPS and s["samples_run"] == (STEPS - HF_SCREEN) * 16
        assert len(s["series"]["loss"]) == STEPS  # the screen's 10 steps, then its own 20
    assert "promoted probes continued from the rung below" in result.stdout
    state = tmp_path / "st" / "state"
    assert not state.exists() or not any(state.iterdir())  # removed once decided


def assert_describes_an_hf_trainer(r: Recipe) -> None:
    """The exports of a recipe whose probe was the script's own HF Trainer say so."""
    assert r.source["script_applied"] == ["hf"]
    notes = " ".join(json.loads(exporters.render(r, "hf"))["notes"])
    assert "own Hugging Face Trainer" in notes and "decays every parameter" not in notes
    head = exporters.render(r, "python").split("\nimport ")[0]
    assert "script train.py" in head and "None (None)" not in head


def test_hf_trainer_divergent_baseline_is_diverged_with_its_cause(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    space = EXAMPLES / "hf_trainer" / "space.yaml"
    result = study(tmp_path, space, "budget.trials=1", *SHORT, "knobs.lr=5", *PERSIST)
    assert result.returncode == 0, h.explain(result)
    rec = trial_record(tmp_path, 0)
    assert rec["outcome"] == "diverged", rec
    assert_baseline_diverged(rec["summary"])


@pytest.fixture(scope="module")
def lightning_study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("lightning")
    tmp = tmp_path_factory.mktemp("lightning")
    space = EXAMPLES / "lightning" / "space.yaml"
    result = study(tmp, space, "budget.trials=2", *SHORT)
    assert result.returncode == 0, h.explain(result)
    return tmp


def test_lightning_study_records_loss_and_reproduces_from_its_recipe(
    lightning_study: Path,
) -> None:
    found = runs(lightning_study, "lightning")
    assert len(found) == 2
    for run, losses in found.values():
        assert run.data.tags.get("autotune.outcome", "complete") == "complete"
        assert len(losses) == STEPS and losses[-1] < losses[0]
    recipe = lightning_study / "r.yaml"
    args = [str(lightning_study / "st"), "-o", str(recipe), "--pick", "trial 1"]
    result = export(args, lightning_study)
    assert result.returncode == 0, h.explain(result)
    summary = lightning_study / "s.json"
    env = {**os.environ, "AUTOTUNE_RECIPE": str(recipe), "AUTOTUNE_SUMMARY": str(summary)}
    env["OMP_NUM_THREADS"] = "1"
    done = subprocess.run(
        [sys.executable, "train.py", "--width", "48"],
        cwd=EXAMPLES / "lightning",
        env=env,
        timeout=120,
    )
    assert done.returncode == 0
    mine = json.loads(summary.read_text())["series"]["loss"][:5]
    _, trial_losses = found["trial-0001"]
    assert mine == pytest.approx(trial_losses[:5], rel=1e-6)


def test_lightning_divergent_baseline_is_diverged_with_its_cause(tmp_path: Path) -> None:
    pytest.importorskip("lightning")
    space = EXAMPLES / "lightning" / "space.yaml"
    result = study(tmp_path, space, "budget.trials=1", *SHORT, "knobs.lr=5", *PERSIST)
    assert result.returncode == 0, h.explain(result)
    rec = trial_record(tmp_path, 0)
    assert rec["outcome"] == "diverged", rec
    assert_baseline_diverged(rec["summary"])
