"""Hardware and software fingerprint of one process on one node, and the hash that names it.

Every probe process fingerprints itself (DESIGN.md: "fingerprint where the trial ran"): in a
cluster of MI210 and MI250 nodes the driver's hardware says nothing about a trial's. The
fingerprint is a plain JSON-serialisable dict; :func:`identity` picks the part of it that names a
platform and :func:`identity_hash` hashes that part, so trials and recipes found on the same
platform group together whatever the hostname, the time or the knobs under search.

This module imports neither ray nor mlflow, and imports torch only inside functions: importing it
costs nothing. Package versions of ray, optuna, mlflow and numpy are read from their installed
metadata, never by importing them. Vendor management libraries (``amdsmi`` on ROCm, ``pynvml``
from ``nvidia-ml-py`` on NVIDIA) are optional: when absent the driver section is ``None``; when a
call fails the field records ``{"error": "..."}`` and collection goes on.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform as _platform
import re
import socket
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

__all__ = [
    "collect",
    "decode_dnn_version",
    "describe_device",
    "diff",
    "format_text",
    "identity",
    "identity_hash",
    "tags",
]

SCHEMA = 1
"""Version of the fingerprint's layout; bump it when a field changes meaning."""

ENV_PREFIXES = ("NCCL_", "RCCL_", "HSA_", "ROCBLAS_", "MIOPEN_", "TORCH_NCCL_")
ENV_NAMES = (
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_HIP_ALLOC_CONF",
    "OMP_NUM_THREADS",
)
# RCCL/NCCL read these files and they override the environment without a word.
CONF_FILES = ("~/.rccl.conf", "/etc/rccl.conf", "~/.nccl.conf", "/etc/nccl.conf")

_GOVERNOR_FILE = "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"
_TAG_MAX = 250
_ERROR_MAX = 300
# In identity(), any failed query reads as this, so an error's wording cannot split a platform.
_UNAVAILABLE = "unavailable"


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------


