"""The divergence monitor's edges, where a changed comparison or a dropped branch would change a
verdict or a reported number (autotune.probe.divergence): the thresholds' bounds and messages,
the onset of immediate verdicts, the order of two verdicts at one step, a spike with nothing
before it, the gradient event the anomaly report reads, and the recorded numbers' rounding.
Written against the survivors of `benchmarks/mutation.py` (benchmarks/RESULTS.md)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from autotune.probe import divergence as d

NO_PERSIST = d.DivergenceThresholds(persist_steps=10**6, recovery_window=20)
"""Spikes never persist long enough; a recovery check is judged 20 steps after its spike."""


def message(**bad: object) -> str:
    with pytest.raises(ValueError) as err:
        d.DivergenceThresholds(**bad)  # type: ignore[arg-type]
    return str(err.value)


# ----- thresholds -----------------------------------------------------------------------------


def test_each_explosion_factor_must_be_positive_on_its_own() -> None:
    for key in ("loss_explosion_factor", "grad_explosion_factor"):
        assert message(**{key: 0.0}) == "explosion factors must be positive"
        assert message(**{key: -1.0}) == "explosion factors must be positive"
        below_one: dict[str, Any] = {key: 0.5}  # fine
        assert getattr(d.DivergenceThresholds(**below_one), key) == 0.5


def test_skipped_fraction_is_in_zero_to_one_open_at_one() -> None:
    assert d.DivergenceThresholds(skipped_fraction=0.0).skipped_fraction == 0.0
    for bad in (1.0, 1.5, -0.1):
        assert message(skipped_fraction=bad) == "skipped_fraction must be in [0, 1)"


def test_the_minimum_counts_may_be_one_not_zero() -> None:
    one = d.DivergenceThresholds(grad_history_min=1, skipped_min_steps=1, recovery_window=1)
    assert (one.grad_history_min, one.skipped_min_steps, one.recovery_window) == (1, 1, 1)
    both = "grad_history_min and skipped_min_steps must be at least 1"
    assert message(grad_history_min=0) == both
    assert message(skipped_min_steps=0) == both
    for key in ("persist_steps", "recovery_window"):
        assert message(**{key: 0}) == "persist_steps and recovery_window must be at least 1"


def test_recovery_factor_just_above_one_and_descent_down_to_zero_are_accepted() -> None:
    assert d.DivergenceThresholds(recovery_factor=1.5).recovery_factor == 1.5
    assert message(recovery_factor=1.0) == "recovery_factor must be above 1"
    for ok in (0.0, 0.5):  # at most 1: the descent test is off
        assert d.DivergenceThresholds(recovery_descent=ok).recovery_descent == ok
    assert message(recovery_descent=-0.5) == (
        "recovery_descent must be at least 0 (at most 1: never deferred)"
    )


# ----- bad series -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["grad_norm", "scale", "skipped"])
def test_a_bad_series_is_named_in_the_error(name: str) -> None:
    mon = d.DivergenceMonitor("fp16")
    with pytest.raises(ValueError) as err:
        mon.update([1.0, 1.0], **{name: [[1.0, 1.0]]})
    assert str(err.value) == f"{name} must be a 1-D series, got shape (1, 2)"
    with pytest.raises(ValueError) as err:
        mon.update([1.0, 1.0], **{name: [1.0]})
    assert str(err.value) == f"{name} has 1 steps, loss has 2"
    with pytest.raises(ValueError) as err:
        mon.update([[1.0, 1.0]])
    assert str(err.value) == "loss must be a 1-D series, got shape (1, 2)"


# ----- verdicts ---------------------------------------------------------------------------


def test_an_immediate_verdict_starts_where_it_is_reached() -> None:
    mon = d.DivergenceMonitor("fp32", initial_loss=1.0)
    mon.update(np.ones(5))
    assert mon.update([1.0, np.nan]) == ("nonfinite_loss", 1)
    assert (mon.cause, mon.step, mon.onset) == ("nonfinite_loss", 6, 6)
    mon = d.DivergenceMonitor("bf16", initial_loss=1.0)
    assert mon.update(np.ones(5), grad_norm=[1, 1, 1, np.inf, 1]) == ("grad_explosion", 3)
    assert (mon.step, mon.onset) == (3, 3)
    mon = d.DivergenceMonitor("fp16", initial_loss=1.0)
    assert mon.update(np.ones(4), scale=[1.0, 1.0, 1e-5, 1e-5]) == ("scaler_collapse", 2)
    assert (mon.step, mon.onset) == (2, 2)


def test_the_scale_floor_itself_is_no_collapse() -> None:
    floor = d.DivergenceThresholds().scale_floor
    assert d.DivergenceMonitor("fp16").update([1.0, 1.0], scale=[1.0, floor]) is None
    below = d.DivergenceMonitor("fp16")
    assert below.update([1.0, 1.0], scale=[1.0, floor * 0.99]) == ("scaler_collapse", 1)


def test_a_loss_back_to_exactly_the_recovery_level_has_recovered() -> None:
    # pre-spike losses all 3.0 (MAD 0): the level is F x 3 = 15; the rule is "above" it
    pre = np.full(30, 3.0)
    level = d.RECOVERY_FACTOR * 3.0
    for after, diverged in ((level, False), (level * 1.01, True)):
        loss = np.concatenate([pre, [60.0], np.full(40, after)])
        mon = d.DivergenceMonitor("fp32", initial_loss=3.0, thresholds=NO_PERSIST)
        hit = mon.update(loss)
        assert (hit == ("no_recovery", 50)) is diverged and mon.diverged is diverged


def test_a_nonfinite_loss_at_a_recovery_checks_end_is_the_verdict_reported() -> None:
    # both hold at step 50 (the window's end after the spike at 30): the non-finite loss comes
    # first in the documented order, so it is the verdict, with its own onset
    loss = np.concatenate([np.full(30, 3.0), [60.0], np.full(19, 20.0), [np.nan], [20.0]])
    mon = d.DivergenceMonitor("fp32", initial_loss=3.0, thresholds=NO_PERSIST)
    assert mon.update(loss) == ("nonfinite_loss", 50)
    assert (mon.cause, mon.step, mon.onset) == ("nonfinite_loss", 50, 50)
    # without the non-finite loss the same step is the no-recovery verdict
    loss[50] = 20.0
    mon = d.DivergenceMonitor("fp32", initial_loss=3.0, thresholds=NO_PERSIST)
    assert mon.update(loss) == ("no_recovery", 50)
    assert mon.onset == 30


def test_a_spike_after_only_nonfinite_losses_is_judged_against_the_reference() -> None:
    # the probe runs on (stop_early false): no finite loss before the spike at step 1, so the
    # reference (1.0) is the pre-spike median; 8.0 for the whole window is above 5 x 1.0
    mon = d.DivergenceMonitor("fp32", initial_loss=1.0, thresholds=NO_PERSIST)
    assert mon.update([np.nan, 50.0]) == ("nonfinite_loss", 0)
    assert mon.spike_count == 1
    assert mon.update(np.full(25, 8.0)) == ("no_recovery", 19)  # step 21 = 1 + 20
    # 4.0 is under that level: recovered
    mon = d.DivergenceMonitor("fp32", initial_loss=1.0, thresholds=NO_PERSIST)
    mon.update([np.nan, 50.0])
    assert mon.update(np.full(25, 4.0)) is None


def test_a_spike_with_nothing_to_compare_with_opens_no_recovery_check() -> None:
    # no reference given and every loss before the gradient spike at step 6 non-finite: there is
    # no pre-spike level, so the spike is counted and nothing is judged after it
    loss = np.r_[np.full(6, np.nan), np.full(40, 8.0)]
    grad = np.r_[np.ones(6), [1e6], np.ones(39)]
    mon = d.DivergenceMonitor("fp32", thresholds=NO_PERSIST)
    assert mon.update(loss[:6], grad_norm=grad[:6]) == ("nonfinite_loss", 0)
    assert mon.update(loss[6:], grad_norm=grad[6:]) is None
    assert mon.spike_count == 1 and mon.spikes[0]["cause"] == "grad_explosion"
    assert mon.initial_loss == 8.0 and mon.cause == "nonfinite_loss"


# ----- spikes and the record ------------------------------------------------------------------


def test_the_grad_spike_threshold_scales_with_the_median_norm() -> None:
    # median norm 2.0: the threshold is 1e3 x 2 = 2000 (not 1e3 / 2)
    grad = np.r_[np.full(8, 2.0), [1500.0, 2.0, 2500.0]]
    mon = d.DivergenceMonitor("fp32", initial_loss=1.0, thresholds=NO_PERSIST)
    assert mon.update(np.ones(11), grad_norm=grad) is None
    assert mon.grad_norm_median == 2.0
    assert mon.spike_count == 1 and mon.spikes[0]["step"] == 10


def test_only_the_first_ten_spikes_are_kept_all_are_counted() -> None:
    loss = np.ones(40)
    loss[2:38:3] = 50.0  # 12 single-step spikes
    mon = d.DivergenceMonitor("fp32", initial_loss=1.0, thresholds=NO_PERSIST)
    mon.update(loss)
    assert mon.spike_count == 12 and len(mon.spikes) == d.SPIKES_KEPT == 10
    assert [s["step"] for s in mon.spikes] == list(range(2, 30, 3))


def test_the_record_rounds_the_ratios_to_six_decimals() -> None:
    loss = np.r_[np.full(5, 3.0), [100.0], np.full(5, 3.0)]  # 100 / 3 = 33.333...
    mon = d.DivergenceMonitor("fp32", initial_loss=3.0, thresholds=NO_PERSIST)
    mon.update(loss)
    spike = {"step": 5, "cause": "loss_explosion", "loss_ratio": 33.333333}
    assert mon.spikes == [spike]
    assert mon.max_loss_ratio == pytest.approx(100 / 3, rel=1e-12)
    assert mon.record() == {
        "divergence_spike_count": 1,
        "divergence_max_loss_ratio": 33.333333,
        "divergence_spikes": [spike],
        "divergence_onset_step": None,
        "divergence_withdrawn": None,
    }
    rec = mon.record()
    rec["divergence_spikes"][0]["step"] = -1  # a copy: the monitor's own list is untouched
    assert mon.spikes == [spike]


def test_a_reference_of_zero_gives_no_loss_ratio_and_grad_spikes_still_count() -> None:
    mon = d.DivergenceMonitor("fp32", initial_loss=0.0, thresholds=NO_PERSIST)
    grad = np.r_[np.ones(6), [1e6], np.ones(3)]
    assert mon.update(np.r_[[1.0], np.full(9, 50.0)], grad_norm=grad) is None
    assert mon.max_loss_ratio is None
    assert mon.spikes == [{"step": 6, "cause": "grad_explosion", "loss_ratio": None}]
    assert mon.record()["divergence_max_loss_ratio"] is None
    assert d.DivergenceMonitor().record() == {
        "divergence_spike_count": 0,
        "divergence_max_loss_ratio": None,
        "divergence_spikes": [],
        "divergence_onset_step": None,
        "divergence_withdrawn": None,
    }


# ----- the gradient event (where the probe's anomaly report looks) ----------------------------


def test_the_gradient_event_is_the_first_grad_spike_or_nonfinite_gradient() -> None:
    clean = d.DivergenceMonitor("fp32", initial_loss=1.0)
    clean.update(np.ones(20), grad_norm=np.ones(20))
    assert clean.grad_event_step is None
    # a loss spike or a non-finite loss is no gradient event
    other = d.DivergenceMonitor("fp32", initial_loss=1.0)
    assert other.update([1.0, 50.0, np.nan], grad_norm=[1.0, 1.0, 1.0]) == ("nonfinite_loss", 2)
    assert other.grad_event_step is None
    # a gradient spike (a spike, not a verdict), then a second one: the first is kept
    grad = np.r_[np.ones(7), [1e6], np.ones(4), [1e6]]
    spiky = d.DivergenceMonitor("fp32", initial_loss=1.0)
    assert spiky.update(np.ones(13), grad_norm=grad) is None
    assert spiky.grad_event_step == 7 and spiky.spike_count == 2
    # a non-finite gradient outside fp16 is one (and the verdict)
    nonfinite = d.DivergenceMonitor("bf16", initial_loss=1.0)
    assert nonfinite.update(np.ones(4), grad_norm=[1.0, 1.0, np.nan, 1.0]) == (
        "grad_explosion",
        2,
    )
    assert nonfinite.grad_event_step == 2
    # in fp16 it is the scaler's overflow: none
    fp16 = d.DivergenceMonitor("fp16", initial_loss=1.0)
    assert fp16.update(np.ones(4), grad_norm=[1.0, 1.0, np.inf, 1.0]) is None
    assert fp16.grad_event_step is None
