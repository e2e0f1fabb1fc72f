"""A benchmark script of `benchmarks/` imported as a module, for the tests of its own logic."""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@contextlib.contextmanager
def imported(name: str) -> Iterator[ModuleType]:
    """`benchmarks/<name>.py` as a module, with the benchmarks' folder on sys.path (its
    scripts import their helpers from there) only while the block runs."""
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCH))
