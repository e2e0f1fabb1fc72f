"""A training script as a probe (autotune.probe.script, autotune.recipe.trial), run in this process
with runpy: its reports go through the probe's checks and summary."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from assets.scripts import hf_trainer_job

import autotune
from autotune import space as sp
from autotune.errors import SpaceError
from autotune.knobs import KNOBS
from autotune.probe import metrics
from autotune.probe.config import ProbeConfig
from autotune.probe.script import BadReport, ScriptFailure
from autotune.probe.script_run import run_script

HEAD = "import autotune\ntrial = autotune.trial(steps=99, micro_batch=3)\n"


@pytest.fixture
def run(tmp_path: Path) -> Callable[..., tuple[dict[str, Any], list[dict[str, Any]]]]:
    def go(body: str, steps: int = 20, **cfg: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        script = tmp_path / "train.py"
        script.write_text(textwrap.dedent(body))
        c = ProbeConfig(workload="script:train.py", steps=steps, script=str(script), **cfg)
        events: list[dict[str, Any]] = []
        t = iter(range(10_000))
        return run_script(c, events.append, clock=lambda: next(t) * 0.010), events

    return go


def losses_loop(losses: list[float]) -> str:
    return (
        HEAD + f"for i, v in enumerate({losses!r}):\n    trial.report(i, loss=v, grad_norm=1.0)\n"
    )


def test_metrics_equal_summarize_on_the_same_series(run: Callable[..., Any]) -> None:
    rng = np.random.default_rng(0)
    losses = [float(x) for x in 3 + rng.random(20)]
    summary, events = run(losses_loop(losses), micro_batch=8)
    assert summary["status"] == "ok" and summary["steps_run"] == 20
    expected = metrics.summarize(
        {k: np.asarray(v) for k, v in summary["series"].items()}, samples_per_step=8
    )
    for name, value in expected.items():
        assert summary["metrics"][name] == pytest.approx(value, nan_ok=True), name
    assert summary["metrics"]["throughput"] == pytest.approx(8 / 0.010)
    assert summary["series"]["loss"] == pytest.approx(losses, rel=1e-6)
    assert events[0]["event"] == "start" and events[-1] is summary


def test_a_loss_explosion_stops_the_script_as_a_divergence(run: Callable[..., Any]) -> None:
    # One step past 10x the first loss is a spike: recorded, the script goes on.
    summary, _ = run(losses_loop([1.0, 1.0, 1.0, 50.0] + [1.0] * 16))
    assert summary["status"] == "ok" and summary["steps_run"] == 20
    assert summary["divergence_spike_count"] == 1
    assert summary["divergence_spikes"][0]["step"] == 3
    # Spikes on persist_steps (here 3) consecutive steps are a divergence, judged at the
    # telemetry fetch as in the built-in loop: every step during the first ones, then every
    # telemetry_every (10) steps.
    body = losses_loop([1.0, 1.0, 1.0] + [50.0] * 15) + "raise SystemExit('not reached')\n"
    summary, _ = run(body, divergence={"persist_steps": 3})
    assert summary["status"] == "diverged"
    assert summary["divergence_cause"] == "loss_explosion"
    assert summary["diverged_at_step"] == 5 and summary["divergence_onset_step"] == 3
    assert summary["steps_run"] < 18
    # like the built-in loop's: the samples of the steps it ran (the compute accounting's unit)
    assert summary["samples_seen"] == summary["samples_per_step"] * summary["steps_run"] > 0


def test_a_script_that_swallows_diverged_is_stopped_at_its_next_report(
    run: Callable[..., Any],
) -> None:
    body = HEAD + textwrap.dedent("""
        for i in range(10):
            try:
                trial.report(i, loss=float('nan'))
            except autotune.Diverged:
                pass
        """)
    summary, _ = run(body)
    assert summary["status"] == "diverged" and summary["divergence_cause"] == "nonfinite_loss"
    assert summary["steps_run"] == 1


def test_should_stop_is_the_polite_path(run: Callable[..., Any]) -> None:
    body = HEAD + textwrap.dedent("""
        import torch
        for i in range(10):
            try:
                trial.report(i, loss=torch.tensor(1.0 if i < 2 else 1e6))
            except autotune.Diverged:
                assert trial.should_stop and trial.stop_reason == "loss_explosion"
                break
        """)
    # spikes at steps 2, 3, 4: the verdict at 4, fetched at once (telemetry_every 1)
    summary, _ = run(body, divergence={"persist_steps": 3}, telemetry_every=1)
    assert summary["status"] == "diverged" and summary["steps_run"] == 5


def test_without_stop_early_the_script_runs_on(run: Callable[..., Any]) -> None:
    body = losses_loop([1.0, 1.0, 50.0, 50.0, 50.0, 1.0, 1.0])
    summary, _ = run(body, divergence={"stop_early": False, "persist_steps": 3})
    assert summary["status"] == "diverged" and summary["steps_run"] == 7
    assert summary["diverged_at_step"] == 4 and summary["divergence_spike_count"] == 3


def test_stop_early_nonfinite_runs_on_past_an_explosion_and_stops_at_a_nan(
    run: Callable[..., Any],
) -> None:
    # the baseline's mode: a persisting explosion is the verdict, but only a NaN loss stops
    losses = "[1.0, 1.0, 50.0, 50.0, 50.0, 1.0, 1.0, float('nan'), 1.0, 1.0]"
    body = HEAD + f"for i, v in enumerate({losses}):\n    trial.report(i, loss=v)\n"
    body += "raise SystemExit('not reached')\n"
    divergence = {"stop_early": "nonfinite", "persist_steps": 3}
    summary, _ = run(body, divergence=divergence, telemetry_every=1)
    assert summary["status"] == "diverged" and summary["divergence_cause"] == "loss_explosion"
    assert summary["diverged_at_step"] == 4 and summary["steps_run"] == 8


def test_a_script_that_never_reports_fails_with_no_reports(run: Callable[..., Any]) -> None:
    with pytest.raises(ScriptFailure, match=r"never called autotune\.trial") as e:
        run("x = 1\n")
    assert e.value.cause == "no_reports"
    with pytest.raises(ScriptFailure, match=r"never trial\.report") as e:
        run(HEAD)
    assert e.value.cause == "no_reports"


@pytest.mark.parametrize(
    ("calls", "reason"),
    [
        (
            "trial.report(0, loss=1.0); trial.report(1, loss=1.0); trial.report(1, loss=1.0)",
            "step=1\\) after step 1",
        ),
        ("trial.report(0, loss=1.0); trial.report(2, loss=1.0)", "step=2\\) after step 0"),
        ("trial.report(-1, loss=1.0)", "first step must be 0"),
        ("trial.report(1.5, loss=1.0)", "step must be an int"),
        ("trial.report(float('nan'), loss=1.0)", "step must be an int"),
        ("trial.report('3', loss=1.0)", "step must be an int"),
        ("trial.report(0, loss=None)", "loss is missing"),
        ("trial.report(0, loss='x')", "is not a number"),
        ("[trial.report(i, loss=1.0) for i in range(4)]", "ran past trial.steps=3"),
    ],
)
def test_bad_reports_fail_with_the_reason(run: Callable[..., Any], calls: str, reason: str) -> None:
    with pytest.raises(BadReport, match=reason) as e:
        run(HEAD + calls + "\n", steps=3)
    assert e.value.cause == "bad_report"


def test_a_bad_report_the_script_swallows_still_fails(run: Callable[..., Any]) -> None:
    body = HEAD + "try:\n    trial.report(5, loss=1.0)\nexcept Exception:\n    pass\n"
    with pytest.raises(BadReport, match="first step"):
        run(body)


def test_a_script_that_raises_propagates_and_state_is_restored(run: Callable[..., Any]) -> None:
    argv, path, cwd = list(sys.argv), list(sys.path), Path.cwd()
    with pytest.raises(ValueError, match="boom"):
        run(HEAD + "trial.report(0, loss=1.0)\nraise ValueError('boom')\n")
    assert (sys.argv, sys.path, Path.cwd()) == (argv, path, cwd)


def test_exit_status_zero_is_a_normal_end_and_nonzero_fails(run: Callable[..., Any]) -> None:
    summary, _ = run(HEAD + "trial.report(0, loss=1.0)\nraise SystemExit(0)\n", steps=1)
    assert summary["status"] == "ok"
    with pytest.raises(ScriptFailure, match="status 2"):
        run(HEAD + "trial.report(0, loss=1.0)\nraise SystemExit(2)\n", steps=1)


def test_the_script_sees_its_args_and_its_folder(run: Callable[..., Any]) -> None:
    body = HEAD + textwrap.dedent("""
        import os, sys
        assert sys.argv[1:] == ["--width", "7"], sys.argv
        assert os.path.exists("train.py")
        trial.report(0, loss=1.0)
        """)
    summary, _ = run(body, steps=1, args=["--width", "7"])
    assert summary["status"] == "ok"


def test_in_a_study_the_knobs_and_steps_are_the_trials(run: Callable[..., Any]) -> None:
    body = HEAD + textwrap.dedent("""
        assert trial.steps == 20 and trial.micro_batch == 16 and trial.in_study
        assert trial.recipe.knobs["clip_norm"] == 0.5 and trial.recipe.lr == 1e-3
        for i in range(trial.steps):
            trial.report(i, loss=1.0)
        """)
    summary, _ = run(body, knobs={"clip_norm": 0.5})
    assert summary["knobs"]["clip_norm"] == 0.5


def test_a_script_schedules_over_the_trials_schedule_steps(run: Callable[..., Any]) -> None:
    body = HEAD + textwrap.dedent("""
        import torch
        assert trial.steps == 4 and trial.schedule_steps == 12
        opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=trial.recipe.lr)
        sched = trial.recipe.scheduler(opt, trial.schedule_steps)
        for i in range(trial.steps):
            trial.report(i, loss=1.0, lr=opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
        """)
    knobs = {"lr": 0.1, "warmup_steps": 1, "schedule": "linear", "min_lr_ratio": 0.0}
    summary, _ = run(body, steps=4, schedule_steps=12, knobs=knobs)
    assert summary["status"] == "ok" and summary["schedule_steps"] == 12
    # The first 4 steps of a 12-step linear decay (10 steps after the warm-up step), not a
    # 4-step one (which would end at 0).
    assert summary["series"]["lr"] == pytest.approx([0.1, 0.1, 0.09, 0.08])


# ----- standalone ----------------------------------------------------------------------------


@pytest.fixture
def fresh_trial(monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune.recipe import trial as trial_api

    monkeypatch.setattr(trial_api, "_TRIAL", None)
    monkeypatch.delenv("AUTOTUNE_RECIPE", raising=False)
    monkeypatch.delenv("AUTOTUNE_SUMMARY", raising=False)


@pytest.mark.usefixtures("fresh_trial")
def test_standalone_uses_pytorchs_defaults() -> None:
    t = autotune.trial(steps=5, micro_batch=4, lr=0.02)
    assert not t.in_study and t.steps == 5 and t.recipe.lr == 0.02
    for name, info in KNOBS.items():
        if name not in ("lr", "batch"):
            assert t.recipe.knobs[name] == info.default, name
    assert t.batch == t.recipe.knobs["batch"] == 4  # micro_batch x accum_steps
    assert autotune.trial() is t
    with pytest.raises(autotune.Diverged):
        for i in range(3):
            t.report(i, loss=[1.0, 1.0, float("nan")][i])


@pytest.mark.usefixtures("fresh_trial")
def test_standalone_without_steps_says_what_to_pass() -> None:
    with pytest.raises(ValueError, match=r"steps not given and no AUTOTUNE_RECIPE"):
        autotune.trial(micro_batch=4)


@pytest.mark.usefixtures("fresh_trial")
def test_a_bad_recipe_variable_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stale AUTOTUNE_RECIPE said only "nope.yaml: no such recipe file": from where?"""
    from autotune.errors import RecipeError

    monkeypatch.setenv("AUTOTUNE_RECIPE", str(tmp_path / "nope.yaml"))
    with pytest.raises(RecipeError, match=r"^AUTOTUNE_RECIPE=.*nope\.yaml: .*no such recipe file"):
        autotune.trial(steps=5, micro_batch=4)


@pytest.mark.usefixtures("fresh_trial")
def test_standalone_with_a_recipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recipe = autotune.Recipe(
        name="r",
        workload={"script": "train.py", "args": []},
        precision="fp32",
        micro_batch=8,
        knobs={**{k: i.default for k, i in KNOBS.items()}, "lr": 0.01, "clip_norm": 0.3},
        probe={"steps": 12, "seed": 4},
    )
    monkeypatch.setenv("AUTOTUNE_RECIPE", str(recipe.save(tmp_path / "r.yaml")))
    t = autotune.trial(steps=None, micro_batch=2)
    assert (t.steps, t.seed, t.micro_batch) == (12, 4, 8)
    assert t.recipe.knobs["clip_norm"] == 0.3 and t.recipe.lr == 0.01


@pytest.mark.usefixtures("fresh_trial")
def test_standalone_with_a_recipe_measures_as_the_recipes_probe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recipe = autotune.Recipe(
        name="r",
        workload={"script": "train.py", "args": ["--big"]},
        precision="bf16",
        micro_batch=4,
        knobs={**{k: i.default for k, i in KNOBS.items()}, "lr": 0.01, "accum_steps": 2},
        probe={
            "steps": 12,
            "seed": 4,
            "threads": 1,
            "divergence": {"persist_steps": 2},
            "reference_batch": 2,
            "reference_samples": 32,
        },
    )
    monkeypatch.setenv("AUTOTUNE_RECIPE", str(recipe.save(tmp_path / "r.yaml")))
    cfg = autotune.trial(steps=None, micro_batch=2)._session.cfg
    measured = autotune.Recipe.load(tmp_path / "r.yaml").probe_config()
    # what the measurement depends on is the recipe's probe's (`Recipe.probe_config`) ...
    same = ["precision", "threads", "divergence", "knobs", "env", "steps", "schedule_steps"]
    same += ["micro_batch", "seed", "reference_batch", "reference_samples"]
    assert {f: getattr(cfg, f) for f in same} == {f: getattr(measured, f) for f in same}
    assert cfg.divergence["persist_steps"] == 2 and cfg.reference_samples == 32
    # ... run as this script, on its own: its own path and arguments, one process
    assert cfg.script == str(Path(sys.argv[0]).resolve()) and cfg.args == []
    assert cfg.world_size == 1 and measured.args == ["--big"]


def test_autotune_trial_is_a_function_after_importing_the_api() -> None:
    import autotune.recipe.trial

    assert callable(autotune.trial) and autotune.trial.__module__ == "autotune.recipe.trial"


# ----- the space -----------------------------------------------------------------------------

SPACE = "name: s\nworkload: {workload}\nprobe: {{steps: 10}}\nknobs: {{lr: 0.01}}\n"


def test_a_script_space_anchors_and_round_trips(write_space: Callable[..., Path]) -> None:
    path = write_space(SPACE.format(workload="{script: train.py, args: [--x, '1']}"))
    (path.parent / "train.py").write_text("")
    s = sp.load(path)
    assert s.workload.script == str(path.parent / "train.py") and s.workload.args == ("--x", "1")
    assert sp.loads(sp.dump(s)) == s
    assert sp.probe_config(s).workload == "script:train.py"


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        ("{script: t.py, name: tiny_gpt}", "not both"),
        ("{size: tiny}", "give `name`"),
        ("{name: tiny_gpt, args: [a]}", "args are the arguments of a `script`"),
        ("{script: t.py, size: small}", "size is for a named workload"),
        ("train.py", "did you mean `workload: {script: train.py}`"),
    ],
)
def test_script_schema_errors(
    write_space: Callable[..., Path], workload: str, message: str
) -> None:
    with pytest.raises(SpaceError, match=message):
        sp.load(write_space(SPACE.format(workload=workload)))


