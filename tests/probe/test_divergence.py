"""The divergence rule: a spike is an event, a verdict needs persistence or no recovery
(autotune.probe.divergence), and the stop modes of `probe.divergence.stop_early`."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from autotune import space as sp
from autotune.errors import SpaceError
from autotune.probe import ProbeConfig, recovery, run_probe, stopping
from autotune.probe import divergence as d
from autotune.probe.telemetry import thresholds

THR = d.DivergenceThresholds(persist_steps=3, recovery_window=20, recovery_factor=3.0)


def decay(n: int, start: float = 2.0, floor: float = 0.5, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n, dtype=float)
    return floor + (start - floor) * np.exp(-t / 40) + rng.normal(0, 0.01, n)


def run(loss: np.ndarray, chunk: int = 7, thr: d.DivergenceThresholds = THR, **kw: object):
    mon = d.DivergenceMonitor("fp32", initial_loss=2.0, thresholds=thr, **kw)  # type: ignore[arg-type]
    hits = []
    for start in range(0, len(loss), chunk):
        hit = mon.update(loss[start : start + chunk])
        if hit is not None:
            hits.append(start + hit[1])
    return mon, hits


def test_one_step_jump_is_a_spike_not_a_divergence() -> None:
    loss = decay(120)
    loss[2] = 60.0  # 30x the reference at step 2, gone at step 3
    mon, hits = run(loss)
    assert hits == [] and not mon.diverged and mon.cause is None and mon.step is None
    assert mon.spike_count == 1
    assert mon.spikes == [{"step": 2, "cause": "loss_explosion", "loss_ratio": 30.0}]
    assert mon.max_loss_ratio == pytest.approx(30.0)
    rec = mon.record()
    assert rec["divergence_spike_count"] == 1 and rec["divergence_onset_step"] is None
    assert rec["divergence_max_loss_ratio"] == pytest.approx(30.0)


def test_k_minus_one_spikes_in_a_row_are_not_a_divergence_k_are() -> None:
    loss = decay(120)
    loss[10:12] = 50.0  # 2 < k = 3 in a row
    mon, hits = run(loss)
    assert hits == [] and mon.spike_count == 2
    loss[40:45] = 50.0  # 5 in a row: the verdict at the third
    mon, hits = run(loss)
    assert mon.cause == "loss_explosion" and mon.step == 42 and mon.onset == 40
    assert hits[0] == 42
    assert mon.spike_count == 7


def test_a_loss_below_zero_explodes_and_fails_to_recover_by_the_same_distance() -> None:
    # A loss that starts at -2 (a log-likelihood of a density): 10 x -2 would be a "threshold"
    # below the loss itself, every step a spike. The threshold is as far above -2 as 10 x 2 is
    # above 2: -2 + 9 x 2 = 16; a recovery level is likewise above a negative median.
    def negative(loss: np.ndarray) -> np.ndarray:
        return loss - 4.0  # decay's 2.0 -> -2.0, its 0.5 floor -> -3.5

    mon = d.DivergenceMonitor("fp32", initial_loss=-2.0, thresholds=THR)
    assert mon.update(negative(decay(120))) is None and mon.spike_count == 0
    assert mon.max_loss_ratio is None  # a ratio to a negative loss says nothing
    loss = negative(decay(120))
    loss[2] = 15.0  # below the threshold of 16: no spike
    loss[50] = 17.0  # above it: one spike, recovered at once
    mon = d.DivergenceMonitor("fp32", initial_loss=-2.0, thresholds=THR)
    assert mon.update(loss) is None and mon.spike_count == 1
    assert mon.spikes == [{"step": 50, "cause": "loss_explosion", "loss_ratio": None}]
    loss[60:65] = 40.0  # persisting: diverged at the third
    mon = d.DivergenceMonitor("fp32", initial_loss=-2.0, thresholds=THR)
    assert mon.update(loss) == ("loss_explosion", 62)
    # A spike, then a plateau. The pre-spike median is about -3.5, so with recovery_factor 3
    # the level is -3.5 + 2 x 3.5 = 3.5: a plateau at 0 recovered, one at 5 did not.
    base = negative(decay(200))
    base[150] = 40.0
    for plateau, diverged in ((0.0, False), (5.0, True)):
        loss = base.copy()
        loss[151:] = plateau
        mon = d.DivergenceMonitor("fp32", initial_loss=-2.0, thresholds=THR)
        hit = mon.update(loss)
        assert (hit is not None and hit[0] == "no_recovery") == diverged, plateau
    # At L0 = 0 there is no scale: no loss explosion (the other tests still run).
    zero = d.DivergenceMonitor("fp32", initial_loss=0.0, thresholds=THR)
    assert zero.update(np.array([0.0, 5.0, 50.0, 0.1])) is None and zero.spike_count == 0
    assert recovery.above(2.0, 10.0) == 20.0 and recovery.above(-2.0, 10.0) == 16.0


def test_persisting_grad_spikes_are_a_grad_explosion_unless_clipped() -> None:
    n = 60
    grad = np.ones(n)
    grad[30:33] = 1e5
    loss = decay(n)
    mon = d.DivergenceMonitor("fp32", initial_loss=2.0, thresholds=THR)
    assert mon.update(loss, grad_norm=grad) == ("grad_explosion", 32)
    assert (mon.onset, mon.spike_count) == (30, 3)
    clipped = d.DivergenceMonitor("fp32", initial_loss=2.0, thresholds=THR, clipping=True)
    assert clipped.update(loss, grad_norm=grad) is None and clipped.spike_count == 0


def test_a_plateau_far_above_the_pre_spike_median_is_no_recovery() -> None:
    loss = decay(200)  # about 0.5 by step 150
    loss[150] = 40.0  # the spike (20x the reference)
    loss[151:] = 3.0  # then a plateau: 6x the pre-spike median, never back
    mon, hits = run(loss)
    assert mon.cause == "no_recovery"
    assert mon.step == 150 + THR.recovery_window and mon.onset == 150
    assert hits[0] == 170
    # the same plateau at 1.2x the pre-spike median recovered well enough
    loss[151:] = 1.2 * np.median(loss[130:150])
    mon, hits = run(loss)
    assert hits == [] and not mon.diverged and mon.spike_count == 1


def test_a_noisy_loss_is_not_held_to_its_median() -> None:
    # the pre-spike losses are noisy (MAD-level): a window median within 6 robust sigmas passes
    rng = np.random.default_rng(3)
    loss = np.abs(rng.normal(0.1, 0.2, 200)) + 0.01
    loss[100] = 30.0
    pre = loss[80:100]
    m = np.median(pre)
    mad = np.median(np.abs(pre - m))
    post = m + 4 * 1.4826 * mad
    assert post > 3 * m  # above the factor's level, below the MAD's
    loss[101:] = post
    mon, _ = run(loss)
    assert not mon.diverged


def test_a_heavy_tailed_series_that_recovers_is_not_a_divergence() -> None:
    # Student-t (2 dof) per-batch noise on a decaying loss: many single-step jumps past 10x
    rng = np.random.default_rng(7)
    n = 600
    noise = np.abs(rng.standard_t(2, n))
    loss = decay(n, seed=1) * (1 + 3 * noise)
    loss[1] = 80.0  # the early jump of the issue, gone a step later
    mon = d.DivergenceMonitor("fp32", initial_loss=2.0)  # the default thresholds
    for start in range(0, n, 10):
        assert mon.update(loss[start : start + 10]) is None
    assert mon.spike_count >= 2 and not mon.diverged


@pytest.mark.parametrize("chunks", [[1], [2], [3], [10], [64], [600], [1, 5, 17, 2, 33]])
def test_chunking_does_not_change_the_state(chunks: list[int]) -> None:
    rng = np.random.default_rng(11)
    n = 600
    loss = decay(n) * (1 + np.abs(rng.standard_t(2, n)))
    loss[200:205] = 100.0
    loss[300] = 60.0
    loss[301:] = 4.0  # no recovery after the spike at 300
    grad = np.abs(rng.normal(1, 0.2, n))
    grad[400] = 1e9
    grad[450] = np.inf
    thr = d.DivergenceThresholds(persist_steps=6, recovery_window=30, recovery_factor=3.0)

    def feed(sizes: list[int]) -> tuple[d.DivergenceMonitor, list[tuple[str, int]]]:
        mon = d.DivergenceMonitor("fp16", initial_loss=2.0, thresholds=thr)
        hits, start, i = [], 0, 0
        while start < n:
            size = sizes[i % len(sizes)]
            hit = mon.update(loss[start : start + size], grad_norm=grad[start : start + size])
            if hit is not None:
                hits.append((hit[0], start + hit[1]))
            start, i = start + size, i + 1
        return mon, hits

    whole, whole_hits = feed([n])
    mon, hits = feed(chunks)
    assert (mon.cause, mon.step, mon.onset) == (whole.cause, whole.step, whole.onset)
    assert (mon.cause, mon.step, mon.onset) == ("no_recovery", 330, 300)
    assert mon.record() == whole.record() and mon.spike_count == whole.spike_count
    assert mon.spikes == whole.spikes and mon.grad_norm_median == whole.grad_norm_median
    # each chunk's first verdict: every verdict step of the whole series is among them
    assert {s for _, s in hits} >= {whole_hits[0][1]}


def test_stop_modes() -> None:
    assert stopping.stop_mode(True) is True and stopping.stop_mode(False) is False
    assert stopping.stop_mode("nonfinite") == "nonfinite" and stopping.stop_mode(None) is True
    with pytest.raises(ValueError, match="stop_early"):
        stopping.stop_mode("sometimes")
    loss = decay(60)
    loss[10:13] = 50.0  # a persisting explosion: a verdict, but finite
    mon, _ = run(loss)
    assert mon.diverged and mon.should_stop(True)
    assert not mon.should_stop("nonfinite") and not mon.should_stop(False)
    mon.update([np.nan])
    assert mon.should_stop("nonfinite") and mon.nonfinite_step == 60
    assert mon.cause == "loss_explosion"  # the first verdict stays the verdict


def test_thresholds_reject_bad_values() -> None:
    with pytest.raises(ValueError, match="persist_steps"):
        d.DivergenceThresholds(persist_steps=0)
    with pytest.raises(ValueError, match="recovery_window"):
        d.DivergenceThresholds(recovery_window=0)
    with pytest.raises(ValueError, match="recovery_factor"):
        d.DivergenceThresholds(recovery_factor=1.0)


# ----- real probes ----------------------------------------------------------------------------

STUDENT_T = Path(__file__).resolve().parents[2] / "benchmarks" / "workloads" / "student_t.py"


def student_t(**changes: object) -> ProbeConfig:
    cfg = ProbeConfig(
        workload=f"{STUDENT_T}:make", steps=80, micro_batch=16, seed=2, knobs={"lr": 0.1}
    )
    return replace(cfg, **changes)  # type: ignore[arg-type]


def test_a_heavy_tailed_workload_spikes_without_diverging_an_exploding_one_still_diverges() -> None:
    # Student-t targets at lr 0.1 (PyTorch's defaults otherwise): the loss jumps past 10x its
    # reference at step 2 and is back a step later. The one-step rule called that a divergence.
    r = run_probe(student_t())
    assert r["status"] == "ok" and r["steps_run"] == 80 and r["divergence_cause"] is None
    assert r["divergence_spike_count"] >= 1 and r["divergence_spikes"][0]["step"] == 2
    assert r["divergence_max_loss_ratio"] > 10
    old = run_probe(student_t(divergence={"persist_steps": 1, "recovery_window": 10**6}))
    assert old["status"] == "diverged" and old["divergence_cause"] == "loss_explosion"
    assert old["diverged_at_step"] == 2 and old["steps_run"] == 3
    # tiny_gpt at lr 5 with no clipping explodes for good (its loss stays past 10x its
    # reference): still diverged, after persist_steps (100) spikes, and stopped early
    boom = run_probe(ProbeConfig(workload="tiny_gpt", steps=250, micro_batch=16, knobs={"lr": 5.0}))
    assert boom["status"] == "diverged" and boom["steps_run"] < 125
    assert boom["divergence_cause"] in {"nonfinite_loss", "loss_explosion", "grad_explosion"}
    # stopped at the fetch that reached the verdict (every step for 20 steps, then every 10)
    assert boom["diverged_at_step"] < boom["steps_run"] <= boom["diverged_at_step"] + 10
    assert boom["divergence_onset_step"] <= boom["diverged_at_step"]


def test_the_baseline_runs_on_past_a_finite_divergence_and_still_says_diverged() -> None:
    # mlp at lr 5: 30-50x its reference for ~30 steps (then it stalls): with k = 20 a verdict
    cfg = ProbeConfig(
        workload="mlp",
        steps=120,
        micro_batch=16,
        knobs={"lr": 5.0},
        divergence={"persist_steps": 20},
    )
    base = cfg.for_baseline()
    assert base.divergence["stop_early"] == "nonfinite"
    assert ProbeConfig.from_dict(base.to_dict()) == base  # it travels as JSON
    assert cfg.for_baseline(False) is cfg
    never = replace(cfg, divergence={"stop_early": False})
    assert never.for_baseline() is never  # a probe told never to stop keeps that
    stopped, carried = run_probe(cfg), run_probe(base)
    assert stopped["status"] == carried["status"] == "diverged"
    assert carried["divergence_cause"] == stopped["divergence_cause"]
    assert carried["diverged_at_step"] == stopped["diverged_at_step"]
    loss = np.asarray(carried["series"]["loss"], dtype=float)
    if np.isfinite(loss).all():  # a finite explosion: the baseline ran the whole length
        assert carried["steps_run"] == 120 > stopped["steps_run"]
    else:  # a non-finite loss stops the baseline too, at that step
        assert carried["steps_run"] == int(np.argmax(~np.isfinite(loss))) + 1


# ----- the space's keys -----------------------------------------------------------------------

SPACE = """
name: d
workload: mlp
probe:
  steps: 40
  divergence: {{{divergence}}}
