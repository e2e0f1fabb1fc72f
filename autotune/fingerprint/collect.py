"""Collecting the fingerprint of this process on this node: devices, driver, versions, host,
environment knobs, the RCCL/NCCL configuration files and the determinism settings.

torch is imported only inside `collect`; package versions of ray, optuna, mlflow and numpy are
read from their installed metadata, never by importing them.
"""

from __future__ import annotations

import os
import platform as _platform
import socket
from datetime import datetime, timezone
from typing import Any

from autotune.fingerprint.drivers import driver_info
from autotune.fingerprint.identity import identity_hash

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
    "AUTOTUNE_PROBE_MEMORY_MB",  # the memory a probe may use (autotune.process.memory_limit)
)


# RCCL/NCCL read these files and they override the environment without a word.
CONF_FILES = ("~/.rccl.conf", "/etc/rccl.conf", "~/.nccl.conf", "/etc/nccl.conf")


_GOVERNOR_FILE = "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"


def collect() -> dict[str, Any]:
    """Fingerprint this process on this node.

    Returns a JSON-serialisable dict with the top-level keys ``schema``, ``platform``
    (``rocm``/``cuda``/``cpu``), ``devices`` (one dict per visible GPU, see
    :func:`describe_device`), ``driver`` (amdsmi/NVML facts or ``None``), ``versions``, ``host``,
    ``env`` (communication/ROCm/allocator variables plus ``torch_threads``), ``conf_files``,
    ``determinism``, ``numerics`` (:func:`numerics`), ``hash`` (:func:`identity_hash`) and
    ``collected_at`` (ISO 8601, UTC).

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
        "driver": driver_info(plat, devices),
        "versions": _versions(plat),
        "host": _host(),
        "env": _env(torch.get_num_threads()),
        "conf_files": _conf_files(),
        "determinism": _determinism(),
        "numerics": numerics(),
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
        "ray": dist_version("ray"),
        "optuna": dist_version("optuna"),
        "mlflow": dist_version("mlflow"),
        "numpy": dist_version("numpy"),
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


# Variables outside ENV_PREFIXES that change results: TF32 overrides, BLAS choice and threads,
# MKL's reproducibility mode.
NUMERICS_ENV = (
    "NVIDIA_TF32_OVERRIDE",
    "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE",
    "TORCH_BLAS_PREFER_HIPBLASLT",
    "TORCH_BLAS_PREFER_CUBLASLT",
    "MKL_NUM_THREADS",
    "MKL_CBWR",
    "OPENBLAS_NUM_THREADS",
)


def numerics() -> dict[str, Any]:
    """The settings that change a result's rounding: float32 matmul precision and the TF32
    flags, the reduced-precision reductions, the preferred BLAS library, the CPU BLAS build,
    interop threads, and the variables of `NUMERICS_ENV` that are set. A query this torch lacks
    reads as None."""
    import torch

    def ask(fn: Any) -> Any:
        try:
            value = fn()
        except Exception:  # an older torch, or a CPU build without the binding
            return None
        return value if isinstance(value, (bool, int, float, str)) or value is None else str(value)

    matmul = torch.backends.cuda.matmul
    out: dict[str, Any] = {
        "float32_matmul_precision": ask(torch.get_float32_matmul_precision),
        "matmul_allow_tf32": ask(lambda: matmul.allow_tf32),
        "cudnn_allow_tf32": ask(lambda: torch.backends.cudnn.allow_tf32),
        "fp16_reduced_precision_reduction": ask(
            lambda: matmul.allow_fp16_reduced_precision_reduction
        ),
        "bf16_reduced_precision_reduction": ask(
            lambda: matmul.allow_bf16_reduced_precision_reduction
        ),
        "preferred_blas": ask(torch.backends.cuda.preferred_blas_library),
        "cpu_blas": ask(lambda: _config_value(torch.__config__.show(), "BLAS_INFO")),
        "cpu_capability": ask(torch.backends.cpu.get_cpu_capability),
        "mkldnn": ask(lambda: bool(torch.backends.mkldnn.is_available())),
        "interop_threads": ask(torch.get_num_interop_threads),
    }
    out.update({k: os.environ[k] for k in NUMERICS_ENV if k in os.environ})
    return out


def _config_value(text: str, key: str) -> str | None:
    """`KEY=value` from torch's build description (`torch.__config__.show()`)."""
    import re

    found = re.search(rf"\b{key}=([^,\s]+)", text)
    return found.group(1) if found else None


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


def dist_version(name: str) -> str | None:
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
    return dist_version(DIST_NAME) or "0+unknown"