def test_a_missing_script_names_its_absolute_path(write_space: Callable[..., Path]) -> None:
    path = write_space(SPACE.format(workload="{script: nope/train.py}"))
    with pytest.raises(SpaceError, match=f"workload.script: {path.parent}/nope/train.py: no such"):
        sp.load(path)


def test_clipping_is_counted_from_the_reported_norm(run: Callable[..., Any]) -> None:
    """Without `clipped=`, a step clipped under global clipping is one whose norm before
    clipping exceeded clip_norm (as Recipe.clip_and_step clips); reported values win."""
    norms = [0.5, 2.0, 3.0, 0.1]
    body = HEAD + f"for i, g in enumerate({norms!r}):\n    trial.report(i, loss=1.0, grad_norm=g)\n"
    summary, _ = run(body, steps=4, knobs={"clip_norm": 1.0})
    assert summary["series"]["clipped"] == [0.0, 1.0, 1.0, 0.0]
    assert summary["metrics"]["clip_fraction"] == pytest.approx(0.5)
    unclipped, _ = run(body, steps=4)  # clip_norm 0: clipping is off
    assert unclipped["metrics"]["clip_fraction"] == 0.0
    told = (
        HEAD + "for i in range(4):\n    trial.report(i, loss=1.0, grad_norm=9.0, clipped=False)\n"
    )
    reported, _ = run(told, steps=4, knobs={"clip_norm": 1.0})
    assert reported["metrics"]["clip_fraction"] == 0.0


HF_SCRIPT = hf_trainer_job(
    after="assert trainer.state.global_step == trial.steps, trainer.state.global_step\n"
)


def test_an_hf_trainer_schedules_over_schedule_steps_and_stops_at_steps(
    run: Callable[..., Any],
) -> None:
    pytest.importorskip("transformers")
    knobs = {"lr": 0.01, "warmup_steps": 0, "schedule": "linear", "min_lr_ratio": 0.0}
    summary, _ = run(HF_SCRIPT, steps=5, schedule_steps=20, knobs=knobs)
    assert summary["status"] == "ok" and summary["steps_run"] == 5
    # The first 5 steps of HF's 20-step linear decay to 0 (a 5-step one would end at 0.002).
    assert summary["series"]["lr"] == pytest.approx([0.01 * (1 - s / 20) for s in range(5)])
