"""Two races of a stop signal (`study/signals.py`), each seen in a test run:

- A signal that arrives while the interpreter's import lock is held: raised there, importlib
  could leave the lock taken and every other thread's import would wait for ever (a migration
  that hung on its SIGTERM). It lands once the lock is free.
- A SIGTERM to the driver's process group that the raylet takes first and exits on cleanly
  (status 0) while the driver waits in Ray's code: a stop by SIGTERM (143), not a crash (1)."""

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


class _Ended:
    """A process that has ended with `code` (what `Popen.poll` returns)."""

    def __init__(self, code: int | None) -> None:
        self.code = code

    def poll(self) -> int | None:
        return self.code


class _Exited(Exception):
    pass


@pytest.mark.parametrize(
    ("raylet", "noted", "status"),
    [
        (0, None, 143),  # the raylet's clean exit on a process group's SIGTERM
        (-signal.SIGTERM, None, 143),
        (-signal.SIGKILL, None, 1),  # killed otherwise: not a stop asked for
        (-signal.SIGKILL, signal.SIGTERM, 143),  # the driver noted the SIGTERM itself
    ],
)
def test_how_the_raylet_ended_says_whether_a_sigterm_stopped_ray(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    raylet: int,
    noted: int | None,
    status: int,
) -> None:
    def exit_(code: int) -> None:
        raise _Exited(code)

    monkeypatch.setattr(signals, "_refuses", lambda _address: False)  # the GCS still answers
    monkeypatch.setattr(signals.os, "_exit", exit_)
    monkeypatch.setattr(signals, "_LEAVING", [])
    monkeypatch.setattr(signals, "_STOPPED", {} if noted is None else {"by": noted})
    with pytest.raises(_Exited) as ended:
        signals._watch_local_ray((_Ended(None), "127.0.0.1:1", _Ended(raylet)))
    assert ended.value.args == (status,)
    said = capsys.readouterr().err
    if status == 143:
        assert "stopped by a SIGTERM" in said, said
    else:
        assert f"node manager (raylet) ended (status {raylet})" in said, said
