"""A Ray worker killed mid-trial is one line of autotune's ("trial N failed (worker_died)"), not
Ray's own around it: a review saw "(raylet) A worker died ...", Ray Tune's "Trial task failed"
with a 15-line traceback and "Trials did not complete" in the study's output (when the screen
ran on Tune; its trials are plain Ray tasks now, `ray::probe_task` while they run)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from assets import studies as h

pytestmark = pytest.mark.integration


def test_a_killed_worker_prints_only_autotunes_line(tmp_path: Path) -> None:
    name = "killed-worker"
    space = h.write(tmp_path, h.mlp_space(name, trials=3, steps=3000, timeout_s=300))
    token = h.new_token()
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    cmd = ["study", "--space", str(space), "--tracking-uri", h.sqlite_uri(tmp_path)]
    with out.open("w") as o, err.open("w") as e:
        proc = subprocess.Popen(
            h.autotune_cmd(*cmd), cwd=tmp_path, env=h.cli_env(token), stdout=o, stderr=e,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    try:
        baseline = tmp_path / "autotune-studies" / name / "trials" / "0000.json"
        killed = None
        deadline = time.monotonic() + 240
        while killed is None and time.monotonic() < deadline and proc.poll() is None:
            if baseline.exists():  # the baseline's worker is never the one killed
                workers = [p for p, c in h.tagged_processes(token) if "probe_task" in c]
                if workers:
                    os.kill(workers[0], signal.SIGKILL)
                    killed = workers[0]
            time.sleep(0.2)
        assert killed is not None, out.read_text() + err.read_text()
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        h.kill_tagged(token)
    text = out.read_text() + err.read_text()
    assert "worker_died" in text, text
    for ray_line in ("(raylet)", "Trial task failed", "Traceback", "Trials did not complete"):
        assert ray_line not in text, text


# A user's script whose searched trials kill the Ray worker running them (the probe process's
# parent), the study's last one among them: Ray publishes a worker's death a moment after its
# task failed, and the last one's could come after the screen had ended, when the raylet's lines
# were printed again (seen once by a review, and in 1 of 2 runs of this study by hand; not in
# every run: a guard, not a reproduction). They are now off until Ray is shut down.
KILLER = """
import os
import time

import torch
from torch import nn

import autotune

trial = autotune.trial(steps=20, micro_batch=16, lr=0.01)
r = trial.recipe
model = nn.Linear(4, 1)
data = (torch.randn(64, 4), torch.randn(64, 1))
loss_of = lambda m, b: nn.functional.mse_loss(m(b[0]), b[1])
trial.reference(model, data, loss_of)
opt, scaler = r.optimizer(model.parameters()), r.scaler(trial.device.type)
for step in range(trial.steps):
    loss = loss_of(model, data)
    loss.backward()
    r.clip_and_step(opt, scaler)
    if step == 3 and r.knobs["clip_norm"] > 0:  # not the baseline
        parent = open(f"/proc/{os.getppid()}/stat").read().rsplit(")", 1)[1].split()[1]
        os.kill(int(parent), 9)
        time.sleep(5)
    trial.report(step=step, loss=loss.item())
"""


def test_a_worker_killed_in_the_last_trial_prints_no_raylet_line_after_the_screen(
    tmp_path: Path,
) -> None:
    (tmp_path / "killer.py").write_text(KILLER)
    space = h.write(
        tmp_path,
        "name: last\n"
        "workload: {script: killer.py}\n"
        "probe: {steps: 20, micro_batch: 16, threads: 1}\n"
        "budget: {trials: 4, trial_timeout_s: 120}\n"
        "knobs:\n  lr: 0.01\n  clip_norm: {low: 0.5, high: 5.0}\n",
    )
    done = h.autotune(
        ["study", "--space", str(space), "--tracking-uri", h.sqlite_uri(tmp_path)], tmp_path
    )
    text = done.stdout + done.stderr
    assert "trial   3  failed (worker_died)" in text, h.explain(done)
    assert "(raylet)" not in text and "A worker died" not in text, text
