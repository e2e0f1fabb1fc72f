"""Every random-number generator a probe draws from, captured and put back: Python's, NumPy's
global one, torch's on the CPU and on each GPU this process sees.

`capture` gives plain data a state file can hold (`torch.save` with `weights_only`: tensors,
lists, tuples, strings and numbers; NumPy's key as a list), and `restore` takes it back in the
same process or another one (a loader may turn tuples into lists). A probe's state keeps it
(`checkpoint`), and the initial-loss reference puts the RNGs back after it has read the held-out
set (`reference`), so the run draws the same numbers as one without it.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import numpy as np


def capture() -> dict[str, Any]:
    """The state of every RNG, as plain data."""
    import torch

    np_state: tuple[Any, ...] = tuple(np.random.get_state())
    return {
        "python": random.getstate(),
        "numpy": [np_state[0], np_state[1].tolist(), *np_state[2:]],
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def restore(state: Mapping[str, Any]) -> None:
    """Put every RNG back to `state` (from `capture`); as many GPUs as this process sees."""
    import torch

    random.setstate(_tuples(state["python"]))
    name, keys, *rest = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), *rest))
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        for index, gpu_state in enumerate(state["cuda"][: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(gpu_state, index)


def _tuples(value: Any) -> Any:
    """`random.setstate` wants the tuples `random.getstate` gave (a loader may give lists)."""
    if isinstance(value, list | tuple):
        return tuple(_tuples(v) for v in value)
    return value
