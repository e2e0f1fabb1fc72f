"""Tests of autotune.probe.metrics and autotune.probe.divergence on synthetic series whose
metrics are known analytically."""

from __future__ import annotations

import ast
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from autotune.probe import divergence as d
from autotune.probe import metrics as m

# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def linear(n: int, start: float = 10.0, slope: float = 0.01) -> np.ndarray:
    return start - slope * np.arange(n, dtype=float)


def exp_decay(n: int = 300, floor: float = 1.0, amp: float = 3.0, tau: float = 60.0) -> np.ndarray:
    return floor + amp * np.exp(-np.arange(n, dtype=float) / tau)


@pytest.mark.parametrize("module", [m, d])
def test_module_is_pure_numpy(module: Any) -> None:
    tree = ast.parse(Path(module.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert "numpy" in imported
    assert not imported & {"torch", "ray", "mlflow", "optuna"}


def test_constants() -> None:
    assert m.FINAL_FRACTION == 0.10
    assert m.STABILITY_FRACTION == 0.5
    assert m.TREND_WINDOW == 9 and m.TREND_WINDOW % 2 == 1
    assert m.SPIKE_WINDOW == 32
    assert m.SPIKE_SIGMA == 6.0
    assert m.THROUGHPUT_WARMUP_FRACTION == 0.1
    assert m.THROUGHPUT_MIN_WARMUP_STEPS == 3
    t = d.DivergenceThresholds()
    assert (t.loss_explosion_factor, t.grad_explosion_factor) == (10.0, 1e3)
    assert (t.scale_floor, t.skipped_fraction) == (1e-4, 0.5)
    assert (t.grad_history_min, t.skipped_min_steps) == (5, 20)
    assert (t.persist_steps, t.recovery_window, t.recovery_factor) == (
        d.PERSIST_STEPS,
        d.RECOVERY_WINDOW,
        d.RECOVERY_FACTOR,
    )


# --------------------------------------------------------------------------------------------
# initial / final / drop
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 7, 19, 20, 21, 60, 100, 333, 1000])
def test_initial_final_drop_on_linear_decay(n: int) -> None:
    start, slope = 10.0, 0.005
    loss = linear(n, start, slope)
    k_final = max(1, ceil_div(n, 10))  # ceil(10% n), exact integer arithmetic
    # mean of a linear series over steps a..b is its value at (a + b) / 2
    expected_initial = start  # step 0's loss
    expected_final = start - slope * ((n - k_final) + (n - 1)) / 2
    assert m.initial_loss(loss) == pytest.approx(expected_initial, rel=1e-12)
    assert m.final_loss(loss) == pytest.approx(expected_final, rel=1e-12)
    assert m.loss_drop(loss) == pytest.approx(1 - expected_final / expected_initial, abs=1e-12)


def test_window_lengths_do_not_suffer_float_rounding() -> None:
    assert 0.07 * 100 > 7  # floating point: ceil would give 8
    assert m._window_len(100, 0.07) == 7
    assert m._window_len(20, 0.15) == 3
    assert [m._window_len(n, 0.5) for n in range(5)] == [0, 1, 1, 2, 2]
    loss = np.r_[np.full(27, 100.0), np.full(3, 2.0)]
    assert m.final_loss(loss) == 2.0


def test_loss_drop_values() -> None:
    flat = np.full(100, 3.0)
    assert m.loss_drop(flat) == 0.0
    assert m.loss_drop(np.r_[np.full(50, 4.0), np.full(50, 1.0)]) == pytest.approx(0.75)
    rising = np.r_[np.full(50, 1.0), np.full(50, 2.0)]
    assert m.loss_drop(rising) == pytest.approx(-1.0)
    assert math.isnan(m.loss_drop(np.full(10, 0.0)))  # initial == 0: nothing to be relative to
    assert m.loss_drop(-np.ones(10)) == 0.0  # a negative loss that did not learn (test_safe_stats)


def test_loss_drop_is_not_inflated_by_an_early_explosion() -> None:
    # The untrained model's loss is ln 8; the first updates blow it up five-fold, the run
    # recovers to chance and stays there. It did not learn: loss_drop ~ 0, so the study's
    # `loss_drop >= 0.05` constraint rejects it (a mean over the first steps gave ~0.35).
    chance = math.log(8)
    loss = np.r_[[chance, 5 * chance, 4 * chance, 2 * chance, 1.2 * chance], np.full(95, chance)]
    assert m.initial_loss(loss) == chance
    assert m.loss_drop(loss) == pytest.approx(0.0, abs=1e-12)
    assert m.loss_drop(loss) < 0.05


