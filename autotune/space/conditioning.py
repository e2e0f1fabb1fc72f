"""Knob conditioning: knobs with no effect on this setup (platform, GPU architecture, world size,
precision, schedule) are not searched, each dropped with its reason."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autotune.knobs import CLIP_CHILDREN, DDP_KNOBS, KNOBS, SCALER_KNOBS, Scalar
from autotune.space.schema import (
    ENV_COMM_PREFIXES,
    ENV_FP16_ALT_IMPL,
    LL128_ARCHS,
    Domain,
    Space,
)


def _forces_ll128(choice: Scalar) -> bool:
    """NCCL_PROTO is a case-insensitive comma list; a leading '^' excludes what it lists."""
    value = str(choice).upper().replace(" ", "")
    return not value.startswith("^") and "LL128" in value.split(",")


def _forces_only(choice: Scalar, what: str) -> bool:
    """`choice` (an NCCL_ALGO/NCCL_PROTO value) allows `what` and nothing else."""
    value = str(choice).upper().replace(" ", "")
    return not value.startswith("^") and set(value.split(",")) == {what.upper()}


#: Socket transport settings: NCCL/RCCL use sockets only between nodes (P2P/SHM within one).
ENV_SOCKET_KNOBS = ("NCCL_SOCKET_NTHREADS", "NCCL_NSOCKS_PERTHREAD")
_TREE_SIMPLE = (
    "RCCL removes Tree+Simple from its candidates on a single gfx942 node; forcing both may "
    "fail or hang"
)


@dataclass(frozen=True)
class Conditioned:
    """The knobs a study searches after conditioning, and the ones dropped with their reason."""

    searched: dict[str, Domain]
    dropped: dict[str, str]


def condition_on(space: Space, fingerprint: Mapping[str, Any]) -> Conditioned:
    """`condition` for the machine a fingerprint (`autotune.fingerprint.collect`) describes:
    its platform and its first device's architecture."""
    arch = (fingerprint.get("devices") or [{}])[0].get("arch")
    return condition(space, platform=str(fingerprint["platform"]), arch=arch)


def condition(
    space: Space, *, platform: str, arch: str | None = None, world_size: int | None = None
) -> Conditioned:
    """Drop knobs that cannot act on `platform` (cpu/cuda/rocm), `arch` and `world_size`
    (default: the space's probe.world_size). A DDP probe runs on one node, with gloo on the CPU
    (probe.device cpu, or no GPU) and NCCL/RCCL on GPUs."""
    searched: dict[str, Domain] = {}
    dropped: dict[str, str] = {}
    world = space.probe.world_size if world_size is None else world_size
    gloo = platform == "cpu" or space.probe.device == "cpu"
    precision = space.probe.precision
    schedule = space.knobs.get("schedule", KNOBS["schedule"].default)
    for name, domain in space.searched().items():
        reason = None
        if name in SCALER_KNOBS and precision != "fp16":
            reason = f"GradScaler knobs act only under fp16 (probe.precision is {precision})"
        elif name in DDP_KNOBS and world == 1:
            reason = "DDP knobs act only with more than one process (world size is 1)"
        elif name == "min_lr_ratio" and schedule == "constant":
            reason = "min_lr_ratio acts only with a linear or cosine schedule (schedule: constant)"
        elif name.startswith(ENV_COMM_PREFIXES) and (world == 1 or gloo):
            why = "one process" if world == 1 else "gloo on CPU"
            reason = f"NCCL/RCCL variables act only on GPU collectives ({why} here)"
        elif name in CLIP_CHILDREN and not clip_child_possible(space, name):
            policy = space.knobs.get("clip_policy", KNOBS["clip_policy"].default)
            shown = f"one of {list(policy.choices)}" if isinstance(policy, Domain) else policy
            reason = (
                f"{name} acts only with clip_policy {CLIP_CHILDREN[name]} (clip_policy: {shown})"
            )
        elif name == "clip_mode" and _clipping_off(space):
            reason = "clip_mode acts only when clipping is on (clip_norm is fixed at 0: off)"
        elif name in ENV_SOCKET_KNOBS:
            reason = (
                "socket transport carries traffic only between nodes, and a DDP probe runs "
                "its processes on one node"
            )
        elif name in ENV_FP16_ALT_IMPL and not (
            platform == "rocm" and arch == "gfx90a" and precision == "fp16"
        ):
            reason = "the fp16 alt-impl switches act only on gfx90a (MI200) under fp16"
        if reason:
            dropped[name] = reason
            continue
        if name == "NCCL_PROTO" and domain.is_choice and (arch not in LL128_ARCHS):
            kept = tuple(c for c in domain.choices if not _forces_ll128(c))
            if len(kept) != len(domain.choices):
                dropped["NCCL_PROTO=LL128"] = (
                    "LL128 is enabled by RCCL only on gfx90a/gfx942/gfx950; forcing it elsewhere "
                    "has corrupted data"
                )
                if not kept:
                    dropped[name] = "no protocol left after removing LL128"
                    continue
                domain = Domain(
                    choices=kept, default=domain.default if domain.default in kept else None
                )
        searched[name] = domain
    if platform == "rocm" and arch == "gfx942" and world > 1 and not gloo:
        _no_tree_simple(space, searched, dropped)
    return Conditioned(searched=searched, dropped=dropped)


