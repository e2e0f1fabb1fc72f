"""Operator audit: how far this platform's kernels are from a float64 reference, op by op.

A model that trains on one platform and not on another often differs in a handful of kernels
(GELU, softmax with large logits, attention, reductions). `run_audit` runs a fixed battery of the
ops a transformer step uses, forward and backward, on seeded inputs of realistic shapes, and
compares each against the same math in float64 on the CPU, computed from the *same* inputs (the
inputs are rounded to the audited dtype first, so only the op's own error is measured).

Per op and pass (`fwd`, `bwd`) it records:

- `max_abs`, `mean_abs`: of |out − ref|;
- `max_rel`: max of |out − ref| / max(|ref|, REL_FLOOR · rms(ref)), REL_FLOOR = 1e-3: the
  relative error, with a floor so that an exact zero of the reference cannot divide by zero;
  it is strict, and shows errors in small values (a matmul output that cancels to ~0 may show a
  large one that is harmless);
- `max_scaled`: max of |out − ref| / max(|ref|, rms(ref)): each element's error relative to its
  own magnitude, or to the tensor's typical magnitude where it is smaller than that. Rounding
  inside a reduction (a softmax tail of e^-80, a cancelling sum) stays small here, a kernel that
  is wrong does not;
- `hist`: counts of |out − ref| per decade (`"0"`, `"<1e-16"`, `"1e-16"` = [1e-16, 1e-15), ...,
  `">=1e+02"`, `"nonfinite"`);
- `nonfinite`: non-finite outputs where the reference is finite (where no output element
  is finite beside a finite reference, nothing was measured: the four errors are None, shown
  as `-`, never 0);
- `flagged` (with `reason`): a non-finite output, an op that raised, or `max_scaled` above
  `TOLERANCE[dtype]` times the op's `tol_factor` (10 for ops that reduce: their rounding grows
  with the reduction). The tolerances catch a kernel that is wrong, not one that rounds
  differently.

The backward pass of an op is the gradient of sum(out · w) with respect to its floating inputs,
`w` a fixed random tensor (uniform in [-1, 1]) of the output's shape; the errors of all input
gradients are pooled, each judged against its own rms. Inputs are cast to the dtype directly
(no autocast).

The battery is data (repro/ops.py): `OPS` is a list of `Op`, and `run_audit(ops=...)` takes
another list, so a test (or a user chasing a kernel) can add ops or swap in a suspect
implementation with `Op(fn=suspect, reference=known_good)`. `log_audit` and `load_audit`
(repro/audit_log.py) keep an audit in MLflow; `compare_audits` (repro/audit_compare.py) sets
two side by side.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from autotune.errors import ReproError
from autotune.repro.audit_compare import (
    compare_audits,
    format_comparison,
    measured,
    measured_max_abs,
)
from autotune.repro.audit_log import EXPERIMENT, load_audit, log_audit
from autotune.repro.ops import DTYPES, OPS, REDUCE, Op

__all__ = [
    "DTYPES",
    "EXPERIMENT",
    "OPS",
    "REL_FLOOR",
    "TOLERANCE",
    "Op",
    "compare_audits",
    "format_audit",
    "format_comparison",
    "load_audit",
    "log_audit",
    "measured",
    "measured_max_abs",
    "run_audit",
]

SCHEMA = 1
HIST_LO, HIST_HI = -16, 2  # decades of the error histogram: [1e-16, 1e+02)

REL_FLOOR = 1e-3
"""Denominator floor of `max_rel`, as a fraction of the reference's root-mean-square."""

TOLERANCE: dict[str, float] = {"fp32": 2e-5, "fp16": 5e-3, "bf16": 4e-2}
"""Largest `max_scaled` an op may show before it is flagged, per dtype (times its `tol_factor`).

About 170 units in the last place for fp32 (2^-23 ≈ 1.2e-7) and 5 for fp16 (2^-10) and bf16
(2^-7). On a 2-core CPU with torch 2.13 the worst correct op (softmax backward) reaches a tenth
of its tolerance in fp32 and under half in fp16 and bf16; a GELU off by 1e-2 exceeds it in fp32
by two orders of magnitude.
"""


# --------------------------------------------------------------------------------------------
# Running it
# --------------------------------------------------------------------------------------------