knobs:
  lr: {{low: 0.001, high: 0.1, log: true}}
"""


def test_space_keys_reach_the_monitor() -> None:
    text = (
        "stop_early: nonfinite, persist_steps: 4, recovery_window: 25, recovery_factor: 2.5, "
        "recovery_descent: 1.5"
    )
    space = sp.loads(SPACE.format(divergence=text), source="d.yaml")
    cfg = sp.probe_config(space)
    assert cfg.divergence["stop_early"] == "nonfinite"
    thr = thresholds(ProbeConfig.from_dict(cfg.to_dict()).divergence)
    assert (thr.persist_steps, thr.recovery_window, thr.recovery_factor) == (4, 25, 2.5)
    assert thr.recovery_descent == 1.5
    default = thresholds(sp.probe_config(sp.loads(SPACE.format(divergence=""))).divergence)
    assert default == d.DivergenceThresholds()
    assert sp.probe_config(space).divergence["stop_early"] == "nonfinite"


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("persist_steps: 0", "persist_steps"),
        ("recovery_window: 0", "recovery_window"),
        ("recovery_factor: 1.0", "recovery_factor"),
        ("recovery_descent: -1", "recovery_descent"),
        ("stop_early: sometimes", "stop_early"),
    ],
)
def test_space_rejects_bad_divergence_keys(text: str, key: str) -> None:
    with pytest.raises(SpaceError, match=rf"probe\.divergence\.{key} "):
        sp.loads(SPACE.format(divergence=text), source="d.yaml")


def test_the_studys_baseline_probes_stop_only_on_a_nonfinite_loss(tmp_path: Path) -> None:
    from autotune.study import states as ss

    space = sp.loads(SPACE.format(divergence=""), overrides=["budget.target_steps=120"])
    base = ss.screen_probe(space, tmp_path, 0, {}, {}, rungs_above=True, baseline=True)
    other = ss.screen_probe(space, tmp_path, 1, {}, {}, rungs_above=True)
    assert base.divergence["stop_early"] == "nonfinite" and other.divergence["stop_early"] is True
    assert base.save_state is not None  # the rest of the probe is unchanged
    rung = ss.rung_probe(space, tmp_path, 0, {}, {}, steps=80, below=40, top=False, baseline=True)
    assert rung.divergence["stop_early"] == "nonfinite" and rung.resume_from is not None
    plain = ss.rung_probe(space, tmp_path, 1, {}, {}, steps=80, below=40, top=False)
    assert plain.divergence["stop_early"] is True


def test_a_continued_probe_judges_its_inherited_steps_as_a_fresh_one(tmp_path: Path) -> None:
    # continuation feeds the shorter probe's steps to the monitor again, in one chunk
    state = str(tmp_path / "s40.pt")
    cfg = student_t(steps=80, schedule_steps=80, divergence={"persist_steps": 3})
    fresh = run_probe(cfg)
    run_probe(replace(cfg, steps=40, save_state=state))
    continued = run_probe(replace(cfg, resume_from=state))
    assert continued["resumed_from_step"] == 40
    keys = ("status", "divergence_cause", "diverged_at_step", "divergence_onset_step")
    keys += ("divergence_spike_count", "divergence_spikes", "divergence_max_loss_ratio")
    assert {k: continued[k] for k in keys} == {k: fresh[k] for k in keys}
    assert fresh["divergence_spike_count"] >= 1


def _excursion(tail: np.ndarray) -> np.ndarray:
    """100 steps at 3.0, a spike at step 100, then `tail` (a loss of reference 3.0)."""
    return np.concatenate([np.full(100, 3.0), [60.0], tail])


def test_a_loss_coming_back_from_a_long_excursion_is_judged_later_not_diverged() -> None:
    # tiny_gpt's shape at lr 0.5 with warm-up 50 (benchmarks/false_divergence.py): far above
    # its reference for ~100 steps (here 9x: under the spike threshold, so only the recovery
    # test judges it) for 100 steps, then back down to where it was by step 350
    back = np.concatenate([np.full(100, 27.0), np.geomspace(27.0, 3.0, 150), np.full(200, 3.0)])
    loss = _excursion(back)
    mon = d.DivergenceMonitor("fp32", initial_loss=3.0, thresholds=d.DivergenceThresholds())
    mon.update(loss)
    assert not mon.diverged and mon.spike_count == 1
    # at W = 200, F = 3 the median since the spike is still ~9x: without the descent test
    # (R <= 1) that is no recovery, judged at the window's end
    thr = d.DivergenceThresholds(recovery_window=200, recovery_factor=3.0)
    assert not d.DivergenceMonitor("fp32", initial_loss=3.0, thresholds=thr).update(loss)
    off = d.DivergenceMonitor(
        "fp32", initial_loss=3.0, thresholds=replace(thr, recovery_descent=1.0)
    )
    assert off.update(loss) == ("no_recovery", 300)
    assert (off.cause, off.step, off.onset) == ("no_recovery", 300, 100)


def test_a_loss_that_stays_up_after_a_spike_does_not_recover() -> None:
    # 20 is 6.7x the reference: no spike after the first, so persistence never fires
    flat = _excursion(np.full(400, 20.0))
    mon = d.DivergenceMonitor("fp32", initial_loss=3.0)
    assert mon.update(flat) == ("no_recovery", 100 + d.RECOVERY_WINDOW)
    assert mon.onset == 100 and mon.spike_count == 1


def test_a_deferred_check_keeps_its_spike_and_level_and_is_judged_a_window_later() -> None:
    w = d.RECOVERY_WINDOW
    no_k = d.DivergenceThresholds(persist_steps=10**6)  # persistence would call them first
    # halves within the first window (coming back: deferred), then stays at 20 (6.7x the
    # pre-spike median of 3, above F = 5 x 3): judged at the second window's end
    down = np.concatenate([np.geomspace(60.0, 20.0, w // 2), np.full(w // 2 + w + 50, 20.0)])
    mon = d.DivergenceMonitor("fp32", initial_loss=3.0, thresholds=no_k)
    assert mon.update(_excursion(down)) == ("no_recovery", 100 + 2 * w)
    assert mon.onset == 100  # the spike that did not recover, not the deferral
    # the same, halving by less than R = 2 (60 -> 40): no deferral, judged at the first
    slow = np.concatenate([np.geomspace(60.0, 40.0, w // 2), np.full(w // 2 + w + 50, 40.0)])
    mon = d.DivergenceMonitor("fp32", initial_loss=3.0, thresholds=no_k)
    assert mon.update(_excursion(slow)) == ("no_recovery", 100 + w)


def test_recovery_descent_is_read_from_the_space_and_checked() -> None:
    with pytest.raises(ValueError, match="recovery_descent"):
        d.DivergenceThresholds(recovery_descent=-1.0)
    assert d.DivergenceThresholds().recovery_descent == d.RECOVERY_DESCENT == 2.0


@pytest.mark.parametrize(
    ("post", "descent", "expected"),
    [
        # q = 10 // 5 = 2, chunks [0:2] .. [8:10]; the last 2 at half the worst chunk: exactly R
        ([10.0, 10, 1, 1, 1, 1, 1, 1, 5, 5], 2.0, True),
        ([10.0, 10, 1, 1, 1, 1, 1, 1, 5.01, 5.01], 2.0, False),
        # q = 1 for 4 losses (each loss a chunk): 2 x 2 <= 4
        ([4.0, 1, 1, 2], 2.0, True),
        # q = 2 for 10: chunk medians 6, 1, 1, 1, 3 and the last two 3: 6 <= 6 (with q = 1 the
        # last loss 4 would be judged: 8 > 6)
        ([6.0, 6, 1, 1, 1, 1, 1, 1, 2, 4], 2.0, True),
        # the worst chunk in the middle counts
        ([1.0, 1, 1, 1, 8, 8, 1, 1, 1, 1], 2.0, True),
        # chunks are aligned: the [5, 5] across two chunks is no chunk (medians 3 and 3)
        ([1.0, 5, 5, 1, 1, 1, 1, 1, 2, 2], 2.0, False),
        # the first chunk counts
        ([9.0, 9, 1, 1, 1, 1, 1, 1, 3, 3], 2.0, True),
        # 13 losses, q = 2: chunks up to [10:12] (its median 10.5), the last two [11:13] are 1
        ([1.0] * 10 + [20.0, 1, 1], 2.0, True),
        # 11 losses, q = 2: the lone last loss is no chunk (chunks up to [8:10], all 1)
        ([1.0] * 10 + [10.0], 1.5, False),
        # the test off, or nothing to judge
        ([10.0, 10, 1, 1, 1, 1, 1, 1, 1, 1], 1.0, False),
        ([10.0, 10, 1, 1, 1, 1, 1, 1, 1, 1], 0.0, False),
        ([], 2.0, False),
    ],
)
def test_coming_back_cuts_the_window_in_aligned_fifths(
    post: list[float], descent: float, expected: bool
) -> None:
    assert recovery.coming_back(post, descent) is expected


def test_a_run_that_ends_inside_a_spike_has_not_recovered_at_its_end() -> None:
    # THR: persist 3, window 20, factor 3; the runs end before the window closes
    base = decay(160)  # about 0.5 by step 150
    plateau = base.copy()
    plateau[150] = 40.0  # the spike (20x the reference), then up at 6x the median, to the end
    plateau[151:] = 3.0
    mon, hits = run(plateau, thr=replace(THR, persist_steps=100))
    assert hits == [] and mon.cause is None  # no verdict while it runs (the window is open)
    assert mon.at_end() == ("no_recovery", 159)
    assert (mon.cause, mon.step, mon.onset) == ("no_recovery", 159, 150)
    assert mon.at_end() is None  # a verdict once

    cases = {
        "one late jump": (158, None),  # 1 loss after it: fewer than END_STEPS
        "four steps after it": (155, None),
        "five steps after it": (154, ("no_recovery", 159)),
    }
    for name, (at, want) in cases.items():
        loss = base.copy()
        loss[at] = 40.0
        loss[at + 1 :] = 3.0
        mon, _ = run(loss, thr=replace(THR, persist_steps=100))
        assert mon.at_end() == want, name

    back = base.copy()  # the spike's losses already falling back: coming back, no verdict
    back[150] = 40.0
    back[151:] = np.geomspace(30.0, 2.0, 9)
    mon, _ = run(back, thr=replace(THR, persist_steps=100))
    assert mon.at_end() is None

    recovered = base.copy()  # back at the median within the run: no verdict
    recovered[150] = 40.0
    mon, _ = run(recovered, thr=replace(THR, persist_steps=100))
    assert mon.at_end() is None and mon.spike_count == 1

    mon, _ = run(decay(160))  # no spike at all
    assert mon.at_end() is None


LATE = """
from autotune.workloads.mlp import MLPWorkload


