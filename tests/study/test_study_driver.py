"""Driver-side parts of `autotune study` that need no Ray: the time-left estimate, the sampler's
seed on resume, and the objective names stored with the Optuna study (a real SQLite storage)."""

from __future__ import annotations

from pathlib import Path

import pytest
from assets import studies as h
from hypothesis import given
from hypothesis import strategies as st

from autotune import space as sp
from autotune import study as sd

seconds = st.floats(min_value=0.1, max_value=3600.0)


@given(
    unstarted=st.integers(min_value=0, max_value=50),
    durations=st.lists(seconds, min_size=1, max_size=20),
    elapsed=st.lists(st.floats(min_value=0.0, max_value=3600.0), max_size=8),
    concurrency=st.integers(min_value=1, max_value=8),
    steps=st.lists(st.floats(min_value=0.0, max_value=600.0), min_size=1, max_size=10),
)
def test_eta_only_falls_while_no_trial_finishes(
    unstarted: int,
    durations: list[float],
    elapsed: list[float],
    concurrency: int,
    steps: list[float],
) -> None:
    last = sd.eta_s(unstarted, durations, elapsed, concurrency)
    assert last is not None and last >= 0
    for dt in steps:
        elapsed = [e + dt for e in elapsed]
        now = sd.eta_s(unstarted, durations, elapsed, concurrency)
        assert now is not None
        assert now <= last + 1e-9, (last, now)
        last = now


def test_eta_waits_for_a_finished_trial_then_counts_what_is_left() -> None:
    assert sd.eta_s(5, [], [30.0], 1) is None, "no ETA before a trial has finished"
    # One at a time, trials of 60 s: 3 to start and one 20 s into its run.
    assert sd.eta_s(3, [60.0], [20.0], 1) == pytest.approx(3 * 60 + 40)
    # Two slots: the work is shared, but the study cannot end before its running trial does.
    assert sd.eta_s(1, [60.0, 60.0], [50.0, 50.0], 2) == pytest.approx((60 + 10 + 10) / 2)
    assert sd.eta_s(0, [60.0], [0.0], 4) == pytest.approx(60)
    # The running trial finishes (after 70 s): the next one starts, the mean moves to 65 s.
    assert sd.eta_s(2, [60.0, 70.0], [0.0], 1) == pytest.approx(3 * 65)
    # A trial that runs longer than the mean adds nothing more; the last one done: 0.
    assert sd.eta_s(0, [60.0], [90.0], 1) == 0
    assert sd.eta_s(0, [60.0], [], 1) == 0


def test_a_resumed_study_gets_another_sampler_seed_a_fresh_one_keeps_its_own() -> None:
    assert sd.sampler_seed(7, 0) == 7
    resumed = [sd.sampler_seed(7, n) for n in range(1, 50)]
    assert len(set(resumed)) == len(resumed)
    assert resumed == [sd.sampler_seed(7, n) for n in range(1, 50)], "not reproducible"
    assert all(0 <= s < 2**32 for s in resumed)
    assert 0 <= sd.sampler_seed(-3, 2) < 2**32, "a negative seed is accepted too"


def test_objectives_are_named_on_new_and_existing_studies(tmp_path: Path) -> None:
    import optuna

    space = sp.loads(h.mlp_space("named", trials=3), source="named.yaml")
    old_space = sp.loads(h.mlp_space("old", trials=3), source="old.yaml")
    cond = sp.condition(space, platform="cpu")
    metrics = [o.metric for o in space.objectives]
    assert len(metrics) >= 2, "the default space has two objectives"
    url = f"sqlite:///{tmp_path / 'optuna.db'}"

    fresh = sd.open_study(sd.StudyOptions(space=space), sd.open_storage(url), cond)
    assert fresh.metric_names == metrics

    # A study stored before its objectives were named gets the names when it resumes.
    old = optuna.create_study(study_name="old", storage=url, directions=sd.directions(space))
    assert old.metric_names is None
    resumed = sd.open_study(sd.StudyOptions(space=old_space), sd.open_storage(url), cond)
    assert resumed.metric_names == metrics
    assert optuna.load_study(study_name="old", storage=url).metric_names == metrics
