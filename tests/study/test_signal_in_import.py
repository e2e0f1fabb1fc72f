"""A stop signal that arrives while the interpreter's import lock is held (`study/signals.py`):
raised there, importlib could leave the lock taken and every other thread's import would wait
for ever (a driver that hung on its SIGTERM, seen in CI). It lands once the lock is free."""

from __future__ import annotations

import _imp
import os
import signal
import time

import pytest

from autotune.study import signals


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_while_the_import_lock_is_held_lands_once_free(sig: int, status: int) -> None:
    raised_while_held = True
    with signals.handled():
        with pytest.raises(KeyboardInterrupt):
            _imp.acquire_lock()
            try:
                os.kill(os.getpid(), sig)
                for _ in range(10_000):  # bytecodes: Python runs the handler at one of these
                    pass
                raised_while_held = False
            finally:
                _imp.release_lock()
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                time.sleep(0.01)
        assert not raised_while_held
        assert signals.stopping() and signals.exit_status() == status
    assert not signals._PENDING  # nothing waits to be delivered once the driver's scope is left


def test_a_sigint_outside_the_import_lock_is_raised_at_once() -> None:
    with signals.handled():
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(10_000):
                pass
            pytest.fail("no KeyboardInterrupt")
        assert signals.exit_status() == 130
