"""A fingerprint in words (`autotune fingerprint`) and as MLflow tags."""

from __future__ import annotations

from typing import Any

from autotune.fingerprint.guards import is_error
from autotune.fingerprint.identity import identity_hash

_TAG_MAX = 250


def format_text(fp: dict[str, Any]) -> str:
    """A readable multi-line summary of a fingerprint, for ``autotune fingerprint``."""
    plat = fp.get("platform")
    lines = [f"platform     {plat}    fingerprint {fp.get('hash') or identity_hash(fp)}"]
    lines += _device_lines(fp)
    lines += _driver_lines(fp.get("driver"))
    lines.append(_versions_line(fp))
    lines += _host_lines(fp.get("host") or {})
    lines += _env_lines(fp)
    det = fp.get("determinism") or {}
    on = [f"{k}={v}" for k, v in det.items() if v not in (None, False)]
    lines.append("determinism  " + (", ".join(on) if on else "defaults (nothing forced)"))
    lines.append(f"collected    {fp.get('collected_at')}")
    return "\n".join(lines)


def _device_lines(fp: dict[str, Any]) -> list[str]:
    plat = fp.get("platform")
    devices = fp.get("devices") or []
    if not devices:
        return ["devices      none (CPU only)"]
    lines = []
    for d in devices:
        parts = [
            f"{d.get('name')}",
            f"{d.get('arch')}",
            f"{d.get('total_memory_mb')} MB",
            f"{d.get('multi_processor_count')} CUs" if plat == "rocm" else "",
            f"{d.get('multi_processor_count')} SMs" if plat == "cuda" else "",
            f"pci {d['pci_bus']}" if d.get("pci_bus") else "",
        ]
        lines.append(f"device {d.get('index')}     " + ", ".join(p for p in parts if p))
    return lines


def _driver_lines(drv: Any) -> list[str]:
    if not isinstance(drv, dict):
        return []
    if "error" in drv:
        return [f"driver       {drv.get('source')}: {_show(drv['error'])}"]
    lines = [f"driver       {drv.get('source')}: version {_show(drv.get('driver_version'))}"]
    for d in drv.get("devices") or []:
        seen = "" if d.get("visible") is not False else "  (not visible)"
        lines.append(
            f"               {_show(d.get('bdf'))}: {_show(d.get('market_name'))}, "
            f"vbios {_show(d.get('vbios'))}, power cap {_show(d.get('power_cap_w'))} W"
            f"{seen}"
        )
    return lines


def _versions_line(fp: dict[str, Any]) -> str:
    plat = fp.get("platform")
    versions = fp.get("versions") or {}
    dnn = "MIOpen" if plat == "rocm" else "cuDNN"
    shown = [
        ("torch", versions.get("torch")),
        ("hip", versions.get("hip")),
        ("cuda", versions.get("cuda")),
        ("rccl" if plat == "rocm" else "nccl", versions.get("nccl")),
        (dnn, versions.get("cudnn")),
        ("python", versions.get("python")),
        ("autotune", versions.get("autotune")),
        ("ray", versions.get("ray")),
        ("optuna", versions.get("optuna")),
        ("mlflow", versions.get("mlflow")),
        ("numpy", versions.get("numpy")),
    ]
    return "versions     " + ", ".join(f"{k} {v}" for k, v in shown if v)


def _host_lines(host: dict[str, Any]) -> list[str]:
    cpus = f"{host.get('cpu_count')} CPUs"
    if host.get("cpu_affinity") not in (None, host.get("cpu_count")):
        cpus += f" ({host.get('cpu_affinity')} usable)"
    return [
        f"host         {host.get('hostname')}: {host.get('cpu_model')}, {cpus}, "
        f"{host.get('ram_gb')} GB RAM",
        f"os           {host.get('os')}, kernel {host.get('kernel')}, "
        f"governor {_show(host.get('cpu_governor'))}",
    ]


def _env_lines(fp: dict[str, Any]) -> list[str]:
    """Torch's thread count, the environment knobs, and the RCCL/NCCL files that override them."""
    env = dict(fp.get("env") or {})
    threads = env.pop("torch_threads", None)
    lines = [f"torch threads {threads}"]
    if env:
        lines.append(
            "env          " + f"\n{'':13}".join(f"{k}={v}" for k, v in sorted(env.items()))
        )
    else:
        lines.append("env          (no NCCL/RCCL/HSA/ROCm/allocator variables set)")
    conf = fp.get("conf_files") or {}
    present = [path for path, exists in conf.items() if exists]
    lines.append(
        "conf files   "
        + (", ".join(present) + " PRESENT: may override the environment" if present else "none")
    )
    return lines


def tags(fp: dict[str, Any]) -> dict[str, str]:
    """Flat string tags for an MLflow run: ``autotune.fp.*``, each value at most 250 characters.

    Always: ``hash``, ``platform``, ``device`` (first GPU's name, else the CPU model), ``arch``
    (first GPU's arch, else the machine type), ``torch``, ``host``, ``device_count``. When set:
    ``hip``, ``cuda``, ``nccl``.
    """
    devices = fp.get("devices") or []
    host = fp.get("host") or {}
    versions = fp.get("versions") or {}
    first = devices[0] if devices else {}
    raw: dict[str, Any] = {
        "hash": fp.get("hash") or identity_hash(fp),
        "platform": fp.get("platform"),
        "device": first.get("name") if devices else host.get("cpu_model"),
        "arch": first.get("arch") if devices else host.get("machine"),
        "torch": versions.get("torch"),
        "host": host.get("hostname"),
        "device_count": len(devices),
    }
    for key in ("hip", "cuda", "nccl"):
        if versions.get(key):
            raw[key] = versions[key]
    return {f"autotune.fp.{k}": ("" if v is None else str(v))[:_TAG_MAX] for k, v in raw.items()}


def _show(value: Any) -> str:
    if is_error(value):
        return f"error ({value['error']})"
    return "n/a" if value is None else str(value)
