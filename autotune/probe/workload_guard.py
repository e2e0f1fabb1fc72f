"""What surrounds a user's workload code while it is imported and while its factory runs.

A workload module is often a user's own file, sometimes their training script: it may print,
parse the command line or end the process at import. Each of these once reached autotune's own
command: a `print` landed in a `--json` stdout, a module-level `parse_args()` read autotune's
arguments (and printed a usage line that looked like autotune's), and `sys.exit(3)` or
`os._exit(0)` ended the command silently with the module's status. Here, meanwhile:

* stdout is stderr (Python's `sys.stdout`): a command's stdout stays its own (`--json`);
* `sys.argv` is the module's name alone: a parser sees no arguments of autotune's;
* `SystemExit` (`sys.exit`, `exit()`, argparse's error) is a `WorkloadExited` naming the module;
* `os._exit` called from this thread raises the same instead of ending the process. A process
  ended another way (a C extension's `exit()`, a signal) cannot be caught in-process.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from typing import NoReturn

from autotune.errors import WorkloadError

# a module that ends the process at import is often a training script named as a workload
_HINT = "; a training script is named as workload.script, not as a workload factory"


class WorkloadExited(WorkloadError):
    """The workload's code tried to end the process (SystemExit, os._exit)."""


class _OsExit(SystemExit):
    """`os._exit(status)` called by the workload, raised instead of ending the process."""

    def __repr__(self) -> str:
        return f"os._exit({self.code!r})"


@contextlib.contextmanager
def workload_code(ref: str, doing: str, argv0: str) -> Iterator[None]:
    """Run the workload's code of the block as described above: `doing` says what it was doing
    in the error ("it was imported"), `argv0` is what `sys.argv` holds meanwhile."""
    real_exit = os._exit
    owner = threading.get_ident()

    def refuse_exit(status: int) -> NoReturn:
        if threading.get_ident() != owner:  # another thread's exit is not the workload's
            real_exit(status)
        raise _OsExit(status)

    saved_argv = sys.argv
    sys.argv = [argv0]
    os._exit = refuse_exit
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    except SystemExit as exc:
        raise WorkloadExited(f"workload {ref!r} exited while {doing}: {exc!r}{_HINT}") from None
    finally:
        os._exit = real_exit
        sys.argv = saved_argv
