"""The package's layers import only the layers below them (pyproject's import-linter contract)."""

from __future__ import annotations

from pathlib import Path

import pytest

importlinter_cli = pytest.importorskip("importlinter.cli")

ROOT = Path(__file__).resolve().parent.parent


def test_layers_import_only_downwards(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    rc = importlinter_cli.lint_imports(
        config_filename=str(ROOT / "pyproject.toml"), no_cache=True, no_logo=True
    )
    assert rc == importlinter_cli.EXIT_STATUS_SUCCESS
