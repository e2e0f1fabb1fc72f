"""What a training script's run leaves behind: its file's SHA-256 and the other metrics it
reports reach its MLflow run; `autotune probe --json` prints JSON alone on stdout whatever the
script prints; `autotune check` shows the script, its arguments and its threads. Real MLflow,
real scripts, the real CLI; nothing mocked."""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from autotune import tracking
from autotune.cli import app
from autotune.probe.config import ProbeConfig
from autotune.probe.script_run import run_script
from autotune.study.folder import verify_path
from autotune.study.verification import save_seed

pytestmark = pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy")

STEPS = 12
SCRIPT = f"""\
import os

import autotune

print("a log line of the script on stdout", flush=True)
if os.environ.get("START_A_PROCESS"):
    os.system("echo a line of a process the script started")
trial = autotune.trial(steps={STEPS}, micro_batch=4)
for step in range(trial.steps):
    loss = 2.0 / (1 + step)
    print({{"loss": loss, "epoch": step}})  # as a Trainer logs its dicts
    trial.report(step, loss=loss, grad_norm=1.0, accuracy=0.5 + step / 100, throughput=7.0)
"""


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Any:
    folder = tmp_path_factory.mktemp("mlflow")
    return tracking.connect(f"sqlite:///{folder}/mlflow.db")


def _outcome(number: int, summary: dict[str, Any]) -> dict[str, Any]:
    return {
        "number": number,
        "outcome": "complete",
        "baseline": False,
        "knobs": summary.get("knobs") or {},
        "env": {},
        "summary": summary,
        "values": [0.1, 1.0],
        "constraints": [0.0],
        "feasible": True,
        "wall_s": 1.0,
    }


def test_a_scripts_hash_and_other_metrics_reach_its_run(tmp_path: Path, store: Any) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    cfg = ProbeConfig(workload="script:train.py", steps=STEPS, script=str(script), device="cpu")
    summary = run_script(cfg)
    digest = hashlib.sha256(script.read_bytes()).hexdigest()
    assert summary["script_sha256"] == digest
    script.write_text(SCRIPT + "# changed\n")  # a trial's hash is the file it ran
    assert run_script(cfg)["script_sha256"] not in (digest, None)

    experiment_id = tracking.ensure_experiment(store, "script-records")
    parent = tracking.ensure_study_run(
        store, experiment_id, "script-records", space_yaml="x", params={}, tags={}
    )
    outcome = _outcome(3, summary)
    run_id = tracking.log_trial(store, experiment_id, parent, "script-records", outcome)
    run = store.get_run(run_id)
    assert run.data.tags["autotune.script_sha256"] == digest
    assert run.data.tags["autotune.script"] == str(script)
    accuracy = {m.step: m.value for m in store.get_metric_history(run_id, "accuracy")}
    assert sorted(accuracy) == list(range(STEPS))
    assert accuracy[0] == pytest.approx(0.5) and accuracy[11] == pytest.approx(0.61)
    # A name autotune logs itself (the summary's throughput) keeps autotune's; the script's
    # is logged beside it.
    assert run.data.metrics["throughput"] == pytest.approx(summary["metrics"]["throughput"])
    mine = store.get_metric_history(run_id, "reported.throughput")
    assert len(mine) == STEPS and {m.value for m in mine} == {7.0}


NAMES_SCRIPT = f"""\
import autotune

trial = autotune.trial(steps={STEPS}, micro_batch=4)
for step in range(trial.steps):
    more = {{"acc@1": 1.0, "acc_1": 2.0, " a b ": 3.0, "throughput": 4.0}}
    more["reported.throughput"] = 5.0
    val = float("nan") if step % 2 else float("inf") if step == 4 else 0.5
    trial.report(step, loss=2.0 / (1 + step), grad_norm=1.0, val=val, **more)
"""