def run_audit(
    device: str = "auto",
    dtype: str = "fp32",
    seed: int = 0,
    ops: Sequence[Op] | None = None,
) -> dict[str, Any]:
    """Run the battery (`ops`, default `OPS`) on `device` in `dtype`; return the audit as a dict.

    `device`: auto (a GPU when torch sees one, ROCm included), cuda, cuda:N or cpu. The result is
    plain JSON data: settings, this process's fingerprint, and one entry per op and pass.
    """
    from autotune import fingerprint

    if dtype not in DTYPES:
        raise ReproError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    dev = _device(device)
    started = time.perf_counter()
    entries: list[dict[str, Any]] = []
    for op in OPS if ops is None else ops:
        entries.extend(_audit_op(op, dev, dtype, seed))
    return {
        "schema": SCHEMA,
        "device": str(dev),
        "dtype": dtype,
        "seed": seed,
        "reference": "float64 on cpu, from the same (rounded) inputs",
        "rel_floor": REL_FLOOR,
        "tolerance": TOLERANCE[dtype],
        "torch": torch.__version__,
        "backend_flags": _backend_flags(dev),
        "fingerprint": fingerprint.collect(),
        "entries": entries,
        "flagged": [f"{e['op']}.{e['pass']}" for e in entries if e["flagged"]],
        "wall_s": time.perf_counter() - started,
    }


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cpu":
        return torch.device("cpu")
    if name == "cuda" or (name.startswith("cuda:") and name[5:].isdigit()):
        if not torch.cuda.is_available():
            raise ReproError(f"device {name!r}: torch sees no GPU (torch.cuda); use --device cpu")
        index = int(name[5:]) if ":" in name else 0
        if index >= torch.cuda.device_count():
            raise ReproError(
                f"device {name!r}: only {torch.cuda.device_count()} GPU(s) are visible"
            )
        return torch.device(name)
    raise ReproError(f"unknown device {name!r}; choose auto, cuda, cuda:N or cpu")


def _backend_flags(dev: torch.device) -> dict[str, Any]:
    """The global switches that change the numerics of matmuls and convolutions."""
    flags: dict[str, Any] = {
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
    }
    if dev.type == "cuda":
        m = torch.backends.cuda.matmul
        flags["cuda.matmul.allow_tf32"] = bool(m.allow_tf32)
        flags["cuda.matmul.allow_fp16_reduced_precision_reduction"] = bool(
            m.allow_fp16_reduced_precision_reduction
        )
        flags["cuda.matmul.allow_bf16_reduced_precision_reduction"] = bool(
            m.allow_bf16_reduced_precision_reduction
        )
        flags["cudnn.allow_tf32"] = bool(torch.backends.cudnn.allow_tf32)
        try:
            flags["preferred_blas_library"] = str(torch.backends.cuda.preferred_blas_library())
        except Exception as exc:  # older torch, or a build without the switch
            flags["preferred_blas_library"] = f"unavailable ({type(exc).__name__})"
    return flags


def _op_seed(seed: int, name: str) -> int:
    # Per-op streams: adding or removing an op leaves every other op's inputs unchanged.
    return (seed * 1_000_003 + zlib.crc32(name.encode())) % 2**63


def _audit_op(op: Op, dev: torch.device, dtype: str, seed: int) -> list[dict[str, Any]]:
    g = torch.Generator().manual_seed(_op_seed(seed, op.name))
    raw = op.make(g)
    tdtype = DTYPES[dtype]
    # Round the inputs to the audited dtype once; the reference starts from the rounded values.
    rounded = {k: v.to(tdtype) if v.is_floating_point() else v for k, v in raw.items()}
    ref_in = {
        k: v.to(torch.float64).requires_grad_(True) if v.is_floating_point() else v
        for k, v in rounded.items()
    }
    test_in = {
        k: v.to(dev).requires_grad_(True) if v.is_floating_point() else v.to(dev)
        for k, v in rounded.items()
    }
    reference = op.reference or op.fn
    tol = TOLERANCE[dtype] * op.tol_factor
    base = {"op": op.name, "tolerance": tol, "note": op.note}
    try:
        ref_out = reference(*ref_in.values())
        out = op.fn(*test_in.values())
    except Exception as exc:
        return [_failed(base, "fwd", exc)]
    entries = [{**base, "pass": "fwd", **_errors([(out, ref_out)], tol)}]
    if not op.backward:
        return entries
    grads_of = [k for k, v in ref_in.items() if v.is_floating_point()]
    weight = (torch.rand(ref_out.shape, generator=g, dtype=torch.float64) * 2.0 - 1.0).to(tdtype)
    try:
        ref_grads = torch.autograd.grad(
            ref_out, [ref_in[k] for k in grads_of], grad_outputs=weight.to(torch.float64)
        )
        grads = torch.autograd.grad(
            out, [test_in[k] for k in grads_of], grad_outputs=weight.to(dev)
        )
    except Exception as exc:
        return [*entries, _failed(base, "bwd", exc)]
    pairs = list(zip(grads, ref_grads, strict=True))
    entries.append({**base, "pass": "bwd", "inputs": grads_of, **_errors(pairs, tol)})
    return entries


def _failed(base: Mapping[str, Any], which: str, exc: Exception) -> dict[str, Any]:
    message = (str(exc).strip().splitlines() or [""])[0][:300]
    return {
        **base,
        "pass": which,
        "error": f"{type(exc).__name__}: {message}",
        "flagged": True,
        "reason": "raised",
    }


