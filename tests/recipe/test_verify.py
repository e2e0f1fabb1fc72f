"""`autotune verify`'s core: the seeds, the probe a recipe was measured with, the baseline it is
compared to, and a real verification (recipe and baseline run as real probe processes)."""

from __future__ import annotations

import pytest
from assets.recipes import make_recipe

from autotune import space as sp
from autotune.recipe import verify as vf


def test_the_verification_seeds_are_other_than_the_studys() -> None:
    assert vf.seeds_for(0, 3) == [1, 2, 3]
    assert 7 not in vf.seeds_for(7, 5) and len(set(vf.seeds_for(7, 5))) == 5


def test_format_interval() -> None:
    assert vf.format_interval(None) == "n/a"
    assert vf.format_interval({"mean": 0.5, "low": None}) == "0.5 (1 seed)"
    assert (
        vf.format_interval(vf.interval([1.0, 2.0, 3.0])) == "2 [-0.4843, 4.484]"
    )  # t(0.975, 2) = 4.303, s = 1, n = 3


def test_the_probe_config_is_the_recipes() -> None:
    r = make_recipe(clip_norm=0.7, warmup_steps=20, accum_steps=2)
    cfg = r.probe_config()
    assert (cfg.workload, cfg.size, cfg.steps, cfg.micro_batch) == ("mlp", "tiny", 50, 16)
    assert cfg.knobs["clip_norm"] == 0.7 and cfg.knobs["accum_steps"] == 2
    assert cfg.env == r.env
    assert r.probe_config(knobs={"lr": 0.5}).knobs == {"lr": 0.5}


def test_the_baseline_resets_the_searched_knobs_and_keeps_the_rest() -> None:
    r = make_recipe(clip_norm=0.7, warmup_steps=20, adam_eps=1e-6)
    base = vf.baseline_knobs(r)  # the study searched clip_norm and warmup_steps
    assert base["clip_norm"] == sp.KNOBS["clip_norm"].default
    assert base["warmup_steps"] == sp.KNOBS["warmup_steps"].default
    assert base["adam_eps"] == 1e-6 and base["lr"] == r.knobs["lr"]


@pytest.mark.integration
def test_a_real_verification_runs_both_sides_on_the_same_seeds() -> None:
    unstable = 0.05  # the mlp at a high lr: the defaults spike, clipping with warm-up does not
    r = make_recipe(lr=unstable, clip_norm=1.0, warmup_steps=20)
    report = vf.verify_recipe(r, seeds=2, timeout_s=120, threads=1, quiet=True)
    assert report["seeds"] == [1, 2] and report["steps"] == report["promised_steps"] == 50
    rec, base = report["recipe_result"], report["baseline_result"]
    assert rec["n"] == base["n"] == 2
    assert rec["metrics"]["loss_cv"]["n"] == 2  # both seeds completed and were measured
    # each seed's loss at every step, for MLflow's loss/seed_N (the probe's own series)
    assert set(report["loss_series"]) == {"1", "2"}
    assert all(len(v) == 50 for v in report["loss_series"].values())
    assert report["loss_series"]["1"] != report["loss_series"]["2"]
    # The promise (loss_cv 0.05 from the study) is compared at the probe length.
    assert [p["metric"] for p in report["promise"]] == ["loss_cv"]
    assert "recipe t" in vf.format_report(report)
    # Paired with the baseline over the same seeds, per compared metric and on divergence.
    vs = report["vs_baseline"]
    assert vs["seeds"] == [1, 2] and vs["diverged"]["n"] == 2
    assert set(vs["metrics"]) == {"final_loss", "loss_cv"}
    assert vs["verdict"] in ("better", "no detectable difference", "mixed"), vs
    assert "recipe vs baseline (paired over seeds [1, 2]): " in vf.format_report(report)


def test_positive_quantities_get_intervals_that_cannot_go_below_zero() -> None:
    # linear: mean 367, half-width t(2) * 552 / sqrt(3) ~ 1372: the low end would be negative
    iv = vf.interval([1.0, 100.0, 1000.0], scale="log")
    assert iv["scale"] == "log" and iv["low"] > 0 and iv["high"] > iv["mean"] > iv["low"]
    assert iv["mean"] == pytest.approx(1e5 ** (1 / 3))  # the geometric mean
    assert vf.interval([1.0, 100.0, 1000.0])["low"] < 0  # what the linear interval said
    runs = [
        {
            "seed": s,
            "outcome": "complete",
            "summary": {"metrics": {"throughput": v, "loss_drop": d}},
        }
        for s, v, d in ((1, 5.0, -0.2), (2, 500.0, 0.1), (3, 90.0, 0.4))
    ]
    res = vf.summarize_seeds(runs, ["throughput", "loss_drop"])
    assert (
        res["metrics"]["throughput"]["low"] > 0 and res["metrics"]["throughput"]["scale"] == "log"
    )
    assert "scale" not in res["metrics"]["loss_drop"]  # not a positive quantity: linear


def test_a_count_or_share_never_gets_an_impossible_bound() -> None:
    # spike counts 0, 0, 0, 0, 31 over five seeds: mean 6.2, the linear low end would be < 0
    runs = [
        {"seed": i, "outcome": "complete", "summary": {"metrics": {"spike_count": c}}}
        for i, c in enumerate([0, 0, 0, 0, 31])
    ]
    iv = vf.summarize_seeds(runs, ["spike_count"])["metrics"]["spike_count"]
    assert iv["low"] == 0.0 and iv["clipped"] is True and iv["high"] > iv["mean"] == 6.2
    runs = [
        {"seed": i, "outcome": "complete", "summary": {"metrics": {"loss_drop": d}}}
        for i, d in enumerate([0.99, 0.2, 0.999])
    ]
    iv = vf.summarize_seeds(runs, ["loss_drop"])["metrics"]["loss_drop"]
    assert iv["high"] == 1.0 and iv["low"] < iv["mean"]
    # an interval inside the range is left as it is
    runs = [
        {"seed": i, "outcome": "complete", "summary": {"metrics": {"spike_count": c}}}
        for i, c in enumerate([3, 4, 5])
    ]
    assert "clipped" not in vf.summarize_seeds(runs, ["spike_count"])["metrics"]["spike_count"]
