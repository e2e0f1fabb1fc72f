"""A promise verified over seeds judged by the interval of the difference between what was
measured here and what was promised (Welch's t interval, `autotune.recipe.unpaired`; a ratio
for a positive metric): "as promised" only where that interval holds no change, the interval
printed beside the verdict, and "too few seeds to tell" where either side has fewer than 3 seeds
(`promise.compare_promise`). Measured values are summarized as `verify` summarizes its runs;
the promises are numbers a study records. Expected values are worked by hand."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest
from assets.recipes import make_recipe, measured

from autotune.recipe import paired, unpaired
from autotune.recipe import promise as pm
from autotune.recipe.seeds import format_interval, summarize_seeds


def judged(promises: dict[str, dict[str, Any]], got: dict[str, Any]) -> list[dict[str, Any]]:
    r = replace(make_recipe(), achieved=promises)
    return pm.compare_promise(r, got, same_hardware=True)


def verified(direction: str, mean: float, low: float, high: float, n: int) -> dict[str, Any]:
    return {
        "direction": direction,
        "value": mean,
        "verified": {"mean": mean, "low": low, "high": high, "n": n},
    }


# loss_drop promised 0.5 [0.45, 0.55] over 5 seeds: se 0.05 / t(0.975, 4) = 0.05 / 2.776.
LOSS_DROP = verified("maximize", 0.5, 0.45, 0.55, 5)
# Five seeds here, 0.40 ... 0.48: mean 0.44, s 0.031623, se 0.014142, their 95% interval
# 0.44 ± 2.776 · 0.014142 = [0.4007, 0.4793]: it overlaps the promise's [0.45, 0.55].
SHIFTED = [0.40, 0.42, 0.44, 0.46, 0.48]


def test_five_seeds_with_a_clear_shift_are_worse_where_the_intervals_overlap() -> None:
    got = measured("loss_drop", SHIFTED)
    iv = got["metrics"]["loss_drop"]
    assert iv["low"] == pytest.approx(0.4007, abs=1e-4) and iv["high"] > 0.45  # they overlap
    (row,) = judged({"loss_drop": LOSS_DROP}, got)
    # by hand: d = 0.44 - 0.5 = -0.06; se = √(0.018012² + 0.014142²) = 0.022900;
    # Welch's df = se⁴ / (0.018012⁴/4 + 0.014142⁴/4) = 7.57, t(0.975, 7) = 2.365;
    # -0.06 ± 0.05416 = [-0.1142, -0.0058]: it leaves out 0, lower, and loss_drop is maximised
    diff = row["difference"]
    assert diff["scale"] == "linear" and diff["level"] == 0.95
    assert diff["df"] == pytest.approx(7.574, abs=1e-3)
    assert diff["mean"] == pytest.approx(-0.06)
    assert diff["low"] == pytest.approx(-0.11416, abs=1e-4)
    assert diff["high"] == pytest.approx(-0.00584, abs=1e-4)
    assert row["verdict"] == "WORSE than promised"
    assert pm.promise_line(row, format_interval) == (
        "  loss_drop      promised 0.5 [0.45, 0.55]  measured 0.44 [0.4007, 0.4793]  -> WORSE "
        "than promised (-0.06 [-0.114, -0.00584])"
    )
    # a WORSE on a metric that measures the configuration: `verify` exits 1, saying it
    report = {"recipe_result": got, "promise": [row]}
    assert paired.verify_problems(report) == ["loss_drop: WORSE than promised"]
    # the same seeds minimised: better, by the same interval
    (row,) = judged({"loss_drop": {**LOSS_DROP, "direction": "minimize"}}, got)
    assert row["verdict"] == "better than promised"


def test_two_seeds_that_overlap_the_promise_are_too_few_to_tell_never_as_promised() -> None:
    # `verify --seeds 2`: one degree of freedom, the mean ± 12.706 standard errors
    got = measured("loss_drop", [0.46, 0.50])  # 0.48 ± 12.706 · 0.02 = [0.2259, 0.7341]
    (row,) = judged({"loss_drop": LOSS_DROP}, got)
    assert row["verdict"] == (
        "too few seeds to tell (2 measured: the loss_drop interval is [0.226, 0.734]; "
        "--seeds 3 or more)"
    )
    assert "difference" not in row
    assert pm.promise_line(row, format_interval).endswith("-> " + row["verdict"])
    # never a reason to exit 1, and never "as promised"
    assert paired.verify_problems({"recipe_result": got, "promise": [row]}) == []
    # a positive metric over 2 seeds says its span as a ratio
    promise = verified("minimize", 0.01094, 0.01041, 0.0115, 3)
    (row,) = judged({"noise_per_drop": promise}, measured("noise_per_drop", [0.0108, 0.0113]))
    span = math.exp(2 * 12.706 * abs(math.log(0.0113 / 0.0108)) / 2)
    assert row["verdict"] == (
        f"too few seeds to tell (2 measured: the noise_per_drop interval spans {span:.3g}x; "
        "--seeds 3 or more)"
    )
    # 3 seeds of which one diverged: 2 complete seeds, too few as well
    runs = [
        {"seed": s, "outcome": o, "summary": {"metrics": {"noise_per_drop": v}}}
        for s, o, v in ((1, "complete", 0.0108), (2, "complete", 0.0113), (3, "diverged", 9.0))
    ]
    got = summarize_seeds(runs, ["noise_per_drop"])
    (row,) = judged({"noise_per_drop": promise}, got)
    assert row["verdict"].startswith("too few seeds to tell (2 measured: ")


def test_as_promised_says_its_interval_and_three_seeds_are_judged() -> None:
    # noise_per_drop promised as a study verified it: 0.01094 [0.01041, 0.0115] over 3 seeds;
    # 3 fresh seeds here near it: as promised, with the ratio's interval (log scale)
    promise = verified("minimize", 0.01094, 0.01041, 0.0115, 3)
    got = measured("noise_per_drop", [0.0101, 0.0112, 0.0121])
    (row,) = judged({"noise_per_drop": promise}, got)
    diff = row["difference"]
    assert diff["scale"] == "log" and diff["low"] < 1.0 < diff["high"]
    assert row["verdict"] == "as promised"
    line = pm.promise_line(row, format_interval)
    text = unpaired.difference_text(diff)
    assert line.endswith(f"-> as promised ({text})") and text.startswith("x")
    assert pm.promise_header([row]) == (
        "against the recipe's promise (measured against promised, 95% interval):"
    )
    # the ratio of the means, by hand: the geometric mean here over the promise's
    geo = math.exp(sum(math.log(v) for v in (0.0101, 0.0112, 0.0121)) / 3)
    assert diff["mean"] == pytest.approx(geo / 0.01094)


def test_twice_the_promised_noise_on_three_seeds_is_worse() -> None:
    promise = verified("minimize", 0.01094, 0.01041, 0.0115, 3)
    got = measured("noise_per_drop", [0.0205, 0.0221, 0.0240])
    (row,) = judged({"noise_per_drop": promise}, got)
    assert row["verdict"] == "WORSE than promised" and row["difference"]["low"] > 1.5
    assert paired.verify_problems({"recipe_result": got, "promise": [row]}) == [
        "noise_per_drop: WORSE than promised"
    ]


def test_the_metrics_judged_share_the_error_as_the_paired_verdict_does() -> None:
    # two metrics judged at once: each interval at 97.5% (`paired.family_level`), said above
    # the rows; at 95% each, one of two unchanged metrics reads a difference about 1 time in 10
    promises = {
        "loss_drop": LOSS_DROP,
        "noise_per_drop": verified("minimize", 0.01094, 0.01041, 0.0115, 3),
    }
    runs = [
        {
            "seed": i,
            "outcome": "complete",
            "summary": {"metrics": {"loss_drop": a, "noise_per_drop": b}},
        }
        for i, (a, b) in enumerate(
            zip(SHIFTED, [0.0101, 0.0112, 0.0121, 0.0105, 0.0117], strict=True)
        )
    ]
    got = summarize_seeds(runs, ["loss_drop", "noise_per_drop"])
    rows = judged(promises, got)
    assert [r["difference"]["level"] for r in rows] == [0.975, 0.975]
    # at 97.5% (t(0.9875, 7) = 2.841): -0.06 ± 0.06506 holds 0; at 95% it did not
    assert rows[0]["difference"]["low"] == pytest.approx(-0.06 - 2.8412 * 0.022900, abs=1e-4)
    assert rows[0]["verdict"] == "as promised"
    assert pm.promise_header(rows) == (
        "against the recipe's promise (measured against promised, each interval at 97.5%: "
        "2 metrics judged):"
    )


def test_the_standard_error_is_read_from_the_wider_half() -> None:
    # a count's interval clipped at 0 (`seeds.bounded`): its upper half is the one measured
    iv = {"mean": 0.3333, "low": 0.0, "high": 1.768}
    assert unpaired.standard_error(iv, 3, log=False) == pytest.approx((1.768 - 0.3333) / 4.303)
    assert unpaired.standard_error(iv, 1, log=False) is None
    assert unpaired.standard_error({"mean": 1.0}, 3, log=False) is None
    # neither side varied (a workload whose seeds agree to the last digit): the difference
    # itself, no interval around it
    same = {"mean": 0.5, "low": 0.5, "high": 0.5}
    d = unpaired.difference("loss_drop", same, 3, same, 3)
    assert d is not None and (d["low"], d["high"], d["df"]) == (0.0, 0.0, None)


# What `autotune verify` measured on a 2-core CPU (2026-12-05) of a gradclip study's pick
# (trial 4: lr 0.3, clip 1.8, warm-up 90; 750 steps), whose study promised noise_per_drop
# 0.01094 [0.01041, 0.0115] over seeds 1-3; per seed, noise_per_drop.
PROMISED = verified("minimize", 0.010943505039454893, 0.010414850514081241, 0.0114989939017, 3)
FRESH = [0.008821, 0.01173, 0.01466, 0.01135, 0.009032]  # the recipe, seeds 100-104
LR_1 = [0.03447, 0.05479, 0.04726]  # lr raised to 1.0 by hand (digests removed), seeds 1-3
LR_06 = [0.2437, 0.05839, 0.02591]  # lr 0.6: one seed spikes (12 spikes a run on average)


def test_real_runs_the_recipe_holds_and_a_recipe_made_worse_is_caught() -> None:
    (row,) = judged({"noise_per_drop": PROMISED}, measured("noise_per_drop", FRESH))
    assert row["verdict"] == "as promised"
    assert unpaired.difference_text(row["difference"]) == "x0.998 [x0.768, x1.3]"  # 95%: one metric
    # 4x noisier on every seed: worse, exit 1 (the intervals are apart: so it was before)
    got = measured("noise_per_drop", LR_1)
    (row,) = judged({"noise_per_drop": PROMISED}, got)
    assert row["verdict"] == "WORSE than promised" and row["difference"]["low"] > 1.5
    assert paired.verify_problems({"recipe_result": got, "promise": [row]}) != []
    # 6.5x noisier, spread over two orders of magnitude: the overlap rule said "as promised";
    # the ratio's interval holds 1 only because it holds nearly any change
    (row,) = judged({"noise_per_drop": PROMISED}, measured("noise_per_drop", LR_06))
    assert row["verdict"].startswith("too few seeds to tell (3 measured: x6.55 [x0.")
    assert row["verdict"].endswith("cannot tell a 2-fold change; more seeds narrow it)")
    assert pm.promise_line(row, format_interval).count("x6.55") == 1  # said once
