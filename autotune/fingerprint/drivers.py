"""The driver section of a fingerprint: facts from the vendor management libraries (`amdsmi` on
ROCm, `pynvml` from `nvidia-ml-py` on NVIDIA), optional: when absent the section is None.
"""

from __future__ import annotations

import contextlib
import re
from typing import Any

from autotune.fingerprint.guards import error_text, first_ok, guard


def driver_info(plat: str, devices: list[dict[str, Any]]) -> dict[str, Any] | None:
    if plat == "rocm":
        info = amdsmi_info(_optional_import("amdsmi"))
    elif plat == "cuda":
        info = nvml_info(_optional_import("pynvml"))
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


def amdsmi_info(amdsmi: Any) -> dict[str, Any] | None:
    """Driver facts from an ``amdsmi`` module (or a stand-in with the same functions)."""
    if amdsmi is None:
        return None
    if isinstance(amdsmi, BaseException):
        return {"source": "amdsmi", "error": error_text(amdsmi)}
    try:
        amdsmi.amdsmi_init()
    except Exception as exc:
        return {"source": "amdsmi", "error": error_text(exc)}
    try:
        handles = list(amdsmi.amdsmi_get_processor_handles())
        versions = [guard(_amd_driver_version, amdsmi, h) for h in handles]
        return {
            "source": "amdsmi",
            "driver_version": first_ok(versions),
            "devices": [_amdsmi_device(amdsmi, h) for h in handles],
        }
    except Exception as exc:
        return {"source": "amdsmi", "error": error_text(exc)}
    finally:
        with contextlib.suppress(Exception):
            amdsmi.amdsmi_shut_down()


def _amdsmi_device(amdsmi: Any, h: Any) -> dict[str, Any]:
    return {
        "bdf": guard(lambda: _norm_bdf(amdsmi.amdsmi_get_gpu_device_bdf(h))),
        "market_name": guard(lambda: amdsmi.amdsmi_get_gpu_asic_info(h)["market_name"]),
        "vbios": guard(lambda: _vbios(amdsmi.amdsmi_get_gpu_vbios_info(h))),
        # amdsmi reports power in microwatts.
        "power_cap_w": guard(lambda: _watts(amdsmi.amdsmi_get_power_cap_info(h)["power_cap"], 1e6)),
        "serial": guard(lambda: _amd_serial(amdsmi, h)),
    }


def nvml_info(nvml: Any) -> dict[str, Any] | None:
    """Driver facts from a ``pynvml`` module (or a stand-in with the same functions)."""
    if nvml is None:
        return None
    if isinstance(nvml, BaseException):
        return {"source": "pynvml", "error": error_text(nvml)}
    try:
        nvml.nvmlInit()
    except Exception as exc:
        return {"source": "pynvml", "error": error_text(exc)}
    try:
        return {
            "source": "pynvml",
            "driver_version": guard(lambda: as_text(nvml.nvmlSystemGetDriverVersion())),
            "devices": [_nvml_device(nvml, i) for i in range(nvml.nvmlDeviceGetCount())],
        }
    except Exception as exc:
        return {"source": "pynvml", "error": error_text(exc)}
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def _nvml_device(nvml: Any, index: int) -> dict[str, Any]:
    h = nvml.nvmlDeviceGetHandleByIndex(index)
    return {
        "bdf": guard(lambda: _norm_bdf(as_text(nvml.nvmlDeviceGetPciInfo(h).busId))),
        "market_name": guard(lambda: as_text(nvml.nvmlDeviceGetName(h))),
        "vbios": guard(lambda: as_text(nvml.nvmlDeviceGetVbiosVersion(h))),
        # NVML reports power in milliwatts.
        "power_cap_w": guard(lambda: _watts(nvml.nvmlDeviceGetPowerManagementLimit(h), 1e3)),
        "serial": guard(lambda: as_text(nvml.nvmlDeviceGetSerial(h))),
    }


def _mark_visible(info: dict[str, Any], devices: list[dict[str, Any]]) -> None:
    """Set ``visible`` on each driver entry: True/False by PCI address, None when unknown."""
    seen = {d["pci_bus"] for d in devices if d.get("pci_bus")}
    for entry in info.get("devices") or []:
        bdf = entry.get("bdf")
        entry["visible"] = (bdf in seen) if seen and isinstance(bdf, str) else None


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


def as_text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
