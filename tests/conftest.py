"""Fixtures shared by several test modules."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture
def write_space(tmp_path: Path) -> Callable[..., Path]:
    """Write a space file into tmp_path and return its path: `write_space(text, "x.yaml")`."""

    def write(text: str, name: str = "space.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return write
