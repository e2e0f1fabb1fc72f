"""A training script that never reports fails early, naming the API it forgot (run_script with
`first_report_s`, in this process: the watch interrupts the script's thread); a failure's message
is one printable line; the first-report rule of the trials after the baseline; a recipe replays
its own length under AUTOTUNE_RECIPE unless the script keeps its own steps."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

import autotune
from autotune.errors import one_line
from autotune.knobs import KNOBS
from autotune.probe.config import ProbeConfig
from autotune.probe.script import ScriptFailure
from autotune.probe.script_run import run_script
from autotune.study import failures

HEAD = "import autotune, time\ntrial = autotune.trial(steps=99, micro_batch=3)\n"


def run(
    tmp_path: Path, body: str, limit: float | None, steps: int = 4, **cfg: Any
) -> dict[str, Any]:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(body))
    c = ProbeConfig(
        workload="script:train.py", steps=steps, script=str(script), first_report_s=limit, **cfg
    )
    return run_script(c, lambda _m: None)


def stalled(tmp_path: Path, body: str, limit: float = 1.0, **cfg: Any) -> tuple[str, float]:
    """The message of a script stopped for its missing first report, and the seconds it took."""
    t0 = time.monotonic()
    with pytest.raises(ScriptFailure) as e:
        run(tmp_path, body, limit, **cfg)
    assert e.value.cause == "no_reports"
    return str(e.value), time.monotonic() - t0


def test_a_script_that_never_reports_is_stopped_at_the_limit_naming_trial_report(
    tmp_path: Path,
) -> None:
    before = signal.getsignal(signal.SIGINT)
    message, took = stalled(tmp_path, HEAD + "time.sleep(60)\n")
    assert took < 20  # not the 60 s the script would have slept
    assert message.startswith("no trial.report within 1 s of the script's start")
    # the plain loop's call, unless transformers is imported here (by another test): hf.attach
    hint = "call trial.report(step, loss=...) after each optimizer step"
    assert (hint in message) != ("transformers" in sys.modules), message
    assert "raise budget.first_report_s" in message
    assert signal.getsignal(signal.SIGINT) is before  # put back


def test_a_script_that_never_calls_the_trial_api_is_told_so(tmp_path: Path) -> None:
    message, _ = stalled(tmp_path, "import threading\nthreading.Event().wait()\n")
    assert "did not call autotune.trial() within 1 s of its start" in message


SLEEP = "try:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n"


@pytest.mark.parametrize(
    "swallow",
    [
        SLEEP + "    pass\n",  # ends normally
        SLEEP + "    raise SystemExit(1)\n",  # as Lightning does
        SLEEP + "    raise RuntimeError('x')\n",
        SLEEP + "    pass\ntrial.report(0, loss=1.0)\n",
    ],
    ids=["ends", "exits_1", "raises", "reports_late"],
)
def test_a_script_that_handles_the_interrupt_still_fails_with_the_missing_report(
    tmp_path: Path, swallow: str
) -> None:
    message, _ = stalled(tmp_path, HEAD + swallow)
    assert message.startswith("no trial.report within 1 s")


def test_a_script_that_ignores_the_interrupt_is_ended_by_its_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A probe process (`on_stuck`) whose script ignores SIGINT reports the failure and leaves
    GRACE_S after the interrupt; here the script then ends on its own."""
    from autotune.probe import first_report

    monkeypatch.setattr(first_report, "GRACE_S", 0.5)
    stuck: list[tuple[str, float]] = []
    body = HEAD + "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(4)\n"
    script = tmp_path / "train.py"
    script.write_text(body)
    cfg = ProbeConfig(workload="script:train.py", steps=4, script=str(script), first_report_s=1)
    t0 = time.monotonic()
    on_stuck = lambda why: stuck.append((why, time.monotonic() - t0))  # noqa: E731
    with pytest.raises(ScriptFailure, match=r"no trial\.report within 1 s"):
        run_script(cfg, lambda _m: None, on_stuck=on_stuck)
    assert len(stuck) == 1 and stuck[0][0].startswith("no trial.report within 1 s")
    assert 1.4 <= stuck[0][1] < 3.5  # the limit, then the grace; before the script's end


