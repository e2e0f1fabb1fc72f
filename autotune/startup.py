"""A signal that comes while the `autotune` command starts (its imports: about a second) is
not lost and prints no traceback (`autotune.command`).

While `autotune.cli` is imported, SIGINT and SIGTERM are only noted; one noted there ends the
command at once with one line (status 130 or 143). After that, SIGTERM and a SIGINT that was not
ignored act as Python's defaults do; a SIGINT inherited as ignored (a script's `autotune study
... &` job) stays noted, and a command that takes it (`study`, `verify`, `migrate`: their
`signals.handled()`) stops on it as soon as its handlers are set (`take_noted`)."""

from __future__ import annotations

import signal
from types import FrameType
from typing import Any

#: The signals noted (not acted on) so far.
NOTED: list[int] = []
#: The SIGINTs raised as KeyboardInterrupt before a command set handlers of its own.
RAISED: list[int] = []
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _note(signum: int, _frame: FrameType | None) -> None:
    NOTED.append(signum)


def _raise(signum: int, _frame: FrameType | None) -> None:
    RAISED.append(signum)
    raise KeyboardInterrupt


def noting() -> dict[int, Any]:
    """Note SIGINT and SIGTERM from now on; returns the handlers found (`imported` needs them)."""
    found: dict[int, Any] = {s: signal.getsignal(s) for s in _SIGNALS}
    for s in _SIGNALS:
        signal.signal(s, _note)
    return found


def imported(found: dict[int, Any]) -> int | None:
    """The imports are done: the first signal noted during them (the command ends on it), else
    None, with SIGTERM's handler as `found`, an ignored SIGINT noted still, and any other SIGINT
    a KeyboardInterrupt, as by default (noted in `RAISED`: Typer ends the command on it with
    status 130 and no word, so `command.main` says it)."""
    if NOTED:
        return NOTED[0]
    signal.signal(signal.SIGTERM, found[signal.SIGTERM])
    if found[signal.SIGINT] is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, _raise)
    return None


def take_noted() -> int | None:
    """The signal noted before a command set its own handlers (and forget it), else None."""
    if not NOTED:
        return None
    first = NOTED[0]
    NOTED.clear()
    return first
