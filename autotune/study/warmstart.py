"""Warm start: configurations of an earlier study or a recipe, tried first (after the baseline)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from autotune import space as sp
from autotune.errors import StudyError
from autotune.recipe import Recipe
from autotune.recipe.values import env_unwarned
from autotune.study import pick
from autotune.study.find import find_study
from autotune.study.options import WarmStart


def warm_params(config: Mapping[str, Any], searched: Mapping[str, sp.Domain]) -> dict[str, Any]:
    """A source configuration as this study's params: only searched knobs, clamped into their
    domains (a choice the domain lacks is left to the sampler)."""
    values = {**(config.get("knobs") or {}), **(config.get("env") or {})}
    out: dict[str, Any] = {}
    for name, dom in searched.items():
        if name not in values or values[name] is None:
            continue
        v = values[name]
        if dom.is_choice:
            match = [c for c in dom.choices if c == v or str(c) == str(v)]
            if match:
                out[name] = match[0]
            continue
        try:
            x = float(v)
        except (TypeError, ValueError):
            continue
        lo, hi = float(dom.low), float(dom.high)  # type: ignore[arg-type]
        x = min(max(x, lo), hi)
        info = sp.KNOBS.get(name)
        is_int = info.kind == "int" if info is not None else isinstance(dom.low, int)
        out[name] = round(x) if is_int else x
    return out


#: Knobs that lay the same arithmetic out differently (the micro-batch that fits).
LAYOUT = ("accum_steps", "batch")


def distinct_params(
    configs: Sequence[Mapping[str, Any]],
    searched: Mapping[str, sp.Domain],
    baseline: Mapping[str, Any],
    grid: Mapping[str, Sequence[Any]] | None = None,
) -> list[tuple[Mapping[str, Any], dict[str, Any]]]:
    """Each warm-start configuration with its params (`warm_params`), leaving out one the study
    already runs: the baseline (every searched knob but the batch layout at the baseline's
    value: a recipe that is PyTorch's defaults, moved to a layout that fits, is the baseline
    again) or an earlier configuration (the same params). `grid`: the grid sampler's values
    (`grid_filled`)."""
    out: list[tuple[Mapping[str, Any], dict[str, Any]]] = []
    seen: list[dict[str, Any]] = []
    own = [n for n in searched if n not in LAYOUT]
    for config in configs:
        params = warm_params(config, searched)
        if grid is not None:
            params = grid_filled(params, config, grid)
        if own and all(n in params and _same(params[n], baseline.get(n)) for n in own):
            continue
        if any(params == p for p in seen):
            continue
        seen.append(params)
        out.append((config, params))
    return out


def grid_filled(
    params: Mapping[str, Any], config: Mapping[str, Any], grid: Mapping[str, Sequence[Any]]
) -> dict[str, Any]:
    """`params` with every knob of the grid given: Optuna's grid sampler runs an enqueued
    configuration only whole ("All parameters must be specified when using GridSampler with
    enqueue_trial"), so a knob the warm start leaves to the sampler (a choice the domain lacks:
    a recipe's accumulation that ran out of memory, outside a re-tune's) takes the grid's value
    nearest the configuration's own, or its first."""
    values = {**(config.get("knobs") or {}), **(config.get("env") or {})}
    out = dict(params)
    for name, points in grid.items():
        if name in out or not points:
            continue
        try:
            mine = float(values[name])
            out[name] = min(points, key=lambda p: abs(float(p) - mine))
        except (KeyError, TypeError, ValueError):
            out[name] = points[0]
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, int | float) and isinstance(b, int | float):
        return bool(a == b or math.isclose(float(a), float(b), rel_tol=1e-9))
    return a == b or str(a) == str(b)


def load_warm_start(ref: str, storage: str | None = None, top: int = 3) -> WarmStart:
    """The configurations to warm-start from: a recipe file's, or an earlier study's best
    `top` candidates (verified ones first, in pick order)."""
    path = Path(ref)
    if path.is_file():
        # Not warned of its env here: only the space's searched names are taken from it
        # (`warm_params`), and the study warns of the space's; `migrate` warned of the file.
        with env_unwarned():
            r = Recipe.load(path)
        objectives = [
            {"metric": m, "direction": a.get("direction", "minimize")}
            for m, a in r.achieved.items()
        ]
        best = [
            float(((a.get("verified") or {}).get("mean")) or a.get("value") or math.nan)
            for a in r.achieved.values()
        ]
        return WarmStart(
            ref=str(path),
            configs=[{"knobs": dict(r.knobs), "env": dict(r.env), "label": f"recipe {path.name}"}],
            fp_hash=r.fingerprint_hash,
            objectives=objectives,
            best=best if objectives else None,
        )
    study, space, _, _ = find_study(ref, storage)
    objectives = [o.model_dump() for o in space.objectives]
    cands = pick.candidates(study)
    if not cands:
        raise StudyError(
            f"--warm-start {ref}: that study has no feasible trial to start from "
            f"({pick.why_none(study)})"
        )
    chosen = pick.pick(cands, objectives, "balanced")
    order = [chosen] + [c for c in pick.ranked(cands, objectives) if c is not chosen]
    hashes = {c.fp_hash for c in order[:top] if c.fp_hash}
    return WarmStart(
        ref=ref,
        configs=[
            {"knobs": c.knobs, "env": c.env, "label": f"{space.name} trial {c.number}"}
            for c in order[:top]
        ],
        fp_hash=", ".join(sorted(hashes)) or None,
        objectives=objectives,
        best=[chosen.value(o["metric"], i) for i, o in enumerate(objectives)],
    )
