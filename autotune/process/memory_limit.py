"""The memory a probe process may use, when the machine gives it less than it has.

`AUTOTUNE_PROBE_MEMORY_MB=N` in the environment of `autotune study`, `verify` or `migrate` (or
of a Ray worker) limits each probe process's data memory (`RLIMIT_DATA`: its heap and private
writable mappings, the tensors of a CPU probe) to N MiB, set by the process itself before it
reads its config. An allocation past it fails as it fails on a machine with that much memory:
torch's CPU allocator raises, and the probe classes that as `oom` (`autotune.probe.oom`), as it
classes a GPU's out-of-memory. What it stands for: a smaller machine, container or device, the
case where a recipe's micro-batch no longer fits (`autotune migrate`). Only the probe is
limited, not Ray, Optuna or MLflow. Linux and macOS; elsewhere it is ignored.
"""

from __future__ import annotations

import os

ENV = "AUTOTUNE_PROBE_MEMORY_MB"


def limit_mb(environ: dict[str, str] | None = None) -> int | None:
    """The limit the environment asks for, in MiB; None when unset or empty. A value that is
    not a positive whole number is a ValueError naming the variable."""
    raw = (os.environ if environ is None else environ).get(ENV, "").strip()
    if not raw:
        return None
    try:
        mb = int(raw)
    except ValueError:
        mb = 0
    if mb <= 0:
        raise ValueError(f"{ENV}={raw!r}: give the probe's memory in MiB, a positive whole number")
    return mb


def apply(environ: dict[str, str] | None = None) -> int | None:
    """Limit this process's data memory as the environment asks (see the module); the limit
    set, in MiB, or None."""
    mb = limit_mb(environ)
    if mb is None:
        return None
    try:
        import resource
    except ImportError:  # not a POSIX system
        return None
    cap = mb << 20
    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (cap, hard))
    return cap >> 20
