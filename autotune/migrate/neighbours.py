"""The recipe's Pareto neighbours (the study's other candidates on the front, `source.neighbours`,
recorded by export), tried here when the recipe does not hold: nearest first, over the recipe's
seeds and against the same baseline runs, until one holds (`try_neighbours`); one that holds
after others were judged on those seeds is judged again with fresh ones (`neighbour_confirm`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from autotune.migrate import neighbour_confirm as nc
from autotune.migrate.judged import add_cost, judge, judged_entry
from autotune.migrate.layout_baseline import LayoutBaselines
from autotune.recipe.file import Recipe
from autotune.recipe.verify import run_local


def neighbours_status(recipe: Recipe, holds: Mapping[str, Any]) -> dict[str, Any]:
    """Whether the recipe's Pareto neighbours (`source.neighbours`, recorded by export) are to
    be tried here (`status` "to try"), or why not: the recipe holds ("not needed"), nothing
    runs here ("not run"), the recipe records none ("not recorded": exported before autotune
    recorded them; "none": its study had no other candidate on the front)."""
    recorded = (recipe.source or {}).get("neighbours")
    out: dict[str, Any] = {
        "recorded": None if recorded is None else len(recorded),
        "source": bool(recipe.source),  # a recipe without one records no neighbours either
        "tried": [],
        "held": None,
        "samples": 0,
        "probes": 0,
        "wall_s": 0.0,
    }
    if not holds.get("problems"):
        return {**out, "status": "not needed", "why": "the recipe holds here"}
    held_at = (holds.get("layout") or {}).get("held")
    if held_at is not None:
        why = f"the recipe holds here at accum_steps {held_at} (the same batch in more steps)"
        return {**out, "status": "not needed", "why": why}
    if holds.get("nothing_runs"):
        return {
            **out,
            "status": "not run",
            "why": "nothing runs here, the baseline included: no configuration can be judged",
        }
    if recorded is None:
        why = (
            "the recipe records no Pareto neighbours (exported before autotune recorded them): "
            "export it again from its study"
            if recipe.source
            else "the recipe has no `source` section: no Pareto neighbours to try"
        )
        return {**out, "status": "not recorded", "why": why}
    if not recorded:
        return {
            **out,
            "status": "none",
            "why": "its study had no other candidate on the Pareto front",
        }
    return {**out, "status": "to try", "why": ""}


def try_neighbours(
    recipe: Recipe,
    base: Mapping[str, Any],
    length: int,
    seed_list: list[int],
    *,
    timeout_s: float,
    threads: int,
    say: Callable[[str], None],
    oom_micro_batch: int | None = None,
    base_oom: bool = False,
    layouts: LayoutBaselines | None = None,
    base_arm: nc.BaseArm | None = None,
) -> dict[str, Any]:
    """The recipe's Pareto neighbours, nearest first, each run here over the recipe's seeds at
    its length (the recipe's probe with the neighbour's knobs and env) and judged as the recipe
    is (`judge`) against the same baseline runs (`base`, not re-run), and more strictly: it
    holds only when it is `better` than them (`not_better`: two or three paired seeds cannot
    show a neighbour worse unless it is several times so, and it replaces the recipe on this
    check alone). The first that holds ends it (`held`: its trial), the ones after it are not
    run. `oom_micro_batch`: the recipe ran out
    of memory here at that micro-batch, so a neighbour at a micro-batch as large is not run
    (the layout is what failed: a lucky seed that fits proves nothing, as on the edge of a
    memory limit, where the same micro-batch fits on one run and not the next). `base_oom`: the
    baseline's runs all ran out of memory here; each neighbour is then paired against the
    defaults at its own layout (`layout_baseline`; `layouts`: those already run, shared with the
    recipe's own layout check), run beside it. `base_arm`: the baseline's config and runs
    behind `base`, run again on fresh seeds when a neighbour that holds after others were
    judged needs it (`neighbour_confirm`)."""
    if base_oom and layouts is None:
        layouts = LayoutBaselines(recipe, length, seed_list)
    out = neighbours_status(recipe, {"problems": ["not held"]})
    out["status"] = "tried"
    among = 0  # the neighbours judged so far on these seeds
    kw: dict[str, Any] = {"timeout_s": timeout_s, "threads": threads, "say": say}
    for n in recipe.source["neighbours"]:
        entry: dict[str, Any] = {
            "trial": n["trial"],
            "front": n.get("front") or "every objective",
            "changes": knob_changes(recipe, n),
        }
        if out["held"] is not None:
            out["tried"].append({**entry, "status": "not run", "holds": None})
            continue
        cfg = replace(recipe.probe_config(knobs=n["knobs"], steps=length), env=dict(n["env"]))
        if oom_micro_batch is not None and int(cfg.micro_batch) >= int(oom_micro_batch):
            why = f"not run: its micro-batch of {cfg.micro_batch} is as large as the one that "
            why += "ran out of memory here"
            out["tried"].append({**entry, "status": why, "holds": False, "problems": [why]})
            continue
        say(f"the recipe does not hold here: its Pareto neighbour trial {n['trial']}")
        shown = ["final_loss", *recipe.achieved]
        against, extra = base, []
        if layouts is None:
            runs = run_local(cfg, n["env"], seed_list, label=f"trial {n['trial']}", shown=shown,
                             **kw)  # fmt: skip
        else:  # the baseline ran out of memory: the defaults at this neighbour's layout
            runs, at = layouts.run_with(cfg, n["env"], f"trial {n['trial']}", shown=shown, **kw)
            against, extra = at["summary"], at["fresh_runs"]
            entry["baseline_accum"] = at["accum_steps"]
        judged = judge(recipe, runs, against, cfg)
        among += 1
        _must_beat(judged)
        entry.update(judged_entry(judged, [*runs, *extra]))
        if entry["holds"] and among > 1:  # the first of several to read better: fresh seeds
            arm = base_arm if layouts is None else layouts.arm(cfg)
            if arm is None:
                raise ValueError("a neighbour's confirmation needs the baseline's runs")
            judged, more, info = nc.confirm(
                recipe, cfg, n["env"], runs, arm, seed_list, among, label=f"trial {n['trial']}",
                **kw, shown=shown,
            )  # fmt: skip
            _must_beat(judged)
            entry.update(judged_entry(judged, [*runs, *extra, *more]))
            entry["confirmation"] = info
        entry["status"] = "holds" if entry["holds"] else "does not hold"
        if "confirmation" in entry and not entry["holds"]:
            entry["status"] = "does not hold on fresh seeds"
        out["tried"].append(entry)
        add_cost(out, entry)
        if entry["holds"]:
            out["held"] = n["trial"]
    out["why"] = (
        f"trial {out['held']} holds here"
        if out["held"] is not None
        else "none of them holds here either"
    )
    return out


def _must_beat(judged: dict[str, Any]) -> None:
    """A neighbour with no other problem that does not beat the defaults does not hold
    (`not_better`): added to `judged`'s problems."""
    if not judged["problems"] and judged["vs_baseline"]["verdict"] != "better":
        judged["problems"].append(not_better(judged["vs_baseline"]))


def not_better(vs: Mapping[str, Any]) -> str:
    """Why a neighbour that is not worse than the defaults still does not hold: it replaces the
    recipe on this check alone, so it must beat them; one that only ties them gives way to them,
    as a study's pick does (`paired.PREFER_DEFAULTS`)."""
    return (
        f"it does not beat PyTorch's defaults here ({vs['verdict']}): a neighbour replaces the "
        "recipe only when it does"
    )


def knob_changes(recipe: Recipe, neighbour: Mapping[str, Any]) -> list[str]:
    """What the neighbour changes from the recipe: `knob: recipe value -> neighbour value` for
    each knob and env variable that differs (a knob the neighbour leaves unset is the
    recipe's)."""
    out = []
    for name, value in neighbour["knobs"].items():
        mine = recipe.knobs.get(name)
        if value is None or _same(mine, value):
            continue
        out.append(f"{name}: {_value_text(mine)} -> {_value_text(value)}")
    env = neighbour.get("env") or {}
    for name in dict.fromkeys([*recipe.env, *env]):
        if recipe.env.get(name) != env.get(name):
            out.append(f"{name}: {recipe.env.get(name, '(unset)')} -> {env.get(name, '(unset)')}")
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)
    return bool(a == b)


def _value_text(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)
