"""`autotune verify`'s verdicts without running a probe: the promise per metric (as promised,
better, WORSE, not measured, other hardware), the divergence promise, the report's text line by
line, the failed seeds, the baseline's knobs, the probe a recipe runs and a workload that cannot
be found. Each expected value is worked by hand from the inputs."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from assets.recipes import make_recipe

from autotune import space as sp
from autotune.errors import WorkloadError
from autotune.recipe import verify as vf
from autotune.recipe import verify_log as vl
from autotune.tracking import redact


def promised(
    direction: str = "minimize",
    value: float | None = 0.5,
    low: float | None = None,
    high: float | None = None,
    mean: float | None = None,
    share: float | None = None,
) -> dict[str, Any]:
    verified = None
    if low is not None or high is not None or mean is not None or share is not None:
        verified = {"mean": mean, "low": low, "high": high, "n": 3, "diverged_share": share}
        verified = {k: v for k, v in verified.items() if v is not None}
    return {"direction": direction, "value": value, "verified": verified}


def measured(**metrics: tuple[float | None, float | None, float | None]) -> dict[str, Any]:
    return {
        "metrics": {m: {"mean": a, "low": b, "high": c, "n": 3} for m, (a, b, c) in metrics.items()}
    }


ONE_SEED = "too few seeds to tell (1 measured: --seeds 3 or more)"


def verdict_of(p: dict[str, Any], got: tuple[Any, Any, Any], same: bool = True) -> str:
    r = replace(make_recipe(), achieved={"loss_cv": p})
    rows = vf.compare_promise(r, measured(loss_cv=got), same)
    assert len(rows) == 1
    return rows[0]["verdict"]


@pytest.mark.parametrize(
    ("p", "got", "expected"),
    [
        # 3 seeds a side, judged by the interval of measured / promised (Welch, log scale:
        # `test_promise_difference.py` works one by hand): it holds 1, as promised
        (promised(mean=0.5, low=0.4, high=0.6), (0.55, 0.5, 0.7), "as promised"),
        # intervals that only touch at one end: the ratio's interval leaves out 1 (x1.3
        # [x1.03, x1.65]; x0.7 [x0.573, x0.856]), by the direction (the overlap rule said
        # "as promised" of both)
        (promised(mean=0.5, low=0.4, high=0.6), (0.65, 0.6, 0.7), "WORSE than promised"),
        (promised(mean=0.5, low=0.4, high=0.6), (0.35, 0.3, 0.4), "better than promised"),
        # apart: by the direction
        (promised(mean=0.5, low=0.4, high=0.6), (0.3, 0.2, 0.39), "better than promised"),
        (promised(mean=0.5, low=0.4, high=0.6), (0.7, 0.61, 0.8), "WORSE than promised"),
        (
            promised("maximize", mean=0.5, low=0.4, high=0.6),
            (0.7, 0.61, 0.8),
            "better than promised",
        ),
        (
            promised("maximize", mean=0.5, low=0.4, high=0.6),
            (0.3, 0.2, 0.39),
            "WORSE than promised",
        ),
        # a promise of one value (one seed, no verified interval) and no per-seed values
        # measured: not judged (test_verify_promise.py judges it against the seeds' spread)
        (promised(value=0.5), (0.45, 0.4, 0.5), "not judged (a promise from 1 seed)"),
        (promised(value=0.5), (0.45, 0.4, 0.49), "not judged (a promise from 1 seed)"),
        (promised(value=0.5), (0.55, 0.5, 0.6), "not judged (a promise from 1 seed)"),
        # verified, its mean first; one end missing: the other end's half stands in for it
        # (the overlap rule took the mean for it, a promise half as wide: 0.6 [0.51, 0.7]
        # read WORSE against 0.5 [0.4, -]; its ratio is x1.2 [x0.978, x1.47])
        (promised(value=9.0, mean=0.5, low=0.4), (0.55, 0.5, 0.6), "as promised"),
        (promised(value=9.0, mean=0.5, low=0.4), (0.6, 0.51, 0.7), "as promised"),
        (promised(value=9.0, mean=0.5, low=0.4), (0.8, 0.7, 0.9), "WORSE than promised"),
        (promised(value=9.0, mean=0.5, high=0.6), (0.39, 0.3, 0.4), "better than promised"),
        # measured without an interval (one seed's): too few seeds to tell, whatever its value
        # (the overlap rule took the mean for both ends: one seed against the mean's interval)
        (promised(mean=0.5, low=0.4, high=0.6), (0.6, None, None), ONE_SEED),
        (promised(mean=0.5, low=0.4, high=0.6), (0.4, None, None), ONE_SEED),
        (promised(mean=0.5, low=0.4, high=0.6), (0.61, None, None), ONE_SEED),
        (promised(mean=0.5, low=0.4, high=0.6), (0.39, None, None), ONE_SEED),
        # measured with one end: the other end's half stands in for it
        (promised(mean=0.5, low=0.4, high=0.6), (0.45, 0.42, None), "as promised"),
        (promised(mean=0.5, low=0.4, high=0.6), (0.38, None, 0.39), "better than promised"),
        # nothing measured, or nothing promised
        (promised(mean=0.5, low=0.4, high=0.6), (None, None, None), "not measured"),
        (promised(value=None), (0.5, 0.4, 0.6), "not measured"),
    ],
)
def test_the_promise_per_metric(
    p: dict[str, Any], got: tuple[Any, Any, Any], expected: str
) -> None:
    assert verdict_of(p, got) == expected


def test_a_promise_row_in_full_and_a_metric_not_measured() -> None:
    r = replace(
        make_recipe(),
        achieved={
            "loss_cv": promised(mean=0.5, low=0.4, high=0.6),
            "throughput": promised("maximize", value=100.0),
        },
    )
    got = measured(loss_cv=(0.55, 0.5, 0.7))
    rows = vf.compare_promise(r, got, same_hardware=True)
    # judged by measured / promised (log scale; Welch: `test_promise_difference.py`): its
    # interval, with the level and the scale, holds 1
    diff = rows[0].pop("difference")
    assert (diff["level"], diff["scale"]) == (0.95, "log")
    assert diff["mean"] == pytest.approx(1.1) and diff["low"] < 1.0 < diff["high"]
    assert rows == [
        {
            "metric": "loss_cv",
            "direction": "minimize",
            "promised": {"mean": 0.5, "low": 0.4, "high": 0.6},
            "measured": {"mean": 0.55, "low": 0.5, "high": 0.7, "n": 3},
            "verdict": "as promised",
        },
        {
            "metric": "throughput",
            "direction": "maximize",
            "promised": {"mean": 100.0, "low": None, "high": None},
            "measured": vf.interval([]),
            "verdict": "not measured",
        },
    ]
    assert rows[1]["measured"]["mean"] is None
    assert vf.compare_promise(r, {}, True)[0]["verdict"] == "not measured"


def test_a_hardware_number_on_other_hardware_is_not_comparable() -> None:
    verified = promised("maximize", mean=100.0, low=95.0, high=105.0)
    r = replace(make_recipe(), achieved={"throughput": verified})
    got = measured(throughput=(50.0, 45.0, 55.0))
    assert vf.compare_promise(r, got, same_hardware=True)[0]["verdict"] == "WORSE than promised"
    assert vf.compare_promise(r, got, same_hardware=False)[0]["verdict"] == (
        "WORSE than promised (other hardware: not comparable)"
    )
    # loss_cv measures the configuration, not the machine: compared on any hardware
    r = replace(make_recipe(), achieved={"loss_cv": promised(mean=0.5, low=0.45, high=0.55)})
    assert vf.compare_promise(r, measured(loss_cv=(0.5, 0.4, 0.6)), False)[0]["verdict"] == (
        "as promised"
    )
    # not measured stays not measured, whatever the hardware
    r = replace(make_recipe(), achieved={"throughput": promised("maximize", value=100.0)})
    assert vf.compare_promise(r, {"metrics": {}}, False)[0]["verdict"] == "not measured"


@pytest.mark.parametrize(
    ("share", "got", "n", "expected"),
    [
        (0.0, 1.0, 3, "DIVERGED on every seed"),
        (1.0, 1.0, 3, "DIVERGED on every seed"),  # never "as promised"
        # one seed of three is within chance: not WORSE (and no exit 1), but said
        (
            0.0,
            1 / 3,
            3,
            "more than promised, within chance (1 of 3 here vs 0 of 3 promised: p = 1)",
        ),
        (1 / 3, 1 / 3, 3, "as promised (1 of 3 here vs 1 of 3 promised: within chance, p = 1)"),
        (2 / 3, 1 / 3, 3, "as promised (1 of 3 here vs 2 of 3 promised: within chance, p = 1)"),
        (0.0, 0.0, 3, "as promised (0 of 3 here vs 0 of 3 promised: within chance, p = 1)"),
        # an equal share over 2 seeds here was "as promised" (a blind user check, `--seeds 2`)
        (0.0, 0.0, 2, "too few seeds to tell (0 of 2 here vs 0 of 2 promised; --seeds 3 or more)"),
        # beyond chance (Fisher's exact test, 95%): worse, and better, than promised
        (
            0.0,
            0.6,
            10,
            "WORSE than promised (6 of 10 here vs 0 of 10 promised: beyond chance, p = 0.011)",
        ),
        (
            0.6,
            0.0,
            10,
            "better than promised (0 of 10 here vs 6 of 10 promised: beyond chance, p = 0.011)",
        ),
    ],
)
def test_the_divergence_promise(share: float, got: float, n: int, expected: str) -> None:
    seeds = list(range(1, n + 1))
    r = replace(
        make_recipe(),
        achieved={
            "throughput": promised("maximize", value=100.0),  # no verified share: skipped
            "loss_cv": {
                **promised(mean=0.5, low=0.4, high=0.6),
                "verified": {
                    "mean": 0.5,
                    "low": 0.4,
                    "high": 0.6,
                    "n": n,
                    "seeds": seeds,
                    "diverged_share": share,
                },
            },
        },
    )
    rows = vf.compare_promise(r, {"metrics": {}, "n": n, "diverged_share": got}, True)
    assert [row["metric"] for row in rows] == ["throughput", "loss_cv", "diverged"]
    judged = {}
    if "(" in expected:  # judged by the test: its p and seeds in the row
        p = rows[-1]["p"]
        judged = {"p": p, "beyond_chance": p < 0.05, "measured_seeds": n, "promise_seeds": n}
    assert rows[-1] == {
        "metric": "diverged",
        "direction": "minimize",
        "promised": {"mean": share, "low": None, "high": None},
        "measured": {"mean": got, "low": None, "high": None},
        "verdict": expected,
        **judged,
    }


def test_no_divergence_row_without_a_recorded_share_or_a_measured_one() -> None:
    r = replace(make_recipe(), achieved={"loss_cv": promised(mean=0.5, low=0.4, high=0.6)})
    assert len(vf.compare_promise(r, {"metrics": {}, "diverged_share": 1.0}, True)) == 1
    r = replace(make_recipe(), achieved={"loss_cv": promised(mean=0.5, share=0.0)})
    assert len(vf.compare_promise(r, {"metrics": {}}, True)) == 1
    assert len(vf.compare_promise(r, {"metrics": {}, "diverged_share": 0.0}, True)) == 2


def seed_run(seed: int, outcome: str, cause: str | None = None, error: str | None = None):
    cv = 0.1 * seed
    return {
        "seed": seed,
        "outcome": outcome,
        "cause": cause,
        "error": error,
        "summary": {"metrics": {"loss_cv": cv, "final_loss": 2.0}, "steps_run": 50},
    }


def test_failed_seeds_and_all_failed() -> None:
    runs = [
        seed_run(1, "complete"),
        seed_run(2, "diverged", "nan_loss"),
        seed_run(3, "failed", "timeout", "ran past 600 s"),
        seed_run(4, "failed"),
    ]
    res = vf.summarize_seeds(runs, ["loss_cv"])
    assert vf.failure_lines(res, "recipe  ") == [
        "  recipe   seed 3: failed (timeout): ran past 600 s",
        "  recipe   seed 4: failed (unknown cause)",
    ]
    assert not vf.all_failed({"recipe_result": res})
    gone = vf.summarize_seeds([seed_run(1, "failed"), seed_run(2, "failed")], ["loss_cv"])
    assert vf.all_failed({"recipe_result": gone})
    assert not vf.all_failed({"recipe_result": vf.summarize_seeds([], ["loss_cv"])})


def test_the_report_line_by_line() -> None:
    rec = vf.summarize_seeds(
        [
            seed_run(1, "complete"),
            seed_run(2, "diverged", "nan_loss"),
            seed_run(3, "failed", "timeout"),
        ],
        ["loss_cv"],
    )
    base = vf.summarize_seeds(
        [seed_run(1, "complete"), seed_run(2, "complete"), seed_run(3, "failed", "crash", "boom")],
        ["loss_cv"],
    )
    drift = [{"field": f"f{i}", "recipe": i, "here": i + 1} for i in range(14)]
    report = {
        "recipe": "t",
        "seeds": [1, 2, 3],
        "steps": 100,
        "promised_steps": 50,
        "recipe_result": rec,
        "baseline_result": base,
        "promise": [
            {
                "metric": "loss_cv",
                "promised": {"mean": 0.5, "low": 0.4, "high": 0.6},
                "measured": {"mean": 0.1, "low": None, "high": None},
                "verdict": "better than promised",
            },
            {
                "metric": "diverged",
                "promised": {"mean": 0.0, "low": None, "high": None},
                "measured": {"mean": 1 / 3, "low": None, "high": None},
                "verdict": "WORSE than promised",
            },
        ],
        "vs_baseline": {"verdict": "worse", "seeds": [1, 2], "why": "it diverged more"},
        "drift": drift,
        "recipe_fingerprint_hash": "abc",
        "fingerprint": {"hash": "def"},
    }
    cv = vf.format_interval(rec["metrics"]["loss_cv"])
    base_cv = vf.format_interval(base["metrics"]["loss_cv"])
    assert vf.format_report(report).splitlines() == [
        "recipe t: 3 seed(s) [1, 2, 3], 100 steps; diverged 33% of seeds (nan_loss on seeds 2), "
        "1 failed; baseline diverged 0%, 1 failed",
        "failed seeds:",
        "  recipe   seed 3: failed (timeout)",
        "  baseline seed 3: failed (crash): boom",
        f"  {'metric':<14} {'recipe: mean [95% interval]':<34} "
        f"{'baseline: mean [95% interval]':<34}",
        f"  {'loss_cv':<14} {cv:<34} {base_cv:<34}",
        "the recipe's promise was measured at 50 steps: not compared at 100 (the recipe "
        "against the baseline above is the check here)",
        "against the recipe's promise:",
        f"  {'loss_cv':<14} promised 0.5 [0.4, 0.6]  measured 0.1 (1 seed)  -> better than "
        "promised",
        f"  {'diverged':<14} promised 0% of seeds  measured 33%  -> WORSE than promised",
        "recipe vs baseline (paired over seeds [1, 2]): WORSE: it diverged more",
        "WARNING: this machine differs from the one the recipe was tuned on (abc -> def):",
        *[f"  f{i}: {i!r} -> {i + 1!r}" for i in range(12)],
        "  ... and 2 more fields",
    ]


def test_the_report_without_a_baseline_failures_or_drift() -> None:
    rec = vf.summarize_seeds([seed_run(1, "complete"), seed_run(2, "complete")], ["loss_cv"])
    report = {
        "recipe": "t",
        "seeds": [1, 2],
        "steps": 50,
        "recipe_result": rec,
        "drift": [],
        "recipe_fingerprint_hash": "abc",
        "fingerprint": {"hash": "abc"},
    }
    cv = vf.format_interval(rec["metrics"]["loss_cv"])
    lines = [
        "recipe t: 2 seed(s) [1, 2], 50 steps; diverged 0% of seeds",
        f"  {'metric':<14} {'recipe: mean [95% interval]':<34}",
        f"  {'loss_cv':<14} {cv:<34}",
        "same hardware as the recipe (abc)",
    ]
    assert vf.format_report(report).splitlines() == lines
    # exactly 12 drifted fields: all listed, no "more"
    drift = [{"field": f"f{i}", "recipe": "a", "here": "b"} for i in range(12)]
    text = vf.format_report({**report, "drift": drift, "fingerprint": {"hash": "x"}})
    assert text.splitlines()[-13:] == [
        "WARNING: this machine differs from the one the recipe was tuned on (abc -> x):",
        *[f"  f{i}: 'a' -> 'b'" for i in range(12)],
    ]
    none = vf.format_report({**report, "recipe_fingerprint_hash": None})
    assert none.splitlines()[-1] == (
        "the recipe records no fingerprint: hardware drift cannot be checked"
    )


def test_the_baseline_knobs_without_a_searched_record() -> None:
    r = make_recipe(clip_norm=0.7, warmup_steps=20, adam_eps=1e-6, accum_steps=2, batch=64)
    r = replace(r, source={"study": "s"})
    base = vf.baseline_knobs(r)
    # every knob back to PyTorch's default but lr and the batch layout
    assert base["clip_norm"] == sp.KNOBS["clip_norm"].default
    assert base["adam_eps"] == sp.KNOBS["adam_eps"].default
    assert base["lr"] == 0.01 and base["accum_steps"] == 2 and base["batch"] == 64
    assert not vf.is_baseline(r)
    # a searched record naming lr or an unknown name: lr stays, the unknown is ignored
    r2 = replace(r, source={"searched": ["lr", "clip_norm", "no_such_knob"]})
    base2 = vf.baseline_knobs(r2)
    assert base2["lr"] == 0.01 and base2["clip_norm"] == sp.KNOBS["clip_norm"].default
    assert "no_such_knob" not in base2 and base2["adam_eps"] == 1e-6
    # the defaults for every searched knob: the recipe is the baseline
    defaults = make_recipe()
    assert vf.is_baseline(defaults)
    assert vf.is_baseline(replace(r, source={"defaults": True}))  # exported as the defaults


def test_the_baseline_batch_is_the_studys_reference_batch() -> None:
    # a study that searched the batch: its baseline ran at the study's reference batch
    r = replace(make_recipe(batch=64), source={"searched": ["batch", "clip_norm"]})
    assert vf.baseline_knobs(replace(r, probe={**r.probe, "batch": 48}))["batch"] == 48
    assert vf.baseline_knobs(r)["batch"] == 64  # no reference recorded: the recipe's


def test_the_probe_a_recipe_runs_in_full() -> None:
    r = make_recipe(accum_steps=4, batch=32)
    r = replace(
        r,
        probe={
            "steps": 50,
            "seed": 7,
            "device": "cpu",
            "deterministic": True,
            "telemetry_every": 5,
            "threads": 2,
            "divergence": {"spike_factor": 8.0},
            "batch": 16,
            "schedule_steps": 200,
        },
        workload={"name": "mlp", "size": "small", "args": [1, "x"]},
    )
    cfg = r.probe_config()
    # 50 steps at batch 16 see the samples of 25 at batch 32; the schedule likewise
    assert (cfg.steps, cfg.schedule_steps, cfg.micro_batch) == (25, 100, 8)
    assert (cfg.seed, cfg.device, cfg.deterministic, cfg.telemetry_every) == (7, "cpu", True, 5)
    assert cfg.threads == 2 and cfg.divergence == {"spike_factor": 8.0}
    assert (cfg.workload, cfg.size, cfg.args, cfg.script) == ("mlp", "small", ["1", "x"], None)
    assert cfg.precision == r.precision and cfg.env == r.env
    # a longer run than the schedule: over the run
    assert r.probe_config(steps=600).schedule_steps == 300
    # the probe's defaults
    bare = replace(make_recipe(), probe={})
    cfg = bare.probe_config()
    assert (cfg.steps, cfg.seed, cfg.device, cfg.deterministic) == (200, 0, "auto", False)
    assert (cfg.telemetry_every, cfg.threads, cfg.divergence) == (10, None, {})
    assert cfg.schedule_steps == 200 and cfg.args == []


def test_a_script_workload_runs_by_its_file_name(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    r = replace(make_recipe(), workload={"script": str(script)})
    assert r.probe_config().workload == "script:train.py"
    assert r.probe_config().script == str(script)
    with pytest.raises(WorkloadError) as e:
        vf.check_workload(r, "r.yaml")
    assert str(e.value) == f"r.yaml: workload.script: {script}: no such file"
    script.write_text("")
    vf.check_workload(r, "r.yaml")  # found: nothing raised


def test_an_unknown_workload_is_named_with_its_recipe() -> None:
    vf.check_workload(make_recipe(), "r.yaml")  # mlp resolves
    r = replace(make_recipe(), workload={"name": "no_such_workload"})
    with pytest.raises(WorkloadError) as e:
        vf.check_workload(r, "r.yaml")
    assert str(e.value).startswith("r.yaml: workload: ")
    assert "no_such_workload" in str(e.value)


# ---------------------------------------------------------------------------------------------
# verify_recipe's orchestration. The probe processes are replaced by recorded outcomes (a stand-in
# for `launcher.run_trial_process`, the process boundary: a unit test may start no process; the
# real processes are the integration test in tests/recipe/test_verify.py). Everything else is real:
# the workload check, the fingerprint, the seeds, the summaries, the paired verdict, the promise.
# ---------------------------------------------------------------------------------------------


class Launcher:
    """Records each probe asked for and answers with an outcome made up from its seed and knobs:
    the baseline (clip_norm at its default) diverges on seed 2 and has a higher loss_cv."""

    def __init__(self, fingerprint: dict[str, Any]) -> None:
        self.calls: list[dict[str, Any]] = []
        self.fingerprint = fingerprint

    def __call__(
        self,
        probe: dict[str, Any],
        env: dict[str, str],
        *,
        timeout_s: float,
        threads: Any,
        spare: bool = False,
        extra_env: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        self.calls.append(
            {
                "probe": probe,
                "env": dict(env),
                "timeout_s": timeout_s,
                "threads": threads,
                "spare": spare,
                "extra_env": extra_env,
            }
        )
        return self.outcome(probe)

    def outcome(self, probe: dict[str, Any]) -> dict[str, Any]:
        seed = probe["seed"]
        base = probe["knobs"]["clip_norm"] == sp.KNOBS["clip_norm"].default
        diverged = base and seed == 2
        cv = (0.3 if base else 0.1) + 0.01 * seed
        return {
            "outcome": "diverged" if diverged else "complete",
            "cause": "loss_explosion" if diverged else None,
            "summary": {
                "metrics": {
                    "loss_cv": cv,
                    "throughput": 100.0 + seed,
                    "final_loss": 2.0 + cv,
                    "loss_drop": (0.3 if base else 0.5) + 0.01 * seed,
                    "grad_norm": (1.5 if base else 1.0) + 0.1 * seed,  # not in REPORTED
                },
                "steps_run": probe["steps"],
                "steps_planned": probe["steps"],
            },
            **({"fingerprint": self.fingerprint} if self.fingerprint else {}),
        }


@pytest.fixture
def launcher(monkeypatch: pytest.MonkeyPatch) -> Launcher:
    from autotune import fingerprint
    from autotune.process import launcher as ln

    fake = Launcher({**fingerprint.collect(), "hash": "here1"})
    monkeypatch.setattr(ln, "run_trial_process", fake)
    return fake


def test_verify_recipe_runs_the_recipe_and_the_baseline_on_the_same_seeds(
    launcher: Launcher, capsys: pytest.CaptureFixture[str]
) -> None:
    from autotune import fingerprint

    r = replace(
        make_recipe(clip_norm=0.7, warmup_steps=20),
        achieved={"loss_cv": promised(mean=0.12, low=0.1, high=0.14, share=0.0)},
        probe={"steps": 50, "seed": 0, "threads": 2},
    )
    report = vf.verify_recipe(r, source="r.yaml", seeds=3, timeout_s=77.0, threads=None)
    # the recipe and the baseline (its searched knobs at their defaults) interleaved by seed:
    # the recipe's seed 1, the baseline's seed 1, the recipe's seed 2, ...
    assert [c["probe"]["seed"] for c in launcher.calls] == [1, 1, 2, 2, 3, 3]
    recipe_cfg = r.probe_config(steps=50)
    base_cfg = r.probe_config(knobs=vf.baseline_knobs(r), steps=50).for_baseline()
    cfgs = [recipe_cfg, base_cfg] * 3
    for call, cfg, seed in zip(launcher.calls, cfgs, [1, 1, 2, 2, 3, 3], strict=True):
        assert call["probe"] == replace(cfg, seed=seed).to_dict()
        assert call["env"] == r.env and call["timeout_s"] == 77.0
        assert call["threads"] == 2  # the recipe's probe.threads: as the study ran it
        assert call["spare"] is True  # forked by a zygote kept for the verification
        assert call["extra_env"] is None  # a built-in workload: no script's preload
    runs = [{**launcher.outcome(c["probe"]), "seed": c["probe"]["seed"]} for c in launcher.calls]
    metrics = list(dict.fromkeys(["loss_cv", *vf.REPORTED]))
    rec, base = vf.summarize_seeds(runs[0::2], metrics), vf.summarize_seeds(runs[1::2], metrics)
    here = launcher.fingerprint
    drift = fingerprint.diff(r.fingerprint, here)
    assert drift  # the recipe's made-up fingerprint is not this machine's
    load = report.pop("load")  # this machine's load average at the start and the end
    assert sorted(load) == ["cores", "end", "start"] and load["cores"] == os.cpu_count()
    assert load["start"] >= 0 and load["end"] >= 0
    assert report == {
        "recipe": "t",
        "source": r.source,
        "fingerprint": here,
        "recipe_fingerprint_hash": r.fingerprint_hash,
        "drift": [{"field": f, "recipe": a, "here": b} for f, a, b in drift],
        "same_hardware": False,
        "seeds": [1, 2, 3],
        "seed_origin": {
            "own": [],
            "probe": [],
            "fresh": [1, 2, 3],
            "recorded": [],
            "text": "seeds [1, 2, 3]: fresh (this recipe was not verified in its study, "
            "which ran it on seed 0)",
        },
        "recipe_is_baseline": False,
        "steps": 50,
        "recipe_result": rec,
        "loss_series": vf.loss_series(runs[0::2]),  # none here: the fake probes report no series
        "baseline_result": base,
        "promised_steps": 50,
        "promised_metrics": ["loss_cv"],
        "edited": [],
        "vs_baseline": vf.paired.compare(
            rec, base, [("final_loss", "minimize"), ("loss_cv", "minimize")]
        ),
        "promise": vf.compare_promise(r, rec, False),
    }
    assert report["vs_baseline"]["verdict"] == "better"
    assert [p["verdict"] for p in report["promise"]] == [
        "as promised",
        "as promised (0 of 3 here vs 0 of 3 promised: within chance, p = 1)",
    ]
    err = capsys.readouterr().err.splitlines()
    assert err == [
        # the driver's own fingerprint; the report keeps the probes'
        f"verifying recipe t on this machine ({fingerprint.collect()['hash']}): 3 seed(s), 50 "
        "steps each, beside "
        "the baseline",
        "  recipe   seed 1 (1/3): complete  final_loss 2.11  loss_cv 0.11",
        "  baseline seed 1 (1/3): complete  final_loss 2.31  loss_cv 0.31",
        "  recipe   seed 2 (2/3): complete  final_loss 2.12  loss_cv 0.12",
        "  baseline seed 2 (2/3): diverged (loss_explosion)",
        "  recipe   seed 3 (3/3): complete  final_loss 2.13  loss_cv 0.13",
        "  baseline seed 3 (3/3): complete  final_loss 2.33  loss_cv 0.33",
    ]


def test_verify_recipe_at_another_length_compares_no_promise(
    launcher: Launcher, capsys: pytest.CaptureFixture[str]
) -> None:
    r = replace(
        make_recipe(clip_norm=0.7, warmup_steps=20, batch=32),
        probe={"steps": 50, "seed": 4, "batch": 16, "schedule_steps": 400},
    )
    report = vf.verify_recipe(r, seeds=2, baseline=False, threads=3, steps=100)
    assert [c["probe"]["seed"] for c in launcher.calls] == [5, 6]  # no baseline
    assert all(c["threads"] == 3 for c in launcher.calls)
    assert [c["probe"]["steps"] for c in launcher.calls] == [50, 50]  # 100 at batch 16
    assert report["steps"] == 100 and report["promised_steps"] == 50
    assert report["promise"] == [] and "baseline_result" not in report
    assert report["vs_baseline"] == {
        **vf.paired.compare(
            report["recipe_result"], None, [("final_loss", "minimize"), ("loss_cv", "minimize")]
        ),
        "why": "the baseline was not run (--no-baseline)",  # not "at these seeds" (a blind check)
    }
    head = capsys.readouterr().err.splitlines()[0]
    assert head.endswith(
        ": 2 seed(s), 50 steps each (100 at the study's batch), LR scheduled over 200"
    )
    # quiet: nothing said
    vf.verify_recipe(r, seeds=1, baseline=False, quiet=True)
    assert capsys.readouterr().err == ""


def test_verify_recipe_of_the_defaults_runs_no_baseline_beside_them(
    launcher: Launcher, capsys: pytest.CaptureFixture[str]
) -> None:
    r = replace(make_recipe(), fingerprint=None)  # every searched knob at its default
    report = vf.verify_recipe(r, seeds=2)
    assert len(launcher.calls) == 2 and "baseline_result" not in report
    assert report["vs_baseline"]["verdict"] == "not compared"
    assert report["drift"] == [] and report["same_hardware"] is False
    err = capsys.readouterr().err.splitlines()
    assert err[1] == "the recipe is the baseline (PyTorch's defaults): no baseline run beside it"
    assert err[0].endswith("2 seed(s), 50 steps each")  # not "beside the baseline" (a blind check)
    # the same hardware: no drift
    same = replace(make_recipe(clip_norm=0.7), fingerprint=launcher.fingerprint)
    report = vf.verify_recipe(same, seeds=1, baseline=False, quiet=True)
    assert report["drift"] == [] and report["same_hardware"] is True


def test_the_probe_takes_the_knobs_batch_layout_and_the_recipes_setup() -> None:
    r = replace(make_recipe(batch=32, precision="bf16"), world_size=2, probe={"steps": 40})
    cfg = r.probe_config()
    assert (cfg.precision, cfg.world_size) == ("bf16", 2)
    assert (cfg.reference_batch, cfg.reference_samples) == r.reference_layout
    assert cfg.reference_batch is not None and cfg.reference_samples is not None
    # accumulation 1: the micro-batch is the batch; an integer
    assert cfg.micro_batch == 32 and isinstance(cfg.micro_batch, int)
    # knobs given: their batch and accumulation, not the recipe's
    other = r.probe_config(knobs={"lr": 0.1, "batch": 64, "accum_steps": 4})
    assert other.micro_batch == 16 and other.steps == 20  # 40 steps at 32 = 20 at 64
    # no accumulation recorded: 1
    assert r.probe_config(knobs={"lr": 0.1, "batch": 48}).micro_batch == 48
    # a batch of 1 with accumulation: at least one sample a micro-batch
    one = r.probe_config(knobs={"lr": 0.1, "batch": 3, "accum_steps": 4})
    assert one.micro_batch == 1
    # a workload without a size: tiny
    assert replace(r, workload={"name": "mlp"}).probe_config().size == "tiny"


def test_a_workload_without_a_size_is_tiny_and_a_bad_size_is_named() -> None:
    vf.check_workload(replace(make_recipe(), workload={"name": "mlp"}), "r.yaml")  # tiny
    bad = replace(make_recipe(), workload={"name": "mlp", "size": "huge"})
    with pytest.raises(WorkloadError) as e:
        vf.check_workload(bad, "r.yaml")
    assert str(e.value).startswith("r.yaml: workload: workload 'mlp' has no size 'huge'")


def test_the_baseline_keeps_the_batch_the_study_did_not_search() -> None:
    # the recipe ran at 64, its study's reference batch was 16: the batch was not searched, so
    # the baseline runs at the recipe's 64
    r = replace(make_recipe(batch=64), probe={"steps": 50, "batch": 16})
    assert vf.baseline_knobs(r)["batch"] == 64
    assert vf.baseline_knobs(replace(r, source={"study": "s"}))["batch"] == 64  # no record


def test_the_report_with_a_clean_baseline_and_without_one() -> None:
    ok = vf.summarize_seeds([seed_run(1, "complete"), seed_run(2, "complete")], ["loss_cv"])
    failing = vf.summarize_seeds([seed_run(1, "complete"), seed_run(2, "failed")], ["loss_cv"])
    report = {
        "recipe": "t",
        "seeds": [1, 2],
        "steps": 50,
        "recipe_result": failing,
        "baseline_result": ok,
        "drift": [{"field": f"f{i}", "recipe": 0, "here": 1} for i in range(13)],
        "recipe_fingerprint_hash": "abc",
        "fingerprint": {"hash": "x"},
    }
    lines = vf.format_report(report).splitlines()
    assert lines[0] == (
        "recipe t: 2 seed(s) [1, 2], 50 steps; diverged 0% of seeds, 1 failed; baseline diverged 0%"
    )
    assert lines[1:3] == ["failed seeds:", "  recipe   seed 2: failed (unknown cause)"]
    assert lines[-1] == "  ... and 1 more fields" and lines[-2] == "  f11: 0 -> 1"
    # no baseline beside it: its failed seeds alone
    alone = vf.format_report({**report, "baseline_result": None}).splitlines()
    assert alone[0] == "recipe t: 2 seed(s) [1, 2], 50 steps; diverged 0% of seeds, 1 failed"
    assert alone[1:4] == [
        "failed seeds:",
        "  recipe   seed 2: failed (unknown cause)",
        f"  {'metric':<14} {'recipe: mean [95% interval]':<34}",
    ]


# ---------------------------------------------------------------------------------------------
# The verification in MLflow: which store, which experiment, which parent, which tags
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One SQLite tracking store for the module (creating its tables takes seconds)."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


def logged_report() -> dict[str, Any]:
    rec = vf.summarize_seeds([seed_run(1, "complete"), seed_run(2, "complete")], ["loss_cv"])
    return {"recipe_result": rec, "drift": [], "fingerprint": None}


def test_log_report_to_a_given_store_in_the_verify_experiment(
    store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    r = make_recipe()
    drift = [{"field": "versions.torch"}, {"field": "host.cpu"}]
    run_id = vl.log_report(r, {**logged_report(), "drift": drift}, store)
    client = MlflowClient(store)
    run = client.get_run(run_id)
    assert client.get_experiment(run.info.experiment_id).name == "autotune-verify"
    assert run.info.run_name == "verify-t"
    tags = run.data.tags
    assert tags["autotune.study"] == "s" and tags["autotune.verified_trial"] == "4"
    assert tags["autotune.recipe"] == "t" and tags["autotune.recipe.fp_hash"] == r.fingerprint_hash
    assert tags["autotune.fp_drift"] == "versions.torch, host.cpu"
    assert "mlflow.parentRunId" not in tags
    # each seed's loss series as its metric history; the artifact keeps the report without it
    series = {"1": [2.0, 1.5, None, 1.0], "2": [2.1, 1.6, 1.2, 1.1]}
    run_id = vl.log_report(r, {**logged_report(), "loss_series": series}, store)
    for seed, want in series.items():
        hist = sorted(client.get_metric_history(run_id, f"loss/seed_{seed}"), key=lambda m: m.step)
        assert [(m.step, m.value) for m in hist] == [
            (i, v) for i, v in enumerate(want) if v is not None
        ]
    logged = client.download_artifacts(run_id, "verification.json")
    assert "loss_series" not in json.loads(Path(logged).read_text())
    # no drift, no source: "none" and empty tags; the store from $MLFLOW_TRACKING_URI
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    bare = replace(make_recipe(), source={}, fingerprint=None)
    tags = client.get_run(vl.log_report(bare, logged_report(), None)).data.tags
    assert tags["autotune.fp_drift"] == "none"
    assert tags.get("autotune.study", "") == "" and tags.get("autotune.verified_trial", "") == ""
    assert tags.get("autotune.recipe.fp_hash", "") == ""


def test_log_report_in_the_studys_own_store_is_a_child_of_its_run(
    store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    client = MlflowClient(store)
    exp = client.create_experiment("the-study")
    parent = client.create_run(exp).info.run_id
    mlflow_src = {"tracking_uri": store, "experiment_id": exp, "study_run_id": parent}
    r = replace(make_recipe(), source={**make_recipe().source, "mlflow": mlflow_src})
    run = client.get_run(vl.log_report(r, logged_report(), None))
    assert run.info.experiment_id == exp
    assert run.data.tags["mlflow.parentRunId"] == parent
    assert run.data.tags["autotune.edited"] == "none"
    # a run of another study (the recipe's `source.study` edited, a blind user check: its run
    # was logged under that study's): the verify experiment, no parent
    client.set_tag(parent, "autotune.study", "another-study")
    run = client.get_run(vl.log_report(r, logged_report(), None))
    assert client.get_experiment(run.info.experiment_id).name == "autotune-verify"
    assert "mlflow.parentRunId" not in run.data.tags
    client.set_tag(parent, "autotune.study", r.source["study"])  # its own study's: under it
    run = client.get_run(vl.log_report(r, {**logged_report(), "edited": ["knobs"]}, None))
    assert run.data.tags["mlflow.parentRunId"] == parent
    assert run.data.tags["autotune.edited"] == "knobs"
    # the study's experiment is gone from that store: the verify experiment, no parent
    gone = {**mlflow_src, "experiment_id": "987654"}
    r = replace(make_recipe(), source={**make_recipe().source, "mlflow": gone})
    run = client.get_run(vl.log_report(r, logged_report(), store))
    assert client.get_experiment(run.info.experiment_id).name == "autotune-verify"
    assert "mlflow.parentRunId" not in run.data.tags


def test_log_report_to_the_studys_store_given_with_its_password_is_a_child_of_its_run(
    store: str,
) -> None:
    # The recipe records the study's store redacted; the same store given with its password
    # (`verify --tracking-uri`) is the study's own, matched by its redacted form.
    from mlflow.tracking import MlflowClient

    client = MlflowClient(store)
    exp = client.create_experiment("the-study-with-a-password")
    parent = client.create_run(exp).info.run_id
    given = "postgresql://optuna:Hunter2SecretPW@db:5432/mlflow"
    recorded = {"tracking_uri": redact(given), "experiment_id": exp, "study_run_id": parent}
    r = replace(make_recipe(), source={**make_recipe().source, "mlflow": recorded})
    run = client.get_run(vl.log_report(r, logged_report(), given, (given, client)))
    assert run.info.experiment_id == exp
    assert run.data.tags["mlflow.parentRunId"] == parent


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        (None, False),
        ("", False),
        (7, False),
        ("sqlite:///no/such/file.db", False),
        ("file:///tmp/mlruns", False),
        ("mlruns", False),
        ("http://tracking:5000", True),
        ("https://user:***@tracking", False),  # a masked secret: not a URI to connect to
    ],
)
def test_which_recorded_stores_are_reachable(uri: Any, expected: bool) -> None:
    assert vl._reachable(uri) is expected


def test_a_sqlite_store_that_exists_here_is_reachable(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    db.write_text("")
    assert vl._reachable(f"sqlite:///{db}")


def test_verify_recipe_defaults_and_what_it_compares(
    launcher: Launcher, capsys: pytest.CaptureFixture[str]
) -> None:
    from autotune import fingerprint

    r = replace(
        make_recipe(clip_norm=0.7, warmup_steps=20),
        achieved={
            "loss_drop": {"direction": "maximize", "value": 0.5, "verified": None},
            "grad_norm": {"value": 1.0, "verified": None},  # no direction: minimised
            "throughput": {"direction": "maximize", "value": 102.0, "verified": None},
        },
        probe={"threads": 2},  # no steps recorded: 200
        fingerprint=launcher.fingerprint,
    )
    report = vf.verify_recipe(r, quiet=True)
    assert [c["probe"]["seed"] for c in launcher.calls] == [1, 1, 2, 2, 3, 3]  # 3 seeds
    assert all(c["timeout_s"] == 600.0 for c in launcher.calls)
    assert report["steps"] == report["promised_steps"] == 200
    assert [c["probe"]["steps"] for c in launcher.calls] == [200] * 6
    # the recipe's own metrics are summarised too, not only the reported ones
    assert report["recipe_result"]["metrics"]["grad_norm"]["n"] == 3
    assert report["baseline_result"]["metrics"]["grad_norm"]["n"] == 2  # seed 2 diverged
    compared = [
        ("final_loss", "minimize"),
        ("loss_drop", "maximize"),
        ("grad_norm", "minimize"),
        ("throughput", "maximize"),
    ]
    vs = report["vs_baseline"]
    assert vs == vf.paired.compare(report["recipe_result"], report["baseline_result"], compared)
    assert "loss_drop" in vs["better_on"] and "grad_norm" in vs["better_on"]
    # the same hardware: throughput's promise is compared, without a note
    rows = {p["metric"]: p["verdict"] for p in report["promise"]}
    assert rows["throughput"] == "as promised" and report["same_hardware"] is True
    # an unknown workload is named by the default source
    with pytest.raises(WorkloadError) as e:
        vf.verify_recipe(replace(r, workload={"name": "no_such_workload"}), quiet=True)
    assert str(e.value).startswith("<recipe>: workload: ")
    # probes that report no fingerprint: the driver's own
    launcher.fingerprint = {}
    here = vf.verify_recipe(r, seeds=1, baseline=False, quiet=True)["fingerprint"]
    assert here["hash"] == fingerprint.collect()["hash"]


def test_verify_recipe_of_the_defaults_is_not_compared_with_itself(launcher: Launcher) -> None:
    r = make_recipe()
    report = vf.verify_recipe(r, seeds=2, quiet=True)
    metrics = [("final_loss", "minimize"), ("loss_cv", "minimize")]
    assert report["vs_baseline"] == vf.paired.compare(
        report["recipe_result"], None, metrics, same=True
    )
    assert "it is the baseline" in report["vs_baseline"]["why"]


def test_verify_recipe_runs_the_baseline_at_the_asked_length_and_threads(
    launcher: Launcher,
) -> None:
    r = replace(
        make_recipe(clip_norm=0.7, warmup_steps=20),
        probe={"steps": 50, "seed": 0, "threads": 2},
    )
    vf.verify_recipe(r, seeds=1, threads=3, steps=80, quiet=True)
    assert [c["probe"]["steps"] for c in launcher.calls] == [80, 80]
    assert [c["threads"] for c in launcher.calls] == [3, 3]


def test_settings_that_differ_on_the_same_hardware_are_not_called_another_machine() -> None:
    """The fingerprint hash is the hardware's; thread counts and the CPU kernels in use are
    outside it (a black-box review: "this machine differs ... (9b6a34995cf3 -> 9b6a34995cf3)")."""
    rec = vf.summarize_seeds([seed_run(1, "complete")], ["loss_cv"])
    drift = [{"field": "numerics.cpu_capability", "recipe": "AVX512", "here": "DEFAULT"}]
    report = {
        "recipe": "t",
        "seeds": [1],
        "steps": 50,
        "recipe_result": rec,
        "drift": drift,
        "recipe_fingerprint_hash": "abc",
        "fingerprint": {"hash": "abc"},
    }
    assert vf.format_report(report).splitlines()[-2:] == [
        "WARNING: the same hardware (abc), set up differently from where the recipe was tuned:",
        "  numerics.cpu_capability: 'AVX512' -> 'DEFAULT'",
    ]


def test_the_report_says_the_machines_load_and_when_other_work_shared_it() -> None:
    """As `migration.md` does: a throughput compared with its promise, measured under load,
    reads lower than the machine gives a job alone; the report says the load beside it."""
    rec = vf.summarize_seeds([seed_run(1, "complete")], ["loss_cv"])
    fp = {"hash": "abc", "env": {"torch_threads": 1}}
    report = {
        "recipe": "t",
        "seeds": [1],
        "steps": 50,
        "recipe_result": rec,
        "drift": [],
        "recipe_fingerprint_hash": "abc",
        "fingerprint": fp,
    }
    assert "Load average" not in vf.format_report(report)  # an older report: nothing said
    busy = vf.format_report({**report, "load": {"start": 2.1, "end": 1.2, "cores": 2}})
    line = next(x for x in busy.splitlines() if x.startswith("Load average"))
    assert line.startswith(
        "Load average here (1 minute): 2.10 at the start of the verification, 1.20 at its end, "
        "on 2 core(s): more than its own 1 thread(s), so other work shared this machine"
    ), line
    assert busy.splitlines()[-1] == "same hardware as the recipe (abc)"  # the last line still
    two = {**fp, "env": {"torch_threads": 2}}  # the probes' own threads account for the load
    quiet = vf.format_report({**report, "fingerprint": two, "load": {"start": 2.1, "end": 2.4}})
    line = next(x for x in quiet.splitlines() if x.startswith("Load average"))
    assert line.endswith("2.10 at the start of the verification, 2.40 at its end, on None core(s).")


def test_a_recipe_that_is_the_baseline_at_another_length_names_no_baseline_above() -> None:
    """A black-box review: "(the recipe against the baseline above is the check here)" above
    "NOT COMPARED: it is the baseline"."""
    rec = vf.summarize_seeds([seed_run(1, "complete")], ["loss_cv"])
    report = {
        "recipe": "t",
        "seeds": [1],
        "steps": 100,
        "promised_steps": 50,
        "recipe_result": rec,
        "baseline_result": None,
        "recipe_is_baseline": True,
        "drift": [],
        "recipe_fingerprint_hash": "abc",
        "fingerprint": {"hash": "abc"},
    }
    text = vf.format_report(report)
    assert "baseline above" not in text
    assert "not compared at 100 (the recipe is the baseline: its runs above" in text
    # A review: `--no-baseline --steps N` on a recipe that is NOT the defaults said it was
    alone = vf.format_report({**report, "recipe_is_baseline": False})
    assert "the recipe is the baseline" not in alone and "baseline above" not in alone
    assert "not compared at 100 (no baseline ran beside it (--no-baseline): its runs" in alone


def test_a_recipe_that_promised_nothing_says_so() -> None:
    """A review: a recipe without `achieved` printed no promise section and no word why."""
    rec = vf.summarize_seeds([seed_run(1, "complete")], ["loss_cv"])
    report = {
        "recipe": "t",
        "seeds": [1],
        "steps": 50,
        "promised_steps": 50,
        "promised_metrics": [],
        "recipe_result": rec,
        "drift": [],
        "recipe_fingerprint_hash": "abc",
        "fingerprint": {"hash": "abc"},
    }
    said = "the recipe records no `achieved` values: it promised nothing"
    assert said in vf.format_report(report)
    assert said not in vf.format_report({**report, "promised_metrics": ["loss_cv"]})
    assert said not in vf.format_report({**report, "steps": 100})  # said: another length


def test_verify_says_whether_the_recipe_is_the_baseline(launcher: Launcher) -> None:
    """The report records it (`recipe_is_baseline`), so that a recipe run alone with
    --no-baseline is not called the baseline."""
    tuned = make_recipe(clip_norm=0.7, warmup_steps=20)
    assert not vf.is_baseline(tuned)
    report = vf.verify_recipe(tuned, seeds=1, baseline=False, steps=80, quiet=True)
    assert report["recipe_is_baseline"] is False and "baseline_result" not in report
    assert report["promised_metrics"] == list(tuned.achieved)
    assert "(the recipe is the baseline" not in vf.format_report(report)
    defaults = replace(tuned, source={**tuned.source, "defaults": True})
    got = vf.verify_recipe(defaults, seeds=1, baseline=False, steps=80, quiet=True)
    assert got["recipe_is_baseline"] is True