def test_loss_level_nan_handling() -> None:
    assert math.isnan(m.initial_loss(np.array([])))
    assert math.isnan(m.final_loss([]))
    assert math.isnan(m.loss_drop([]))
    # run that diverged: last 10% of steps non-finite -> final loss and drop are NaN
    loss = np.r_[linear(18), [np.nan, np.inf]]
    assert m.initial_loss(loss) == 10.0
    assert math.isnan(m.final_loss(loss))
    assert math.isnan(m.loss_drop(loss))
    # a non-finite value inside a window is ignored
    loss = np.r_[[np.nan, 4.0, 2.0], np.full(37, 1.0)]  # n = 40: head = 2 steps, final = 4
    assert m.initial_loss(loss) == 4.0
    assert m.final_loss(loss) == 1.0


def test_rejects_non_1d() -> None:
    with pytest.raises(ValueError):
        m.initial_loss(np.ones((3, 3)))


# --------------------------------------------------------------------------------------------
# rolling median
# --------------------------------------------------------------------------------------------


def test_rolling_median_known_values() -> None:
    x = np.array([1.0, 5.0, 2.0, 8.0, 3.0])
    np.testing.assert_array_equal(m.rolling_median(x, 3), [3.0, 2.0, 5.0, 3.0, 5.5])
    np.testing.assert_array_equal(
        m.rolling_median(x, 3, exclude_center=True), [5.0, 1.5, 6.5, 2.5, 8.0]
    )
    np.testing.assert_array_equal(m.rolling_median(x, 1), x)
    # series shorter than the window: every window is truncated to the available points
    np.testing.assert_array_equal(m.rolling_median([1.0, 2.0, 9.0], 9), [2.0, 2.0, 2.0])
    # non-finite values are ignored; an all-NaN window gives NaN
    np.testing.assert_array_equal(m.rolling_median([1.0, np.nan, 3.0], 3), [1.0, 2.0, 3.0])
    out = m.rolling_median([np.nan, np.nan, np.nan, np.nan, 1.0], 3)
    assert np.isnan(out[:3]).all() and out[3:].tolist() == [1.0, 1.0]


def test_rolling_median_matches_brute_force() -> None:
    x = np.random.default_rng(0).normal(size=57)
    for window in (1, 3, 9, 31):
        h = window // 2
        for excl in (False, True):
            want = []
            for i in range(len(x)):
                idx = [j for j in range(i - h, i + h + 1) if 0 <= j < len(x)]
                if excl:
                    idx.remove(i)
                want.append(np.median(x[idx]) if idx else np.nan)
            got = m.rolling_median(x, window, exclude_center=excl)
            np.testing.assert_allclose(got, want, equal_nan=True)


@pytest.mark.parametrize("window", [0, -1, 2, 8])
def test_rolling_median_rejects_bad_window(window: int) -> None:
    with pytest.raises(ValueError):
        m.rolling_median(np.ones(5), window)


# --------------------------------------------------------------------------------------------
# loss_cv, loss_range
# --------------------------------------------------------------------------------------------


def reference_loss_cv(loss: np.ndarray) -> float:
    n = len(loss)
    tail = loss[n - max(1, ceil_div(n, 2)) :]
    tail = tail[np.isfinite(tail)]
    trend = np.array(
        [
            np.median([tail[j] for j in range(i - 4, i + 5) if 0 <= j < len(tail) and j != i])
            for i in range(len(tail))
        ]
    )
    return float(np.std(tail - trend) / np.mean(trend))


def test_loss_cv_smooth_decay_is_near_zero() -> None:
    assert 0 <= m.loss_cv(exp_decay()) < 2e-3
    assert m.loss_cv(np.full(100, 2.0)) == 0.0
    # a steep ramp (1% of the level per step) only leaves the truncated edge windows' bias
    assert m.loss_cv(linear(200)) == pytest.approx(0.0, abs=1e-3)
    assert m.loss_cv(linear(200) + 0.05 * (-1.0) ** np.arange(200)) > 0.005


