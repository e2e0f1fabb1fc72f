"""What a recipe promised against what `autotune verify` measured (`autotune.recipe.promise`),
where its mutants survived the other tests: a one-seed promise at the ends of the prediction
interval, how many seeds a promise counts, when the one-seed rule applies (a promise of 2 seeds
is not judged; a metric measured over 2 seeds is too few to tell), a verdict not
judged on other hardware, the seeds a recipe records without per-metric seeds, and every mix of
own, probe and fresh seeds.
Pure functions on hand-made recipes and measurements (no probe runs)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from assets.recipes import make_recipe, measured

from autotune.recipe import Recipe
from autotune.recipe import promise as pm
from autotune.recipe.seeds import format_interval, prediction_interval

THREE = [0.1, 0.2, 0.3]  # loss_drop measured on three seeds: can be 0 or negative (linear)


def rows(metric: str, promised: dict[str, Any], got: dict[str, Any], same: bool = True) -> Any:
    r = replace(make_recipe(), achieved={metric: promised})
    out = pm.compare_promise(r, got, same)
    assert len(out) == 1
    return out[0]


def one_seed(direction: str, value: float) -> dict[str, Any]:
    return {"direction": direction, "value": value, "verified": None}


@pytest.mark.parametrize("direction", ["minimize", "maximize"])
def test_a_one_seed_promise_at_either_end_of_the_prediction_interval_is_as_promised(
    direction: str,
) -> None:
    # the interval is closed: a promise on its end is where one more seed may still fall
    low, high = prediction_interval(THREE, "loss_drop")
    got = measured("loss_drop", THREE)
    for end in (low, high):
        r = rows("loss_drop", one_seed(direction, end), got)
        assert r["verdict"] == "as promised", (direction, end)
        assert r["one_seed"]["prediction"] == {"low": low, "high": high}


def test_a_one_seed_promise_inside_a_window_past_twofold_is_too_few_seeds_to_tell() -> None:
    """A blind user check: a 1-seed noise_per_drop promise read "as promised" where one more
    seed would fall in [0.0033, 0.46] (x0.16 to x22 the promise): a window no promise leaves.
    A positive metric's window reaching half or twice the promise tells nothing; a narrow one
    still judges, and a linear metric (no scale to call twofold) keeps its rule (above)."""
    wide = [0.010, 0.040, 0.090]  # noise_per_drop over three seeds here
    low, high = prediction_interval(wide, "noise_per_drop")
    assert low < 0.02 / 2 and high > 0.02 * 2
    r = rows("noise_per_drop", one_seed("minimize", 0.02), measured("noise_per_drop", wide))
    assert r["verdict"].startswith("too few seeds to tell (one seed's spread here reaches half")
    assert r["one_seed"]["prediction"] == {"low": low, "high": high}
    narrow = [0.0200, 0.0205, 0.0210]
    r = rows("noise_per_drop", one_seed("minimize", 0.0204), measured("noise_per_drop", narrow))
    assert r["verdict"] == "as promised"
    r = rows("noise_per_drop", one_seed("minimize", 0.05), measured("noise_per_drop", narrow))
    assert r["verdict"] == "better than promised"


def test_how_many_seeds_a_promise_counts() -> None:
    assert pm.promise_seeds({"value": 1.0}) == 1
    assert pm.promise_seeds({"value": 1.0, "verified": None}) == 1
    assert pm.promise_seeds({"value": 1.0, "verified": {}}) == 1
    assert pm.promise_seeds({"verified": {"mean": 1.0, "low": 0.9, "high": 1.1, "n": 5}}) == 5
    assert pm.promise_seeds({"verified": {"mean": 1.0, "n": 1}}) == 1
    # recorded without `n`: an interval means seeds (at least 2), none means the one run
    assert pm.promise_seeds({"verified": {"mean": 1.0, "low": 0.9, "high": 1.1}}) == 2
    assert pm.promise_seeds({"verified": {"mean": 1.0, "low": None, "high": None}}) == 1
    assert pm.promise_seeds({"verified": {"mean": 1.0}}) == 1


def test_a_verification_with_one_end_of_its_interval_counts_as_seeds() -> None:
    # the recipe file allows one end alone (`recorded.verified` checks each end on its own): an
    # interval over seeds still, judged by the difference with the half it has; without its
    # number of seeds (`n`) no standard error can be read from it: not judged, saying so
    assert pm.promise_seeds({"verified": {"mean": 1.0, "low": 0.9, "high": None}}) == 2
    assert pm.promise_seeds({"verified": {"mean": 1.0, "low": None, "high": 1.1}}) == 2
    for end in ({"low": 0.45}, {"high": 0.55}):
        promised = {"direction": "minimize", "value": 9.0, "verified": {"mean": 0.5, **end}}
        r = rows("loss_drop", promised, measured("loss_drop", THREE))  # [-0.048, 0.448]
        assert r["verdict"] == (
            "not judged (a promise without its number of seeds: achieved.loss_drop.verified.n)"
        )
        assert "one_seed" not in r and "difference" not in r, end
        promised["verified"]["n"] = 3
        r = rows("loss_drop", promised, measured("loss_drop", THREE))
        assert r["verdict"] == "better than promised" and "one_seed" not in r, end
        assert r["difference"]["high"] < 0  # 0.2 - 0.5 and its interval: below no change


def test_a_promise_of_two_seeds_is_not_judged_whatever_its_metric() -> None:
    # two seeds verified: an interval of the mean, not one draw, but of one degree of freedom
    # (12.7 standard errors a side): not judged, as a throughput promise of 2 seeds is (the
    # overlap rule judged it, "better than promised" here)
    verified: dict[str, Any] = {"mean": 0.5, "low": 0.45, "high": 0.55, "n": 2}
    two = {"direction": "minimize", "value": 9.0, "verified": verified}
    r = rows("loss_drop", two, measured("loss_drop", THREE))  # [-0.048, 0.448]: lower
    assert r["verdict"] == (
        "not judged (a promise from 2 seeds: the loss_drop interval is [0.45, 0.55]; too few "
        "seeds to compare loss_drop (verify.seeds >= 3))"
    )
    assert "one_seed" not in r and "difference" not in r
    assert pm.promise_line(r, format_interval).endswith("-> " + r["verdict"])
    # the same without `n`: its interval says it is from seeds, not how many
    del verified["n"]
    r = rows("loss_drop", two, measured("loss_drop", THREE))
    assert r["verdict"].startswith("not judged (a promise without its number of seeds")


def test_throughput_measured_on_two_seeds_is_too_few_seeds_to_tell() -> None:
    # a black-box review: `verify --seeds 2` called throughput "as promised" against a measured
    # interval of one degree of freedom spanning 3.8x; the measured side keeps the promise's
    # rule (3 seeds at least), whichever side of the promise the two seeds fall
    promised = {
        "direction": "maximize",
        "value": 6.665e4,
        "verified": {"mean": 6.665e4, "low": 5.874e4, "high": 7.479e4, "n": 3},
    }
    got = measured("throughput", [5.5e4, 9.2e4])
    iv = got["metrics"]["throughput"]
    assert iv["n"] == 2 and iv["low"] < 5.874e4 and iv["high"] > 7.479e4  # overlaps: the old rule
    span = iv["high"] / iv["low"]
    for same in (True, False):  # not judged: nothing to call not comparable either
        r = rows("throughput", promised, got, same=same)
        assert r["verdict"] == (
            f"too few seeds to tell (2 measured: the throughput interval spans {span:.3g}x; "
            "--seeds 3 or more)"
        )
        assert "one_seed" not in r
    r = rows("throughput", promised, measured("throughput", [9.0e4, 9.1e4]))
    assert r["verdict"].startswith("too few seeds to tell (2 measured: ")
    # three seeds measured: the overlap rule, as before
    r = rows("throughput", promised, measured("throughput", [6.4e4, 6.6e4, 6.9e4]))
    assert r["verdict"] == "as promised"
    # a metric that is not timed is held to the same rule over 2 seeds measured (the overlap
    # rule called this "as promised")
    loss = {
        "direction": "minimize",
        "value": 0.5,
        "verified": {"mean": 0.5, "low": 0.45, "high": 0.55, "n": 3},
    }
    assert rows("loss_drop", loss, measured("loss_drop", [0.5, 0.52]))["verdict"] == (
        "too few seeds to tell (2 measured: the loss_drop interval is [0.383, 0.637]; "
        "--seeds 3 or more)"
    )


def test_throughput_on_one_run_is_not_judged_on_any_hardware_and_records_why() -> None:
    promised = {
        "direction": "maximize",
        "value": 7.0e4,
        "verified": {"mean": 7.2e4, "low": 7.0e4, "high": 7.4e4, "n": 3},
    }
    got = measured("throughput", [7.9e4], throughput_low=7.6e4, throughput_high=8.3e4)
    why = "not judged (throughput measured on 1 seed: one run's timing interval)"
    for same in (True, False):  # nothing judged: nothing to call not comparable either
        r = rows("throughput", promised, got, same=same)
        assert r["verdict"] == why, same
        # the promise was of 3 seeds: the rule applied for the measurement, not the promise
        assert r["one_seed"] == {"promise_seeds": None, "measured_seeds": 1, "prediction": None}
    # a one-seed promise not judged (one seed here) on other hardware: not judged either
    r = rows("throughput", one_seed("maximize", 7.0e4), got, same=False)
    assert r["verdict"] == "not judged (a promise from 1 seed)"
    assert r["one_seed"]["promise_seeds"] == 1


def test_only_complete_seeds_count_as_the_seeds_measured() -> None:
    runs = {
        "runs": [
            {"seed": 1, "outcome": "complete", "metrics": {"loss_cv": 0.1}},
            {"seed": 2, "outcome": "diverged", "metrics": {"loss_cv": 0.9}},
            {"seed": 3, "outcome": "failed", "metrics": {"loss_cv": 0.8}},
            {"seed": 4, "outcome": "complete", "metrics": {"loss_cv": float("nan")}},
            {"seed": 5, "outcome": "complete", "metrics": {"loss_cv": None}},
            {"seed": 6, "outcome": "complete", "metrics": {"loss_cv": 0.2}},
        ]
    }
    assert pm.seed_values(runs, "loss_cv") == [0.1, 0.2]


def recipe_with(seeds: list[int] | None = None, runs: list[Any] | None = None) -> Recipe:
    """A recipe whose study probed seed 0 and verified it on `seeds` (per metric) or recorded
    only its verified `runs`."""
    verified: dict[str, Any] | None = None
    if seeds is not None:
        verified = {"mean": 0.05, "low": 0.04, "high": 0.06, "n": 3, "seeds": seeds}
    achieved = {"loss_cv": {"direction": "minimize", "value": 0.05, "verified": verified}}
    recorded = {} if runs is None else {"verified": {"steps": 50, "runs": runs}}
    return replace(make_recipe(), achieved=achieved, recorded=recorded)


def test_the_recorded_seeds_come_from_the_recorded_runs_without_per_metric_seeds() -> None:
    runs = [
        {"seed": 3, "metrics": {"loss_cv": 0.05}},
        {"seed": None, "metrics": {"loss_cv": 0.06}},  # a run without its seed is left out
        {"seed": 5, "metrics": {"loss_cv": 0.04}},
    ]
    assert pm.recorded_seeds(recipe_with(runs=runs)) == [3, 5]
    assert pm.recorded_seeds(recipe_with(seeds=[7, 8], runs=runs)) == [7, 8]  # per metric first
    assert pm.recorded_seeds(recipe_with()) == []
    origin = pm.seed_origin(recipe_with(runs=runs), [3, 5])
    assert origin["own"] == [3, 5] and origin["recorded"] == [3, 5]


def test_the_next_fresh_seed_is_past_the_highest_recorded_one() -> None:
    r = recipe_with(seeds=[200, 201, 202])
    assert pm.seed_origin(r, [200, 201, 202])["text"] == (
        "seeds [200, 201, 202]: the study's own verification seeds (on the same machine they "
        "reproduce its numbers; --first-seed 203 checks on fresh seeds)"
    )


@pytest.mark.parametrize(
    ("seeds", "text"),
    [
        ([0], "[0] the study's probe seed (the trial's own run)"),
        ([1, 9], "[1] the study's own verification seeds, [9] fresh"),
        ([0, 9], "[0] the study's probe seed (the trial's own run), [9] fresh"),
        (
            [0, 2],
            "[2] the study's own verification seeds, [0] the study's probe seed (the trial's "
            "own run)",
        ),
    ],
)
def test_each_mix_of_seeds_names_only_the_kinds_present(seeds: list[int], text: str) -> None:
    r = recipe_with(seeds=[1, 2, 3])  # probe seed 0
    origin = pm.seed_origin(r, seeds)
    assert origin["text"] == f"seeds {seeds}: {text}"
    kinds = {k: origin[k] for k in ("own", "probe", "fresh")}
    assert sorted(s for ss in kinds.values() for s in ss) == sorted(seeds)


def divergence_row(n: int, diverged: int, failed: int, promised_on: int = 3) -> dict[str, Any]:
    """The divergence promise (0% of `promised_on` seeds) against `n` seeds here, some diverged,
    some failed."""
    verified = {"mean": 0.05, "low": 0.04, "high": 0.06, "n": promised_on, "diverged_share": 0.0}
    verified["seeds"] = list(range(1, promised_on + 1))
    r = replace(
        make_recipe(),
        achieved={"loss_cv": {"direction": "minimize", "value": 0.05, "verified": verified}},
    )
    got = {"n": n, "failed": failed, "diverged_share": diverged / n, "metrics": {}}
    return next(p for p in pm.compare_promise(r, got, True) if p["metric"] == "diverged")


def test_the_divergence_share_is_over_the_seeds_that_ran_and_none_when_none_ran() -> None:
    # 4 seeds, 1 failed, 2 diverged: 2 of the 3 that ran (not 2 of 4, nor every seed),
    # against 0 of 10 promised: beyond chance
    row = divergence_row(4, diverged=2, failed=1, promised_on=10)
    assert row["measured"]["mean"] == pytest.approx(2 / 3)
    assert row["verdict"] == "WORSE than promised (2 of 3 here vs 0 of 10 promised: beyond " + (
        "chance, p = 0.038)"
    )
    assert pm.promise_line(row, None) == (
        "  diverged       promised 0% of seeds  measured 67%  -> WORSE than promised (2 of 3 "
        "here vs 0 of 10 promised: beyond chance, p = 0.038)"
    )
    # every seed failed: nothing measured, nothing judged, and the line says n/a
    row = divergence_row(2, diverged=0, failed=2)
    assert row["measured"]["mean"] is None
    assert pm.promise_line(row, None) == (
        "  diverged       promised 0% of seeds  measured n/a  -> not judged: every seed failed "
        "(2 of 2)"
    )


def test_a_throughput_promise_from_two_seeds_is_not_judged() -> None:
    # 2 seeds: a t-interval with one degree of freedom, 357x wide; nothing measured could
    # break it, so "as promised" against it would claim what nothing checked
    wide = {"mean": 2.5e4, "low": 1335.0, "high": 4.771e5, "n": 2}
    promised = {"direction": "maximize", "value": 2.5e4, "verified": wide}
    r = rows("throughput", promised, measured("throughput", [1.7e4, 1.9e4, 2.1e4]))
    assert r["verdict"] == (
        "not judged (a promise from 2 seeds: the throughput interval spans 357x; too few "
        "seeds to compare throughput (verify.seeds >= 3))"
    )
    # from three seeds it is judged, by the interval of measured / promised: 1.89e4 against
    # 2.5e4 [2.0e4, 3.0e4] (the intervals overlap: the overlap rule said "as promised")
    three = dict(promised, verified=dict(wide, n=3, low=2.0e4, high=3.0e4))
    r = rows("throughput", three, measured("throughput", [1.7e4, 1.9e4, 2.1e4]))
    assert r["verdict"] == "WORSE than promised"
    assert r["difference"]["high"] < 1.0 and r["difference"]["scale"] == "log"
    r = rows("throughput", three, measured("throughput", [2.2e4, 2.4e4, 2.6e4]))
    assert r["verdict"] == "as promised"
    # a metric that is not timed is held to the same rule from 2 seeds (the overlap rule:
    # "better than promised")
    loss = {
        "direction": "minimize",
        "value": 0.5,
        "verified": dict(wide, mean=0.5, low=0.45, high=0.55),
    }
    assert rows("loss_drop", loss, measured("loss_drop", THREE))["verdict"] == (
        "not judged (a promise from 2 seeds: the loss_drop interval is [0.45, 0.55]; too few "
        "seeds to compare loss_drop (verify.seeds >= 3))"
    )
