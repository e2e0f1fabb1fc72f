"""Tests for autotune.fingerprint, on a CPU-only machine.

GPU paths are covered through the pure helpers: device properties and vendor libraries are
replaced by stand-ins with the same attributes and functions.
"""

from __future__ import annotations

import copy
import json
import platform
import re
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from autotune import fingerprint as fpmod

ROOT = Path(__file__).resolve().parents[2]

MI250_PROPS = SimpleNamespace(
    name="AMD Instinct MI250X/MI250",
    gcnArchName="gfx90a:sramecc+:xnack-",
    major=9,
    minor=0,
    total_memory=64 * 1024**3,
    multi_processor_count=104,
    pci_domain_id=0,
    pci_bus_id=0xC1,
    pci_device_id=0,
)


@pytest.fixture(scope="module")
def fp() -> dict[str, Any]:
    return fpmod.collect()


def _with_device(fp: dict[str, Any], props: Any = MI250_PROPS) -> dict[str, Any]:
    """A copy of ``fp`` dressed up as a one-GPU ROCm fingerprint."""
    out = copy.deepcopy(fp)
    out["platform"] = "rocm"
    out["devices"] = [fpmod.describe_device(0, props, "rocm")]
    out["versions"]["hip"] = "6.4.43482"
    out["hash"] = fpmod.identity_hash(out)
    return out


# ---- collect() on this machine ------------------------------------------------------------


def test_collect_is_json_and_describes_this_cpu_process(fp: dict[str, Any]) -> None:
    assert json.loads(json.dumps(fp)) == fp
    assert fp["platform"] == "cpu"
    assert fp["devices"] == []
    assert fp["driver"] is None
    assert fp["versions"]["torch"] == torch.__version__
    assert fp["versions"]["python"] == platform.python_version()
    assert fp["versions"]["hip"] is None and fp["versions"]["cuda"] is None
    assert fp["hash"] == fpmod.identity_hash(fp)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", fp["collected_at"])
    for section in ("versions", "host", "env", "conf_files", "determinism"):
        assert isinstance(fp[section], dict), section


def test_collect_reads_package_versions_and_host(fp: dict[str, Any]) -> None:
    from importlib.metadata import version

    import autotune

    assert fp["versions"]["ray"] == version("ray")
    assert fp["versions"]["mlflow"] == version("mlflow")
    assert fp["versions"]["optuna"] == version("optuna")
    assert fp["versions"]["numpy"] == version("numpy")
    assert fp["versions"]["autotune"] == getattr(autotune, "__version__", "0+unknown")
    host = fp["host"]
    assert host["cpu_count"] >= 1
    assert host["ram_gb"] > 0
    assert host["kernel"] == platform.release()
    assert host["cpu_model"]
    assert fp["env"]["torch_threads"] == torch.get_num_threads()
    assert fp["determinism"]["deterministic_algorithms"] is False


def test_fingerprint_reports_the_installed_distributions_version(fp: dict[str, Any]) -> None:
    """`autotune` on PyPI is another project: ours is installed under a name of its own."""
    from importlib.metadata import packages_distributions, version

    # The distribution that installed the `autotune` package here (editable or not).
    (name,) = set(packages_distributions()["autotune"])  # an editable install may list it twice
    assert name != "autotune"
    assert name == fpmod.DIST_NAME
    assert re.search(rf'^name = "{name}"$', (ROOT / "pyproject.toml").read_text(), re.M)
    assert fp["versions"]["autotune"] == version(name) != "0+unknown"
    assert fpmod.dist_version(fpmod.DIST_NAME) == version(name)


def test_collect_is_fast_once_torch_is_imported() -> None:
    fpmod.collect()  # first call may page in metadata
    start = time.perf_counter()
    fpmod.collect()
    assert time.perf_counter() - start < 1.0