def collect() -> dict[str, Any]:
    """Fingerprint this process on this node.

    Returns a JSON-serialisable dict with the top-level keys ``schema``, ``platform``
    (``rocm``/``cuda``/``cpu``), ``devices`` (one dict per visible GPU, see
    :func:`describe_device`), ``driver`` (amdsmi/NVML facts or ``None``), ``versions``, ``host``,
    ``env`` (communication/ROCm/allocator variables plus ``torch_threads``), ``conf_files``,
    ``determinism``, ``hash`` (:func:`identity_hash`) and ``collected_at`` (ISO 8601, UTC).

    On a GPU this initialises the device runtime (``torch.cuda.get_device_properties``); on a CPU
    it takes a few milliseconds once torch is imported.
    """
    import torch

    available = bool(torch.cuda.is_available())
    if available and torch.version.hip:
        plat = "rocm"
    elif available and torch.version.cuda:
        plat = "cuda"
    else:
        plat = "cpu"

    devices: list[dict[str, Any]] = []
    if plat != "cpu":
        for i in range(torch.cuda.device_count()):
            devices.append(describe_device(i, torch.cuda.get_device_properties(i), plat))

    fp: dict[str, Any] = {
        "schema": SCHEMA,
        "platform": plat,
        "devices": devices,
        "driver": _driver(plat, devices),
        "versions": _versions(plat),
        "host": _host(),
        "env": _env(torch.get_num_threads()),
        "conf_files": _conf_files(),
        "determinism": _determinism(),
    }
    fp["hash"] = identity_hash(fp)
    fp["collected_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return fp


def describe_device(index: int, props: Any, platform: str) -> dict[str, Any]:
    """Turn one ``torch.cuda.get_device_properties(i)`` result into a plain dict.

    ``props`` is anything with the attributes of ``torch.cuda._CudaDeviceProperties`` (a
    ``SimpleNamespace`` in tests). ``arch`` is the base ``gcnArchName`` on ROCm (``gfx90a`` from
    ``gfx90a:sramecc+:xnack-``; the full string stays in ``gcn_arch_name``) and
    ``sm_<major><minor>`` on CUDA. ``pci_bus`` is ``dddd:bb:dd.0`` where torch exposes the PCI
    ids (it lets the driver section tell the visible devices from the rest of the node), else
    ``None``.
    """
    name = str(getattr(props, "name", "") or "")
    gcn = getattr(props, "gcnArchName", None) or None
    major, minor = getattr(props, "major", None), getattr(props, "minor", None)
    arch: str | None = None
    if platform == "rocm":
        arch = str(gcn).split(":", 1)[0] if gcn else None
    elif major is not None and minor is not None:
        arch = f"sm_{major}{minor}"
    total = getattr(props, "total_memory", None)
    mps = getattr(props, "multi_processor_count", None)
    out: dict[str, Any] = {
        "index": int(index),
        "name": name,
        "arch": arch,
        "total_memory_mb": int(total) // (1024 * 1024) if total is not None else None,
        "multi_processor_count": int(mps) if mps is not None else None,
        "pci_bus": _pci_from_props(props),
    }
    if platform == "rocm":
        out["gcn_arch_name"] = str(gcn) if gcn else None
    return out


def decode_dnn_version(raw: int | None, platform: str) -> str | None:
    """Decode ``torch.backends.cudnn.version()`` into ``"major.minor.patch"``.

    On ROCm the number is MIOpen's, encoded ``major*1_000_000 + minor*1_000 + patch`` (3004000 is
    3.4.0). On CUDA it is cuDNN's ``CUDNN_VERSION``: ``major*10_000 + minor*100 + patch`` from
    cuDNN 9 on (90100 is 9.1.0), ``major*1_000 + minor*100 + patch`` before (8902 is 8.9.2).
    """
    if raw is None:
        return None
    v = int(raw)
    if platform == "rocm":
        major, rest = divmod(v, 1_000_000)
        minor, patch = divmod(rest, 1_000)
    elif v >= 90_000:
        major, rest = divmod(v, 10_000)
        minor, patch = divmod(rest, 100)
    else:
        major, rest = divmod(v, 1_000)
        minor, patch = divmod(rest, 100)
    return f"{major}.{minor}.{patch}"


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
    speed) and ``conf_files`` (they override the environment). Paths look like
    ``versions.torch``, ``devices.0.name``, ``env.NCCL_ALGO``; a field missing on one side reads
    as ``None``. Sorted by path, with list indices in numeric order.
    """
    fa, fb = _comparable(a), _comparable(b)
    out = [(k, fa.get(k), fb.get(k)) for k in fa.keys() | fb.keys() if fa.get(k) != fb.get(k)]
    return sorted(out, key=lambda item: _path_key(item[0]))


def format_text(fp: dict[str, Any]) -> str:
    """A readable multi-line summary of a fingerprint, for ``autotune fingerprint``."""
    plat = fp.get("platform")
    versions = fp.get("versions") or {}
    host = fp.get("host") or {}
    lines = [f"platform     {plat}    fingerprint {fp.get('hash') or identity_hash(fp)}"]

    devices = fp.get("devices") or []
    if not devices:
        lines.append("devices      none (CPU only)")
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

    drv = fp.get("driver")
    if isinstance(drv, dict):
        if "error" in drv:
            lines.append(f"driver       {drv.get('source')}: {_show(drv['error'])}")
        else:
            lines.append(
                f"driver       {drv.get('source')}: version {_show(drv.get('driver_version'))}"
            )
            for d in drv.get("devices") or []:
                seen = "" if d.get("visible") is not False else "  (not visible)"
                lines.append(
                    f"               {_show(d.get('bdf'))}: {_show(d.get('market_name'))}, "
                    f"vbios {_show(d.get('vbios'))}, power cap {_show(d.get('power_cap_w'))} W"
                    f"{seen}"
                )

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
    lines.append("versions     " + ", ".join(f"{k} {v}" for k, v in shown if v))

    cpus = f"{host.get('cpu_count')} CPUs"
    if host.get("cpu_affinity") not in (None, host.get("cpu_count")):
        cpus += f" ({host.get('cpu_affinity')} usable)"
    lines.append(
        f"host         {host.get('hostname')}: {host.get('cpu_model')}, {cpus}, "
        f"{host.get('ram_gb')} GB RAM"
    )
    lines.append(
        f"os           {host.get('os')}, kernel {host.get('kernel')}, "
        f"governor {_show(host.get('cpu_governor'))}"
    )

    env = dict(fp.get("env") or {})
    threads = env.pop("torch_threads", None)
    lines.append(f"torch threads {threads}")
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

    det = fp.get("determinism") or {}
    on = [f"{k}={v}" for k, v in det.items() if v not in (None, False)]
    lines.append("determinism  " + (", ".join(on) if on else "defaults (nothing forced)"))
    lines.append(f"collected    {fp.get('collected_at')}")
    return "\n".join(lines)


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


# --------------------------------------------------------------------------------------------
# Sections
# --------------------------------------------------------------------------------------------


def _versions(plat: str) -> dict[str, Any]:
    import torch

    try:
        nccl: str | None = ".".join(str(p) for p in torch.cuda.nccl.version())
    except Exception:  # CPU builds have no NCCL binding at all
        nccl = None
    try:
        dnn_raw = torch.backends.cudnn.version()
    except Exception:
        dnn_raw = None
    return {
        "torch": str(torch.__version__),
        "hip": torch.version.hip,
        "cuda": torch.version.cuda,
        "nccl": nccl,
        "cudnn": decode_dnn_version(dnn_raw, plat),
        "cudnn_raw": dnn_raw,
        "python": _platform.python_version(),
        "autotune": _autotune_version(),
        "ray": _dist_version("ray"),
        "optuna": _dist_version("optuna"),
        "mlflow": _dist_version("mlflow"),
        "numpy": _dist_version("numpy"),
    }


def _host() -> dict[str, Any]:
    try:
        affinity: int | None = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on macOS / Windows
        affinity = None
    return {
        "hostname": socket.gethostname(),
        "cpu_model": _cpu_model(),
        "machine": _platform.machine() or None,
        "cpu_count": os.cpu_count(),
        "cpu_affinity": affinity,
        "ram_gb": _ram_gb(),
        "os": _platform.platform(),
        "kernel": _platform.release(),
        "cpu_governor": _read_text(_GOVERNOR_FILE),
    }


def _env(torch_threads: int) -> dict[str, Any]:
    env: dict[str, Any] = {
        k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES) or k in ENV_NAMES
    }
    env["torch_threads"] = int(torch_threads)
    return env


def _conf_files() -> dict[str, bool]:
    return {path: os.path.isfile(os.path.expanduser(path)) for path in CONF_FILES}


def _determinism() -> dict[str, Any]:
    import torch

    return {
        "deterministic_algorithms": bool(torch.are_deterministic_algorithms_enabled()),
        "deterministic_warn_only": bool(torch.is_deterministic_algorithms_warn_only_enabled()),
        "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "CUBLAS_WORKSPACE_CONFIG": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
    }


# --------------------------------------------------------------------------------------------
# Driver: amdsmi on ROCm, NVML on NVIDIA. Both enumerate every GPU of the node, whatever the
# *_VISIBLE_DEVICES say, so each entry carries its PCI address and whether torch sees it.
# --------------------------------------------------------------------------------------------


def _driver(plat: str, devices: list[dict[str, Any]]) -> dict[str, Any] | None:
    if plat == "rocm":
        info = _amdsmi_info(_optional_import("amdsmi"))
    elif plat == "cuda":
        info = _nvml_info(_optional_import("pynvml"))
    else:
        return None
    if info is not None:
        _mark_visible(info, devices)
    return info


def _optional_import(name: str) -> Any:
    """The module, ``None`` when it is not installed, or an exception when importing it failed."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError:
        return None
    except Exception as exc:  # e.g. the Python binding is there but its shared library is not
        return exc


