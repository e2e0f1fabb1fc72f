"""The communication variables a space may set (`env:`), checked by name and value: a name that
is no known NCCL/RCCL/PyTorch-NCCL variable but is close to one (`NCCL_ALOG`) and a value of an
enumerated variable outside its values (`NCCL_ALGO: Rnig`) are warned of, naming the likely
intent. Warnings, not refusals: a newer NCCL or RCCL adds variables and values that this list
does not have, and the library ignores a name it does not know (so a typo tunes nothing)."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from autotune.space.schema import ENV_COMM_PREFIXES, Domain, Space

#: Enumerated variables and their values, as the NCCL and RCCL documentation lists them. A value
#: of NCCL_ALGO or NCCL_PROTO is a comma list, case-insensitive, that a leading '^' inverts.
ENUMERATED: dict[str, tuple[str, ...]] = {
    "NCCL_ALGO": (
        "Ring",
        "Tree",
        "CollNet",
        "CollNetDirect",
        "CollNetChain",
        "NVLS",
        "NVLSTree",
        "PAT",
    ),
    "NCCL_PROTO": ("LL", "LL128", "Simple"),
    "NCCL_DEBUG": ("VERSION", "WARN", "INFO", "TRACE"),
}
_LISTS = ("NCCL_ALGO", "NCCL_PROTO")

#: Variables NCCL, RCCL and PyTorch's NCCL process group read (a name near one is a likely typo).
KNOWN = (
    *ENUMERATED,
    "NCCL_BUFFSIZE",
    "NCCL_NTHREADS",
    "NCCL_MIN_NCHANNELS",
    "NCCL_MAX_NCHANNELS",
    "NCCL_MIN_CTAS",
    "NCCL_MAX_CTAS",
    "NCCL_CROSS_NIC",
    "NCCL_CHECKS_DISABLE",
    "NCCL_CHECK_POINTERS",
    "NCCL_COMM_BLOCKING",
    "NCCL_CUMEM_ENABLE",
    "NCCL_DEBUG_FILE",
    "NCCL_DEBUG_SUBSYS",
    "NCCL_GRAPH_FILE",
    "NCCL_GRAPH_DUMP_FILE",
    "NCCL_LAUNCH_MODE",
    "NCCL_LL_THRESHOLD",
    "NCCL_LL128_NTHREADS",
    "NCCL_NET",
    "NCCL_NET_GDR_LEVEL",
    "NCCL_NET_GDR_READ",
    "NCCL_NET_PLUGIN",
    "NCCL_NSOCKS_PERTHREAD",
    "NCCL_NVLS_ENABLE",
    "NCCL_P2P_DISABLE",
    "NCCL_P2P_LEVEL",
    "NCCL_P2P_NET_CHUNKSIZE",
    "NCCL_P2P_NVL_CHUNKSIZE",
    "NCCL_P2P_PCI_CHUNKSIZE",
    "NCCL_SHM_DISABLE",
    "NCCL_SOCKET_FAMILY",
    "NCCL_SOCKET_NTHREADS",
    "NCCL_TOPO_FILE",
    "NCCL_TOPO_DUMP_FILE",
    "NCCL_TREE_THRESHOLD",
    "NCCL_WORK_FIFO_DEPTH",
    "RCCL_MSCCL_ENABLE",
    "RCCL_MSCCLPP_ENABLE",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "TORCH_NCCL_AVOID_RECORD_STREAMS",
    "TORCH_NCCL_BLOCKING_WAIT",
    "TORCH_NCCL_ENABLE_MONITORING",
    "TORCH_NCCL_HIGH_PRIORITY",
    "TORCH_NCCL_USE_COMM_NONBLOCKING",
)


def env_warnings(space: Space) -> list[str]:
    """One line per communication variable whose name looks misspelt, and per value of an
    enumerated variable that is not one of its values."""
    return env_mapping_warnings(space.env)


def env_mapping_warnings(env: Mapping[str, Any]) -> list[str]:
    """`env_warnings` of an `env:` mapping, fixed values or a space's domains: a recipe's (its
    environment applied by `verify`, `repro` and `migrate`) is checked by the same rules."""
    out: list[str] = []
    for name, value in env.items():
        if not name.startswith(ENV_COMM_PREFIXES):
            continue  # HSA_, ROCBLAS_, MIOPEN_: no list here to compare with
        if name not in KNOWN:
            close = difflib.get_close_matches(name, KNOWN, n=1, cutoff=0.8)
            if close:
                out.append(
                    f"env.{name}: not a known NCCL/RCCL variable (did you mean {close[0]}?); "
                    "the library ignores a name it does not know"
                )
            continue
        values = value.choices if isinstance(value, Domain) else (value,)
        out += [f"env.{name}: {w}" for v in values if (w := _value_problem(name, str(v)))]
    return out


def _value_problem(name: str, value: str) -> str:
    """Why `value` is not one of the enumerated `name`'s values ('' when it is, or when the
    variable is not enumerated or the value uses a syntax this list does not know)."""
    allowed = ENUMERATED.get(name)
    if allowed is None or any(c in value for c in ":;="):  # per-collective NCCL_ALGO syntax
        return ""
    upper = {a.upper() for a in allowed}
    items = value.lstrip("^").split(",") if name in _LISTS else [value]
    bad = [i for i in items if i.strip().upper() not in upper]
    if not bad:
        return ""
    close = difflib.get_close_matches(bad[0], allowed, n=1, cutoff=0.5)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return f"{bad[0]!r} is not one of its values {', '.join(allowed)}{hint}"
