"""`autotune check`: a `budget.gpus_per_trial` beyond this machine's GPUs is refused.

The study's own fit check (`study.fits`) weighs the GPUs a trial asks for only where its probes
run on a GPU, so on a machine without one (probe.device auto) `gpus_per_trial: 4` ran on the CPU
unremarked, though the README says a trial asking for more than the machine has is refused
naming the key. Here it is refused where this machine has GPUs and fewer than a trial asks for.
On a machine without one the probes run on the CPU (a DDP probe's ranks as processes on its
cores), where the key does not apply: the built-in `ddp_amp` space asks for 2 and is checked on
any machine."""

from __future__ import annotations

from autotune import space as sp
from autotune.errors import SpaceError


def gpus_here() -> int:
    """The GPUs torch sees on this machine."""
    import torch

    return int(torch.cuda.device_count())


def check_gpus_per_trial(space: sp.Space, gpus: int) -> None:
    """Raise SpaceError naming budget.gpus_per_trial when one trial asks for more than the
    `gpus` this machine has, where it has any (without one the trials run on the CPU)."""
    asked = space.budget.gpus_per_trial
    if gpus == 0 or asked <= gpus:
        return
    raise SpaceError(
        f"{space.source}: budget.gpus_per_trial: each trial asks for {asked:g} GPU(s), but this "
        f"machine has {gpus} (as torch sees it); lower budget.gpus_per_trial to at most {gpus}"
    )
