"""The environment a probe process starts with: the one place it is built.

Environment knobs (NCCL_*, HSA_*, ...) are read by libraries once, when torch and its device
runtimes start: a knob is honest only if the process starts with it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from autotune.knobs import ENV_PREFIXES


def process_env(
    env_knobs: Mapping[str, object], threads: int | None = None, *, clean: bool = False
) -> dict[str, str]:
    """This process's environment (minus every knob-prefixed variable if `clean`), plus the
    trial's environment knobs, unbuffered output and, if given, the thread count."""
    env = {k: v for k, v in os.environ.items() if not (clean and k.startswith(ENV_PREFIXES))}
    env.update({k: str(v) for k, v in env_knobs.items()})
    env["PYTHONUNBUFFERED"] = "1"
    if threads:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    return env
