"""`autotune ui --port` on a port another server listens on, and the link it prints.

A black-box review: with another MLflow UI on the port, `autotune ui` printed "MLflow UI for
STORE" and that port's URL and exited 0 at once: MLflow's server failed to bind (its error
buried in stderr) while the health check was answered by the other server, of another store.
The link without a study was the bare home address, which MLflow 3 opens in its GenAI view."""

from __future__ import annotations

import socket
from pathlib import Path

from assets import studies as h
from assets.cli import invoke, one_line_error

from autotune.tracking.ui import home_link


def test_a_port_in_use_is_refused_before_anything_starts(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'm.db'}"
    with socket.socket() as other:  # another server's listening socket
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        result = invoke("ui", "--tracking-uri", store, "--port", str(port))
    one_line_error(result, f"port {port} is in use", "--port")
    assert list(tmp_path.iterdir()) == []  # refused before any store was looked at


def test_the_link_opens_the_model_training_view() -> None:
    # MLflow 3.17 honours ?workflowType= on its list of experiments (looked at in Chromium);
    # its bare home opens in GenAI mode, and an experiment clicked there on its traces.
    url = f"http://127.0.0.1:{h.free_port()}"
    assert home_link(url, None) == f"{url}/#/experiments?workflowType=machine_learning"
    assert home_link(url, "3") == f"{url}/#/experiments/3?workflowType=machine_learning"