def test_each_reported_name_has_its_own_history_with_its_nan(tmp_path: Path, store: Any) -> None:
    """Names that MLflow would clean to one key, or to autotune's own, get a key each (the
    renamed ones said in a tag); NaN values are logged, infinite ones counted."""
    script = tmp_path / "train.py"
    script.write_text(NAMES_SCRIPT)
    cfg = ProbeConfig(workload="script:train.py", steps=STEPS, script=str(script), device="cpu")
    summary = run_script(cfg)
    experiment_id = tracking.ensure_experiment(store, "script-names")
    parent = tracking.ensure_study_run(
        store, experiment_id, "script-names", space_yaml="x", params={}, tags={}
    )
    run_id = tracking.log_trial(store, experiment_id, parent, "script-names", _outcome(1, summary))
    renamed = json.loads(store.get_run(run_id).data.tags["autotune.metric_keys"])
    assert renamed == {
        "acc@1": "acc_1.2",
        " a b ": "a b",
        "throughput": "reported.throughput.2",
    }
    keys = {"acc_1": 2.0, "acc_1.2": 1.0, "a b": 3.0, "reported.throughput": 5.0}
    for key, value in {**keys, "reported.throughput.2": 4.0}.items():
        history = store.get_metric_history(run_id, key)
        assert sorted(m.step for m in history) == list(range(STEPS)), key
        assert {m.value for m in history} == {value}, key
    val = {m.step: m.value for m in store.get_metric_history(run_id, "val")}
    assert sorted(val) == [s for s in range(STEPS) if s != 4]  # step 4's inf is counted
    assert all(math.isnan(val[s]) for s in range(1, STEPS, 2))
    assert val[0] == 0.5
    infinite = json.loads(store.get_run(run_id).data.tags["autotune.metric_infinite"])
    assert infinite == {"val": 1}


def test_verification_seeds_log_their_loss_series(tmp_path: Path, store: Any) -> None:
    """A verification seed keeps its loss series in its record, and the verification's run
    has each seed's as a metric history."""
    losses = {1: [2.0, 1.5, 1.2, float("nan")], 2: [2.1, 1.4, 1.1, 1.0]}
    runs = []
    for seed, loss in losses.items():
        out = {
            "outcome": "complete",
            "summary": {"metrics": {"final_loss": loss[-2]}, "series": {"loss": loss, "lr": [1]}},
        }
        written = save_seed(tmp_path, 5, seed, out, steps=4)
        assert "series" not in written["summary"]
        back = json.loads(verify_path(tmp_path, 5, seed, 4).read_text())
        assert back["loss_series"][:3] == loss[:3], seed
        runs.append({**back, "seed": seed})
    experiment_id = tracking.ensure_experiment(store, "verify-series")
    result = {"seeds": [1, 2], "n": 2, "metrics": {}, "diverged_share": 0.0}
    run_id = tracking.log_verification(
        store,
        experiment_id,
        name="verify-0005",
        result=result,
        tags={},
        losses={int(r["seed"]): r["loss_series"] for r in runs},
    )
    for seed, loss in losses.items():
        history = {m.step: m.value for m in store.get_metric_history(run_id, f"loss/seed_{seed}")}
        finite = {i: v for i, v in enumerate(loss) if math.isfinite(v)}
        assert history == pytest.approx(finite), seed


SPACE = """\
name: scripted
workload:
  script: train.py
  args: ["--width", "8", "--name", "two words"]
probe: {{steps: {steps}, micro_batch: 4, device: cpu{threads}}}
knobs: {{lr: 0.01}}
"""


@pytest.mark.integration
def test_probe_json_is_json_alone_on_stdout(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    space = tmp_path / "space.yaml"
    space.write_text(SPACE.format(steps=STEPS, threads=", threads: 1"))
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": root, "START_A_PROCESS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "autotune", "probe", "--space", str(space), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout)  # the JSON alone
    assert data["status"] == "ok" and data["steps_run"] == STEPS
    # What the script (and a process it started) printed went to stderr.
    assert "a log line of the script on stdout" in proc.stderr
    assert "a line of a process the script started" in proc.stderr
    assert "'epoch': 11" in proc.stderr


def test_check_shows_the_script_its_args_and_threads(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    space = tmp_path / "space.yaml"
    space.write_text(SPACE.format(steps=STEPS, threads=", threads: 2"))
    result = CliRunner().invoke(app, ["check", str(space)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    workload = next(line for line in lines if line.startswith("workload"))
    assert str(tmp_path / "train.py") in workload
    assert "args --width 8 --name 'two words'" in workload
    probe = next(line for line in lines if line.startswith("probe"))
    assert "2 CPU thread(s) per trial (probe.threads)" in probe
    space.write_text(SPACE.format(steps=STEPS, threads=""))
    result = CliRunner().invoke(app, ["check", str(space)])
    probe = next(line for line in result.stdout.splitlines() if line.startswith("probe"))
    assert "CPU thread(s) per trial (planned for this machine; probe.threads unset)" in probe