def _amdsmi_info(amdsmi: Any) -> dict[str, Any] | None:
    """Driver facts from an ``amdsmi`` module (or a stand-in with the same functions)."""
    if amdsmi is None:
        return None
    if isinstance(amdsmi, BaseException):
        return {"source": "amdsmi", "error": _error(amdsmi)}
    try:
        amdsmi.amdsmi_init()
    except Exception as exc:
        return {"source": "amdsmi", "error": _error(exc)}
    try:
        handles = list(amdsmi.amdsmi_get_processor_handles())
        versions = [_guard(_amd_driver_version, amdsmi, h) for h in handles]
        return {
            "source": "amdsmi",
            "driver_version": _first_ok(versions),
            "devices": [_amdsmi_device(amdsmi, h) for h in handles],
        }
    except Exception as exc:
        return {"source": "amdsmi", "error": _error(exc)}
    finally:
        with contextlib.suppress(Exception):
            amdsmi.amdsmi_shut_down()


def _amdsmi_device(amdsmi: Any, h: Any) -> dict[str, Any]:
    return {
        "bdf": _guard(lambda: _norm_bdf(amdsmi.amdsmi_get_gpu_device_bdf(h))),
        "market_name": _guard(lambda: amdsmi.amdsmi_get_gpu_asic_info(h)["market_name"]),
        "vbios": _guard(lambda: _vbios(amdsmi.amdsmi_get_gpu_vbios_info(h))),
        # amdsmi reports power in microwatts.
        "power_cap_w": _guard(
            lambda: _watts(amdsmi.amdsmi_get_power_cap_info(h)["power_cap"], 1e6)
        ),
        "serial": _guard(lambda: _amd_serial(amdsmi, h)),
    }


