"""`autotune ui --tracking-uri http://...`: a tracking server serves its own UI, so there is
nothing to start; one line says so, or that nothing answers there (a black-box review: MLflow's
two tracebacks, then "is the port in use?")."""

from __future__ import annotations

from pathlib import Path

import pytest
from assets.cli import invoke, one_line_error


def test_an_unreachable_tracking_server_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    line = one_line_error(invoke("ui", "--tracking-uri", "http://127.0.0.1:9"), "127.0.0.1:9")
    assert "cannot reach" in line and "port in use" not in line
    assert list(tmp_path.iterdir()) == []


def test_an_unreachable_database_store_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # MLflow's server was started on it and retried for ever, printing tracebacks (a review)
    monkeypatch.chdir(tmp_path)
    uri = "postgresql://u:pw@127.0.0.1:9/x"
    line = one_line_error(invoke("ui", "--tracking-uri", uri), "127.0.0.1:9")
    assert "cannot reach the MLflow tracking store" in line and ":pw@" not in line
    assert list(tmp_path.iterdir()) == []
