"""A study's pick is the best of its verified candidates on the very seeds it is then compared
with the baseline over: the luckiest of k there. The paired verdict shares its 5% error over
those k as over the metrics (`paired.family_level`), so that a pick no better than the defaults
does not read `better` twice as often as a configuration fixed in advance would
(`benchmarks/pick_selection.py`). A real SQLite Optuna study with made-up records (the helpers
of tests/study/test_verdicts.py)."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import pytest
from test_verdicts import N, recorded, result, space_of, verified

from autotune.recipe import paired as pd
from autotune.recipe.seeds import summarize_seeds
from autotune.study import pick as pk
from autotune.study import verdict as vd

OBJ = [
    {"metric": "loss_cv", "direction": "minimize"},
    {"metric": "throughput", "direction": "maximize"},
]
BEST = N - 1  # the lowest loss_cv of the recorded study: the balanced pick
BASE = [2.0, 2.1, 1.9]
# The pick's loss_cv x0.887 / x0.905 / x0.923 the baseline's 0.1, its final losses the
# baseline's: over 3 metrics at 98.3% each its loss_cv is better; at 99.4% (chosen among 3) not.
SHIFTED = [0.1 * math.exp(x) for x in (-0.12, -0.10, -0.08)]


def _study(tmp_path: Path, others: int) -> Any:
    """The recorded study with the baseline, the shifted pick and `others` candidates verified
    (trials 1, 2, ...: worse than the baseline on loss_cv, so never the pick)."""
    study, _ = recorded(tmp_path, space_of(verify_top_k=1 + others), [2.0] * N)
    study.set_user_attr("autotune.verified.0", verified(result(BASE)))
    study.set_user_attr(f"autotune.verified.{BEST}", verified(result(BASE, cvs=SHIFTED)))
    for n in range(1, 1 + others):
        study.set_user_attr(f"autotune.verified.{n}", verified(result(BASE, cv=0.2)))
    return study


def test_the_level_is_shared_over_the_candidates_as_over_the_metrics() -> None:
    assert pd.family_level(["final_loss"], 3) == pytest.approx(1 - 0.05 / 3)
    assert pd.family_level(["final_loss", "loss_cv", "throughput"], 3) == pytest.approx(
        1 - 0.05 / 9
    )
    assert pd.family_level(["final_loss"], 0) == pd.family_level(["final_loss"]) == 0.95


def test_a_pick_chosen_among_three_is_judged_at_the_shared_level(tmp_path: Path) -> None:
    mine, base = verified(result(BASE, cvs=SHIFTED)), verified(result(BASE))
    metrics = pd.compared_metrics(OBJ)
    assert pd.compare(mine, base, metrics)["verdict"] == "better"  # fixed in advance
    assert pd.compare(mine, base, metrics, chosen_from=3)["verdict"] == "no detectable difference"

    alone = vd.pick_part(_study(tmp_path / "alone", 0), OBJ)
    assert alone["pick"]["number"] == BEST and alone["pick"]["verdict"] == "better"
    assert alone["vs_baseline"]["chosen_from"] == 1
    assert "chosen among" not in pd.format_line(alone["vs_baseline"])

    three = vd.pick_part(_study(tmp_path / "three", 2), OBJ)
    vs = three["vs_baseline"]
    assert vs["chosen_from"] == 3 and vs["level"] == pytest.approx(1 - 0.05 / 9)
    assert vs["verdict"] == "no detectable difference", vs["metrics"]["loss_cv"]
    # the same runs, chosen among 3: a tie, and the defaults, which held, are the pick
    assert three["pick"]["first_choice"] == BEST and three["pick"]["defaults_preferred"]
    assert three["pick"]["number"] == 0
    line = pd.format_line(vs)
    assert line.endswith(
        "(each metric's interval at 99.4%: 3 metrics compared, the pick chosen among 3 on "
        "these seeds)"
    ), line


def test_only_the_searched_candidates_verified_at_the_picks_length_count(tmp_path: Path) -> None:
    cands = pk.candidates(_study(tmp_path, 2))
    first = next(c for c in cands if c.number == BEST)
    assert vd.chosen_among(cands, first) == 3  # the baseline is compared with, not chosen
    longer = [c if c.number != 1 else type(c)(**{**c.__dict__, "steps": 60}) for c in cands]
    assert vd.chosen_among(longer, first) == 2  # verified at another length: another choice
    unverified = [type(c)(**{**c.__dict__, "verified": None}) for c in cands]
    assert vd.chosen_among(unverified, first) == 0


def _runs(values: list[float]) -> dict[str, Any]:
    rows = [
        {
            "seed": s,
            "outcome": "complete",
            "summary": {"steps_run": 10, "steps_planned": 10, "metrics": {"final_loss": v}},
        }
        for s, v in enumerate(values, 1)
    ]
    return summarize_seeds(rows, metrics=["final_loss"])


def test_a_pick_no_better_than_the_defaults_rarely_reads_better() -> None:
    """Three candidates and the baseline from one distribution (half the variance the seed's),
    the pick the lowest mean over 3 seeds: uncounted, `better` ~5-6% of the time (2.4% for a
    configuration fixed in advance); with the 3 counted, about the 2.5% intended."""
    rng = random.Random(11)
    draws, counted, uncounted = 1500, 0, 0
    for _ in range(draws):
        seed_part = [rng.gauss(0.0, math.sqrt(0.5)) for _ in range(3)]

        def config() -> list[float]:
            return [math.exp(s + rng.gauss(0.0, math.sqrt(0.5))) for s in seed_part]  # noqa: B023

        base = _runs(config())
        pick = min((config() for _ in range(3)), key=lambda c: sum(map(math.log, c)))
        mine, metrics = _runs(pick), [("final_loss", "minimize")]
        counted += pd.compare(mine, base, metrics, chosen_from=3)["verdict"] == "better"
        uncounted += pd.compare(mine, base, metrics)["verdict"] == "better"
    # 2.0% and 6.3% with this generator: what the count corrects, by a margin of draws
    assert counted / draws < 0.03 and uncounted / draws > 0.045, (counted, uncounted)
    assert counted < uncounted / 2, (counted, uncounted)
