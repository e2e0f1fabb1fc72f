"""The part of a fingerprint that names a platform (`identity`), its hash, and the fields two
fingerprints differ in (`diff`).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from autotune.fingerprint.guards import UNAVAILABLE, stable

#: The sections of a fingerprint that hold settings, not hardware, that change results.
NUMERICS_SECTIONS = ("determinism", "numerics")


def identity(fp: dict[str, Any]) -> dict[str, Any]:
    """The part of a fingerprint that names a platform: what can change numerics or speed.

    Included: the platform; per visible device its name, arch, memory and compute-unit count,
    and the device count; the driver version and, per device, market name, VBIOS and power cap
    (a lower cap lowers throughput, so two nodes with different caps are different platforms);
    the torch, HIP, CUDA, NCCL/RCCL and cuDNN/MIOpen versions; the CPU model and machine type,
    the logical CPU count and the RAM in whole GB.

    Left out: the hostname and the time; the environment (its knobs are what a study searches,
    and :func:`diff` reports them separately); the CPU affinity, thread count, OS, kernel and
    governor; Python and the versions of autotune, ray, optuna, mlflow and numpy (they do not
    change the numerics); and GPU serial numbers, which name a board, not a platform. When the
    driver section names devices' PCI addresses, only those visible to this process count;
    identical boards collapse into one entry. Any failed query reads as ``"unavailable"``.
    """
    devices = [
        {
            "name": d.get("name"),
            "arch": d.get("arch"),
            "total_memory_mb": d.get("total_memory_mb"),
            "multi_processor_count": d.get("multi_processor_count"),
        }
        for d in fp.get("devices") or []
    ]
    versions = fp.get("versions") or {}
    host = fp.get("host") or {}
    ram = host.get("ram_gb")
    return {
        "platform": fp.get("platform"),
        "device_count": len(devices),
        "devices": devices,
        "driver": _driver_identity(fp.get("driver")),
        "versions": {k: versions.get(k) for k in ("torch", "hip", "cuda", "nccl", "cudnn")},
        "host": {
            "cpu_model": host.get("cpu_model"),
            "machine": host.get("machine"),
            "cpu_count": host.get("cpu_count"),
            "ram_gb": round(ram) if isinstance(ram, (int, float)) else None,
        },
    }


def identity_hash(fp: dict[str, Any]) -> str:
    """Twelve hex characters of the SHA-256 of :func:`identity` as sorted-key JSON."""
    blob = json.dumps(identity(fp), sort_keys=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:12]


def diff(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """Fields that differ between two fingerprints, as ``(dotted.path, value_in_a, value_in_b)``.

    Compares :func:`identity` plus the ``env`` section (environment knobs change numerics and
    speed), ``conf_files`` (they override the environment) and, where both fingerprints hold
    them, the settings that change results on the same hardware (``NUMERICS_SECTIONS``: thread
    counts, the CPU kernels used, TF32 and deterministic-algorithm flags, ...). Paths look like
    ``versions.torch``, ``devices.0.name``, ``env.NCCL_ALGO``; a field missing on one side reads
    as ``None``. Sorted by path, with list indices in numeric order.
    """
    fa, fb = _comparable(a), _comparable(b)
    for section in NUMERICS_SECTIONS:  # where both recorded it (an older fingerprint did not)
        if isinstance(a.get(section), dict) and isinstance(b.get(section), dict):
            _flatten({section: a[section]}, "", fa)
            _flatten({section: b[section]}, "", fb)
    out = [(k, fa.get(k), fb.get(k)) for k in fa.keys() | fb.keys() if fa.get(k) != fb.get(k)]
    return sorted(out, key=lambda item: _path_key(item[0]))


def _driver_identity(drv: Any) -> Any:
    if drv is None:
        return None
    if not isinstance(drv, dict) or "error" in drv:
        return UNAVAILABLE
    entries = drv.get("devices") or []
    if any(e.get("visible") for e in entries):
        entries = [e for e in entries if e.get("visible")]
    boards = {
        json.dumps(
            {k: stable(e.get(k)) for k in ("market_name", "vbios", "power_cap_w")},
            sort_keys=True,
        )
        for e in entries
    }
    return {
        "source": drv.get("source"),
        "driver_version": stable(drv.get("driver_version")),
        "boards": [json.loads(b) for b in sorted(boards)],
    }


def _comparable(fp: dict[str, Any]) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    _flatten(identity(fp), "", flat)
    _flatten({"env": fp.get("env") or {}}, "", flat)
    _flatten({"conf_files": fp.get("conf_files") or {}}, "", flat)
    return flat


def _flatten(obj: Any, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            _flatten(v, f"{prefix}.{i}" if prefix else str(i), out)
    else:
        out[prefix] = obj


def _path_key(path: str) -> list[tuple[int, int, str]]:
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in path.split(".")]
