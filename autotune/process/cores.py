"""Does one probe fit on this machine's cores? Checked before any probe runs.

A DDP probe on the CPU runs one process per core: more ranks than cores share them, and the
timings (throughput, scaling_efficiency) then measure the sharing. Threads beyond the cores do
the same within one process. And a probe's threads are shared out evenly among its ranks
(`supervisor._resolved`: threads // world_size each), so a count that does not divide would
run with fewer threads than it says, or more (1 thread for 2 ranks runs 2). `autotune check`
and `study` refuse such a space (`study.fits`); `probe`, `verify`, `repro` and `migrate`
refuse the probe they would run in the same line (`check_fits_here`), exit status 2.
"""

from __future__ import annotations

import os

from autotune.errors import AutotuneError
from autotune.probe.config import ProbeConfig


class DoesNotFit(AutotuneError):
    """A probe asks for more cores than this machine has, or threads its ranks cannot share."""


def threads_problem(
    world_size: int, threads: int | None, cores: float, world_key: str = "probe.world_size"
) -> str | None:
    """Why `threads` (probe.threads; None: unset) cannot run as asked with `world_size` ranks
    (`world_key`: where the file sets them) on a node of `cores` CPUs, naming probe.threads;
    None when they can."""
    if not threads:
        return None
    if threads > cores:
        return (
            f"probe.threads: each trial asks for {threads} CPU(s) (a thread each), but "
            f"{{place}} has {cores:g} CPU(s): lower probe.threads"
        )
    if world_size > 1 and threads % world_size:
        each = max(1, threads // world_size)
        return (
            f"probe.threads: {threads} thread(s) cannot be shared out evenly among "
            f"{world_key} {world_size} ranks (each would run {each}, {each * world_size} "
            f"in all): set probe.threads to a multiple of {world_size}"
        )
    return None


def cores_problem(
    cfg: ProbeConfig, cores: float | None = None, world_key: str = "probe.world_size"
) -> str | None:
    """Why `cfg` does not fit on a node of `cores` CPUs (default: this machine's), in one line
    naming the key (`world_key`: the world size's, `world_size` in a recipe); None when it
    fits. A DDP probe on a GPU takes a GPU per rank, not a core (the supervisor checks those).
    """
    cores = float(cores or os.cpu_count() or 1)
    if cfg.world_size > cores and not _on_gpu(cfg.device):  # first: threads follow the ranks
        return (
            f"{world_key}: each trial asks for {cfg.world_size} CPU(s), but this machine has "
            f"{cores:g}: a DDP probe on the CPU runs a process per core; lower {world_key}"
        )
    problem = threads_problem(cfg.world_size, cfg.threads, cores, world_key)
    return None if problem is None else problem.format(place="this machine")


def check_fits_here(cfg: ProbeConfig, source: str, world_key: str = "probe.world_size") -> None:
    """Raise DoesNotFit (`source`: the space or recipe file, named first) when `cfg` does not
    fit on this machine's cores (`cores_problem`)."""
    problem = cores_problem(cfg, world_key=world_key)
    if problem:
        raise DoesNotFit(f"{source}: {problem}")


def _on_gpu(device: str) -> bool:
    if device.startswith("cuda"):
        return True
    if device != "auto" or os.environ.get("CUDA_VISIBLE_DEVICES") == "":
        return False
    import torch

    return bool(torch.cuda.is_available())
