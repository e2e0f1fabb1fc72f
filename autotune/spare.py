"""A probe process started before its trial is known (see `autotune.launcher`).

`python -m autotune.spare` imports torch, the probe and the workload resolver, writes one ready
line, and waits on stdin for the path of its trial's config; it then runs exactly what
`python -m autotune.probe CONFIG.json` runs. End of input without a line (the worker discarded
the spare, or died) ends it quietly. A fresh process for a trial that is already waiting is the
same command with the config path written to its stdin at once.

It leaves with `os._exit` once its reports are flushed: tearing down an interpreter that has
imported torch takes most of a second, and nothing is left to clean up.
"""

from __future__ import annotations

import os
import sys

READY_LINE = "@@autotune-spare-ready"


def _imports() -> None:
    import torch

    # torch.optim imports torch._dynamo the first time an optimizer is built: ~2 s of a
    # trial's start on a CPU. A throwaway optimizer does that here.
    torch.optim.AdamW([torch.zeros(1, requires_grad=True)])

    from autotune import fingerprint, probe, workload  # noqa: F401


def main() -> int:
    _imports()
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
