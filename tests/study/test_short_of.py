"""A late blow-up that hits every trial carried on to the target (a black-box review, wl
pasha.yaml): the summary said "no feasible trial: every trial diverged" beside "14 complete, 0
diverged", `show --json` had `pick: null` (no `pick.best`), `studies` said "none yet" of a
finished study and export called the trials that never ran that long "infeasible". Now each
says that the trials carried on to the target diverged there, and names the feasible trials
that stopped short of it, the longest first. A recorded study (no Ray), its rungs set as the
rung phase stores them; the CLI through typer's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import optuna
import pytest
from assets import studies as h
from assets.cli import invoke, one_line_error

from autotune.study import attrs as ua
from autotune.study.export import recipe_from_study

TARGET = 120


def slim(number: int, rung: int, steps: int, outcome: str) -> dict[str, Any]:
    """A rung record as `rung_phase.slim` keeps it; a complete one feasible."""
    ok = outcome == "complete"
    metrics = {"loss_cv": 0.05 / (number + 1), "throughput": 100.0 + number, "loss_drop": 0.5}
    return {
        "number": number,
        "rung": rung,
        "steps": steps,
        "baseline": number == 0,
        "outcome": outcome,
        "cause": None if ok else "loss_explosion",
        "metrics": metrics,
        "values": [metrics["loss_cv"], metrics["throughput"]] if ok else None,
        "feasible": ok,
    }


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Study `late`: 5 trials screened at 30 steps, all feasible; 0, 1, 3, 4 carried on to 60
    (4 diverged there), 0 and 1 on to 120, the target, where both diverged. Trials 3 (60
    steps) and 2 (the screen) are feasible and never reached the target."""
    monkeypatch.chdir(tmp_path)
    study_dir = h.recorded_study(
        tmp_path, "late", trials=5, finished=5, overrides=[f"budget.target_steps={TARGET}"]
    )
    study = optuna.load_study(study_name="late", storage=f"sqlite:///{study_dir / 'optuna.db'}")
    records = [(n, 1, 60, "complete") for n in (0, 1, 3)] + [(4, 1, 60, "diverged")]
    records += [(n, 2, TARGET, "diverged") for n in (0, 1)]
    for number, rung, steps, outcome in records:
        study.set_user_attr(ua.rung_key(number, steps), slim(number, rung, steps, outcome))
    study.set_user_attr(
        ua.RUNGS,
        [
            {"rung": 1, "steps": 60, "numbers": [0, 1, 3, 4]},
            {"rung": 2, "steps": TARGET, "numbers": [0, 1]},
        ],
    )
    decided = {"steps": TARGET, "rung": 2, "reason": "target", "tau": None}
    study.set_user_attr(ua.DECIDED, {**decided, "target_steps": TARGET})
    return tmp_path


def test_the_summary_names_the_trials_short_of_the_target(here: Path) -> None:
    result = invoke("show", "late")
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "every trial diverged" not in text
    assert (
        f"no feasible trial at {TARGET} steps: the 2 trials carried on to {TARGET} steps "
        "(the target) diverged there (2 of 2: loss_explosion)"
    ) in text
    assert (
        f"feasible trials that did not reach {TARGET} steps: trial 3 (complete and feasible at "
        f"60 steps), trial 2 (complete and feasible at {h.SHARED_STEPS} steps)"
    ) in text, "the longest first; trial 4, diverged at 60 steps, is no configuration to carry on"
    assert "`autotune export late --pick 'trial 3' -o recipe.yaml`" in text
    assert f"`autotune verify recipe.yaml --steps {TARGET}`" in text

    data = json.loads(invoke("show", "late", "--json").stdout)
    pick = data["pick"]
    assert pick["number"] is None and pick["best"] == 3 and pick["best_steps"] == 60
    assert "best_diverged_share" in pick and pick["best_diverged_share"] is None
    short = data["short_of_target"]
    assert short["carried"]["outcomes"] == {"diverged": 2}
    assert [s["number"] for s in short["short"]] == [3, 2]


def count_line(name: str) -> str:
    result = invoke("show", name)
    assert result.exit_code == 0, result.output
    return next(x for x in result.stdout.splitlines() if x.startswith(f"study {name}: "))


