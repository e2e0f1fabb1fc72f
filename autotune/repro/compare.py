"""Loss-curve comparison: do two runs trace the same curve, step by step, within a tolerance?

`compare_series` is pure numpy. The relative difference at a step is
|a − b| / max(|a|, |b|, eps); it is smoothed with a centred rolling median over `window` steps
(an odd window, shrunk at the ends), so one noisy step cannot make two runs disagree while a
lasting departure is found at the step where it starts. The curves agree when the smoothed
difference never exceeds `rtol`, both cover the same steps, and no step holds a non-finite value
the other run lacks or two different non-finite values (+inf and -inf, NaN and inf); the same
non-finite value on both sides is the same outcome, but two runs with nothing finite to set
side by side do not agree (`nothing_finite`, which `compare_runs` refuses).

`compare_runs` reads two step series from MLflow (the metric histories a study logs per trial:
`loss`, `grad_norm`, ...), compares them, draws both curves and their difference to a PNG and
logs the PNG (`compare_plot`) and the numbers as a run of the experiment `autotune-compare`.
mlflow and matplotlib are imported inside the functions.
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from autotune import outfile
from autotune.errors import ReproError

if TYPE_CHECKING:
    from mlflow.entities import Run
    from mlflow.tracking import MlflowClient

__all__ = [
    "EXPERIMENT",
    "check_options",
    "compare_runs",
    "compare_series",
    "format_compare",
    "get_run",
]

EXPERIMENT = "autotune-compare"
EPS = 1e-12
CLAMPED = 1.7e308  # MLflow's SQLite store keeps an infinity as its largest double


def check_options(
    rtol: float, window: int, flag: str = "", out_png: str | Path | None = None
) -> None:
    """`rtol` a finite number > 0 (an infinite one agrees with anything and cannot be drawn)
    and `window` at least one step: a ReproError otherwise, each named as `{flag}rtol` /
    `{flag}window` (the CLI passes `--`). `out_png`, when given, must be a regular file or
    not there yet (a symlink's target is written): a device or FIFO is refused as `-o`, as is
    a name not ending in .png or one below a file."""
    if not (math.isfinite(rtol) and rtol > 0):
        raise ReproError(f"{flag}rtol must be a finite number > 0, got {rtol}")
    if window < 1:
        raise ReproError(f"{flag}window must be >= 1 step, got {window}")
    if out_png is not None:
        outfile.target(out_png, "-o")
        _check_png_path(Path(out_png))


def _check_png_path(path: Path) -> None:
    """The plot is a PNG: a path with another suffix (`-o x.txt`) would get a PNG under a name
    that says otherwise. A folder above it that is a file (`-o x.txt/y.png`) is named as such,
    not left to mkdir's "File exists"."""
    if path.suffix.lower() != ".png":
        raise ReproError(f"-o {path}: the plot is a PNG; give a file name ending in .png")
    for above in path.parents:
        if above.exists() or above.is_symlink():
            if not above.is_dir():
                raise ReproError(f"-o {path}: {above} is not a folder")
            return


def compare_series(
    steps_a: Sequence[float] | np.ndarray,
    loss_a: Sequence[float] | np.ndarray,
    steps_b: Sequence[float] | np.ndarray,
    loss_b: Sequence[float] | np.ndarray,
    rtol: float = 0.05,
    window: int = 5,
    eps: float = EPS,
) -> dict[str, Any]:
    """Compare two step series on their common steps (see the module docstring).

    Returns plain data: `common_steps`, `only_a`/`only_b` (steps one series lacks),
    `first_divergence_step` (the first step whose smoothed relative difference exceeds `rtol`
    and whose own does too, else None), `max_rel_diff` (and its step), `final_rel_diff`
    (last common step, raw) and `final_smoothed_rel_diff`, `correlation` (Pearson, over steps
    where both are finite), `agree`, `nothing_finite` (no step where both are finite, and none
    where they part: not an agreement), `verdict` (one line), `series` (step, a, b, rel_diff,
    smoothed as lists, on the common steps) and `series_a`, `series_b` (each whole: step,
    value).
    Non-finite numbers are reported as None.
    """
    check_options(rtol, window)
    sa, va = _series(steps_a, loss_a, "a")
    sb, vb = _series(steps_b, loss_b, "b")
    steps, ia, ib = np.intersect1d(sa, sb, assume_unique=True, return_indices=True)
    if steps.size == 0:
        raise ReproError(
            f"the two series share no step (a: steps {_span(sa)}, b: steps {_span(sb)})"
        )
    a, b = va[ia], vb[ib]
    rel = _rel_diff(a, b, eps)
    smooth = rolling_median(rel, window)
    # Where the smoothed difference exceeds rtol, the departure starts at the first such step
    # that departs itself: a centred window reaches forward, and must not pull later steps
    # into one where the runs still agree (identical at step 0, apart from step 1 on).
    over = np.flatnonzero(smooth > rtol)
    own = over[rel[over] > rtol]
    over = own if own.size else over
    # A non-finite value one run has and the other lacks, or two that are not the same outcome
    # (+inf and -inf, NaN and inf), is a departure of its own: the rolling median would smooth
    # one such step away (a NaN loss is a divergence, not noise). The same non-finite value on
    # both sides (NaN and NaN, +inf and +inf) is the same outcome: its difference is 0.
    departs = np.isinf(rel)
    lone = np.flatnonzero(departs)
    if lone.size and (not over.size or lone[0] <= over[0]):
        over = lone
    first = int(steps[over[0]]) if over.size else None
    only_a, only_b = int(sa.size - steps.size), int(sb.size - steps.size)
    k = int(np.argmax(np.where(np.isnan(rel), -np.inf, rel)))
    # Nothing finite on both sides and no departure: equal non-finite values agree on nothing.
    nothing = first is None and not np.any(np.isfinite(a) & np.isfinite(b))

    if first is not None:
        i = over[0]
        verdict = _departure(first, a[i], b[i], smooth[i], rtol, nonfinite=bool(departs[i]))
    elif nothing:
        verdict = (
            f"nothing finite to compare: at each of the {steps.size} common steps both values "
            "are non-finite"
        )
    elif only_a or only_b:
        verdict = (
            f"agree on the {steps.size} common steps, but a has {only_a} and b has {only_b} "
            f"steps the other lacks (a: {_span(sa)}, b: {_span(sb)})"
        )
    else:
        verdict = (
            f"agree within rtol {rtol:g} over {steps.size} steps "
            f"(max relative difference {rel[k]:.3g} at step {int(steps[k])})"
        )
    return {
        "rtol": rtol,
        "window": _odd(window),
        "window_asked": window,
        "common_steps": int(steps.size),
        "first_step": int(steps[0]),
        "last_step": int(steps[-1]),
        "only_a": only_a,
        "only_b": only_b,
        "first_divergence_step": first,
        "max_rel_diff": _num(rel[k]),
        "max_rel_diff_step": int(steps[k]),
        "final_rel_diff": _num(rel[-1]),
        "final_smoothed_rel_diff": _num(smooth[-1]),
        "correlation": _pearson(a, b),
        "agree": first is None and only_a == 0 and only_b == 0 and not nothing,
        "nothing_finite": bool(nothing),
        "verdict": verdict,
        "series": {
            "step": steps.tolist(),
            "a": [_num(x) for x in a],
            "b": [_num(x) for x in b],
            "rel_diff": [_num(x) for x in rel],
            "smoothed": [_num(x) for x in smooth],
        },
        # each run whole (the plot draws both lengths)
        "series_a": {"step": sa.tolist(), "value": [_num(x) for x in va]},
        "series_b": {"step": sb.tolist(), "value": [_num(x) for x in vb]},
    }


def _departure(step: int, a: float, b: float, smooth: float, rtol: float, nonfinite: bool) -> str:
    """The verdict of runs that part at `step`: by their smoothed difference, or by a
    non-finite value (one side's alone, or two that are not the same)."""
    if not nonfinite:
        return (
            f"diverge from step {step}: smoothed relative difference {smooth:.3g} > rtol {rtol:g}"
        )
    why = (
        "non-finite values that are not the same"
        if not (math.isfinite(a) or math.isfinite(b))
        else "a non-finite loss the other run does not have"
    )
    return f"diverge at step {step}: a's value is {_text(a)} and b's {_text(b)} ({why})"


def _series(
    steps: Sequence[float] | np.ndarray, values: Sequence[float] | np.ndarray, side: str
) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(steps, dtype=float).reshape(-1)
    v = np.asarray(values, dtype=float).reshape(-1)
    if s.size != v.size:
        raise ReproError(f"series {side}: {s.size} steps but {v.size} values")
    if s.size == 0:
        raise ReproError(f"series {side} is empty")
    if not np.all(np.isfinite(s)) or np.any(s != np.round(s)):
        raise ReproError(f"series {side}: steps must be whole numbers")
    # MLflow on SQLite stores an infinite value as +-1.8e308 (its largest double, clamped):
    # read back, that is the infinity it was
    v = np.where(np.abs(v) >= CLAMPED, np.copysign(np.inf, v), v)  # 0 * inf would warn
    # Sorted by step; a step given twice keeps its last value.
    order = np.argsort(s, kind="stable")
    s, v = s[order].astype(np.int64), v[order]
    last = np.append(s[1:] != s[:-1], True)
    return s[last], v[last]


def _rel_diff(a: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    """|a − b| / max(|a|, |b|, eps); 0 where both are the same non-finite value, inf where one
    is non-finite and the other is not (or they are different non-finite values)."""
    finite = np.isfinite(a) & np.isfinite(b)
    with np.errstate(invalid="ignore", over="ignore"):
        rel = np.abs(a - b) / np.maximum(np.maximum(np.abs(a), np.abs(b)), eps)
    same_nonfinite = ~finite & ((np.isnan(a) & np.isnan(b)) | (a == b))
    return np.where(finite, rel, np.where(same_nonfinite, 0.0, np.inf))


def _odd(window: int) -> int:
    return 2 * (window // 2) + 1


def rolling_median(x: np.ndarray, window: int) -> np.ndarray:
    """Centred rolling median over `window` points (rounded up to odd), shrunk at the ends."""
    half = window // 2
    if half == 0 or x.size == 0:
        return x.astype(float).copy()
    padded = np.concatenate([np.full(half, np.nan), x.astype(float), np.full(half, np.nan)])
    windows = np.lib.stride_tricks.sliding_window_view(padded, 2 * half + 1)
    return np.asarray(np.nanmedian(windows, axis=1), dtype=float)


def _pearson(a: np.ndarray, b: np.ndarray) -> float | None:
    ok = np.isfinite(a) & np.isfinite(b)
    if ok.sum() < 2:
        return None
    with np.errstate(over="ignore", invalid="ignore"):  # huge finite losses: no number
        x, y = a[ok] - a[ok].mean(), b[ok] - b[ok].mean()
        denom = math.sqrt(float(np.dot(x, x)) * float(np.dot(y, y)))
        r = float(np.dot(x, y)) / denom if denom > 0 else math.nan
    return r if math.isfinite(r) else None


def _text(x: Any) -> str:
    return f"{float(x):.4g}"


def _num(x: Any) -> float | None:
    value = float(x)
    return value if math.isfinite(value) else None


def _or_none(step: int | None) -> str:
    return "none" if step is None else str(step)


def _span(steps: np.ndarray) -> str:
    return f"{int(steps[0])}..{int(steps[-1])} ({steps.size})"


def format_compare(result: dict[str, Any]) -> str:
    """The comparison of two series (or two runs) in a few lines."""

    def num(v: float | None, fmt: str = ".4g", inf: str = "n/a") -> str:
        return inf if v is None else format(v, fmt)

    lines = []
    if "run_a" in result:
        lines += [
            f"a  {result['run_a']}  ({result.get('name_a') or '-'})",
            f"b  {result['run_b']}  ({result.get('name_b') or '-'})",
            f"metric {result['metric']}",
        ]
    lines += [
        f"{'AGREE' if result['agree'] else 'DIFFER'}: {result['verdict']}",
        f"steps compared     {result['common_steps']} ({result['first_step']}..."
        f"{result['last_step']}); only in a: {result['only_a']}, only in b: {result['only_b']}",
        f"rtol / window      {result['rtol']:g} / {result['window']} steps (rolling median"
        + (
            f"; {result['window_asked']} asked, rounded up: a centred median takes an odd count)"
            if result.get("window_asked", result["window"]) != result["window"]
            else ")"
        ),
        f"first divergence   {_or_none(result['first_divergence_step'])}",
        # None there is an infinite difference (a non-finite value, or an overflow), not "n/a"
        f"max rel. diff      {num(result['max_rel_diff'], inf='inf')} at step "
        f"{result['max_rel_diff_step']}",
        f"final rel. diff    {num(result['final_rel_diff'])} "
        f"(smoothed {num(result['final_smoothed_rel_diff'])})",
        f"correlation        {num(result['correlation'], '.6f')}",
    ]
    lines += [f"note: {n}" for n in result.get("notes", [])]
    if result.get("png"):
        lines.append(f"plot               {result['png']}")
    if result.get("compare_run_id"):
        lines.append(
            f"logged             run {result['compare_run_id']} in experiment {EXPERIMENT} "
            f"({result['tracking_uri']})"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Runs in MLflow
# --------------------------------------------------------------------------------------------


def get_run(client: MlflowClient, run_id: str, uri: str) -> Run:
    """The run `run_id`, or a ReproError naming it and the store."""
    try:
        return client.get_run(run_id)
    except Exception as exc:
        raise ReproError(f"no run {run_id!r} in the MLflow store {uri}") from exc


def _history(
    client: MlflowClient, run: Run, metric: str, uri: str
) -> tuple[list[int], list[float]]:
    run_id = run.info.run_id
    points = client.get_metric_history(run_id, metric)
    if not points:
        have = sorted(run.data.metrics)
        listed = ", ".join(have[:20]) + (", ..." if len(have) > 20 else "") if have else "none"
        raise ReproError(f"run {run_id} in {uri} has no metric {metric!r} (its metrics: {listed})")
    # A step logged twice keeps its latest value.
    points = sorted(points, key=lambda m: (m.step, m.timestamp))
    return [int(m.step) for m in points], [float(m.value) for m in points]


def compare_runs(
    run_a: str,
    run_b: str,
    tracking_uri: str | None = None,
    metric: str = "loss",
    rtol: float = 0.05,
    window: int = 5,
    out_png: str | Path | None = None,
    log: bool = True,
) -> dict[str, Any]:
    """Compare the step series `metric` of two MLflow runs; plot it; log the comparison.

    The plot goes to `out_png` (default: only into the logged run). With `log`, a run of the
    experiment `autotune-compare` gets the numbers as metrics (and the smoothed difference as
    the history `rel_diff`), tags naming both runs, `comparison.png` and `comparison.json`.
    Returns `compare_series`' result with `run_a`, `run_b`, `metric`, `notes`, `png`,
    `tracking_uri` and `compare_run_id` added.
    """
    from autotune import tracking
    from autotune.repro.compare_plot import plot_comparison

    check_options(rtol, window, out_png=out_png)  # before the store is opened
    uri = tracking.resolve_uri(tracking_uri)
    client = tracking.connect(uri)
    ra, rb = get_run(client, run_a, uri), get_run(client, run_b, uri)
    steps_a, values_a = _history(client, ra, metric, uri)
    steps_b, values_b = _history(client, rb, metric, uri)
    result = compare_series(steps_a, values_a, steps_b, values_b, rtol=rtol, window=window)
    if result["nothing_finite"]:  # a comparison that cannot be made: nothing is logged
        raise ReproError(f"runs {run_a} and {run_b}, metric {metric!r}: {result['verdict']}")
    result.update(
        run_a=run_a,
        run_b=run_b,
        name_a=ra.info.run_name,
        name_b=rb.info.run_name,
        metric=metric,
        tracking_uri=uri,
        notes=[],
    )
    # The study does not log non-finite losses (MLflow cannot keep them); it counts them.
    if metric == "loss":
        na = ra.data.metrics.get("nonfinite_steps", 0.0)
        nb = rb.data.metrics.get("nonfinite_steps", 0.0)
        if na != nb:
            result["notes"].append(f"non-finite loss steps (not logged): a {int(na)}, b {int(nb)}")
            result["agree"] = False
            result["verdict"] = "one run has non-finite losses the other lacks; " + str(
                result["verdict"]
            )

    result["png"] = None
    with tempfile.TemporaryDirectory() as tmp:
        png = plot_comparison(result, Path(tmp) / "comparison.png")
        if out_png is not None:
            target = Path(out_png)
            try:
                outfile.target(target, "-o").parent.mkdir(parents=True, exist_ok=True)
                outfile.write(target, png.read_bytes(), "-o")  # as `export -o` writes
            except OSError as exc:
                raise ReproError(
                    f"cannot write the plot to {target}: {exc.strerror or exc}"
                ) from exc
            result["png"] = str(target)
        result["compare_run_id"] = _log(client, result, png) if log else None
    return result


def _log(client: MlflowClient, result: dict[str, Any], png: Path) -> str:
    from mlflow.entities import Metric, Param, RunStatus, RunTag

    from autotune import tracking

    experiment_id = tracking.ensure_experiment(client, EXPERIMENT)
    tags = {
        "autotune.role": "compare",
        "autotune.compare.run_a": result["run_a"],
        "autotune.compare.run_b": result["run_b"],
        "autotune.compare.name_a": str(result.get("name_a") or ""),
        "autotune.compare.name_b": str(result.get("name_b") or ""),
        "autotune.compare.metric": result["metric"],
        "autotune.compare.agree": str(bool(result["agree"])).lower(),
    }
    name = f"compare-{result['run_a'][:8]}-{result['run_b'][:8]}"
    run = client.create_run(experiment_id, run_name=name, tags=tags)
    run_id = str(run.info.run_id)
    ts = int(time.time() * 1000)
    numbers = {
        "agree": float(bool(result["agree"])),
        "common_steps": result["common_steps"],
        "max_rel_diff": result["max_rel_diff"],
        "final_rel_diff": result["final_rel_diff"],
        "final_smoothed_rel_diff": result["final_smoothed_rel_diff"],
        "correlation": result["correlation"],
        "first_divergence_step": result["first_divergence_step"],
    }
    metrics = [Metric(k, float(v), ts, 0) for k, v in numbers.items() if v is not None]
    for step, value in zip(result["series"]["step"], result["series"]["smoothed"], strict=True):
        if value is not None:
            metrics.append(Metric("rel_diff", float(value), ts, int(step)))
    params = [
        Param("metric", result["metric"]),
        Param("rtol", repr(result["rtol"])),
        Param("window", str(result["window"])),
    ]
    client.log_batch(run_id, params=params, tags=[RunTag("mlflow.note.content", result["verdict"])])
    for start in range(0, len(metrics), 1000):
        client.log_batch(run_id, metrics=metrics[start : start + 1000], synchronous=True)
    client.log_artifact(run_id, str(png))
    client.log_text(run_id, json.dumps(result, indent=2, default=str), "comparison.json")
    client.set_terminated(run_id, status=RunStatus.to_string(RunStatus.FINISHED))
    return run_id