def midpoint_env(space: Space, cond: Conditioned) -> dict[str, str]:
    """The environment of the space's midpoint (`Space.fixed_env`: each searched variable at
    its domain's default) as a study conditioned by `cond` sets it on this machine: a variable
    it dropped (it cannot act here) is left unset, as every trial leaves it (the study builds a
    trial's env from `Space.baseline_env`), and one whose choices it narrowed (NCCL_PROTO
    without LL128) is at the narrowed domain's default, a value a trial could run."""
    out: dict[str, str] = {}
    for name, value in space.env.items():
        domain = cond.searched.get(name) if isinstance(value, Domain) else None
        if domain is not None:
            kind = space.knob_kind(name)
            value = domain.default if domain.default is not None else domain.midpoint(kind)
        if not isinstance(value, Domain):
            out[name] = str(value)
    return out


def env_dropped(space: Space, cond: Conditioned) -> dict[str, str]:
    """What `cond` dropped of the space's `env:` (a variable, which `midpoint_env` leaves
    unset, or one of its choices, `NCCL_PROTO=LL128`), with why: a line each, as the study
    says it, `dropped knob NAME: why`."""
    return {k: why for k, why in cond.dropped.items() if k.partition("=")[0] in space.env}


def env_dropped_text(name: str, why: str) -> str:
    """One of `env_dropped` in a line, as the study says it (`dropped knob NAME: why`), and
    that a variable dropped (not one of its choices, `NCCL_PROTO=LL128`) is left unset."""
    unset = "" if "=" in name else "; left unset, as a study here leaves it"
    return f"dropped knob {name}: {why}{unset}"


def _clipping_off(space: Space) -> bool:
    """Whether no trial of `space` clips by norm: the policy is the norm (fixed) and clip_norm
    is fixed at 0 (off), so how the norm is taken (clip_mode) changes nothing."""
    policy = space.knobs.get("clip_policy", KNOBS["clip_policy"].default)
    norm = space.knobs.get("clip_norm", KNOBS["clip_norm"].default)
    return policy == "norm" and not isinstance(norm, Domain) and not norm


def clip_child_possible(space: Space, name: str) -> bool:
    """Whether clipping knob `name` (a child of clip_policy) can act in some trial of `space`:
    its policy is clip_policy's fixed value (default norm) or one of its searched choices."""
    policy = space.knobs.get("clip_policy", KNOBS["clip_policy"].default)
    if isinstance(policy, Domain):
        return CLIP_CHILDREN[name] in policy.choices
    return CLIP_CHILDREN[name] == policy


def _no_tree_simple(space: Space, searched: dict[str, Domain], dropped: dict[str, str]) -> None:
    """Keep a study from forcing NCCL_ALGO=Tree together with NCCL_PROTO=Simple. With one of
    them fixed, the other loses that choice; with both searched, Tree goes (Ring runs every
    protocol, and on one node a tree is a chain)."""
    algo, proto = searched.get("NCCL_ALGO"), searched.get("NCCL_PROTO")
    fixed_algo, fixed_proto = space.env.get("NCCL_ALGO"), space.env.get("NCCL_PROTO")
    algo_tree = (isinstance(fixed_algo, str) and _forces_only(fixed_algo, "Tree")) or (
        algo is not None and algo.is_choice and any(_forces_only(c, "Tree") for c in algo.choices)
    )
    proto_simple = (isinstance(fixed_proto, str) and _forces_only(fixed_proto, "Simple")) or (
        proto is not None
        and proto.is_choice
        and any(_forces_only(c, "Simple") for c in proto.choices)
    )
    if not (algo_tree and proto_simple):
        return
    if algo is not None and algo.is_choice:
        name, domain, what = "NCCL_ALGO", algo, "Tree"
    elif proto is not None and proto.is_choice:
        name, domain, what = "NCCL_PROTO", proto, "Simple"
    else:
        return  # both fixed: the file's explicit choice
    kept = tuple(c for c in domain.choices if not _forces_only(c, what))
    dropped[f"{name}={what}"] = _TREE_SIMPLE
    if kept:
        default = domain.default if domain.default in kept else None
        searched[name] = Domain(choices=kept, default=default)
    else:
        del searched[name]
        dropped[name] = f"no choice left after removing {what} ({_TREE_SIMPLE})"
