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
(repro/audit_log.py) keep an audit in MLflow.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from autotune.errors import ReproError
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


def measured(e: Mapping[str, Any]) -> bool:
    """Whether entry `e` measured an error: some output element and its reference are both
    finite. An output that is non-finite wherever its reference is finite (a scalar loss that
    overflowed) measured none: its errors are None (an audit logged before they were, or a
    recipe's compact record, holds 0 there, which is not an error of 0). A compact entry
    (`repro.record`: no element counts) with non-finite outputs measured none when its error
    and the reference's rms are both 0."""
    if e.get("error") or e.get("max_abs", 0) is None:
        return False
    if not e.get("nonfinite"):
        return True
    if "numel" in e and "ref_nonfinite" in e:
        return int(e["numel"]) - int(e["nonfinite"]) - int(e["ref_nonfinite"]) > 0
    return bool(e.get("max_abs")) or bool(e.get("ref_rms"))


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


def compare_audits(
    a: Mapping[str, Any], b: Mapping[str, Any], factor: float = 10.0
) -> dict[str, Any]:
    """Two audits side by side; rows whose max-abs errors differ by more than `factor` are marked.

    The ratio is the larger max-abs error over the smaller, both floored at 1e-3 ulp of the
    reference's rms (in the coarser of the two dtypes): an exact result and one off by a
    fraction of a rounding are alike. A row
    where only one side is non-finite, raised or is missing is marked too.
    """
    if factor <= 1.0:
        raise ReproError(f"the comparison factor must be > 1, got {factor:g}")
    rows_a = {(e["op"], e["pass"]): e for e in a["entries"]}
    rows_b = {(e["op"], e["pass"]): e for e in b["entries"]}
    keys = list(rows_a) + [k for k in rows_b if k not in rows_a]
    rows: list[dict[str, Any]] = []
    for key in keys:
        ea, eb = rows_a.get(key), rows_b.get(key)
        row: dict[str, Any] = {
            "op": key[0],
            "pass": key[1],
            "a_max_abs": measured_max_abs(ea),
            "b_max_abs": measured_max_abs(eb),
            "ratio": None,
            "differs": False,
            "why": None,
        }
        if ea is None or eb is None:
            row.update(differs=True, why="only in " + ("b" if ea is None else "a"))
        elif ea.get("error") or eb.get("error"):
            if bool(ea.get("error")) != bool(eb.get("error")):
                row.update(differs=True, why="raised in " + ("a" if ea.get("error") else "b"))
        elif bool(ea["nonfinite"]) != bool(eb["nonfinite"]):
            row.update(differs=True, why="non-finite in " + ("a" if ea["nonfinite"] else "b"))
        elif not (measured(ea) and measured(eb)):
            pass  # non-finite on both sides, and no error measured on one: nothing to divide
        else:
            floor = max(_floor(ea, a["dtype"]), _floor(eb, b["dtype"]))
            va, vb = max(ea["max_abs"], floor), max(eb["max_abs"], floor)
            ratio = max(va, vb) / min(va, vb)
            row["ratio"] = ratio
            if ratio > factor:
                row.update(differs=True, why=f"max_abs {'a' if va > vb else 'b'} larger")
        rows.append(row)
    return {
        "factor": factor,
        "a": _side(a),
        "b": _side(b),
        "rows": rows,
        "differs": [f"{r['op']}.{r['pass']}" for r in rows if r["differs"]],
    }


def measured_max_abs(e: Mapping[str, Any] | None) -> float | None:
    """Entry `e`'s max-abs error; None when there is no entry or it measured none
    (`measured`: it raised, or no output element was finite beside a finite reference)."""
    if e is None or not measured(e):
        return None
    return float(e["max_abs"])


def _floor(e: Mapping[str, Any], dtype: str) -> float:
    eps = torch.finfo(DTYPES.get(dtype, torch.float32)).eps
    return max(1e-3 * eps * float(e.get("ref_rms") or 0.0), 1e-300)


def _side(r: Mapping[str, Any]) -> dict[str, Any]:
    fp = r.get("fingerprint") or {}
    devices = fp.get("devices") or []
    return {
        "device": r.get("device"),
        "dtype": r.get("dtype"),
        "torch": r.get("torch"),
        "platform": fp.get("platform"),
        "hardware": devices[0].get("name") if devices else (fp.get("host") or {}).get("cpu_model"),
        "fingerprint": fp.get("hash"),
        "run_id": r.get("run_id"),
    }


def format_comparison(cmp: Mapping[str, Any]) -> str:
    """The comparison of two audits as a table."""
    a, b = cmp["a"], cmp["b"]

    def side(s: Mapping[str, Any]) -> str:
        run = f" run {s['run_id']}" if s.get("run_id") else ""
        where = f"{s['platform']}, {s['hardware']}, torch {s['torch']}"
        return f"{s['device']} {s['dtype']} ({where}){run}"

    lines = [f"a: {side(a)}", f"b: {side(b)}"]
    if a["dtype"] != b["dtype"]:
        lines.append("note: the two audits ran in different dtypes")
    lines += [
        "",
        f"{'op':<29}{'pass':<5}{'a max_abs':>11}{'b max_abs':>11}{'ratio':>9}  differs",
    ]

    def num(v: float | None) -> str:
        return "-" if v is None else f"{v:.2e}"

    for r in cmp["rows"]:
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.3g}"
        mark = f"DIFFERS ({r['why']})" if r["differs"] else ""
        lines.append(
            f"{r['op']:<29}{r['pass']:<5}{num(r['a_max_abs']):>11}{num(r['b_max_abs']):>11}"
            f"{ratio:>9}  {mark}"
        )
    differs = cmp["differs"]
    lines.append("")
    lines.append(
        f"{len(differs)} differ by more than {cmp['factor']:g}x: {', '.join(differs)}"
        if differs
        else f"no op differs by more than {cmp['factor']:g}x"
    )
    return "\n".join(lines)
