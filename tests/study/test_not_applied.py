"""A searched knob the study's script never applied (its own LambdaLR, the space searching
warmup_steps) is said: once during the study on stderr, in `show`, and in the summary, whose
Pareto front and pick mark its values as not applied."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from assets import studies as h
from assets.cli import invoke

STEPS = 10
SCRIPT = f"""\
import torch
import autotune

trial = autotune.trial(steps={STEPS}, micro_batch=4, lr=3e-2)
model = torch.nn.Linear(4, 1)
opt = trial.recipe.optimizer(model.parameters())
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 5))
x = torch.randn(64, 4)
y = x.sum(1, keepdim=True)
for step in range(trial.steps):
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    gn = trial.recipe.clip_and_step(opt, None)
    sched.step()
    trial.report(step, loss=loss, grad_norm=gn)
"""
SPACE = f"""\
name: own-sched
workload: {{script: train.py}}
probe: {{steps: {STEPS}, batch: 4, device: cpu}}
budget: {{trials: 2, trial_timeout_s: 120}}
sampler: {{name: random, seed: 0}}
verify: {{top_k: 0}}
knobs:
  lr: 0.03
  clip_norm: {{low: 0.1, high: 5.0, log: true}}
  warmup_steps: {{low: 0, high: 10, step: 5}}
"""
SAID = "warning: searched knob(s) never applied by the script: warmup_steps (applied by "


def test_show_says_the_unapplied_knobs_and_marks_their_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    h.recorded_study(tmp_path, "na", trials=3, finished=3, applied=["optimizer", "clip"])
    monkeypatch.chdir(tmp_path)
    shown = invoke("show", "na")
    assert shown.exit_code == 0, shown.output
    assert SAID + "trial.recipe.scheduler (or recipe.lr_at))" in shown.stdout
    front = shown.stdout.split("Pareto front")[1].split("\n\n")[0]
    assert re.search(r"warmup_steps=\d+ \(not applied\)", front), front
    assert re.search(r"clip_norm=[\d.]+(,|$)", front, re.M), front  # clip_and_step applied it
    summary = json.loads(invoke("show", "na", "--json").stdout)
    assert summary["not_applied"] == {"warmup_steps": "trial.recipe.scheduler (or recipe.lr_at)"}


def test_a_script_that_applies_every_searched_knob_says_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    h.recorded_study(
        tmp_path, "ok", trials=2, finished=2, applied=["optimizer", "scheduler", "clip"]
    )
    monkeypatch.chdir(tmp_path)
    shown = invoke("show", "ok")
    assert "never applied" not in shown.stdout and "(not applied)" not in shown.stdout


@pytest.mark.integration
def test_the_study_warns_once_of_a_knob_its_script_never_applied(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    h.write(tmp_path, SPACE)
    token = h.new_token()
    try:
        run = h.autotune(
            ["study", "--space", "space.yaml", "--quiet", "--tracking-uri", h.sqlite_uri(tmp_path)],
            tmp_path,
            token=token,
        )
    finally:
        h.kill_tagged(token)
    assert run.returncode == 0, h.explain(run)
    assert run.stderr.count("never applied by the script") == 1, h.explain(run)
    assert SAID in run.stderr
    assert SAID in run.stdout, h.explain(run)  # and in the summary at the end