def _errors(pairs: Sequence[tuple[torch.Tensor, torch.Tensor]], tol: float) -> dict[str, Any]:
    """Error statistics of (output, reference) pairs, pooled; each pair has its own rms floor."""
    errs, rels, scaled = [], [], []
    nonfinite = ref_nonfinite = numel = 0
    rms_all = []
    for out, ref in pairs:
        out64 = out.detach().to("cpu", torch.float64).reshape(-1)
        ref64 = ref.detach().to(torch.float64).reshape(-1)
        ref_finite = torch.isfinite(ref64)
        both = ref_finite & torch.isfinite(out64)
        nonfinite += int((ref_finite & ~torch.isfinite(out64)).sum())
        ref_nonfinite += int((~ref_finite).sum())
        numel += out64.numel()
        err = (out64 - ref64).abs()[both]
        mag = ref64[both].abs()
        rms = float(mag.square().mean().sqrt()) if mag.numel() else 0.0
        tiny = torch.finfo(torch.float64).tiny
        errs.append(err)
        rels.append(err / torch.clamp(mag, min=max(REL_FLOOR * rms, tiny)))
        scaled.append(err / torch.clamp(mag, min=max(rms, tiny)))
        rms_all.append(rms)
    err = torch.cat(errs)
    # No element whose output and reference are both finite (a scalar loss that overflowed):
    # no error was measured, and None says so (0 would be an exact result).
    some = err.numel() > 0
    max_scaled = float(torch.cat(scaled).max()) if some else None
    reason = None
    if nonfinite:
        reason = f"{nonfinite} non-finite output(s) where the reference is finite"
    elif max_scaled is not None and max_scaled > tol:
        reason = f"max_scaled {max_scaled:.3g} > tolerance {tol:.3g}"
    return {
        "shape": list(pairs[0][0].shape),
        "numel": numel,
        "max_abs": float(err.max()) if some else None,
        "mean_abs": float(err.mean()) if some else None,
        "max_rel": float(torch.cat(rels).max()) if some else None,
        "max_scaled": max_scaled,
        "ref_rms": max(rms_all),
        "nonfinite": nonfinite,
        "ref_nonfinite": ref_nonfinite,
        "hist": _histogram(err, nonfinite),
        "error": None,
        "flagged": reason is not None,
        "reason": reason,
    }


def _histogram(err: torch.Tensor, nonfinite: int) -> dict[str, int]:
    """Counts of the absolute errors per decade; exact zeros and non-finite outputs apart."""
    hist: dict[str, int] = {"0": int((err == 0).sum())}
    positive = err[err > 0]
    decade = torch.floor(torch.log10(positive)).to(torch.int64)
    hist[f"<1e{HIST_LO:+03d}"] = int((decade < HIST_LO).sum())
    counts = torch.bincount(
        (decade[(decade >= HIST_LO) & (decade < HIST_HI)] - HIST_LO), minlength=HIST_HI - HIST_LO
    )
    for k in range(HIST_LO, HIST_HI):
        hist[f"1e{k:+03d}"] = int(counts[k - HIST_LO])
    hist[f">=1e{HIST_HI:+03d}"] = int((decade >= HIST_HI).sum())
    hist["nonfinite"] = nonfinite
    return hist


def _typical(hist: Mapping[str, int]) -> str:
    """The histogram bin holding most errors."""
    if not hist or not any(hist.values()):
        return "-"
    return max(hist.items(), key=lambda kv: kv[1])[0]


# --------------------------------------------------------------------------------------------
# Reading it
# --------------------------------------------------------------------------------------------


def _error(e: Mapping[str, Any], key: str) -> str:
    return f"{float(e[key]):.2e}" if measured(e) else "-"


def format_audit(result: Mapping[str, Any]) -> str:
    """A readable table: one line per op and pass, flagged ones marked."""
    fp = result.get("fingerprint") or {}
    lines = [
        f"audit {result['device']} {result['dtype']} (seed {result['seed']}, torch "
        f"{result['torch']}, fingerprint {fp.get('hash', '?')}) vs {result['reference']}",
        f"max_rel = max |out-ref| / max(|ref|, {result['rel_floor']:g}·rms(ref)); "
        "scaled = max |out-ref| / max(|ref|, rms(ref)); flagged when scaled > "
        f"{result['tolerance']:g} (x{REDUCE:g} for reductions) or an output is non-finite",
        "",
        f"{'op':<29}{'pass':<5}{'max_abs':>10}{'mean_abs':>10}{'max_rel':>10}{'scaled':>10}"
        f"{'typical':>10}{'nonfin':>7}  flag",
    ]
    for e in result["entries"]:
        if e.get("error"):
            lines.append(f"{e['op']:<29}{e['pass']:<5}  ERROR {e['error']}")
            continue
        flag = "FLAGGED" if e["flagged"] else ""
        errors = [_error(e, key) for key in ("max_abs", "mean_abs", "max_rel", "max_scaled")]
        lines.append(
            f"{e['op']:<29}{e['pass']:<5}{''.join(f'{x:>10}' for x in errors)}"
            f"{_typical(e['hist']) if measured(e) else '-':>10}{e['nonfinite']:>7}  {flag}"
        )
    flagged = result.get("flagged") or []
    lines.append("")
    lines.append(f"{len(flagged)} flagged: {', '.join(flagged)}" if flagged else "nothing flagged")
    return "\n".join(lines)
