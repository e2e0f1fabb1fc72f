"""In a study, `hf.training_args` refuses `report_to` naming mlflow (or "all"), and warns of
other reporters; outside a study (a recipe in the user's own run) it passes them through.

A review: `report_to=["mlflow"]` in a study made each trial's MLflowCallback write a stray run
into MLflow's default store, the study's own `mlflow.db` beside the script (experiment
Default), and slowed the measured steps about 10x."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from autotune.probe.config import ProbeConfig
from autotune.probe.script_run import run_script

pytestmark = pytest.mark.filterwarnings("ignore")

SCRIPT = """
import sys
import autotune
from autotune.integrations import hf

trial = autotune.trial(steps=1, micro_batch=4)
args = hf.training_args(trial, output_dir="out", report_to=REPORT_TO)
print("REPORT_TO", args.report_to, flush=True)
trial.report(0, loss=1.0)
"""


def run(tmp_path: Path, report_to: object) -> dict[str, object]:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SCRIPT).replace("REPORT_TO", repr(report_to), 1))
    cfg = ProbeConfig(workload="script:train.py", steps=1, script=str(script))
    return run_script(cfg, lambda _m: None)


@pytest.mark.parametrize("report_to", [["mlflow"], "mlflow", "all", ["tensorboard", "MLflow"]])
def test_a_study_refuses_report_to_mlflow(tmp_path: Path, report_to: object) -> None:
    with pytest.raises(ValueError, match=r"report_to=.* in a study") as e:
        run(tmp_path, report_to)
    said = str(e.value)
    assert "\n" not in said and "leave report_to out, or 'none'" in said, said
    assert "the study's own store" in said, said


def test_a_study_warns_of_other_reporters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(tmp_path, ["tensorboard"])["status"] == "ok"
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("autotune: warning: training_args")]
    assert len(lines) == 1 and "timed as part of the trial's steps" in lines[0], err
    # "none" (or leaving it out) is the study's own: no warning
    assert run(tmp_path, "none")["status"] == "ok"
    assert "autotune: warning" not in capsys.readouterr().err


@pytest.mark.integration
def test_outside_a_study_report_to_is_the_users(tmp_path: Path) -> None:
    """The script run on its own (a recipe applied in the user's run): nothing refused."""
    (tmp_path / "train.py").write_text(
        textwrap.dedent(SCRIPT).replace("REPORT_TO", "['mlflow']", 1)
    )
    out = subprocess.run(
        [sys.executable, "train.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "REPORT_TO ['mlflow']" in out.stdout, out.stdout
    assert "autotune: warning: training_args" not in out.stderr
