"""Fixtures of the trial-process tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune.process.zygotes import discard_zygote


@pytest.fixture
def no_zygote_left(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Run away from the source tree (a probe process must import the installed package), and
    end the worker's zygote the test started."""
    monkeypatch.chdir(tmp_path)
    yield
    discard_zygote()