def _nvml_info(nvml: Any) -> dict[str, Any] | None:
    """Driver facts from a ``pynvml`` module (or a stand-in with the same functions)."""
    if nvml is None:
        return None
    if isinstance(nvml, BaseException):
        return {"source": "pynvml", "error": _error(nvml)}
    try:
        nvml.nvmlInit()
    except Exception as exc:
        return {"source": "pynvml", "error": _error(exc)}
    try:
        return {
            "source": "pynvml",
            "driver_version": _guard(lambda: _text(nvml.nvmlSystemGetDriverVersion())),
            "devices": [_nvml_device(nvml, i) for i in range(nvml.nvmlDeviceGetCount())],
        }
    except Exception as exc:
        return {"source": "pynvml", "error": _error(exc)}
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def _nvml_device(nvml: Any, index: int) -> dict[str, Any]:
    h = nvml.nvmlDeviceGetHandleByIndex(index)
    return {
        "bdf": _guard(lambda: _norm_bdf(_text(nvml.nvmlDeviceGetPciInfo(h).busId))),
        "market_name": _guard(lambda: _text(nvml.nvmlDeviceGetName(h))),
        "vbios": _guard(lambda: _text(nvml.nvmlDeviceGetVbiosVersion(h))),
        # NVML reports power in milliwatts.
        "power_cap_w": _guard(lambda: _watts(nvml.nvmlDeviceGetPowerManagementLimit(h), 1e3)),
        "serial": _guard(lambda: _text(nvml.nvmlDeviceGetSerial(h))),
    }


def _mark_visible(info: dict[str, Any], devices: list[dict[str, Any]]) -> None:
    """Set ``visible`` on each driver entry: True/False by PCI address, None when unknown."""
    seen = {d["pci_bus"] for d in devices if d.get("pci_bus")}
    for entry in info.get("devices") or []:
        bdf = entry.get("bdf")
        entry["visible"] = (bdf in seen) if seen and isinstance(bdf, str) else None


