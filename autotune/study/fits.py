"""Does one trial fit on one node? Checked before a study starts its trials.

Ray places a trial only on a node that has every resource the trial asks for
(`session.plan_resources`: its CPUs, and its GPUs on a GPU). A trial that no node can hold is
never placed: Ray waits for it forever, printing only Ray's "insufficient resources" warning,
with the study's folder made. So a space that asks for more than any node has is refused,
naming the key that asked: `budget.cpus_per_trial`, `probe.threads`, `probe.world_size` (a DDP
probe takes a core or a GPU per rank) or `budget.gpus_per_trial`. So is a probe.threads beyond
a node's cores (the trial's CPUs would be shared: its timings measure that), or one that a DDP
probe's ranks cannot share out evenly (it would run another count than it says). On a local
Ray the node is this machine (`ray.init(num_cpus=os.cpu_count())`, its GPUs as torch sees them),
checked before anything is made; on a cluster, each live node's own resources, once the cluster
is joined.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from autotune import space as sp
from autotune.errors import SpaceError
from autotune.process.cores import threads_problem
from autotune.study.session import plan_resources


def local_node(space: sp.Space) -> dict[str, float]:
    """This machine as a local Ray sees it: its CPUs, and its GPUs where the probes may use one."""
    gpus = 0
    if space.probe.device != "cpu":
        import torch

        gpus = torch.cuda.device_count()
    return {"CPU": float(os.cpu_count() or 1), "GPU": float(gpus)}


def cluster_nodes(ray: Any) -> list[dict[str, float]]:
    """The resources of each live node of the Ray cluster `ray` is connected to."""
    return [dict(n.get("Resources") or {}) for n in ray.nodes() if n.get("Alive")]


def check_trial_fits(space: sp.Space, nodes: Sequence[Mapping[str, float]], where: str) -> None:
    """Raise SpaceError naming the key when no node in `nodes` (`where`: "this machine", "the
    Ray cluster at ADDRESS") has what one trial asks for."""
    totals = {
        "CPU": sum(float(n.get("CPU", 0) or 0) for n in nodes),
        "GPU": sum(float(n.get("GPU", 0) or 0) for n in nodes),
    }
    most_cpu = max((float(n.get("CPU", 0) or 0) for n in nodes), default=0.0)
    place = where if len(nodes) == 1 else f"the largest node of {where}"
    # Threads beyond a node's cores, or that its ranks cannot share evenly: the one check that
    # probe, verify, repro and migrate make of the probe they run (`process.cores`).
    problem = threads_problem(space.probe.world_size, space.probe.threads, most_cpu)
    if problem:
        raise SpaceError(f"{space.source}: {problem.format(place=place)}")
    _, resources, _ = plan_resources(space, totals)
    cpu, gpu = float(resources.get("cpu", 0)), float(resources.get("gpu", 0))
    if any(_has(n, "CPU", cpu) and _has(n, "GPU", gpu) for n in nodes):
        return
    most_gpu = max((float(n.get("GPU", 0) or 0) for n in nodes), default=0.0)
    if gpu > most_gpu:
        key, asked, has = _gpu_key(space), f"{gpu:g} GPU(s)", f"{most_gpu:g} GPU(s)"
    else:
        key, asked, has = _cpu_key(space, cpu), f"{cpu:g} CPU(s)", f"{most_cpu:g} CPU(s)"
    raise SpaceError(
        f"{space.source}: {key}: each trial asks for {asked}, but {place} has {has}; Ray "
        f"would never place a trial and the study would wait forever: lower {key}"
    )


def _has(node: Mapping[str, float], name: str, need: float) -> bool:
    return need <= 0 or float(node.get(name, 0) or 0) >= need


def _cpu_key(space: sp.Space, cpu: float) -> str:
    """The key that made a trial ask for `cpu` CPUs (`plan_resources`'s order)."""
    b, p = space.budget, space.probe
    if b.cpus_per_trial and b.cpus_per_trial >= cpu:
        return "budget.cpus_per_trial"
    if p.world_size >= cpu and p.world_size > 1:
        return "probe.world_size"
    if p.threads:
        return "probe.threads"
    return "budget.cpus_per_trial"


def _gpu_key(space: sp.Space) -> str:
    b, p = space.budget, space.probe
    return "probe.world_size" if p.world_size > b.gpus_per_trial else "budget.gpus_per_trial"
