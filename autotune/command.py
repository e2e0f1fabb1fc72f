"""The `autotune` command's entry point (`[project.scripts]`, `python -m autotune`): the command
line's imports run with SIGINT and SIGTERM noted (`autotune.startup`), so that a Ctrl-C in its
first second ends it with one line instead of a traceback, or of nothing at all where SIGINT
was inherited as ignored."""

from __future__ import annotations

import signal
import sys

from autotune import startup


def main() -> None:
    found = startup.noting()
    from autotune.cli import main as run

    signum = startup.imported(found)
    if signum is not None:
        print("autotune: interrupted while it started: nothing was done", file=sys.stderr)
        sys.exit(128 + signum)
    try:
        run()
    except SystemExit as e:
        if e.code == 128 + signal.SIGINT and startup.RAISED:  # Typer's silent 130
            print("autotune: interrupted", file=sys.stderr)
        raise