def _driver_identity(drv: Any) -> Any:
    if drv is None:
        return None
    if not isinstance(drv, dict) or "error" in drv:
        return _UNAVAILABLE
    entries = drv.get("devices") or []
    if any(e.get("visible") for e in entries):
        entries = [e for e in entries if e.get("visible")]
    boards = {
        json.dumps(
            {k: _stable(e.get(k)) for k in ("market_name", "vbios", "power_cap_w")},
            sort_keys=True,
        )
        for e in entries
    }
    return {
        "source": drv.get("source"),
        "driver_version": _stable(drv.get("driver_version")),
        "boards": [json.loads(b) for b in sorted(boards)],
    }


# --------------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------------


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


def _guard(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, or ``{"error": "..."}`` when it raises: one failed query loses one field."""
    try:
        return fn(*args)
    except Exception as exc:
        return {"error": _error(exc)}


def _first_ok(values: list[Any]) -> Any:
    """The first value that is not an error; the first error when all failed; None when empty."""
    return next((v for v in values if not _is_error(v)), values[0] if values else None)


def _is_error(value: Any) -> bool:
    return isinstance(value, dict) and "error" in value


def _stable(value: Any) -> Any:
    return _UNAVAILABLE if _is_error(value) else value


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:_ERROR_MAX]


def _show(value: Any) -> str:
    if _is_error(value):
        return f"error ({value['error']})"
    return "n/a" if value is None else str(value)


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _watts(value: Any, per_watt: float) -> float:
    return round(float(value) / per_watt, 1)


def _vbios(info: dict[str, Any]) -> Any:
    # The key was `vbios_version` in early amdsmi releases and `version` since.
    return info.get("version", info.get("vbios_version"))


def _amd_driver_version(amdsmi: Any, handle: Any) -> Any:
    return amdsmi.amdsmi_get_gpu_driver_info(handle)["driver_version"]


def _amd_serial(amdsmi: Any, handle: Any) -> Any:
    serial = amdsmi.amdsmi_get_gpu_board_info(handle).get("product_serial")
    return serial or amdsmi.amdsmi_get_gpu_asic_info(handle).get("asic_serial")


def _norm_bdf(value: Any) -> str:
    """``0000:c1:00.0`` from amdsmi's string or NVML's ``00000000:C1:00.0``."""
    m = re.fullmatch(r"(?:([0-9a-fA-F]+):)?([0-9a-fA-F]+):([0-9a-fA-F]+)\.([0-7])", str(value))
    if not m:
        return str(value)
    domain, bus, dev, fn = m.groups()
    return f"{int(domain or '0', 16):04x}:{int(bus, 16):02x}:{int(dev, 16):02x}.{fn}"


def _pci_from_props(props: Any) -> str | None:
    ids = [getattr(props, k, None) for k in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
    if any(not isinstance(i, int) for i in ids):
        return None
    domain, bus, dev = ids
    return f"{domain:04x}:{bus:02x}:{dev:02x}.0"


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip() or None
    except OSError:
        pass
    return _platform.processor() or None


def _ram_gb() -> float | None:
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 1024**2, 1)  # kB -> GiB
    except (OSError, ValueError, IndexError):
        pass
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3, 1)
    except (AttributeError, ValueError, OSError):
        return None


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip() or None
    except OSError:
        return None


def _dist_version(name: str) -> str | None:
    from importlib import metadata  # ~50 ms to import: only when collecting

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


# The distribution's name (pyproject's [project] name); the import package is `autotune`.
DIST_NAME = "autotune-probes"


def _autotune_version() -> str:
    import autotune

    version = getattr(autotune, "__version__", None)
    if isinstance(version, str):
        return version
    return _dist_version(DIST_NAME) or "0+unknown"
