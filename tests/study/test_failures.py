"""Failures a user can read, through the real CLI (Ray, Optuna on SQLite, MLflow on SQLite): a
failed trial's one-line message on its console line, in `show`, `show --json`, export's refusal
and its MLflow run; a failed baseline stops the study at once with exit status 1 (and a second
run of the same command says so again); a later trial's failure is a line and the study goes
on; a Trainer never attached fails early, naming `hf.attach`."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from assets import studies as h

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy"),
    pytest.mark.filterwarnings("ignore:For backward compatibility, 'str' dtypes"),
]

# The baseline (clip_norm at PyTorch's default, off) imports a module that is not installed; any
# other trial would sleep for minutes: the study must not wait for it.
BROKEN = """\
import time
import autotune

trial = autotune.trial(steps=10, micro_batch=4)
if trial.recipe.knobs["clip_norm"] == 0.0:
    import wandb_is_not_installed_here  # noqa
time.sleep(300)
"""

SPACE = """\
name: {name}
workload: {{script: train.py}}
probe: {{steps: 10, micro_batch: 4, threads: 1}}
budget: {{trials: {trials}, concurrency: {concurrency}, cpus_per_trial: 1, {budget}}}
verify: {{top_k: 0}}
sampler: {{name: random, seed: 0}}
knobs:
  lr: 0.01
  clip_norm: {{low: 0.1, high: 1.0}}
"""

MISSING = "ModuleNotFoundError: No module named 'wandb_is_not_installed_here'"


def write_study(
    tmp: Path, script: str, trials: int, concurrency: int = 1, budget: str = ""
) -> Path:
    (tmp / "train.py").write_text(script)
    text = SPACE.format(name="s", trials=trials, concurrency=concurrency, budget=budget)
    return h.write(tmp, text.replace(", }", "}"))


def study(tmp: Path, space: Path, token: str) -> tuple[Any, float]:
    args = ["study", "--space", str(space), "--tracking-uri", h.sqlite_uri(tmp)]
    args += ["--study-dir", str(tmp / "st")]
    t0 = time.monotonic()
    result = h.autotune(args, tmp, token=token, timeout=400)
    return result, time.monotonic() - t0


def record(tmp: Path, number: int) -> dict[str, Any]:
    return dict(json.loads((tmp / "st" / "trials" / f"{number:04d}.json").read_text()))


@pytest.fixture
def token() -> Any:
    t = h.new_token()
    yield t
    h.kill_tagged(t)


def test_a_failed_baseline_stops_the_study_at_once_with_its_message(
    tmp_path: Path, token: str
) -> None:
    space = write_study(tmp_path, BROKEN, trials=4, concurrency=2)
    result, took = study(tmp_path, space, token)
    assert result.returncode == 1, h.explain(result)
    # Trial 1 ran beside the baseline and would have slept 300 s: it was stopped.
    assert took < 250, h.explain(result)
    assert not h.wait_gone(token, 60), "a trial's process outlived the study"
    line = f"baseline (trial 0) failed (exception): {MISSING}"
    assert f"autotune: error: {line}. The study stops" in result.stderr
    assert "--set name=s-2" in result.stderr and "Traceback" not in result.stderr
    assert f"baseline   0  failed (exception): {MISSING}" in result.stdout  # its console line
    assert "interrupted" not in result.stderr
    # one instruction: the summary does not say "run it again" above the error's "afresh"
    assert "and its baseline failed" in result.stdout, h.explain(result)
    assert "again to finish it" not in result.stdout, h.explain(result)
    rec = record(tmp_path, 0)
    assert rec["outcome"] == "failed" and rec["error"] == MISSING
    assert "wandb_is_not_installed_here" in rec["log_tail"]  # the traceback stays in the log
    assert not (tmp_path / "st" / "trials" / "0002.json").exists()  # no trial after it

    shown = h.autotune(["show", str(tmp_path / "st"), "--json"], tmp_path)
    assert shown.returncode == 0, h.explain(shown)
    summary = json.loads(shown.stdout)
    assert summary["failures"][0] == {
        "number": 0,
        "baseline": True,
        "cause": "exception",
        "error": MISSING,
    }
    assert summary["baseline"]["error"] == MISSING
    text = h.autotune(["show", str(tmp_path / "st")], tmp_path)
    assert f"  {line}" in text.stdout

    exported = h.autotune(["export", str(tmp_path / "st"), "-o", "r.yaml"], tmp_path)
    assert exported.returncode == 2
    assert "every trial failed" in exported.stderr and MISSING in exported.stderr

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=h.sqlite_uri(tmp_path))
    exp = client.get_experiment_by_name("s")
    assert exp is not None
    runs = client.search_runs([exp.experiment_id], "tags.`autotune.trial_number` = '0'")
    assert runs and runs[0].data.tags["autotune.error"] == MISSING

    # The same command again: the study is not continued against a failed baseline.
    again, _ = study(tmp_path, space, token)
    assert again.returncode == 1, h.explain(again)
    assert f"autotune: error: {line}. The study stops" in again.stderr
    assert not (tmp_path / "st" / "trials" / "0002.json").exists()


HF_UNATTACHED = """\
import autotune
trial = autotune.trial(steps=10, micro_batch=4)  # first: the deadline counts from the start
import torch
from transformers import Trainer
from autotune.integrations import hf

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 2)
    def forward(self, x, labels):
        return {"loss": torch.nn.functional.cross_entropy(self.lin(x), labels)}

