"""Fixtures shared by several test modules."""

from __future__ import annotations

import os
import platform
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

# No per-example deadline: on a shared 2-core machine an example's time measures the machine's
# load (and the first example pays for imports done where a function runs, scipy.stats in
# `recipe/divergence_chance.py`), not the code under test.
settings.register_profile("autotune", deadline=None)
settings.load_profile("autotune")


_MADE_CACHE: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    """The suite's caches (the MLflow store template, `tracking/store_template.py`) in a folder
    of its own, not the user's: shared by the whole run (its xdist workers inherit the variable)
    and the CLI processes it starts; removed at the end by the process that made it."""
    if "AUTOTUNE_CACHE_DIR" not in os.environ:
        made = tempfile.mkdtemp(prefix="autotune-test-cache-")
        _MADE_CACHE.append(made)
        os.environ["AUTOTUNE_CACHE_DIR"] = made


def pytest_unconfigure(config: pytest.Config) -> None:
    import shutil

    for made in _MADE_CACHE:
        shutil.rmtree(made, ignore_errors=True)
    _MADE_CACHE.clear()


@pytest.fixture
def write_space(tmp_path: Path) -> Callable[..., Path]:
    """Write a space file into tmp_path and return its path: `write_space(text, "x.yaml")`."""

    def write(text: str, name: str = "space.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return write


@pytest.fixture(scope="session")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The small `mlp` study the integration tests share (`assets.studies.finished_study`: run
    once per test session, a `FinishedStudy`)."""
    from assets import studies

    return studies.finished_study(tmp_path_factory.getbasetemp())


# ---------------------------------------------------------------------------------------------
# `pytest -m "not integration"` is the fast unit suite: a test that starts a process (a probe
# subprocess, Ray, an MLflow server, a fork) must be marked `integration`. Python's audit hooks
# see every process start; one outside an integration test fails that test, naming the event.
# ---------------------------------------------------------------------------------------------

_PROCESS_EVENTS = frozenset(
    {"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.system"}
)
_started: list[str] = []
_watching = False


def _audit(event: str, args: tuple) -> None:
    if _watching and event in _PROCESS_EVENTS:
        what = args[1] if event == "subprocess.Popen" and len(args) > 1 else args[:1]
        _started.append(f"{event} {str(what)[:120]}")


sys.addaudithook(_audit)
# platform.processor() runs `uname -p` once per interpreter (libraries ask for it on first use):
# asked here, so that no test is blamed for it depending on the order the tests run in.
platform.processor()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    """Watch a unit test from before its fixtures are set up, the module- and session-scoped
    ones too (a fixture that starts a process for a unit test is the unit test's)."""
    global _watching
    if item.get_closest_marker("integration") is None:
        _started.clear()
        _watching = True
    yield


@pytest.fixture(autouse=True)
def _unit_tests_start_no_process(request: pytest.FixtureRequest) -> Iterator[None]:
    global _watching
    if request.node.get_closest_marker("integration") is not None:
        _watching = False
        yield
        return
    try:  # watching since the setup began (pytest_runtest_setup)
        yield
    finally:
        _watching = False
    if _started:
        pytest.fail(
            "a test that starts processes must be marked integration; it started: "
            + "; ".join(_started[:3]),
            pytrace=False,
        )


@pytest.fixture(autouse=True)
def _no_stop_left_noted() -> Iterator[None]:
    """A stop signal a test noted in this process (`signals._STOPPED`, which `signals.stopping`
    reads and a study's outermost `handled` clears) is not the next test's: a probe feed run
    outside a study would stop at once (seen under xdist: `run_jobs` interrupted after 15 us,
    behind a signal test in the same worker). Cleared only where the module is loaded."""
    yield
    signals = sys.modules.get("autotune.study.signals")
    if signals is not None:
        signals._STOPPED.clear()
        signals._PENDING.clear()
        signals._ON_ABORT.clear()
