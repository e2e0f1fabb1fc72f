"""`autotune ui` on a finished study, looked at with a real headless Chromium.

Needs /usr/bin/chromium (apt-get install chromium). Without it the test is skipped, unless
AUTOTUNE_REQUIRE_SERVICES=1 (CI), where a missing browser is a failure.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from assets import studies as h

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy"),
    pytest.mark.filterwarnings("ignore:For backward compatibility, 'str' dtypes"),
]

SCREENSHOT_COPY = Path("/tmp/autotune-ui.png")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def browser() -> str:
    """Chromium's path; asked for first, so that a missing browser starts nothing."""
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None and Path("/usr/bin/chromium").exists():
        path = "/usr/bin/chromium"
    if path is None:
        reason = "chromium is not installed (apt-get install chromium): the UI test needs it"
        if os.environ.get("AUTOTUNE_REQUIRE_SERVICES") == "1":
            pytest.fail(reason + " and AUTOTUNE_REQUIRE_SERVICES=1")
        pytest.skip(reason)
    return path


class UI:
    """A running `autotune ui` and the lines it printed."""

    def __init__(self, proc: subprocess.Popen[str], port: int):
        self.proc, self.port = proc, port
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def link(self, timeout: float) -> str:
        """The link `autotune ui` prints once the UI answers."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for i, line in enumerate(self.lines[:-1]):
                if line.startswith("MLflow UI for "):
                    return self.lines[i + 1].strip()
            if self.proc.poll() is not None:
                time.sleep(0.5)  # let the reader drain the pipe
                raise AssertionError(
                    f"`autotune ui` exited with status {self.proc.returncode}:\n"
                    + "\n".join(self.lines[-40:])
                )
            time.sleep(0.2)
        raise AssertionError(
            f"`autotune ui` printed no URL within {timeout:.0f} s:\n" + "\n".join(self.lines[-40:])
        )


@pytest.fixture(scope="module")
def ui(browser: str, shared: h.FinishedStudy) -> Iterator[UI]:
    """One `autotune ui` for the module's tests (it only serves what they read)."""
    port = h.free_port()
    token = h.new_token()
    proc = subprocess.Popen(
        h.autotune_cmd(
            "ui", shared.name, "--tracking-uri", shared.tracking_uri, "--port", str(port)
        ),
        cwd=shared.folder,
        env=h.cli_env(token),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    server = UI(proc, port)
    try:
        yield server
    finally:
        h.interrupt_group(proc, token, "`autotune ui`")


def browse(browser: str, tmp_path: Path, *args: str, timeout: float = 120) -> str:
    """Run headless Chromium with `args`; return its stdout. Nothing of it is left running."""
    token = h.new_token()
    profile = tmp_path / f"chromium-{token[:8]}"
    proc = subprocess.Popen(
        [browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
        env={**os.environ, h.TOKEN_VAR: token},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise AssertionError(f"chromium ran past {timeout:.0f} s: {args}") from None
    finally:
        h.kill_tagged(token)
    assert proc.returncode == 0, f"chromium exited with {proc.returncode}: {err[-3000:]}"
    return out


def test_ui_shows_the_study_and_its_trials(
    browser: str, shared: h.FinishedStudy, ui: UI, tmp_path: Path
) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=shared.tracking_uri)
    experiment = client.get_experiment_by_name(shared.name)
    assert experiment is not None
    trial_run = next(
        r
        for r in client.search_runs([experiment.experiment_id])
        if r.data.tags.get("autotune.trial_number") == "1"
    )

    link = ui.link(timeout=330)
    base = f"http://127.0.0.1:{ui.port}"
    # The study's experiment, in MLflow's model-training view (its runs, not GenAI traces).
    assert link == f"{base}/#/experiments/{experiment.experiment_id}?workflowType=machine_learning"

    budget = "--virtual-time-budget=15000"
    png = tmp_path / "ui.png"
    shot = [f"--screenshot={png}", "--window-size=1400,900"]
    dom = browse(browser, tmp_path, budget, "--dump-dom", *shot, link)
    assert shared.name in dom, "the study's run is not on its experiment page"
    # The study's run, one child run per trial, and the verification runs (the study's own and
    # any `autotune verify` of its recipe that other tests logged to the same experiment).
    runs = client.search_runs([experiment.experiment_id])
    roles = [r.data.tags.get("autotune.role") for r in runs]
    assert roles.count("study") == 1 and len(runs) >= shared.trials + 2, roles
    assert re.search(rf"\b{len(runs)}\D{{0,40}}matching runs", dom), "no runs table"

    run_page = (
        f"{base}/#/experiments/{experiment.experiment_id}/runs/{trial_run.info.run_id}"
        "?workflowType=machine_learning"
    )
    dom = browse(browser, tmp_path, budget, "--dump-dom", run_page)
    assert "trial-0001" in dom, "the trial's run page does not show its name"
    assert "autotune.fp.hash" in dom, "the trial's fingerprint tags are not shown"
    assert "clip_norm" in dom, "the trial's knobs are not shown"

    data = png.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 20_000, len(data)
    shutil.copyfile(png, SCREENSHOT_COPY)


SHOTS = {
    "experiment": Path("/tmp/autotune-experiment.png"),
    "dashboard": Path("/tmp/autotune-dashboard.png"),
}


def test_the_experiment_is_of_the_training_kind_and_opens_on_its_runs(
    browser: str, shared: h.FinishedStudy, ui: UI, tmp_path: Path
) -> None:
    """The study's experiment carries MLflow 3's kind tag for model training, and the link
    `autotune ui` prints opens it on the runs table. (MLflow 3.17's UI takes the kind it shows
    from its workflow switch, which that link sets; versions without the switch read the tag.)
    The verification's run has each seed's loss series."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=shared.tracking_uri)
    experiment = client.get_experiment_by_name(shared.name)
    assert experiment is not None
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    link = ui.link(timeout=330)
    png = tmp_path / "experiment.png"
    shot = [f"--screenshot={png}", "--window-size=1400,900"]
    dom = browse(browser, tmp_path, "--virtual-time-budget=15000", "--dump-dom", *shot, link)
    runs = client.search_runs([experiment.experiment_id])
    assert re.search(rf"\b{len(runs)}\D{{0,40}}matching runs", dom), "no runs table"
    assert "Token Usage" not in dom, "the GenAI overview, not the runs"
    assert png.read_bytes().startswith(b"\x89PNG")
    shutil.copyfile(png, SHOTS["experiment"])

    # The verification seeds' loss series are on the study's verification run.
    verifications = [
        r
        for r in runs
        if r.data.tags.get("autotune.role") == "verification"
        and r.data.tags.get("autotune.study") == shared.name
        and r.info.run_name.startswith("verify-0")
    ]
    assert verifications
    for run in verifications:
        keys = [k for k in run.data.metrics if k.startswith("loss/seed_")]
        assert len(keys) >= 2, run.data.metrics.keys()
        for key in keys:
            assert len(client.get_metric_history(run.info.run_id, key)) >= 10, key


def test_optuna_dashboard_plots_on_readable_axes(
    browser: str, shared: h.FinishedStudy, tmp_path: Path
) -> None:
    """optuna-dashboard on the study's storage, in a real browser: its history plot's value
    axis ends on the scale of the measured trials (no 1e12 from an infeasible one)."""
    import sys

    storage = f"sqlite:///{shared.study_dir / 'optuna.db'}"
    port = h.free_port()
    exe = Path(sys.executable).with_name("optuna-dashboard")
    token = h.new_token()
    server = subprocess.Popen(
        [str(exe), "--host", "127.0.0.1", "--port", str(port), storage],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, h.TOKEN_VAR: token},
        start_new_session=True,
    )
    try:
        import urllib.request

        deadline = time.monotonic() + 180  # its imports, on a busy machine
        while True:
            try:
                url = f"http://127.0.0.1:{port}/api/studies"
                with urllib.request.urlopen(url, timeout=5) as answer:
                    studies = json.loads(answer.read())["study_summaries"]
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, "no dashboard"
                time.sleep(0.5)
        (sid,) = [st["study_id"] for st in studies if st["study_name"] == shared.name]
        png = tmp_path / "dashboard.png"
        dom = browse(
            browser,
            tmp_path,
            "--virtual-time-budget=40000",
            "--dump-dom",
            f"--screenshot={png}",
            "--window-size=1400,1000",
            f"http://127.0.0.1:{port}/dashboard/studies/{sid}",
        )
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
        h.kill_tagged(token)
    text = " ".join(
        re.sub(r"<[^>]+>", " ", re.sub(r"(?s)<(style|script).*?</\1>", "", dom)).split()
    )
    for objective in shared.summary["objectives"]:
        assert objective["metric"] in text, f"the dashboard did not draw it: {text[:1500]}"
    assert "1e+12" not in dom and "1T" not in dom, "an axis runs to 1e12"
    assert png.read_bytes().startswith(b"\x89PNG")
    shutil.copyfile(png, SHOTS["dashboard"])
