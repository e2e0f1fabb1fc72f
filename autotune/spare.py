"""A probe process started before its trial is known (see `autotune.launcher`).

`python -m autotune.spare` imports torch, the probe and the workload resolver in a thread at the
lowest CPU priority (nice 19: on a core busy with a trial it takes a small share of that core),
writes one ready line, and waits on stdin for the path of its trial's config; it then runs
exactly what `python -m autotune.probe CONFIG.json` runs, at normal priority (only the importing
thread was niced). End of input without a line (the worker discarded the spare, or died) ends it
quietly. `python -m autotune.spare --now` imports at normal priority, for a trial already waiting.

It leaves with `os._exit` once its reports are flushed: tearing down an interpreter that has
imported torch takes most of a second, and nothing is left to clean up.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading

READY_LINE = "@@autotune-spare-ready"


def _imports(niced: bool) -> None:
    if niced:
        with contextlib.suppress(OSError, AttributeError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)  # this thread only
    import torch  # noqa: F401  (the point of a spare: this import is already done)

    from autotune import fingerprint, probe, workload  # noqa: F401


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    now = "--now" in args
    loader = threading.Thread(target=_imports, args=(not now,), daemon=True)
    loader.start()
    loader.join()
    sys.stdout.write(READY_LINE + "\n")
    sys.stdout.flush()
    line = sys.stdin.readline().strip()
    if not line:
        return 0
    from autotune import probe

    rc = probe.main([line])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)


if __name__ == "__main__":
    raise SystemExit(main())