def test_a_script_that_reports_in_time_runs_on_past_the_limit(tmp_path: Path) -> None:
    body = HEAD + "trial.report(0, loss=1.0)\ntime.sleep(1.5)\ntrial.report(1, loss=1.0)\n"
    summary = run(tmp_path, body, 0.5, steps=2)
    assert summary["status"] == "ok" and summary["steps_run"] == 2
    assert 0 <= summary["first_report_s"] < 0.5


def test_without_a_limit_nothing_watches(tmp_path: Path) -> None:
    summary = run(tmp_path, HEAD + "time.sleep(0.3)\ntrial.report(0, loss=1.0)\n", None, steps=1)
    assert summary["status"] == "ok" and summary["first_report_s"] >= 0.3


HF = """
import time, torch
from transformers import Trainer
import autotune
from autotune.integrations import hf

trial = autotune.trial(steps=99, micro_batch=4)

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 2)
    def forward(self, x, labels):
        loss = torch.nn.functional.cross_entropy(self.lin(x), labels)
        time.sleep(0.05)  # a step that takes time: the Trainer trains its whole max_steps
        return {"loss": loss}

rows = [{"x": torch.randn(4), "labels": i % 2} for i in range(64)]
trainer = Trainer(model=Net(), args=hf.training_args(trial), train_dataset=rows)
ATTACH
trainer.train()
"""


