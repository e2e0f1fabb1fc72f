"""The baseline's verification seeds beside the top rung (`autotune.study.beside`), over a real
SQLite Optuna study recorded through the study's own code and the real `Ladder`: which seed is
handed out when, where it is written, and that the verification phase reads it back instead of
running it again. No Ray, no probe process (the integration test of `rungs.promotion: async`
runs them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from assets import studies as h

from autotune import space as sp
from autotune.recipe.seeds import seeds_for
from autotune.study import promotion as pm
from autotune.study import verification as vn
from autotune.study.beside import Beside, is_beside
from autotune.study.folder import verify_path
from autotune.study.rungs import plan

N = 6


def setup(tmp_path: Path, *sets: str) -> tuple[Any, sp.Space, Path, pm.Ladder, list[str]]:
    import optuna

    overrides = ["budget.target_steps=90", "verify.top_k=2", "verify.seeds=3", *sets]
    study_dir = h.recorded_study(tmp_path, "b", trials=N, finished=N, overrides=overrides)
    study = optuna.load_study(study_name="b", storage=f"sqlite:///{study_dir / 'optuna.db'}")
    space = sp.loads(h.mlp_space("b", trials=N), source="b", overrides=overrides)
    steps = plan(space)
    assert len(steps) >= 2 and steps[-1] == 90, steps
    ladder = pm.Ladder(
        steps,
        list(range(N)),
        baseline=0,
        objectives=[o.model_dump() for o in space.objectives],
        settings=pm.settings_of(space.rungs),
        early=True,
    )
    return study, space, study_dir, ladder, []


def test_baseline_seeds_run_beside_the_top_rung_and_are_read_back_by_verification(
    tmp_path: Path,
) -> None:
    study, space, study_dir, ladder, said = setup(tmp_path)
    beside = Beside(space, study, study_dir, 90, said.append, ladder)
    assert beside.job() is None, "no entrant at the top rung yet: the study may decide below"

    ladder.rungs[ladder.top].entrants.append(3)
    seeds = seeds_for(space.probe.seed, 3)
    # a seed an earlier driver ran is not run again
    earlier = verify_path(study_dir, 0, seeds[1], 90)
    earlier.parent.mkdir(parents=True, exist_ok=True)
    earlier.write_text(json.dumps({"seed": seeds[1], "outcome": "complete"}))

    first = beside.job()
    assert first is not None and is_beside(first) and first.key[1] == seeds[0]
    assert first.probe.steps == 90 and first.probe.seed == seeds[0]
    base = vn.baseline_candidate(study, space, 90)
    assert base is not None and first.probe.knobs == base.knobs, "the baseline's knobs"
    assert first.probe.divergence.get("stop_early") == "nonfinite", "run as the baseline is"
    out = {"outcome": "complete", "summary": {"metrics": {"loss_cv": 0.2}, "series": {}}}
    beside.done(first, out, 1.5)
    written = verify_path(study_dir, 0, seeds[0], 90)
    assert written.is_file()
    group = json.loads(written.read_text())["timing_group"]
    assert group.startswith("beside the top rung@"), "timed apart from the verification phase"

    second = beside.job()
    assert second is not None and second.key[1] == seeds[2], "seed 2's file is there already"
    assert beside.job() is None, "every seed handed out"
    assert any("beside the top rung" in line for line in said), said

    results, pending = vn.saved_seeds(study_dir, [base], seeds, 90)
    assert sorted(r["seed"] for r in results[0]) == [seeds[0], seeds[1]]
    assert [s for _c, s in pending] == [seeds[2]], "only the seed not yet run is left"


def test_nothing_beside_once_decided_or_without_verification(tmp_path: Path) -> None:
    study, space, study_dir, ladder, said = setup(tmp_path)
    ladder.rungs[ladder.top].entrants.append(3)
    ladder.decided = {"steps": 90, "rung": ladder.top, "reason": "target", "tau": None}
    assert Beside(space, study, study_dir, 90, said.append, ladder).job() is None

    study, space, study_dir, ladder, said = setup(tmp_path / "k0", "verify.top_k=0")
    ladder.rungs[ladder.top].entrants.append(3)
    assert Beside(space, study, study_dir, 90, said.append, ladder).job() is None


def test_the_synchronous_top_rung_takes_every_seed_not_yet_run(tmp_path: Path) -> None:
    study, space, study_dir, _ladder, said = setup(tmp_path)
    seeds = seeds_for(space.probe.seed, 3)
    earlier = verify_path(study_dir, 0, seeds[0], 90)
    earlier.parent.mkdir(parents=True, exist_ok=True)
    earlier.write_text(json.dumps({"seed": seeds[0], "outcome": "complete"}))
    beside = Beside(space, study, study_dir, 90, said.append)
    assert beside.job() is None, "one at a time only under a ladder (async)"
    jobs = beside.jobs()
    assert [j.key[1] for j in jobs] == seeds[1:] and all(is_beside(j) for j in jobs)
    assert all(j.probe.steps == 90 for j in jobs)
    assert said == [
        f"  beside them, the baseline's verification (trial 0) at 90 steps: seeds "
        f"{seeds[1]}, {seeds[2]}"
    ], said
    assert beside.jobs() == [], "handed out once"
