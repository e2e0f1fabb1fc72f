"""The paired verdict's per-side rows carry the interval each side's own seeds summary reports
when they are over the same seeds (`intervals.same_seed_intervals`, applied by
`paired.compare`): so `verify --json` and `migrate`, which call it directly, give one interval
per quantity, as the study's `show --json` does (tests/study/test_bb4_one_interval.py)."""

from __future__ import annotations

from assets.recipes import measured

from autotune.recipe import paired

TIMED = ("throughput", "maximize")


def test_a_row_over_the_same_seeds_takes_the_sides_own_interval() -> None:
    # each run's own timing interval is much wider than the spread over the seeds
    mine = measured("throughput", [1000.0, 1100.0, 1050.0], throughput_low=500.0,
                    throughput_high=1600.0)  # fmt: skip
    base = measured("throughput", [900.0, 950.0, 920.0], throughput_low=450.0,
                    throughput_high=1400.0)  # fmt: skip
    row = paired.compare(mine, base, [TIMED])["metrics"]["throughput"]
    assert row["pick"] == mine["metrics"]["throughput"]
    assert row["baseline"] == base["metrics"]["throughput"]
    assert row["pick"]["high"] > 1500.0, "widened to the runs' own intervals"


def test_a_row_over_fewer_seeds_keeps_its_own() -> None:
    mine = measured("throughput", [1000.0, 1100.0, 1050.0], throughput_low=500.0,
                    throughput_high=1600.0)  # fmt: skip
    base = measured("throughput", [900.0, 950.0], throughput_low=450.0, throughput_high=1400.0)
    row = paired.compare(mine, base, [TIMED])["metrics"]["throughput"]
    assert row["pick"] != mine["metrics"]["throughput"], "over seeds 1-2 only, not 1-3"
    assert row["baseline"] == base["metrics"]["throughput"]
