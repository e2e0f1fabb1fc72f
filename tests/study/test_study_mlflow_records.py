"""What a study records in MLflow, read back as a user would after a small real study with rungs
(real local Ray, SQLite Optuna and MLflow; nothing mocked). A black-box review found the step
time logged in seconds under `step_time_ms`, the study run's best and baseline at the screen
beside a change at the decided length (and no decided length, no verdict), and the baseline's
yardstick seeds nowhere in MLflow though they count in the verification's compute.

Then the study's folder is removed and a study of the same name started afresh (as the README
says to): it logs to MLflow runs of its own. A review found its trials nested under the old
study's parent run beside the old study's numbers. (That was tests/study/test_name_reused.py,
which ran a first study of its own only to have an old study of the name in the store.)"""

from __future__ import annotations

import json
import math
import shutil
import statistics
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from assets import studies as h

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy"),
    pytest.mark.filterwarnings("ignore:For backward compatibility, 'str' dtypes"),
]

RELATIVE = "constraints:\n  - {metric: final_loss, op: '<=', value: 1.05, relative_to: baseline}\n"


def cli(args: Sequence[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """A read-only command in-process (`assets.cli.in_process`)."""
    from assets.cli import in_process

    return in_process(args, cwd)


def _runs(uri: str, name: str) -> list[Any]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(name)
    return list(client.search_runs([exp.experiment_id], max_results=500))


def test_the_study_records_in_mlflow_what_it_printed_and_a_new_one_of_its_name_its_own(
    tmp_path: Path,
) -> None:
    from mlflow.tracking import MlflowClient

    text = h.mlp_space("rec", trials=3, steps=20, verify_top_k=1, verify_seeds=2) + RELATIVE
    text = text.replace("budget: {", "budget: {target_steps: 40, ")
    space = h.write(tmp_path, text.replace("device: cpu,", "device: cpu, threads: 1,"))
    uri = h.sqlite_uri(tmp_path)
    cmd = ["study", "--space", str(space), "--tracking-uri", uri]
    run = h.autotune(cmd, tmp_path, token=h.new_token(), timeout=600)
    assert run.returncode == 0, h.explain(run)
    show = cli(["show", "rec", "--json"], tmp_path)
    assert show.returncode == 0, h.explain(show)
    summary = json.loads(show.stdout)
    client = MlflowClient(tracking_uri=uri)
    listed = _runs(uri, "rec")
    runs = {r.info.run_name: r for r in listed}
    parent = next(r for r in listed if r.data.tags.get("autotune.role") == "study")

    # 1. step_time_ms in milliseconds: the throughput is the samples of a step over its median
    # steady step time (after max(3, ceil(n/10)) warm-up steps)
    base = runs["trial-0000-baseline"]
    history = client.get_metric_history(base.info.run_id, "step_time_ms")
    times = [m.value for m in sorted(history, key=lambda m: m.step)]
    steady = times[max(3, math.ceil(len(times) / 10)) :]
    per_step = 1000.0 * h.MICRO_BATCH / statistics.median(steady)
    assert per_step == pytest.approx(base.data.metrics["throughput"], rel=1e-6)

    # 2. the study run at the decided length, with the verdict the summary printed
    m, tags = parent.data.metrics, parent.data.tags
    assert summary["pareto_steps"] == 40 and tags["autotune.decided_steps"] == "40"
    verdict = (summary.get("vs_baseline") or {}).get("verdict")
    assert tags.get("autotune.verdict") == (verdict.upper() if verdict else None)
    for name, row in summary["improvement"].items():
        assert m[f"best.{name}"] == pytest.approx(row["best"])
        assert m[f"baseline.{name}"] == pytest.approx(row["baseline"])
    base_screen = summary["baseline"]["metrics"]["final_loss"]
    assert m["screen.baseline.final_loss"] == pytest.approx(base_screen)
    assert "baseline.steps_run" not in m and m["screen.baseline.steps_run"] == 20

    # 3. the baseline's yardstick seeds at the screen, a verification run of their own
    yard = runs["verify-0000-s20"]
    assert yard.data.tags["autotune.yardstick"] == "true"
    assert yard.data.tags["mlflow.parentRunId"] == parent.info.run_id
    assert yard.data.params["n_seeds"] == "2"
    assert len(client.get_metric_history(yard.info.run_id, "loss/seed_1")) == 20
    assert summary["screen_yardstick"]["run_id"] == yard.info.run_id
    assert "verify-0000" in runs, "the baseline's verification at 40 steps"

    # logged once: a resume finds it
    again = h.autotune([*cmd, "--resume"], tmp_path, token=h.new_token(), timeout=600)
    assert again.returncode == 0, h.explain(again)
    names = [r.info.run_name for r in _runs(uri, "rec")]
    assert names.count("verify-0000-s20") == 1, names

    # A new study of the name, its folder removed (2 trials at another learning rate), gets its
    # own parent run: the old study's trials stay under the old one, its own under its own.
    shutil.rmtree(tmp_path / "autotune-studies" / "rec")
    fresh = h.write(tmp_path, h.mlp_space("rec", trials=2, steps=20), "fresh.yaml")
    args = ["study", "--space", str(fresh), "--quiet", "--tracking-uri", uri]
    second = h.autotune([*args, "--set", "knobs.lr=0.1"], tmp_path, token=h.new_token())
    assert second.returncode == 0, h.explain(second)
    exp = client.get_experiment_by_name("rec")
    assert exp is not None
    listed = client.search_runs([exp.experiment_id], order_by=["attributes.start_time ASC"])
    parents = [r.info.run_id for r in listed if r.data.tags.get("autotune.role") == "study"]
    assert len(parents) == 2, "the second study continued the first one's run"
    kids = {p: [r for r in listed if r.data.tags.get("mlflow.parentRunId") == p] for p in parents}
    old_trials = [r for r in kids[parents[0]] if r.data.tags.get("autotune.role") == "trial"]
    assert len(old_trials) == 3, [r.info.run_name for r in kids[parents[0]]]
    assert len(kids[parents[1]]) == 2, [c.info.run_name for c in kids[parents[1]]]
    old_lrs = {float(r.data.params["lr"]) for r in kids[parents[0]] if "lr" in r.data.params}
    new_lrs = {float(r.data.params["lr"]) for r in kids[parents[1]]}
    assert new_lrs == {0.1} and old_lrs and 0.1 not in old_lrs, (old_lrs, new_lrs)
