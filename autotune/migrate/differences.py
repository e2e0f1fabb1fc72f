"""The recipe's fingerprint against this machine's, field by field, each difference classed by
what it can change: `numerics` (the results themselves: kernels, their reductions and rounding),
`performance` (speed and memory only) or `none` (bookkeeping).

Compared: the fingerprint's identity (platform, devices, driver, torch/HIP/CUDA/NCCL/DNN versions,
CPU model and count, RAM), the environment knobs and thread count, the RCCL/NCCL configuration
files, the determinism settings, the numerics settings (`fingerprint.collect.numerics`: TF32 and
reduced-precision flags, preferred BLAS, the CPU BLAS build and ISA) and the remaining versions.
A section the recipe's fingerprint does not record (an older autotune) is named, not compared.
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Any

from autotune import fingerprint

NUMERICS, PERFORMANCE, NONE = "numerics", "performance", "none"

# (pattern, class, why): the first pattern that matches a dotted path decides.
RULES: tuple[tuple[str, str, str], ...] = (
    ("platform", NUMERICS, "another device kind runs other kernels"),
    ("devices.*.name", NUMERICS, "another device runs other kernels"),
    ("devices.*.arch", NUMERICS, "another architecture runs other kernels"),
    ("device_count", PERFORMANCE, "the number of devices changes the layout, not one step"),
    ("devices.*", PERFORMANCE, "memory and compute units change speed and what fits"),
    ("driver*", PERFORMANCE, "driver, VBIOS and power cap change speed"),
    ("versions.torch", NUMERICS, "another torch can round its kernels and reductions differently"),
    ("versions.hip", NUMERICS, "another ROCm ships other rocBLAS/MIOpen kernels"),
    ("versions.cuda", NUMERICS, "another CUDA ships other cuBLAS kernels"),
    ("versions.cudnn", NUMERICS, "another cuDNN/MIOpen picks other convolution kernels"),
    ("versions.nccl", NUMERICS, "another NCCL/RCCL can sum gradients in another order (DDP)"),
    ("versions.*", NONE, "does not enter the training step"),
    ("host.cpu_model", NUMERICS, "another CPU can take other vectorised kernels"),
    ("host.machine", NUMERICS, "another CPU architecture runs other kernels"),
    ("host.*", PERFORMANCE, "CPU count and memory change speed"),
    ("env.torch_threads", NUMERICS, "CPU reductions split over another number of threads"),
    ("env.OMP_NUM_THREADS", NUMERICS, "CPU reductions split over another number of threads"),
    ("env.ROCBLAS_*", NUMERICS, "rocBLAS settings (fp16 alt-impl, atomics) change rounding"),
    ("env.MIOPEN_*", NUMERICS, "MIOpen settings (fp16 alt-impl, find mode) change kernels"),
    ("env.NCCL_ALGO", NUMERICS, "the all-reduce algorithm changes the order of the sum"),
    ("env.RCCL_ALGO", NUMERICS, "the all-reduce algorithm changes the order of the sum"),
    ("env.NCCL_PROTO", NUMERICS, "the protocol can change the order of the sum"),
    ("env.AUTOTUNE_PROBE_MEMORY_MB", PERFORMANCE, "less memory: a micro-batch may not fit"),
    ("env.*", PERFORMANCE, "communication and allocator settings change speed"),
    ("conf_files.*", PERFORMANCE, "an RCCL/NCCL file overrides the communication settings"),
    ("determinism.*", NUMERICS, "deterministic algorithms change which kernels run"),
    ("numerics.*_NUM_THREADS", NUMERICS, "BLAS reductions split over another number of threads"),
    ("numerics.interop_threads", PERFORMANCE, "inter-op threads change speed, not one op"),
    (
        "numerics.cpu_capability",
        NUMERICS,
        "another vector instruction set (ATEN_CPU_CAPABILITY): CPU kernels round differently",
    ),
    ("numerics.*", NUMERICS, "changes how a kernel rounds (TF32, reduced precision, BLAS)"),
)

# The sections compared beyond the identity and environment `fingerprint.diff` reads.
EXTRA_SECTIONS = ("determinism", "numerics")


def classify(path: str) -> tuple[str, str]:
    """The class of a difference at `path` (`versions.torch`, `env.NCCL_ALGO`) and why."""
    for pattern, cls, why in RULES:
        if fnmatchcase(path, pattern):
            return cls, why
    return NONE, "not part of a training step"


def differences(recorded: dict[str, Any] | None, here: dict[str, Any]) -> dict[str, Any]:
    """Every field the two fingerprints differ in, classed; and the sections not recorded.

    Returns `{rows: [{field, recorded, here, class, why}], counts: {class: n},
    not_recorded: [section], same_identity: bool}`; with no recorded fingerprint, no rows and
    `not_recorded: ["fingerprint"]`."""
    if not recorded:
        return {"rows": [], "counts": {}, "not_recorded": ["fingerprint"], "same_identity": False}
    pairs = dict(
        ((f, (a, b)) for f, a, b in fingerprint.diff(recorded, here)),
    )
    not_recorded = []
    flat_a: dict[str, Any] = {}
    flat_b: dict[str, Any] = {}
    for section in EXTRA_SECTIONS:
        if section not in recorded:
            not_recorded.append(section)
            continue
        _flatten(recorded.get(section) or {}, section, flat_a)
        _flatten(here.get(section) or {}, section, flat_b)
    for section in ("python", "numpy", "autotune"):
        flat_a[f"versions.{section}"] = (recorded.get("versions") or {}).get(section)
        flat_b[f"versions.{section}"] = (here.get("versions") or {}).get(section)
    for key in flat_a.keys() | flat_b.keys():
        if flat_a.get(key) != flat_b.get(key):
            pairs[key] = (flat_a.get(key), flat_b.get(key))
    rows = []
    for field in sorted(pairs):
        cls, why = classify(field)
        a, b = pairs[field]
        rows.append({"field": field, "recorded": a, "here": b, "class": cls, "why": why})
    order = {NUMERICS: 0, PERFORMANCE: 1, NONE: 2}
    rows.sort(key=lambda r: (order[r["class"]], r["field"]))
    counts = {c: sum(1 for r in rows if r["class"] == c) for c in (NUMERICS, PERFORMANCE, NONE)}
    return {
        "rows": rows,
        "counts": counts,
        "not_recorded": not_recorded,
        "same_identity": fingerprint.identity_hash(recorded) == fingerprint.identity_hash(here),
    }


def _flatten(obj: Any, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            _flatten(v, f"{prefix}.{k}", out)
    else:
        out[prefix] = obj
