"""benchmarks/carried_on.py's judgement, without training: a trial's configuration goes back to
`--set` exactly, and a carried run is judged truly divergent, recovered or falsely labelled by
the calibration's rule, with the study's spend on the truly divergent counted as saved or not."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest
from assets.bench import imported
from hypothesis import given
from hypothesis import strategies as hs

from autotune.errors import SpaceError
from autotune.space import yaml_reader

TARGET = 100
B = 8  # samples per step


@pytest.fixture(scope="module")
def bench() -> Iterator[ModuleType]:
    with imported("carried_on") as module:
        yield module


@given(
    hs.one_of(
        hs.floats(allow_nan=False, allow_infinity=False),
        hs.integers(-(10**9), 10**9),
        hs.booleans(),
        hs.sampled_from(["global", "per_layer", "none", "1e-07"]),
    )
)
def test_a_value_comes_back_from_set_exactly(bench: ModuleType, value: Any) -> None:
    back = yaml_reader.load(bench.as_yaml(value), "--set", SpaceError)
    assert back == value and type(back) is type(value)


def trial(final: float | None, *, labelled: bool = False, baseline: bool = False, **kw: Any):
    run = {"status": "ok", "cause": None, "initial_loss": 2.0, "final_loss": final}
    return {
        "params": {},
        "baseline": baseline,
        "labelled": ["r0: no_recovery"] if labelled else [],
        "search": kw.get("search", 10 * B),
        "verify": kw.get("verify", 0),
        "finals": kw.get("finals", {}),
        "samples_per_step": B,
        "carried": {**run, **kw.get("run", {})},
    }


def test_truth_false_labels_and_savings(bench: ModuleType) -> None:
    trials = {
        0: trial(0.5, baseline=True, search=TARGET * B),  # the yardstick: never a saving
        1: trial(0.4, labelled=True, finals={TARGET: 0.4}),  # best: its label is false
        2: trial(0.43, labelled=True),  # within 10% of the best: false too
        3: trial(0.7, search=20 * B),  # above 1.5x the best: truly divergent
        4: trial(1.9, search=10 * B, verify=TARGET * B),  # stuck at 0.95x its start; verified
        5: trial(None, run={"status": "diverged", "cause": "nonfinite_loss"}, labelled=True),
        6: trial(0.55),  # 1.375x the best: recovered
    }
    out = bench.judge(trials, TARGET)
    truth = {n: t["truth"].split(":")[0] for n, t in trials.items()}
    assert truth == {
        0: "recovered",
        1: "recovered",
        2: "recovered",
        3: "divergent",
        4: "divergent",
        5: "divergent",
        6: "recovered",
    }
    assert out["labelled"] == [1, 2, 5] and out["false"] == [1, 2]
    assert out["divergent"] == [3, 4, 5] and out["divergent_verified"] == [4]
    assert out["spent"] == (20 + 10 + 10) * B and out["of"] == 3 * TARGET * B
    assert out["saved"] == pytest.approx(1 - 40 / 300)
    assert out["self_check"] == {"n": 1, "max_rel_diff": 0.0}
    # the strict subset: 4 learned nothing (0.95x its start), 5 is non-finite; 3 learned
    assert out["stuck"] == {"numbers": [4, 5], "spent": 20 * B, "of": 2 * TARGET * B, "saved": 0.9}
    assert not out["baseline_divergent"]


def test_nothing_truly_divergent_saves_nothing_to_count(bench: ModuleType) -> None:
    out = bench.judge({0: trial(0.5, baseline=True), 1: trial(2.5)}, TARGET)
    assert out["baseline_divergent"] is False and out["divergent"] == [1]
    out = bench.judge({0: trial(2.5, baseline=True), 1: trial(0.5)}, TARGET)
    assert out["baseline_divergent"] and out["divergent"] == [] and out["saved"] is None