def test_the_count_line_counts_every_length(here: Path) -> None:
    """The count line counted the screen alone: "5 complete, 0 diverged" above "no feasible
    trial at 120 steps: ... diverged there (2 of 2 ...)". It now says what happened to the
    probes promoted to each rung, and `show --json` has them (`rung_counts`)."""
    screen = (
        "5/5 trials — 5 complete, 0 diverged, 0 out of memory, 0 failed at the screen "
        f"({h.SHARED_STEPS} steps)"
    )
    assert count_line("late") == (
        f"study late: {screen}; 4 promoted to 60 steps: 3 complete, 1 diverged; "
        f"2 promoted to {TARGET} steps: 2 diverged"
    )
    data = json.loads(invoke("show", "late", "--json").stdout)
    assert data["rung_counts"] == [
        {"steps": 60, "trials": 4, "complete": 3, "diverged": 1, "oom": 0, "failed": 0},
        {"steps": TARGET, "trials": 2, "complete": 0, "diverged": 2, "oom": 0, "failed": 0},
    ]


def test_the_count_line_counts_a_rung_stopped_midway(here: Path) -> None:
    """A driver stopped during the top rung (its row and the decision not written yet, as
    `rung_phase` writes them once a rung ends; a resumed driver adopts its records): the
    count line counts the probes recorded there."""
    study_dir = here / "autotune-studies" / "late"
    study = optuna.load_study(study_name="late", storage=f"sqlite:///{study_dir / 'optuna.db'}")
    study.set_user_attr(ua.RUNGS, [{"rung": 1, "steps": 60, "numbers": [0, 1, 3, 4]}])
    study.set_user_attr(ua.DECIDED, {})
    study.set_user_attr(ua.rung_key(0, TARGET), slim(0, 2, TARGET, "complete"))
    line = count_line("late")
    assert line.endswith(
        f"at the screen ({h.SHARED_STEPS} steps); 4 promoted to 60 steps: 3 complete, 1 "
        f"diverged; 2 promoted to {TARGET} steps: 1 complete, 1 diverged"
    ), line


def test_export_and_studies_say_the_trials_stopped_short(here: Path) -> None:
    line = one_line_error(
        invoke("export", "late", "-o", "r.yaml"),
        f"no feasible trial at {TARGET} steps, the length it decided at",
        "diverged there (2 of 2",
        "trial 3 (complete and feasible at 60 steps)",
    )
    assert "infeasible" not in line
    recipe = recipe_from_study("late", "trial 3")  # what the refusal says to do works
    assert recipe.source["short_of_decided"] == {"steps": 60, "decided_steps": TARGET}

    result = invoke("studies")
    assert result.exit_code == 0, result.output
    row = next(x for x in result.stdout.splitlines() if x.startswith("late"))
    assert "none yet" not in row and "finished without one" in row


def test_the_baselines_seeds_run_beside_the_target_are_recorded(
    here: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The review saw `verified: []` although the baseline's verification seeds ran beside the
    top rung: with no candidate there the verification phase never read them back. Now it
    records the baseline alone, from its files, and runs nothing."""
    from types import SimpleNamespace

    from autotune import space as sp
    from autotune.recipe.seeds import seeds_for
    from autotune.study import verification as vn
    from autotune.study.folder import verify_path

    overrides = [f"budget.target_steps={TARGET}", "verify.top_k=1", "verify.seeds=2"]
    space = sp.loads(h.mlp_space("late", trials=5), source="late", overrides=overrides)
    study_dir = here / "autotune-studies" / "late"
    study = optuna.load_study(study_name="late", storage=f"sqlite:///{study_dir / 'optuna.db'}")
    assert vn.to_verify(study, space) == [], "no candidate at the target"
    assert vn.ran_beside(study, space, study_dir) == [], "its seeds have not run yet"
    for seed in seeds_for(space.probe.seed, 2):
        path = verify_path(study_dir, 0, seed, TARGET)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"seed": seed, "number": 0, "outcome": "diverged"}))
    recorded: list[tuple[int, int]] = []
    monkeypatch.setattr(  # the summary of the seeds and its MLflow run are not this test's
        vn,
        "_record_verified",
        lambda _st, _sp, _l, c, runs, *_a: recorded.append((c.number, len(runs))),
    )
    opts = SimpleNamespace(space=space, quiet=True)
    assert vn.verify_phase(opts, study, None, study_dir, None) is False  # type: ignore[arg-type]
    assert recorded == [(0, 2)], "the baseline, from its 2 seeds read back; no probe run"