class Late(MLPWorkload):
    calls = 0

    def loss(self, model, batch):
        out = super().loss(model, batch)
        if model.training:
            self.calls += 1
        return out * 100 if self.calls > 50 else out  # from then on, to the end


def make(size="tiny"):
    return Late(size)
"""


def test_the_probe_loop_judges_a_run_at_its_schedules_end_only(tmp_path: Path) -> None:
    (tmp_path / "late.py").write_text(LATE)

    def probe(schedule_steps: int | None) -> dict[str, object]:
        cfg = ProbeConfig(
            workload=f"{tmp_path / 'late.py'}:make", steps=60, micro_batch=8,
            knobs={"lr": 0.001}, schedule_steps=schedule_steps, telemetry_every=5,
        )  # fmt: skip
        return run_probe(cfg)

    ended = probe(None)  # the whole run: it ended inside a 100x jump
    assert (ended["status"], ended["divergence_cause"]) == ("diverged", "no_recovery")
    loss = ended["series"]["loss"]  # type: ignore[index]
    onset = next(i for i, x in enumerate(loss) if x > 20)  # (the workload counts loss() calls)
    assert onset <= 55 and all(x > 20 for x in loss[onset:])
    assert ended["diverged_at_step"] == 59 and ended["divergence_onset_step"] == onset
    rung = probe(120)  # the first 60 of 120 steps: not the end, no verdict yet
    assert (rung["status"], rung["divergence_cause"]) == ("ok", None)
    assert rung["divergence_spike_count"] == 60 - onset