rows = [{"x": torch.randn(4), "labels": i % 2} for i in range(64)]
trainer = Trainer(model=Net(), args=hf.training_args(trial), train_dataset=rows)
trainer.train()  # never attached: no report, and max_steps is the target's 1000000 steps
"""


def test_a_trainer_never_attached_fails_early_naming_hf_attach(tmp_path: Path, token: str) -> None:
    pytest.importorskip("transformers")
    budget = "first_report_s: 25, target_steps: 1000000"
    space = write_study(tmp_path, HF_UNATTACHED, trials=2, budget=budget)
    result, took = study(tmp_path, space, token)
    assert result.returncode == 1, h.explain(result)
    assert took < 300, h.explain(result)
    rec = record(tmp_path, 0)
    assert rec["cause"] == "no_reports", rec
    assert rec["error"].startswith("no trial.report within 25 s of the script's start")
    assert "autotune.integrations.hf.attach(trainer, trial)" in rec["error"]
    assert "did not stop on the interrupt" not in rec["error"]  # the interrupt stopped it
    assert "autotune.integrations.hf.attach(trainer, trial)" in result.stderr


def test_a_later_trials_failure_is_its_line_and_the_study_goes_on(
    tmp_path: Path, token: str
) -> None:
    """A searched trial that raises before its first report: one line (its message's first
    line, without the terminal's escapes) on its console line, in its record and the summary,
    and the study goes on. The next one raises partway (`failed_partway`, below): one study of
    three trials for both (two tests, each a study of a baseline and a failing trial, before).
    With one trial at a time the first searched trial to run is trial 1; it leaves a mark."""
    script = (
        "import os\n"
        "import autotune\n"
        "trial = autotune.trial(steps=40, micro_batch=4)\n"
        f"mark = {str(tmp_path / 'first-searched-ran')!r}\n"
        "if trial.recipe.knobs['clip_norm'] > 0 and not os.path.exists(mark):\n"
        "    open(mark, 'w').close()\n"
        "    raise RuntimeError('clip \\x1b[31mrefused\\x1b[0m\\nsecond line')\n"
        "for i in range(trial.steps):\n"
        "    if i == 30 and trial.recipe.knobs['clip_norm'] > 0:\n"
        "        raise RuntimeError('gave up at step 30')\n"
        "    trial.report(i, loss=1.0 / (i + 1))\n"
    )
    space = write_study(tmp_path, script, trials=3)
    space.write_text(space.read_text().replace("steps: 10,", "steps: 40,"))
    result, _ = study(tmp_path, space, token)
    assert result.returncode == 0, h.explain(result)
    assert "trial   1  failed (exception): RuntimeError: clip refused" in result.stdout
    assert record(tmp_path, 1)["error"] == "RuntimeError: clip refused"
    assert "  trial 1 failed (exception): RuntimeError: clip refused" in result.stdout  # summary
    failed_partway(tmp_path, result, 2)


def failed_partway(tmp_path: Path, result: Any, number: int) -> None:
    """A trial that raised partway logged none of its steps: its MLflow run had only wall_s.
    The steps it reported before (the telemetry sent up to its last fetch) are its loss curve."""
    from mlflow.tracking import MlflowClient

    said = f"trial   {number}  failed (exception): RuntimeError: gave up at step 30"
    assert said in result.stdout, h.explain(result)
    client = MlflowClient(tracking_uri=h.sqlite_uri(tmp_path))
    experiment = client.get_experiment_by_name("s")
    runs = client.search_runs(
        [experiment.experiment_id], f"tags.`autotune.trial_number` = '{number}'", max_results=5
    )
    failed = [r for r in runs if r.info.status == "FAILED"]
    assert len(failed) == 1, [(r.info.run_name, r.info.status) for r in runs]
    history = {m.step: m.value for m in client.get_metric_history(failed[0].info.run_id, "loss")}
    assert len(history) >= 20 and max(history) < 30, sorted(history)
    assert sorted(history) == list(range(len(history)))  # from step 0, in order
    assert all(abs(v - 1.0 / (s + 1)) < 1e-6 for s, v in history.items()), history
    trial_json = client.download_artifacts(failed[0].info.run_id, "trial.json", str(tmp_path))
    assert '"partial"' not in Path(trial_json).read_text()  # the series went to the metrics
