"""`autotune ui`: the MLflow UI on a tracking store, bound to loopback, without the job runner."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request

from autotune.errors import TrackingError
from autotune.tracking import _redact


def mlflow_ui_command(uri: str, host: str, port: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "mlflow",
        "ui",
        "--backend-store-uri",
        uri,
        "--host",
        host,
        "--port",
        str(port),
    ]


def ui_env() -> dict[str, str]:
    # MLflow 3's server starts a job runner of ~7 processes (~2.5 GB) unless told not to.
    return {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}


def wait_healthy(url: str, proc: subprocess.Popen[bytes] | None, timeout_s: float = 60) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise TrackingError(
                f"the MLflow UI exited with status {proc.returncode} before it "
                f"answered at {url} (is the port in use?)"
            )
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise TrackingError(f"the MLflow UI did not answer at {url} within {timeout_s:.0f} s")


def serve(uri: str, *, host: str, port: int, experiment_id: str | None = None) -> None:
    """Run the UI until Ctrl-C, printing the URL once it answers."""

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # SIGTERM stops the UI as Ctrl-C does: no server left behind

    signal.signal(signal.SIGTERM, stop)
    proc = subprocess.Popen(mlflow_ui_command(uri, host, port), env=ui_env())
    url = f"http://{host}:{port}"
    try:
        wait_healthy(url, proc)
        # MLflow 3's UI opens an experiment in its GenAI (traces) view unless told otherwise.
        link = (
            f"{url}/#/experiments/{experiment_id}?workflowType=machine_learning"
            if experiment_id
            else url
        )
        print(f"MLflow UI for {_redact(uri)}\n  {link}\n(Ctrl-C to stop)", flush=True)
        proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