@pytest.mark.filterwarnings("ignore")
def test_a_trainer_never_attached_fails_early_naming_hf_attach(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    body = HF.replace("ATTACH", "")
    # schedule_steps is the Trainer's max_steps: 100000 steps, were it not stopped
    message, took = stalled(tmp_path, body, limit=15, schedule_steps=100_000, threads=1)
    assert took < 60
    assert "autotune.integrations.hf.attach(trainer, trial) was never called" in message
    assert "call it after Trainer(...), before trainer.train()" in message
    # attached, the same job reports and stops at its steps
    summary = run(tmp_path, HF.replace("ATTACH", "hf.attach(trainer, trial)"), 15, threads=1)
    assert summary["status"] == "ok" and summary["steps_run"] == 4


def test_the_message_at_the_end_names_the_forgotten_api_too(tmp_path: Path) -> None:
    with pytest.raises(ScriptFailure, match=r"never trial\.report\(step, loss=\.\.\.\): ") as e:
        run(tmp_path, HEAD, None)
    assert e.value.cause == "no_reports"
    # which call: trial.report's, or (transformers imported, as by the test above) hf.attach's
    assert ("call trial.report(step" in str(e.value)) != ("transformers" in sys.modules)


# ----- the one-line message ------------------------------------------------------------------


def test_a_failures_message_is_one_printable_bounded_line() -> None:
    assert one_line("ValueError: boom\n  detail\n") == "ValueError: boom"
    assert one_line("KeyError:\n  'x'") == "KeyError: 'x'"  # the line it introduces
    hostile = "\x1b[2J\x1b]0;title\x07Bad\u202etxt\x00 \t name\x1b[31m!\x7f\u2028"
    assert one_line(hostile) == "Bad txt name!"
    assert one_line("shown\rhidden") == "shown"  # a carriage return ends the line
    long = one_line("E: " + "x" * 5000)
    assert len(long) == 300 and long.endswith("...")
    assert one_line("\n \n") == ""


def test_the_first_report_rule_after_the_baseline() -> None:
    assert failures.first_report_s(300, None) == 300  # the baseline has not reported
    assert failures.first_report_s(300, 2.0) == failures.FLOOR_S  # 5 x 2 s, under the floor
    assert failures.first_report_s(300, 20.0) == 100  # 5 x 20 s
    assert failures.first_report_s(300, 100.0) == 300  # never past budget.first_report_s
    assert failures.first_report_s(None, 20.0) is None  # no limit asked


def test_every_trial_failed_is_said_only_when_no_trial_had_a_result() -> None:
    row = {"number": 0, "baseline": True, "cause": "exception", "error": "ValueError: boom"}
    text = failures.every_trial_failed({"failed": 2, "complete": 0}, [row])
    assert text == (
        "every trial failed (2 of 2); baseline (trial 0) failed (exception): ValueError: boom"
    )
    assert failures.every_trial_failed({"failed": 2, "diverged": 1}, [row]) is None
    assert failures.every_trial_failed({"failed": 0}, []) is None


# ----- AUTOTUNE_RECIPE replays the recipe's length --------------------------------------------


@pytest.fixture
def recipe_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from autotune.recipe import trial as trial_api

    monkeypatch.setattr(trial_api, "_TRIAL", None)
    recipe = autotune.Recipe(
        name="r",
        workload={"script": "train.py", "args": []},
        precision="fp32",
        micro_batch=8,
        knobs={**{k: i.default for k, i in KNOBS.items()}, "lr": 0.01},
        probe={"steps": 12, "schedule_steps": 40, "seed": 4},
    )
    path = recipe.save(tmp_path / "r.yaml")
    monkeypatch.setenv("AUTOTUNE_RECIPE", str(path))
    return path


def test_the_recipes_steps_and_schedule_win_over_the_scripts_default(
    recipe_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    t = autotune.trial(steps=200, micro_batch=16)
    assert (t.steps, t.schedule_steps, t.micro_batch) == (12, 40, 8)
    err = capsys.readouterr().err
    assert "steps=12 and its schedule are the recipe's" in err and "steps=200" in err


def test_own_steps_keeps_the_scripts_steps_and_schedules_over_them(recipe_env: Path) -> None:
    t = autotune.trial(steps=200, micro_batch=16, own_steps=True)
    assert (t.steps, t.schedule_steps, t.micro_batch) == (200, 200, 8)
    assert t.recipe.lr == 0.01  # the recipe's knobs all the same


def test_own_steps_without_steps_is_refused(recipe_env: Path) -> None:
    with pytest.raises(ValueError, match=r"own_steps=True\) needs steps=N"):
        autotune.trial(own_steps=True)


@pytest.mark.integration
def test_a_replayed_script_runs_the_recipes_length(recipe_env: Path, tmp_path: Path) -> None:
    """The script as a user runs it, `AUTOTUNE_RECIPE=r.yaml python train.py`: its own
    `steps=200` default gives way to the recipe's 12 steps over a 40-step schedule."""
    import json
    import os
    import subprocess

    script = tmp_path / "train.py"
    script.write_text(
        "import autotune\n"
        "trial = autotune.trial(steps=200, micro_batch=16, lr=3e-3)\n"
        "for i in range(trial.steps):\n"
        "    trial.report(i, loss=1.0 / (i + 1))\n"
    )
    out = tmp_path / "s.json"
    env = {**os.environ, "AUTOTUNE_SUMMARY": str(out)}
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(out.read_text())
    assert (summary["steps_run"], summary["schedule_steps"], summary["seed"]) == (12, 40, 4)


@pytest.mark.integration
@pytest.mark.parametrize(
    ("where", "said"),
    [("folder", "is a folder: name a file"), ("missing/s.json", "missing is not there")],
)
def test_a_summary_that_cannot_be_written_fails_at_the_start(
    tmp_path: Path, where: str, said: str
) -> None:
    # It failed at exit, as a traceback under exit status 0, with no summary written.
    import os

    (tmp_path / "folder").mkdir()
    script = tmp_path / "train.py"
    script.write_text(
        "import autotune\n"
        "trial = autotune.trial(steps=5, micro_batch=16)\n"
        "print('started')\n"
        "for i in range(trial.steps):\n"
        "    trial.report(i, loss=1.0 / (i + 1))\n"
    )
    env = {**os.environ, "AUTOTUNE_SUMMARY": str(tmp_path / where)}
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0 and "started" not in done.stdout
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ValueError: autotune.trial(): AUTOTUNE_SUMMARY=") and said in last


@pytest.mark.integration
@pytest.mark.parametrize(
    ("imports", "advice"),
    [
        ("import lightning", "lightning.Trainer(**autotune.integrations.lightning.trainer_kwargs"),
        ("import lightning; from transformers import Trainer", "hf.attach(trainer, trial)"),
        ("from transformers import Trainer", "hf.attach(trainer, trial)"),
    ],
    ids=["lightning", "both", "hf"],
)
def test_a_lightning_job_gets_lightnings_advice(imports: str, advice: str) -> None:
    # `import lightning` imports transformers too (the fifth black-box review: a Lightning job
    # that forgot trainer_kwargs was told to attach an HF Trainer); the HF advice is for a job
    # that imported the Trainer. In a fresh interpreter: what is imported is the point.
    code = f"{imports}\nfrom autotune.probe.first_report import FirstReport\n"
    code += "print(FirstReport().forgotten())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert advice in out.stdout, out.stdout
