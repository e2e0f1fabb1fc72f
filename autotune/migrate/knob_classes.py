"""Which knobs a migration re-tunes: the hardware-bound ones, and those a failure implicates.

Hardware-bound: what depends on the machine more than on the model: the batch layout
(`accum_steps`, `batch`: what fits in memory), the fp16 GradScaler (how often fp16 overflows
here), the DDP communication knobs, and every environment knob (NCCL/RCCL, rocBLAS/MIOpen
backend choices, HSA). Portable: the optimizer and schedule (`lr`, betas, `adam_eps`, weight
decay, warm-up, schedule) and the clip policy and threshold: they belong to the model and the
data. A recipe that does not hold here is re-tuned on its hardware-bound knobs and on the
portable knobs its failure implicates (divergence: the clip policy, warm-up and eps).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from autotune.knobs import DDP_KNOBS, SCALER_KNOBS

HARDWARE_BOUND = frozenset({"accum_steps", "batch", *SCALER_KNOBS, *DDP_KNOBS})
STABILITY = ("clip_norm", "clip_mode", "warmup_steps", "adam_eps")

ENV_ONLY_ON = {
    # prefix -> the platforms (and least world size) where the variable acts
    "NCCL_": ({"cuda", "rocm"}, 2),
    "RCCL_": ({"rocm"}, 2),
    "TORCH_NCCL_": ({"cuda", "rocm"}, 2),
    "ROCBLAS_": ({"rocm"}, 1),
    "MIOPEN_": ({"rocm"}, 1),
    "HSA_": ({"rocm"}, 1),
}


def knob_class(name: str) -> str:
    """`hardware-bound` or `portable` (an environment variable is hardware-bound)."""
    if name in HARDWARE_BOUND or name.isupper():
        return "hardware-bound"
    return "portable"


def classes(knobs: Iterable[str], env: Iterable[str]) -> dict[str, list[str]]:
    """The recipe's searched knobs and environment knobs, by class."""
    out: dict[str, list[str]] = {"hardware-bound": [], "portable": []}
    for name in [*knobs, *env]:
        out[knob_class(name)].append(name)
    return out


def inert_env(env: Mapping[str, str], platform: str, world_size: int) -> list[str]:
    """The recipe's environment knobs that cannot act here (an NCCL variable on a CPU or a single
    process, a rocBLAS one off ROCm): a migration drops them."""
    out = []
    for name in env:
        for prefix, (platforms, least) in ENV_ONLY_ON.items():
            if name.startswith(prefix):
                if platform not in platforms or world_size < least:
                    out.append(name)
                break
    return out


def add_oom(
    knobs: list[str], why: dict[str, str], names: list[str], oom: Mapping[str, Any]
) -> None:
    """The micro-batch did not fit: the batch layout is what failed. `accum_steps` is re-tuned
    whether or not the source study searched it (a recipe from a study that fixed it, re-tuned
    with a space that searches it, was fixed at the micro-batch that failed here and could only
    run out of memory again: the re-tune searches the space's accumulations that fit,
    `retune.reduced_overrides`); `batch` when it searched it."""
    for k in ("accum_steps", "batch"):
        if k == "accum_steps" or k in names:
            if k not in knobs:
                knobs.append(k)
            why[k] = f"implicated: micro-batch {oom['micro_batch']} ran out of memory here"


def retune_plan(
    searched: Iterable[str], env: Mapping[str, str], holds: Mapping[str, Any]
) -> dict[str, Any]:
    """What a re-tune searches when the recipe does not hold: its hardware-bound knobs, plus the
    stability knobs when it diverged (more often than the baseline beyond chance, or on every
    seed); when its micro-batch ran out of memory, `oom_micro_batch` (the re-tune searches
    smaller ones only)."""
    names = list(searched)
    by = classes(names, env)
    knobs = list(by["hardware-bound"])
    why = {k: "hardware-bound" for k in knobs}
    # the recipe at a layout that fits (`layout`) and still not holding: what it shows counts
    fitted = [e for e in (holds.get("layout") or {}).get("tried") or [] if not e["out_of_memory"]]
    problems = [*(holds.get("problems") or []), *(p for e in fitted for p in e["problems"])]
    diverged = any("diverged" in p for p in problems)
    if diverged:
        for k in STABILITY:
            if k in names and k not in knobs:
                knobs.append(k)
                why[k] = "implicated: it diverged here"
    oom = holds.get("oom")
    if oom:
        add_oom(knobs, why, names, oom)
    worse = [
        m
        for vs in [holds.get("vs_baseline"), *(e["vs_baseline"] for e in fitted)]
        for m in (vs or {}).get("worse_on") or []
    ]
    worse = list(dict.fromkeys(worse))
    for k in by["portable"]:
        if worse and k not in knobs:
            knobs.append(k)
            why[k] = f"implicated: worse on {', '.join(worse)}"
    out: dict[str, Any] = {"knobs": knobs, "why": why, "classes": by}
    if oom:
        out["oom_micro_batch"] = oom["micro_batch"]
    return out
