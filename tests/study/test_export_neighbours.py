"""`autotune export` records the pick's Pareto neighbours in the recipe's `source.neighbours`
(issue 28: `autotune migrate` re-runs them when the recipe does not hold on another machine):
up to 3 other candidates on the front, not the baseline, nearest the pick first in objective
space scaled per objective over the candidates; each with its trial, knobs, env and values.
A recipe without them (an older file) loads unchanged; a malformed one is refused naming the
file and the key."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from assets import studies as h
from assets.recipes import make_recipe

from autotune.errors import RecipeError
from autotune.recipe import Recipe
from autotune.study import export as ex

# Trial 0 is the baseline (dominated by trial 1). On the front: 1 (the stablest), 2 (the
# knee: the balanced pick) and 3 (the fastest); trial 4 is dominated by trial 2.
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


def _trials(study_dir: Path) -> list[Any]:
    study = optuna.load_study(study_name="exp", storage=f"sqlite:///{study_dir}/optuna.db")
    return study.trials


def test_the_recipe_records_its_pareto_neighbours_nearest_first(study_dir: Path) -> None:
    r = ex.recipe_from_study(str(study_dir))
    assert r.source["trial"] == 2
    got = r.source["neighbours"]
    # Scaled over the candidates (loss_cv over 0.49, throughput over 150): trial 3 is
    # (0.55, 0.07) from the pick, trial 1 (0.04, 0.87). Not the dominated 4, not the baseline.
    # Then by loss_cv alone (without throughput, a hardware number): 1 is taken, 2 is the pick,
    # so the dominated 4 comes next, the stablest left.
    assert [(n["trial"], n["front"]) for n in got] == [
        (3, "every objective"),
        (1, "every objective"),
        (4, "without throughput"),
    ]
    trials = _trials(study_dir)
    for n in got:
        assert n["values"] == pytest.approx(
            {k: METRICS[n["trial"]][k] for k in ("loss_cv", "throughput")}
        )
        assert n["env"] == {}
        # every knob resolved as the recipe's own, with the trial's searched values
        assert set(n["knobs"]) == set(r.knobs)
        for knob, value in trials[n["trial"]].params.items():
            assert n["knobs"][knob] == pytest.approx(value)
        assert n["knobs"]["lr"] == r.knobs["lr"] and n["knobs"]["batch"] == r.knobs["batch"]
    # It goes through the file whole: written, read back, the same.
    out = study_dir / "recipe.yaml"
    ex.write(r, "yaml", str(out))
    assert Recipe.load(out).source["neighbours"] == got
    # The other formats are as they were: no neighbour's value in them.
    for fmt in ("env", "python", "hf", "lightning"):
        assert "neighbours" not in ex.write(r, fmt, None)


def test_a_pick_off_the_front_has_the_whole_front_but_the_baseline_as_neighbours(
    study_dir: Path,
) -> None:
    r = ex.recipe_from_study(str(study_dir), "trial 4")
    # From trial 4 (0.05, 150): trial 2 at 0.27, trial 1 at 0.606, trial 3 at 0.609.
    assert [n["trial"] for n in r.source["neighbours"]] == [2, 1, 3]


def test_the_baseline_on_the_front_is_no_neighbour_and_at_most_three_are(tmp_path: Path) -> None:
    # Every trial on the front (each faster and less stable than the one after it), the
    # baseline the fastest of them.
    cvs = [0.30, 0.25, 0.20, 0.15, 0.12, 0.02]
    speeds = [300.0, 260.0, 220.0, 180.0, 150.0, 100.0]
    metrics = [
        {"loss_cv": cv, "throughput": s, "loss_drop": 0.5}
        for cv, s in zip(cvs, speeds, strict=True)
    ]
    folder = h.recorded_study(tmp_path, "all", trials=6, finished=6, metrics=metrics)
    r = ex.recipe_from_study(str(folder), "trial 3")
    # From trial 3, scaled over 0.28 and 200: trial 4 at 0.18, 2 at 0.27, 1 at 0.54, 5 at 0.61.
    got = r.source["neighbours"]
    assert [n["trial"] for n in got[:3]] == [4, 2, 1]
    assert {n["front"] for n in got[:3]} == {"every objective"}
    # Then the front without throughput (a hardware number): loss_cv alone, whose best is trial
    # 5, the farthest on the whole front. It is recorded once, after the three.
    assert [(n["trial"], n["front"]) for n in got[3:]] == [(5, "without throughput")]


def test_the_front_without_the_hardware_objectives_adds_the_stabler_trade_offs(
    tmp_path: Path,
) -> None:
    # The pick (trial 2) and four more on the front; without throughput, loss_cv and final_loss
    # remain, and their front is trials 4 (the stablest) and 5 (the lowest loss): trial 3 is
    # nearest the pick on the whole front, but dominated by both without throughput.
    rows = [
        (0.50, 1.00, 100.0),  # the baseline
        (0.30, 0.90, 300.0),
        (0.10, 0.60, 250.0),
        (0.08, 0.65, 200.0),
        (0.02, 0.50, 40.0),
        (0.05, 0.40, 30.0),
    ]
    metrics = [
        {"loss_cv": cv, "final_loss": fl, "throughput": tp, "loss_drop": 0.5} for cv, fl, tp in rows
    ]
    objectives = ["loss_cv: minimize", "final_loss: minimize", "throughput: maximize"]

    def study(folder: Path, objs: list[str]) -> Path:
        listed = ", ".join(
            f"{{metric: {o.split(':')[0]}, direction:{o.split(':')[1]}}}" for o in objs
        )
        overrides = [f"objectives=[{listed}]"]
        return h.recorded_study(
            folder, "o", trials=6, finished=6, metrics=metrics, overrides=overrides
        )

    folder = study(tmp_path, objectives)
    r = ex.recipe_from_study(str(folder), "trial 2")
    got = [(n["trial"], n["front"]) for n in r.source["neighbours"]]
    # The whole front's three nearest (scaled: 3 at 0.21, 1 at 0.68, 4 at 0.81, 5 at 0.89),
    # then the other front's, not repeated: 5.
    assert got[:3] == [(3, "every objective"), (1, "every objective"), (4, "every objective")]
    assert got[3:] == [(5, "without throughput")]
    # Only the configuration's own objectives (front 4, 5), or only a hardware one (front 1):
    # the first front alone.
    for objs, expected in ((objectives[:2], 1), (objectives[2:], 0)):
        other = study(tmp_path / objs[0].split(":")[0], objs)
        fronts = [n["front"] for n in ex.recipe_from_study(str(other)).source["neighbours"]]
        assert fronts == ["every objective"] * expected


def test_a_recipe_without_neighbours_loads_unchanged(study_dir: Path) -> None:
    r = ex.recipe_from_study(str(study_dir))
    source = {k: v for k, v in r.source.items() if k != "neighbours"}
    old = Recipe.loads(replace(r, source=source).dump(), source="old.yaml")
    assert old.source == source and "neighbours" not in old.source
    hand = make_recipe()
    assert Recipe.loads(hand.dump()).source == hand.source


def _with(study_dir: Path, change: Any) -> str:
    data = yaml.safe_load(ex.recipe_from_study(str(study_dir)).dump())
    change(data["source"])
    return yaml.safe_dump(data)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda s: s["neighbours"][1]["knobs"].update(lr="fast"),
            r"recipe\.yaml: source\.neighbours\[1\]\.knobs\.lr: ",
        ),
        (
            lambda s: s["neighbours"][1]["knobs"].update(warmup_stesp=3),
            r"recipe\.yaml: source\.neighbours\[1\]\.knobs\.warmup_stesp: unknown knob.*"
            r"warmup_steps",
        ),
        (
            lambda s: s["neighbours"][1].update(knobs=[1, 2]),
            r"recipe\.yaml: source\.neighbours\[1\]\.knobs: must be a mapping",
        ),
        (
            lambda s: s["neighbours"][0]["knobs"].update(clip_norm={"low": 0.1}),
            r"recipe\.yaml: source\.neighbours\[0\]\.knobs\.clip_norm: .*not a domain",
        ),
        (
            lambda s: s["neighbours"][1].pop("knobs"),
            r"recipe\.yaml: source\.neighbours\[1\]\.knobs: required",
        ),
        (
            lambda s: s["neighbours"][0].update(trial="three"),
            r"recipe\.yaml: source\.neighbours\[0\]\.trial: must be a trial number",
        ),
        (
            lambda s: s["neighbours"][0].update(nobs={}),
            r"recipe\.yaml: source\.neighbours\[0\]\.nobs: unknown key",
        ),
        (
            lambda s: s["neighbours"][1].update(env={"NCCL_ALGO": ["Ring", "Tree"]}),
            r"recipe\.yaml: source\.neighbours\[1\]\.env\.NCCL_ALGO: must be one value",
        ),
        (
            lambda s: s["neighbours"][0].update(values={"loss_cv": "low"}),
            r"recipe\.yaml: source\.neighbours\[0\]\.values: must be a mapping",
        ),
        (
            lambda s: s["neighbours"][0].update(front={"every": "objective"}),
            r"recipe\.yaml: source\.neighbours\[0\]\.front: must be a line of text",
        ),
        (
            lambda s: s.update(neighbours={"trial": 3}),
            r"recipe\.yaml: source\.neighbours: must be a list",
        ),
        (
            lambda s: s.update(neighbours=[3]),
            r"recipe\.yaml: source\.neighbours\[0\]: must be a mapping",
        ),
    ],
    ids=[
        "knob-value",
        "unknown-knob",
        "knobs-not-mapping",
        "knob-domain",
        "no-knobs",
        "trial",
        "unknown-key",
        "env",
        "values",
        "front",
        "not-a-list",
        "entry-not-mapping",
    ],
)
def test_a_malformed_neighbour_is_refused_naming_the_key(
    study_dir: Path, change: Any, message: str
) -> None:
    text = _with(study_dir, change)
    with pytest.raises(RecipeError, match=message):
        Recipe.loads(text, source="recipe.yaml")


def _rung_run(study: Any, study_dir: Path, number: int, rung: int, steps: int, values: Any) -> None:
    """Trial `number`'s run at `rung` (`steps`) as the rung phase keeps it: a slim row in the
    study and a record with its loss curve in the folder; `values` None: it diverged there."""
    from autotune.study import attrs as ua
    from autotune.study import folder

    feasible = values is not None
    values = values or [0.9, 10.0]
    metrics = {"loss_cv": values[0], "throughput": values[1], "loss_drop": 0.5}
    row = {
        "number": number, "rung": rung, "steps": steps, "baseline": number == 0,
        "outcome": "complete" if feasible else "diverged", "metrics": metrics,
        "steps_run": steps, "steps_planned": steps, "values": values,
        "constraints": [0.0 if feasible else 1.0, -0.45], "feasible": feasible,
    }  # fmt: skip
    study.set_user_attr(ua.rung_key(number, steps), row)
    summary = {"metrics": metrics, "seed": 0, "steps_run": steps, "steps_planned": steps}
    summary["series"] = {"loss": [2.0 - i / steps for i in range(steps)]}
    folder.write_json(folder.rung_path(study_dir, number, rung), {**row, "summary": summary})


def test_decided_above_the_screen_the_second_front_is_drawn_from_the_screen(
    tmp_path: Path,
) -> None:
    # Screened: 1 and 2 fast, 3 the stablest there but slow (not promoted: the rungs weigh
    # throughput too), 4 stabler still at the screen but diverged at the middle rung, 5 dominated.
    screen = [(0.5, 100.0), (0.10, 300.0), (0.08, 250.0), (0.01, 50.0), (0.005, 40.0), (0.2, 60.0)]
    metrics = [{"loss_cv": cv, "throughput": tp, "loss_drop": 0.5} for cv, tp in screen]
    study_dir = h.recorded_study(
        tmp_path, "rs", trials=6, finished=6, metrics=metrics, overrides=["budget.target_steps=90"]
    )
    study = optuna.load_study(study_name="rs", storage=f"sqlite:///{study_dir / 'optuna.db'}")
    from autotune.study import attrs as ua

    study.set_user_attr(ua.DECIDED, {"steps": 90, "rung": 2, "reason": "target"})
    at_top = {0: [0.4, 100.0], 1: [0.09, 300.0], 2: [0.07, 250.0]}
    for number, values in at_top.items():
        _rung_run(study, study_dir, number, 1, 60, values)
        _rung_run(study, study_dir, number, 2, 90, values)
    _rung_run(study, study_dir, 4, 1, 60, None)
    r = ex.recipe_from_study(str(study_dir), "trial 1")
    got = [(n["trial"], n["front"]) for n in r.source["neighbours"]]
    # At the decided length the front is 1 and 2 alone; from the screen, without throughput,
    # the stablest that did not fail longer are 3 and then 5 (2 is taken, 1 the pick, 0 the
    # baseline; not 4, which diverged at 60 steps).
    screen_front = "without throughput, at the screen"
    assert got == [(2, "every objective"), (3, screen_front), (5, screen_front)]
    third = r.source["neighbours"][1]
    assert third["values"] == {"loss_cv": 0.01, "throughput": 50.0}
    for knob, value in study.trials[3].params.items():
        assert third["knobs"][knob] == pytest.approx(value)


def test_a_trial_that_ran_at_the_decided_length_is_ranked_by_what_it_did_there(
    tmp_path: Path,
) -> None:
    # Trial 3 is the stablest at the screen (40 steps of a tight clip look calm) and was promoted
    # to the decided length, where it is the least stable: the screen's ranking there was the
    # reverse of the longer one's. Its screen value must not make it a neighbour ahead of the
    # trials that did better at the length migrate re-runs them at.
    screen = [(0.5, 100.0), (0.10, 300.0), (0.08, 250.0), (0.01, 50.0), (0.03, 200.0)]
    screen += [(0.02, 45.0), (0.04, 180.0)]
    metrics = [{"loss_cv": cv, "throughput": tp, "loss_drop": 0.5} for cv, tp in screen]
    study_dir = h.recorded_study(
        tmp_path, "rl", trials=7, finished=7, metrics=metrics, overrides=["budget.target_steps=90"]
    )
    study = optuna.load_study(study_name="rl", storage=f"sqlite:///{study_dir / 'optuna.db'}")
    from autotune.study import attrs as ua

    study.set_user_attr(ua.DECIDED, {"steps": 90, "rung": 2, "reason": "target"})
    at_top = {0: [0.4, 100.0], 1: [0.09, 300.0], 2: [0.07, 250.0], 3: [0.5, 50.0]}
    at_top |= {4: [0.2, 200.0], 6: [0.15, 180.0]}
    for number, values in at_top.items():
        _rung_run(study, study_dir, number, 1, 60, values)
        _rung_run(study, study_dir, number, 2, 90, values)
    r = ex.recipe_from_study(str(study_dir), "trial 1")
    got = [(n["trial"], n["front"]) for n in r.source["neighbours"]]
    # The front at 90 steps is 1 and 2; without throughput, at 90 steps: 2 (taken), 1 (the
    # pick), then 6 and 4, ahead of 3; trial 5 never ran that long and comes after them.
    assert got == [(2, "every objective"), (6, "without throughput"), (4, "without throughput")]
    assert r.source["neighbours"][1]["values"] == {"loss_cv": 0.15, "throughput": 180.0}