@pytest.mark.integration
def test_module_import_is_cheap_and_collect_never_imports_ray_or_mlflow() -> None:
    code = (
        "import sys, autotune.fingerprint as f\n"
        "assert 'torch' not in sys.modules, 'torch imported at module import'\n"
        "f.collect()\n"
        "bad = [m for m in ('ray', 'mlflow', 'optuna') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr


# ---- hash and identity ----------------------------------------------------------------------


def test_hash_is_stable_and_twelve_hex_chars(fp: dict[str, Any]) -> None:
    again = fpmod.collect()
    assert re.fullmatch(r"[0-9a-f]{12}", fp["hash"])
    assert again["hash"] == fp["hash"]


def test_hash_ignores_hostname_env_time_and_tool_versions(fp: dict[str, Any]) -> None:
    other = copy.deepcopy(fp)
    other["host"]["hostname"] = "some-other-node"
    other["host"]["cpu_affinity"] = 1
    other["host"]["cpu_governor"] = "powersave"
    other["env"] = {"NCCL_ALGO": "Tree", "HIP_VISIBLE_DEVICES": "3", "torch_threads": 1}
    other["conf_files"] = {"~/.rccl.conf": True}
    other["collected_at"] = "1999-01-01T00:00:00+00:00"
    for pkg in ("ray", "optuna", "mlflow", "numpy", "autotune", "python"):
        other["versions"][pkg] = "0.0.0"
    assert fpmod.identity_hash(other) == fp["hash"]


def test_hash_changes_with_device_or_software(fp: dict[str, Any]) -> None:
    gpu = _with_device(fp)
    assert gpu["hash"] != fp["hash"]

    renamed = copy.deepcopy(gpu)
    renamed["devices"][0]["name"] = "AMD Instinct MI210"
    assert fpmod.identity_hash(renamed) != gpu["hash"]

    two = copy.deepcopy(gpu)
    two["devices"].append(fpmod.describe_device(1, MI250_PROPS, "rocm"))
    assert fpmod.identity_hash(two) != gpu["hash"]

    for field, value in [("torch", "9.9.9"), ("nccl", "2.99.0"), ("cudnn", "3.5.0")]:
        changed = copy.deepcopy(fp)
        changed["versions"][field] = value
        assert fpmod.identity_hash(changed) != fp["hash"], field

    bigger = copy.deepcopy(fp)
    bigger["host"]["ram_gb"] = fp["host"]["ram_gb"] + 64
    assert fpmod.identity_hash(bigger) != fp["hash"]


def test_identity_excludes_unstable_fields(fp: dict[str, Any]) -> None:
    ident = fpmod.identity(_with_device(fp))
    blob = json.dumps(ident)
    assert fp["host"]["hostname"] not in json.dumps(ident["host"])
    assert "env" not in ident and "collected_at" not in ident
    assert set(ident["versions"]) == {"torch", "hip", "cuda", "nccl", "cudnn"}
    assert ident["device_count"] == 1
    assert ident["devices"][0]["arch"] == "gfx90a"
    assert isinstance(ident["host"]["ram_gb"], int)
    assert "pci" not in blob and "index" not in blob


# ---- device description and version decoding -------------------------------------------------


def test_describe_device_rocm() -> None:
    d = fpmod.describe_device(0, MI250_PROPS, "rocm")
    assert d == {
        "index": 0,
        "name": "AMD Instinct MI250X/MI250",
        "arch": "gfx90a",
        "gcn_arch_name": "gfx90a:sramecc+:xnack-",
        "total_memory_mb": 65536,
        "multi_processor_count": 104,
        "pci_bus": "0000:c1:00.0",
    }
    json.dumps(d)


def test_describe_device_cuda_and_missing_pci_ids() -> None:
    props = SimpleNamespace(
        name="NVIDIA H100 80GB HBM3",
        gcnArchName="",
        major=9,
        minor=0,
        total_memory=80 * 1024**3,
        multi_processor_count=132,
    )
    d = fpmod.describe_device(2, props, "cuda")
    assert d["arch"] == "sm_90"
    assert d["index"] == 2
    assert d["pci_bus"] is None
    assert "gcn_arch_name" not in d


@pytest.mark.parametrize(
    ("raw", "plat", "expected"),
    [
        (3004000, "rocm", "3.4.0"),
        (2020000, "rocm", "2.20.0"),
        (3003001, "rocm", "3.3.1"),
        (90100, "cuda", "9.1.0"),
        (91002, "cuda", "9.10.2"),
        (8902, "cuda", "8.9.2"),
        (None, "rocm", None),
    ],
)
def test_decode_dnn_version(raw: int | None, plat: str, expected: str | None) -> None:
    assert fpmod.decode_dnn_version(raw, plat) == expected


# ---- environment and config files -------------------------------------------------------------


def test_env_capture(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NCCL_ALGO", "Ring")
    monkeypatch.setenv("HSA_ENABLE_SDMA", "0")
    monkeypatch.setenv("PYTORCH_HIP_ALLOC_CONF", "expandable_segments:True")
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "1")
    monkeypatch.setenv("AUTOTUNE_UNRELATED_VAR", "x")
    monkeypatch.setenv("NCCLX_NOT_A_PREFIX", "x")
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    fp = fpmod.collect()
    env = fp["env"]
    assert env["NCCL_ALGO"] == "Ring"
    assert env["HSA_ENABLE_SDMA"] == "0"
    assert env["PYTORCH_HIP_ALLOC_CONF"] == "expandable_segments:True"
    assert env["HIP_VISIBLE_DEVICES"] == "1"
    assert "AUTOTUNE_UNRELATED_VAR" not in env
    assert "NCCLX_NOT_A_PREFIX" not in env
    assert fp["determinism"]["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"


def test_conf_file_detection(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert fpmod.collect()["conf_files"]["~/.rccl.conf"] is False
    (tmp_path / ".rccl.conf").write_text("NCCL_ALGO=Tree\n")
    conf = fpmod.collect()["conf_files"]
    assert conf["~/.rccl.conf"] is True
    assert conf["~/.nccl.conf"] is False
    assert set(conf) == {"~/.rccl.conf", "/etc/rccl.conf", "~/.nccl.conf", "/etc/nccl.conf"}


# ---- diff -----------------------------------------------------------------------------------


def test_diff_names_changed_fields(fp: dict[str, Any]) -> None:
    a = _with_device(fp)
    b = copy.deepcopy(a)
    b["devices"][0]["name"] = "AMD Instinct MI210"
    b["versions"]["torch"] = "9.9.9"
    b["env"]["NCCL_PROTO"] = "LL128"
    b["conf_files"]["~/.rccl.conf"] = not a["conf_files"]["~/.rccl.conf"]
    b["host"]["hostname"] = "elsewhere"  # not part of the comparison
    b["collected_at"] = "later"
    assert fpmod.diff(a, b) == [
        (
            "conf_files.~/.rccl.conf",
            a["conf_files"]["~/.rccl.conf"],
            b["conf_files"]["~/.rccl.conf"],
        ),
        ("devices.0.name", "AMD Instinct MI250X/MI250", "AMD Instinct MI210"),
        ("env.NCCL_PROTO", None, "LL128"),
        ("versions.torch", a["versions"]["torch"], "9.9.9"),
    ]
    assert fpmod.diff(a, a) == []
    assert fpmod.diff(a, copy.deepcopy(a)) == []


def test_diff_names_the_settings_that_change_numerics_where_both_record_them(
    fp: dict[str, Any],
) -> None:
    """verify said "same hardware as the recipe" where migrate listed the CPU kernels used
    (ATEN_CPU_CAPABILITY) and the thread counts as changing numerics (a black-box review)."""
    assert "numerics" in fp and "determinism" in fp  # this machine's fingerprint records them
    b = copy.deepcopy(fp)
    key = next(iter(b["numerics"]))
    b["numerics"][key] = "something else"
    assert (f"numerics.{key}", fp["numerics"][key], "something else") in fpmod.diff(fp, b)
    older = {k: v for k, v in fp.items() if k not in ("numerics", "determinism")}
    assert fpmod.diff(older, b) == []  # a fingerprint that did not record them: nothing to say


def test_diff_orders_device_indices_numerically(fp: dict[str, Any]) -> None:
    a = copy.deepcopy(fp)
    a["platform"] = "rocm"
    a["devices"] = [fpmod.describe_device(i, MI250_PROPS, "rocm") for i in range(12)]
    b = copy.deepcopy(a)
    b["devices"][10]["arch"] = "gfx942"
    b["devices"][2]["arch"] = "gfx942"
    paths = [p for p, _, _ in fpmod.diff(a, b)]
    assert paths == ["devices.2.arch", "devices.10.arch"]


def test_diff_reports_cpu_vs_gpu(fp: dict[str, Any]) -> None:
    paths = {p for p, _, _ in fpmod.diff(fp, _with_device(fp))}
    assert {"platform", "device_count", "devices.0.name", "devices.0.arch"} <= paths
    assert "versions.hip" in paths


# ---- presentation -----------------------------------------------------------------------------


def test_format_text(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NCCL_ALGO", "Tree")
    fp = fpmod.collect()
    text = fpmod.format_text(fp)
    assert "cpu" in text
    assert fp["hash"] in text
    assert "NCCL_ALGO=Tree" in text
    assert f"torch {torch.__version__}" in text
    assert fp["host"]["hostname"] in text
    gpu_text = fpmod.format_text(_with_device(fp))
    assert "AMD Instinct MI250X/MI250" in gpu_text and "gfx90a" in gpu_text


def test_tags(fp: dict[str, Any]) -> None:
    t = fpmod.tags(fp)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in t.items())
    assert all(k.startswith("autotune.fp.") for k in t)
    assert t["autotune.fp.hash"] == fp["hash"]
    assert t["autotune.fp.platform"] == "cpu"
    assert t["autotune.fp.device"] == fp["host"]["cpu_model"]
    assert t["autotune.fp.torch"] == torch.__version__
    assert t["autotune.fp.device_count"] == "0"
    assert t["autotune.fp.host"] == fp["host"]["hostname"]
    assert "autotune.fp.hip" not in t and "autotune.fp.cuda" not in t

    gpu = _with_device(fp)
    gpu["devices"][0]["name"] = "x" * 1000
    gt = fpmod.tags(gpu)
    assert gt["autotune.fp.arch"] == "gfx90a"
    assert gt["autotune.fp.hip"] == "6.4.43482"
    assert gt["autotune.fp.device"] == "x" * 250
    assert all(len(v) <= 250 for v in gt.values())


# ---- driver section through stand-in vendor libraries -----------------------------------------


class _FakeAmdSmiError(Exception):
    pass


def _fake_amdsmi(power_caps_uw: list[int], fail_power_on: int | None = None) -> Any:
    def power(h: int) -> dict[str, int]:
        if h == fail_power_on:
            raise _FakeAmdSmiError("not supported on a VM guest")
        return {"power_cap": power_caps_uw[h], "default_power_cap": 560_000_000}

    calls: list[str] = []
    return SimpleNamespace(
        calls=calls,
        amdsmi_init=lambda: calls.append("init"),
        amdsmi_shut_down=lambda: calls.append("shut_down"),
        amdsmi_get_processor_handles=lambda: list(range(len(power_caps_uw))),
        amdsmi_get_gpu_device_bdf=lambda h: f"0000:{0xC1 + h:02x}:00.0",
        amdsmi_get_gpu_asic_info=lambda h: {
            "market_name": "AMD Instinct MI250X/MI250",
            "asic_serial": f"0xASIC{h}",
        },
        amdsmi_get_gpu_board_info=lambda h: {"product_serial": f"SN{h}"},
        amdsmi_get_gpu_vbios_info=lambda h: {"version": "113-D65209-073", "name": "x"},
        amdsmi_get_gpu_driver_info=lambda h: {"driver_name": "amdgpu", "driver_version": "6.8.5"},
        amdsmi_get_power_cap_info=power,
    )


def test_amdsmi_reader_converts_and_guards_each_field() -> None:
    fake = _fake_amdsmi([560_000_000, 500_000_000], fail_power_on=1)
    info = fpmod.amdsmi_info(fake)
    assert info is not None
    assert info["source"] == "amdsmi" and info["driver_version"] == "6.8.5"
    d0, d1 = info["devices"]
    assert d0 == {
        "bdf": "0000:c1:00.0",
        "market_name": "AMD Instinct MI250X/MI250",
        "vbios": "113-D65209-073",
        "power_cap_w": 560.0,
        "serial": "SN0",
    }
    assert d1["power_cap_w"] == {"error": "_FakeAmdSmiError: not supported on a VM guest"}
    assert d1["market_name"] == "AMD Instinct MI250X/MI250"
    assert fake.calls == ["init", "shut_down"]
    json.dumps(info)


def test_amdsmi_reader_absent_or_broken() -> None:
    assert fpmod.amdsmi_info(None) is None
    assert fpmod.amdsmi_info(OSError("libamd_smi.so: cannot open")) == {
        "source": "amdsmi",
        "error": "OSError: libamd_smi.so: cannot open",
    }

    def boom() -> None:
        raise RuntimeError("driver not loaded")

    broken = SimpleNamespace(amdsmi_init=boom)
    assert fpmod.amdsmi_info(broken) == {
        "source": "amdsmi",
        "error": "RuntimeError: driver not loaded",
    }


def test_driver_section_absent_module_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "amdsmi", None)  # makes `import amdsmi` fail
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert fpmod.driver_info("rocm", []) is None
    assert fpmod.driver_info("cuda", []) is None
    assert fpmod.driver_info("cpu", []) is None


def test_driver_identity_keeps_power_cap_and_visible_boards_not_serials(
    fp: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    def with_driver(caps: list[int], serial_prefix: str = "SN") -> dict[str, Any]:
        fake = _fake_amdsmi(caps)
        fake.amdsmi_get_gpu_board_info = lambda h: {"product_serial": f"{serial_prefix}{h}"}
        monkeypatch.setitem(sys.modules, "amdsmi", fake)
        out = _with_device(fp)  # torch sees one device, at 0000:c1:00.0
        out["driver"] = fpmod.driver_info("rocm", out["devices"])
        return out

    base = with_driver([560_000_000, 560_000_000])
    assert [d["visible"] for d in base["driver"]["devices"]] == [True, False]
    h = fpmod.identity_hash(base)
    # Another board's serial, or a cap on a device this process cannot see: same platform.
    assert fpmod.identity_hash(with_driver([560_000_000, 560_000_000], "OTHER")) == h
    assert fpmod.identity_hash(with_driver([560_000_000, 300_000_000])) == h
    # The visible device's power cap differs: a different platform, and diff says where.
    capped = with_driver([300_000_000, 560_000_000])
    assert fpmod.identity_hash(capped) != h
    assert ("driver.boards.0.power_cap_w", 560.0, 300.0) in fpmod.diff(base, capped)


def test_nvml_reader() -> None:
    calls: list[str] = []
    fake = SimpleNamespace(
        nvmlInit=lambda: calls.append("init"),
        nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlSystemGetDriverVersion=lambda: b"550.54.15",
        nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetPciInfo=lambda h: SimpleNamespace(busId=b"00000000:1B:00.0"),
        nvmlDeviceGetName=lambda h: "NVIDIA H200",
        nvmlDeviceGetVbiosVersion=lambda h: "96.00.A5.00.01",
        nvmlDeviceGetPowerManagementLimit=lambda h: 700_000,
        nvmlDeviceGetSerial=lambda h: (_ for _ in ()).throw(RuntimeError("NotSupported")),
    )
    info = fpmod.nvml_info(fake)
    assert info is not None
    assert info["driver_version"] == "550.54.15"
    dev = info["devices"][0]
    assert dev["bdf"] == "0000:1b:00.0"
    assert dev["market_name"] == "NVIDIA H200"
    assert dev["power_cap_w"] == 700.0
    assert dev["serial"] == {"error": "RuntimeError: NotSupported"}
    assert calls == ["init", "shutdown"]
