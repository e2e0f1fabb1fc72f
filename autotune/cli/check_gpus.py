"""`autotune check`: a `budget.gpus_per_trial` beyond this machine's GPUs is refused.

The study's own fit check (`study.fits`) weighs the GPUs a trial asks for only where its probes
run on a GPU, so on a machine without one (probe.device auto) `gpus_per_trial: 4` ran on the CPU
unremarked, though the README says a trial asking for more than the machine has is refused
naming the key. 1, the default, is one GPU per trial where there are GPUs and the CPU where
there are none: never refused."""

from __future__ import annotations

from autotune import space as sp
from autotune.errors import SpaceError


def gpus_here() -> int:
    """The GPUs torch sees on this machine."""
    import torch

    return int(torch.cuda.device_count())


def check_gpus_per_trial(space: sp.Space, gpus: int) -> None:
    """Raise SpaceError naming budget.gpus_per_trial when one trial asks for more than the
    `gpus` this machine has (and more than the default 1)."""
    asked = space.budget.gpus_per_trial
    if asked <= max(1, gpus):
        return
    raise SpaceError(
        f"{space.source}: budget.gpus_per_trial: each trial asks for {asked:g} GPU(s), but this "
        f"machine has {gpus} (as torch sees it); lower budget.gpus_per_trial to at most "
        f"{max(1, gpus)}"
    )