def test_loss_cv_alternating_noise_is_noise_over_mean() -> None:
    a = 0.05
    smooth = exp_decay()
    noisy = smooth + a * (-1.0) ** np.arange(len(smooth))
    expected = a / np.mean(smooth[len(smooth) // 2 :])
    assert m.loss_cv(noisy) == pytest.approx(expected, rel=0.05)
    # flat level c with ±a: exactly a/c in the interior, edges change it only slightly
    flat = 2.0 + 0.1 * (-1.0) ** np.arange(400)
    assert m.loss_cv(flat) == pytest.approx(0.05, rel=0.05)


def test_loss_cv_formula_and_invariances() -> None:
    rng = np.random.default_rng(1)
    loss = exp_decay() + rng.normal(scale=0.05, size=300)
    assert m.loss_cv(loss) == pytest.approx(reference_loss_cv(loss), rel=1e-12)
    assert m.loss_cv(7.0 * loss) == pytest.approx(m.loss_cv(loss), rel=1e-12)
    # only the tail counts: noise in the first half changes nothing
    early_noise = loss.copy()
    early_noise[:150] += rng.normal(scale=1.0, size=150)
    assert m.loss_cv(early_noise) == m.loss_cv(loss)
    # more noise in the tail -> larger cv
    assert m.loss_cv(exp_decay() + rng.normal(scale=0.2, size=300)) > 2 * m.loss_cv(loss)


def test_loss_cv_nan_cases() -> None:
    assert math.isnan(m.loss_cv([]))
    assert math.isnan(m.loss_cv([1.0, 2.0, 3.0, 4.0]))  # tail = 2 points < MIN_CV_POINTS
    assert math.isnan(m.loss_cv(np.r_[np.ones(10), np.full(10, np.nan)]))
    # a negative level: relative to its size (test_script_extremes); a level of 0 has none
    assert m.loss_cv(-exp_decay()) == pytest.approx(m.loss_cv(exp_decay()), rel=1e-12)
    assert math.isnan(m.loss_cv(np.zeros(20)))
    # non-finite values in the tail are dropped, not propagated
    loss = exp_decay()
    loss[250] = np.nan
    assert m.loss_cv(loss) == pytest.approx(m.loss_cv(np.delete(exp_decay(), 250)), abs=1e-3)


def test_noise_per_drop_ranks_a_flat_run_at_chance_below_one_that_learns() -> None:
    rng = np.random.default_rng(3)
    steps = np.arange(400)
    # both start at 2.08 (ln 8); one stays near chance, the other learns to ~0.2 with more noise
    # in absolute terms and much more relative to its (low) level
    stuck = 2.08 - 0.2 * (1 - np.exp(-steps / 20)) + rng.normal(scale=0.03, size=400)
    learns = 0.2 + 1.88 * np.exp(-steps / 60) + rng.normal(scale=0.06, size=400)
    stuck[0] = learns[0] = 2.08
    assert m.loss_cv(stuck) < m.loss_cv(learns)  # the level-relative measure prefers the flat run
    assert m.noise_per_drop(learns) < m.noise_per_drop(stuck)


def test_noise_per_drop_formula() -> None:
    a = 0.05
    smooth = exp_decay()
    noisy = smooth + a * (-1.0) ** np.arange(len(smooth))
    noise = m.loss_cv(noisy) * float(
        np.mean(m.rolling_median(noisy[150:], m.TREND_WINDOW, exclude_center=True))
    )
    drop = m.initial_loss(noisy) - float(np.median(noisy[-30:]))  # the last 10%'s median
    assert m.noise_per_drop(noisy) == pytest.approx(noise / drop, rel=1e-12)
    # scale-free: a loss in other units ranks the same
    assert m.noise_per_drop(7.0 * noisy) == pytest.approx(m.noise_per_drop(noisy), rel=1e-12)


def test_noise_per_drop_nan_when_nothing_was_learned() -> None:
    assert math.isnan(m.noise_per_drop([]))
    assert math.isnan(m.noise_per_drop(np.full(100, 2.0)))  # no drop
    assert math.isnan(m.noise_per_drop(exp_decay()[::-1]))  # the loss went up
    assert math.isnan(m.noise_per_drop([3.0, 2.0, 1.0, 0.5]))  # tail too short


def test_noise_per_drop_one_outlier_batch_at_the_end_does_not_decide_it() -> None:
    # Heavy-tailed data: a run that learned 95% meets one outlier batch (10^4 x the loss) in its
    # last 10% of steps. That batch lifts the window's mean above the initial loss, not its
    # median: the run still learned, and the outlier still counts in the noise.
    smooth = exp_decay(140, floor=0.2, amp=3.1, tau=15.0)
    spiky = smooth.copy()
    spiky[129] = 5000.0
    assert m.final_loss(spiky) > m.initial_loss(spiky)  # the mean says it did not learn
    npd = m.noise_per_drop(spiky, reference=3.3)
    assert math.isfinite(npd) and npd > 100 * m.noise_per_drop(smooth, reference=3.3)
    assert m.final_train_level(spiky) == pytest.approx(float(np.median(smooth[-14:])))
    # a run that did not learn is still NaN, outlier or not
    flat = np.full(140, 3.3)
    flat[129] = 5000.0
    assert math.isnan(m.noise_per_drop(flat, reference=3.3))


def test_loss_range() -> None:
    loss = linear(100, 10.0, 0.1)  # tail: steps 50..99
    assert m.loss_range(loss) == pytest.approx(0.1 * 49)
    loss[10] = 1e6  # outside the tail
    loss[70] = np.nan  # ignored
    assert m.loss_range(loss) == pytest.approx(0.1 * 49)
    loss[80] = 20.0  # swing inside the tail
    assert m.loss_range(loss) == pytest.approx(20.0 - (10.0 - 9.9))
    assert m.loss_range(np.full(31, 1.5)) == 0.0
    assert math.isnan(m.loss_range([]))
    assert math.isnan(m.loss_range([1.0, np.nan]))


# --------------------------------------------------------------------------------------------
# spikes
# --------------------------------------------------------------------------------------------


def noisy_decay(seed: int = 2) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return exp_decay() + rng.normal(scale=0.02, size=300)


def test_spike_count_zero_on_clean_series() -> None:
    assert m.spike_count(np.full(200, 3.0)) == 0
    assert m.spike_count(np.zeros(200)) == 0
    assert m.spike_count(exp_decay()) == 0
    assert m.spike_count(noisy_decay()) == 0
    assert m.spike_count(linear(300, 1.0, -0.01)) == 0  # steadily rising loss is no spike
    assert m.spike_count([]) == 0
    assert m.spike_count(np.ones(5)) == 0


def test_single_spike_counted_once() -> None:
    loss = noisy_decay()
    loss[150] *= 20
    assert m.spike_count(loss) == 1
    loss[40] *= 20
    assert m.spike_count(loss) == 2
    assert isinstance(m.spike_count(loss), int)


def test_spike_lasting_three_steps_counts_three() -> None:
    loss = noisy_decay()
    loss[200:203] *= 20
    assert m.spike_count(loss) == 3


def test_spikes_before_min_history_and_nonfinite_are_not_counted() -> None:
    loss = np.full(100, 1.0)
    loss[7] = 50.0  # t < min(W, 8)
    assert m.spike_count(loss) == 0
    loss[8] = 50.0  # first testable step, trailing window of 8
    assert m.spike_count(loss) == 1
    flat = np.full(100, 1.0)
    flat[60] = np.inf
    flat[61] = np.nan
    assert m.spike_count(flat) == 0


def test_spike_threshold_is_median_plus_6_robust_sigma() -> None:
    # history of 40 steps alternating 0.9 / 1.1: median 1.0, MAD 0.1
    history = 1.0 + 0.1 * (-1.0) ** np.arange(40)
    threshold = 1.0 + 6.0 * 1.4826 * 0.1
    assert m.spike_count(np.r_[history, threshold - 1e-3]) == 0
    assert m.spike_count(np.r_[history, threshold + 1e-3]) == 1
    # flat history: MAD floor = 1e-3 * |median|
    flat = np.full(40, 2.0)
    threshold = 2.0 + 6.0 * 1.4826 * 1e-3 * 2.0
    assert m.spike_count(np.r_[flat, threshold - 1e-5]) == 0
    assert m.spike_count(np.r_[flat, threshold + 1e-5]) == 1
    # only the last 32 steps form the window: an old, very different level is forgotten
    old = np.r_[np.full(40, 100.0), flat[:32]]
    assert m.spike_count(np.r_[old, threshold + 1e-5]) == 1


# --------------------------------------------------------------------------------------------
# grad norms, clipping, throughput
# --------------------------------------------------------------------------------------------


def test_grad_norm_stats() -> None:
    g = np.arange(1.0, 101.0)
    stats = m.grad_norm_stats(g)
    assert stats == {"p50": 50.5, "p99": pytest.approx(99.01), "max": 100.0}
    rng = np.random.default_rng(3)
    with_overflow = rng.permutation(np.r_[g, np.inf, np.nan, -np.inf])
    assert m.grad_norm_stats(with_overflow) == stats
    assert all(math.isnan(v) for v in m.grad_norm_stats([np.inf, np.nan]).values())
    assert all(math.isnan(v) for v in m.grad_norm_stats([]).values())


def test_clip_fraction() -> None:
    assert m.clip_fraction(np.array([True, False, False, True])) == 0.5
    assert m.clip_fraction([0, 0, 0, 1]) == 0.25
    assert m.clip_fraction(np.zeros(10)) == 0.0
    assert m.clip_fraction([1.0, np.nan]) == 1.0
    assert math.isnan(m.clip_fraction([]))


def test_throughput_skips_warmup() -> None:
    # n = 30: skip max(3, ceil(3)) = 3 slow warm-up steps
    times = np.r_[np.full(3, 10.0), np.full(27, 0.5)]
    assert m.throughput(times, 64) == pytest.approx(128.0)
    # n = 50: skip max(3, 5) = 5; the steady times 0.1..4.5 have median 2.3
    # (skipping only 3 would pull the two 100 s steps in and move the median to 2.4)
    times = np.r_[np.full(5, 100.0), 0.1 * np.arange(1, 46)]
    assert m.throughput(times, 32) == pytest.approx(32 / 2.3)
    assert m.throughput(times, 32 * 512) == pytest.approx(32 * 512 / 2.3)  # tokens/s


def test_throughput_edge_cases() -> None:
    assert math.isnan(m.throughput([1.0, 1.0, 1.0], 8))  # all warm-up
    assert m.throughput([9.0, 9.0, 9.0, 0.25], 8) == 32.0
    times = np.r_[np.full(3, 5.0), [0.5, np.nan, np.inf, 0.0, -1.0, 0.5]]
    assert m.throughput(times, 1) == 2.0
    assert math.isnan(m.throughput([], 1))


# --------------------------------------------------------------------------------------------
# summarize
# --------------------------------------------------------------------------------------------


def probe_series(n: int = 200) -> dict[str, np.ndarray]:
    loss = linear(n, 5.0, 0.01)
    return {
        "loss": loss,
        "grad_norm": np.linspace(1.0, 2.0, n),
        "clipped": (np.arange(n) % 4 == 0),
        "scale": 65536.0 * 0.5 ** (np.arange(n) // 50),
        "skipped": np.isin(np.arange(n), [0, 50, 100]),
        "lr": np.full(n, 1e-3),
        "step_time": np.r_[np.full(20, 3.0), np.full(n - 20, 0.25)],
    }


def test_summarize_values_and_types() -> None:
    s = probe_series()
    out = m.summarize(s, samples_per_step=32, tokens_per_step=32 * 128, precision="fp16")
    assert set(out) == {
        "steps_run",
        "initial_loss",
        "final_loss",
        "final_train_loss",
        "loss_drop",
        "loss_cv",
        "noise_per_drop",
        "loss_range",
        "spike_count",
        "grad_norm_p50",
        "grad_norm_p99",
        "grad_norm_max",
        "clip_fraction",
        "skipped_steps",
        "throughput",
        "throughput_low",
        "throughput_high",
        "tokens_per_s",
        "tokens_per_s_low",
        "tokens_per_s_high",
        "final_scale",
    }
    for key in ("steps_run", "spike_count", "skipped_steps"):
        assert type(out[key]) is int
    for key, value in out.items():
        assert type(value) in (int, float), key
    assert out["steps_run"] == 200
    assert out["initial_loss"] == m.initial_loss(s["loss"])
    assert out["final_loss"] == out["final_train_loss"] == m.final_loss(s["loss"])
    assert out["loss_drop"] == m.loss_drop(s["loss"])
    assert out["loss_cv"] == m.loss_cv(s["loss"])
    assert out["loss_range"] == pytest.approx(0.01 * 99)
    assert out["spike_count"] == 0
    assert out["grad_norm_p50"] == pytest.approx(1.5)
    assert out["grad_norm_max"] == 2.0
    assert out["clip_fraction"] == 0.25
    assert out["skipped_steps"] == 3
    assert out["throughput"] == pytest.approx(128.0)
    assert out["tokens_per_s"] == pytest.approx(128.0 * 128)
    # every steady step took 0.25 s: no timing noise, the interval is the point
    assert out["throughput_low"] == out["throughput_high"] == pytest.approx(128.0)
    assert out["tokens_per_s_low"] == pytest.approx(128.0 * 128)
    assert out["final_scale"] == 65536.0 / 8


def test_summarize_optional_keys() -> None:
    s = probe_series()
    out = m.summarize(s, samples_per_step=32)
    assert "tokens_per_s" not in out and "final_scale" not in out
    assert "tokens_per_s_low" not in out and "throughput_low" in out
    minimal = {k: s[k] for k in ("loss", "grad_norm", "step_time")}
    out = m.summarize(minimal, samples_per_step=32, precision="fp16")
    assert math.isnan(out["clip_fraction"])  # not told is not "never clipped"
    assert out["skipped_steps"] == 0
    assert math.isnan(out["final_scale"])
    assert m.summarize(minimal, samples_per_step=32, precision="bf16")["throughput"] > 0


def test_summarize_truncated_and_nonfinite_series() -> None:
    n = 30  # probe planned for 200 steps, stopped at 30: NaN at the end
    s = {k: v[:n].copy() for k, v in probe_series().items()}
    s["loss"][-2:] = np.nan
    s["grad_norm"][-2:] = np.inf
    out = m.summarize(s, samples_per_step=8)
    assert out["steps_run"] == 30
    assert out["initial_loss"] == pytest.approx(m.initial_loss(linear(30, 5.0, 0.01)))
    assert out["final_loss"] == s["loss"][27]  # last ceil(3) steps, only step 27 is finite
    assert out["loss_drop"] == pytest.approx(1 - s["loss"][27] / out["initial_loss"])
    assert out["grad_norm_max"] == pytest.approx(s["grad_norm"][27])
    assert out["loss_range"] == pytest.approx(0.01 * 12)  # tail 15..29, finite 15..27


def test_summarize_empty_series() -> None:
    empty = {k: np.array([]) for k in ("loss", "grad_norm", "step_time")}
    out = m.summarize(empty, samples_per_step=8)
    assert out["steps_run"] == 0 and out["spike_count"] == 0
    for key in ("initial_loss", "final_loss", "loss_drop", "loss_cv", "throughput"):
        assert math.isnan(out[key])
    assert math.isnan(out["throughput_low"]) and math.isnan(out["throughput_high"])


def test_summarize_rejects_bad_input() -> None:
    s = probe_series()
    with pytest.raises(ValueError, match="step_time"):
        m.summarize({k: v for k, v in s.items() if k != "step_time"}, samples_per_step=1)
    s["lr"] = s["lr"][:-1]
    with pytest.raises(ValueError, match="length"):
        m.summarize(s, samples_per_step=1)
    with pytest.raises(ValueError, match="precision"):
        m.summarize(probe_series(), samples_per_step=1, precision="float16")


# --------------------------------------------------------------------------------------------
# divergence
# --------------------------------------------------------------------------------------------


def feed(
    mon: d.DivergenceMonitor, chunk: int, **series: np.ndarray
) -> list[tuple[int, tuple[str, int]]]:
    """Feed the series in chunks; return (chunk number, result) for every non-None result."""
    n = len(series["loss"])
    hits = []
    for c, start in enumerate(range(0, n, chunk)):
        part = {k: v[start : start + chunk] for k, v in series.items()}
        res = mon.update(**part)
        if res is not None:
            hits.append((c, res))
    return hits


def test_healthy_run_never_diverges() -> None:
    loss = noisy_decay()
    grad = np.abs(np.random.default_rng(4).normal(1.0, 0.3, size=300)) + 0.1
    for precision in m.PRECISIONS:
        mon = d.DivergenceMonitor(precision)
        assert feed(mon, 16, loss=loss, grad_norm=grad, scale=np.full(300, 65536.0)) == []
        assert not mon.diverged and mon.cause is None and mon.step is None
        assert mon.steps_seen == 300
        assert mon.initial_loss == pytest.approx(m.initial_loss(loss))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nonfinite_loss(bad: float) -> None:
    mon = d.DivergenceMonitor("fp32")
    assert mon.update([2.0, 2.0, 2.0]) is None
    assert mon.update([2.0, 2.0, bad, np.nan]) == ("nonfinite_loss", 2)
    assert mon.diverged and mon.cause == "nonfinite_loss" and mon.step == 5


ONE_STEP = d.DivergenceThresholds(persist_steps=1, recovery_window=10**6)
"""The one-step rule the monitor had before spikes had to persist: every spike is a verdict."""


def test_loss_explosion_fires_at_the_right_step() -> None:
    loss = np.full(40, 2.0)  # initial loss = step 0's = 2.0
    loss[13] = 20.0  # exactly 10x: not above
    loss[19] = 20.01
    mon = d.DivergenceMonitor("bf16", thresholds=ONE_STEP)
    assert feed(mon, 8, loss=loss) == [(2, ("loss_explosion", 3))]
    assert mon.step == 19 and mon.initial_loss == 2.0
    # with the default thresholds the same step is a spike, not a verdict
    mon = d.DivergenceMonitor("bf16")
    assert feed(mon, 8, loss=loss) == []
    assert mon.spike_count == 1 and mon.spikes == [
        {"step": 19, "cause": "loss_explosion", "loss_ratio": 10.005}
    ]


def test_loss_explosion_uses_first_finite_loss_and_explicit_initial() -> None:
    loss = np.r_[[1.0, 3.0, 2.0, 2.0, 2.0], np.full(10, 19.0), 25.0]
    # L0 = the first loss (1.0) -> 19 > 10 already at step 5
    mon = d.DivergenceMonitor("fp32", thresholds=ONE_STEP)
    assert mon.update(loss) == ("loss_explosion", 5)
    assert mon.initial_loss == m.initial_loss(loss) == 1.0
    # a non-finite first loss is the nonfinite_loss divergence; L0 is the next finite one
    mon = d.DivergenceMonitor("fp32")
    assert mon.update([np.nan, 2.0, 19.0, 20.5]) == ("nonfinite_loss", 0)
    assert mon.initial_loss == 2.0
    # an explicit initial loss is used from step 0
    mon = d.DivergenceMonitor("fp32", initial_loss=0.2, thresholds=ONE_STEP)
    assert mon.update(loss) == ("loss_explosion", 1)


def test_grad_explosion_by_ratio() -> None:
    n = 30
    grad = np.ones(n)
    grad[2] = 1e9  # only 2 norms seen before: not tested
    grad[12] = 1000.0  # exactly 1e3 x median: not above
    grad[21] = 1000.5
    mon = d.DivergenceMonitor("fp16", thresholds=ONE_STEP)
    assert feed(mon, 7, loss=np.full(n, 2.0), grad_norm=grad) == [(3, ("grad_explosion", 0))]
    assert mon.step == 21
    assert mon.grad_norm_median == 1.0


def test_grad_explosion_needs_five_prior_norms() -> None:
    grad = np.array([1.0, 1.0, 1.0, 1.0, 1e9, 1e9])
    mon = d.DivergenceMonitor("fp32", thresholds=ONE_STEP)
    # step 4 has 4 prior norms; step 5 has 5 (median 1.0) -> fires at 5
    assert mon.update(np.ones(6), grad_norm=grad) == ("grad_explosion", 5)
    assert mon.spike_count == 1


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_nonfinite_grad_is_divergence_outside_fp16(precision: str) -> None:
    mon = d.DivergenceMonitor(precision)
    assert mon.update([1.0, 1.0, 1.0], grad_norm=[1.0, np.inf, 1.0]) == ("grad_explosion", 1)
    mon = d.DivergenceMonitor(precision)
    assert mon.update([1.0, 1.0], grad_norm=[np.nan, 1.0]) == ("grad_explosion", 0)


def test_fp16_skipped_steps_are_not_divergence() -> None:
    n = 200
    skip_at = [0, 1, 2, 3, 60, 61, 130]  # initial scale backoff, then occasional overflow
    skipped = np.isin(np.arange(n), skip_at)
    grad = np.where(skipped, np.inf, 1.0)
    scale = 65536.0 * 0.5 ** np.cumsum(skipped)
    loss = exp_decay(n)  # a skipped step's loss is still finite
    mon = d.DivergenceMonitor("fp16")
    assert feed(mon, 10, loss=loss, grad_norm=grad, scale=scale, skipped=skipped) == []
    assert not mon.diverged
    assert mon.skipped_steps == len(skip_at)
    assert mon.grad_norm_median == 1.0  # inf norms are kept out of the history
    # the same telemetry in bf16 is a gradient explosion at the first inf
    mon = d.DivergenceMonitor("bf16")
    assert feed(mon, 10, loss=loss, grad_norm=grad, skipped=skipped)[0] == (
        0,
        ("grad_explosion", 0),
    )


def test_scaler_collapse_from_falling_scale() -> None:
    n = 40
    scale = 65536.0 * 0.5 ** np.arange(n)  # 2**16 * 2**-30 = 6.1e-5 < 1e-4 at step 30
    loss = np.full(n, 2.0)
    mon = d.DivergenceMonitor("fp16")
    hits = feed(mon, 8, loss=loss, scale=scale)
    assert hits[0] == (3, ("scaler_collapse", 6))
    assert hits[1:] == [(4, ("scaler_collapse", 0))]  # still collapsed in the next chunk
    assert mon.step == 30
    # the scale is not a divergence signal outside fp16
    mon = d.DivergenceMonitor("bf16")
    assert feed(mon, 8, loss=loss, scale=scale) == []
    # a non-finite scale is ignored
    assert d.DivergenceMonitor("fp16").update([1.0], scale=[np.nan]) is None


def test_scaler_collapse_from_many_skips() -> None:
    n = 60
    loss = np.full(n, 2.0)
    # every step skipped: fires at the 20th step (index 19), not before
    skipped = np.ones(n, dtype=bool)
    grad = np.full(n, np.inf)
    mon = d.DivergenceMonitor("fp16")
    assert feed(mon, 6, loss=loss, grad_norm=grad, skipped=skipped) == [
        (3, ("scaler_collapse", 1)),
        *[(c, ("scaler_collapse", 0)) for c in range(4, 10)],
    ]
    assert mon.step == 19
    # 10 good steps, then all skipped: S / N > 0.5 first at N = 21 (S = 11)
    skipped = np.arange(n) >= 10
    mon = d.DivergenceMonitor("fp16")
    assert mon.update(loss, grad_norm=np.where(skipped, np.inf, 1.0), skipped=skipped) == (
        "scaler_collapse",
        20,
    )
    # exactly half skipped is not "more than half"
    skipped = np.arange(n) % 2 == 1
    mon = d.DivergenceMonitor("fp16")
    assert mon.update(loss, grad_norm=np.where(skipped, np.inf, 1.0), skipped=skipped) is None
    assert mon.skipped_steps == 30


def test_cause_priority_and_first_step() -> None:
    mon = d.DivergenceMonitor("fp16", initial_loss=1.0)
    # step 1: NaN loss and collapsed scale -> nonfinite_loss wins; step 0 is clean
    res = mon.update([1.0, np.nan, 50.0], grad_norm=[1.0, 1.0, 1.0], scale=[1.0, 1e-9, 1e-9])
    assert res == ("nonfinite_loss", 1)
    # a non-finite gradient (fp32) is a verdict at once; the loss spike beside it only a spike
    mon = d.DivergenceMonitor("fp32", initial_loss=1.0)
    assert mon.update([1.0, 50.0], grad_norm=[1.0, np.inf]) == ("grad_explosion", 1)
    assert mon.spike_count == 1 and mon.spikes[0]["cause"] == "loss_explosion"
    # the monitor keeps the first divergence ever reported
    assert mon.update([np.nan]) == ("nonfinite_loss", 0)
    assert (mon.cause, mon.step) == ("grad_explosion", 1)
    assert mon.nonfinite_step == 2
    assert set(d.DIVERGENCE_CAUSES) == {
        "nonfinite_loss",
        "loss_explosion",
        "grad_explosion",
        "scaler_collapse",
        "no_recovery",
    }


def test_step_0_is_never_a_loss_explosion() -> None:
    # Step 0 runs before any update: a first batch far above the held-out reference is the
    # data, not a divergence. The same loss one step later is.
    mon = d.DivergenceMonitor("fp32", initial_loss=1.0, thresholds=ONE_STEP)
    assert mon.update([50.0, 2.0], grad_norm=[1.0, 1.0]) is None
    assert mon.update([50.0], grad_norm=[1.0]) == ("loss_explosion", 0)
    assert mon.step == 2
    # a non-finite loss at step 0 still is one
    assert d.DivergenceMonitor("fp32", initial_loss=1.0).update([np.inf]) == ("nonfinite_loss", 0)


def test_monitor_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        d.DivergenceMonitor("fp8")
    with pytest.raises(ValueError):
        d.DivergenceMonitor().update([1.0, 2.0], grad_norm=[1.0])
    with pytest.raises(ValueError):
        d.DivergenceThresholds(skipped_fraction=1.5)
    thresholds = d.DivergenceThresholds(loss_explosion_factor=2.0, persist_steps=1)
    mon = d.DivergenceMonitor(initial_loss=1.0, thresholds=thresholds)
    assert mon.update([1.5, 2.5]) == ("loss_explosion", 1)


def test_a_clipped_run_is_not_a_grad_explosion_but_a_nonfinite_gradient_still_is() -> None:
    grads = [1.0] * 6 + [1e6]
    assert d.DivergenceMonitor("fp32", thresholds=ONE_STEP).update([1.0] * 7, grad_norm=grads) == (
        "grad_explosion",
        6,
    )
    clipped = d.DivergenceMonitor("fp32", clipping=True, thresholds=ONE_STEP)
    assert clipped.update([1.0] * 7, grad_norm=grads) is None
    assert clipped.spike_count == 0
    assert clipped.update([1.0], grad_norm=[np.inf]) == ("grad_explosion", 0)


def test_summarize_final_loss_is_the_held_out_one_when_measured() -> None:
    # A training curve whose last window holds one outlier batch (heavy-tailed data): the mean
    # of the window is moved by it, the held-out loss of the trained model is not.
    loss = np.full(100, 1.0)
    loss[0] = 2.0
    loss[95] = 40.0
    s = {"loss": loss, "grad_norm": np.ones(100), "step_time": np.full(100, 0.01)}
    out = m.summarize(s, samples_per_step=8, reference=2.0, final_reference=0.9)
    assert out["final_loss"] == 0.9
    assert out["loss_drop"] == pytest.approx(1 - 0.9 / 2.0)
    assert out["final_train_loss"] == pytest.approx((9 * 1.0 + 40.0) / 10)
    # no held-out measure (None or non-finite): the training window's mean, as before
    for missing in (None, math.nan):
        out = m.summarize(s, samples_per_step=8, reference=2.0, final_reference=missing)
        assert out["final_loss"] == out["final_train_loss"] == pytest.approx(4.9)
        assert out["loss_drop"] == pytest.approx(1 - 4.9 / 2.0)
