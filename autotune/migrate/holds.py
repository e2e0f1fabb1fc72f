"""Does the recipe hold here: the recipe and the baseline re-run on this machine over the same
seeds at the decided length, judged by the paired verdict (`recipe.paired`, as `autotune
verify` judges), and the recipe's loss curve at its own seed against the one it recorded
(`repro.compare.compare_series`).

The seeds start at the recipe's probe seed (the seed its study ran every trial with), so the
first seed's curve is the recorded curve's twin: same seed, same data order, only the machine
differs. Threads: this machine's (its torch default, or `threads`), not the recipe's: the
thread count is part of what moved.

A recipe that does not hold in the full check has its Pareto neighbours tried (the study's other
candidates on the front, `source.neighbours`, recorded by export), nearest first, over the same
seeds and against the same baseline runs, until one holds (`try_neighbours`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from autotune.errors import one_line
from autotune.migrate.layout_baseline import LayoutBaselines, ran_out_of_memory
from autotune.probe.outcome import Outcome
from autotune.recipe import paired
from autotune.recipe.file import Recipe
from autotune.recipe.seeds import summarize_seeds
from autotune.recipe.verify import (
    baseline_config,
    is_baseline,
    metrics_of,
    run_interleaved,
    run_local,
)
from autotune.repro.compare import compare_series

RTOL = 0.05  # the curves' tolerance: `autotune compare`'s default
# The recorded run reproduces here when the loss at every recorded step is within this relative
# difference (measured: a torch 2.13 -> 2.14 and 1 -> 2 threads migration on a CPU, 1.4e-7; a
# run that trains differently drifts by more than 1e-2 within its first hundred steps).
REPRODUCE_RTOL = 1e-3


def reproduces(
    recipe: Recipe,
    *,
    steps: int | None,
    threads: int,
    timeout_s: float,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """The cheap check first: the recipe at its recorded seed, at the decided length, against
    its recorded curve (`recorded.curve`, the trial's run at that length). When every recorded
    step agrees within `REPRODUCE_RTOL` the machine trains the same run, and the study's own
    verification (its seeds, its paired verdict) stands for this one; one probe instead of
    2 x seeds. `reproduces` False (with `why`) otherwise; `runs`: the probe it ran (none when
    there is nothing to compare with), reused by the full check."""
    length, cfg = _probe(recipe, steps)
    recorded = recipe.recorded.get("curve")
    why = _not_comparable(recorded, length)
    if why is not None:
        return {"reproduces": False, "why": why, "runs": [], "steps": length}
    say(f"does the recorded run reproduce here: seed {cfg.seed}, {length} steps")
    runs = run_local(
        cfg,
        recipe.env,
        [cfg.seed],
        timeout_s=timeout_s,
        threads=threads,
        say=say,
        label="recipe  ",
        shown=["final_loss", *recipe.achieved],
    )
    curve = curve_check(recorded, runs[0])
    out: dict[str, Any] = {"reproduces": False, "runs": runs, "curve": curve, "steps": length}
    worst = curve.get("max_rel_diff")
    if runs[0].get("outcome") != "complete":
        out["why"] = f"the run here ended {runs[0].get('outcome')}"
    elif curve.get("status") != "compared" or curve.get("common_steps") != len(
        (recorded or {})["step"]
    ):
        out["why"] = f"the curves could not be compared step for step ({curve.get('status')})"
    elif worst is None or worst > REPRODUCE_RTOL:
        at = curve.get("max_rel_diff_step")
        out["why"] = f"the curves differ by up to {_rel(worst)} (at step {at})"
    else:
        out["reproduces"] = True
        out["why"] = (
            f"seed {cfg.seed}, {length} steps: every one of the {curve['common_steps']} recorded "
            f"steps within {_rel(worst)} of the recorded loss (<= {REPRODUCE_RTOL:g})"
        )
    return out


def reproduced(
    recipe: Recipe,
    fast: Mapping[str, Any],
    threads: int,
    spread: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """What `rerun` reports, for a recipe whose recorded run reproduced here, or (`spread`,
    `spread.within_spread`) ended within its verified seeds' spread: the study's own verdict
    stands (no baseline re-run)."""
    runs = fast["runs"]
    metrics = metrics_of(recipe)
    source = dict((recipe.source or {}).get("vs_baseline") or {})
    held = {"path": "reproduced", "reproduced": fast["why"]}
    if spread is not None:
        held = {
            "path": "within_spread",
            "reproduced": None,
            "not_reproduced": fast["why"],
            "spread": dict(spread),
        }
    return {
        **held,
        "steps": fast["steps"],
        "run_steps": fast["steps"],
        "seeds": [r.get("seed") for r in runs],
        "threads": threads,
        "recipe_result": summarize_seeds(runs, metrics),
        "baseline_result": None,
        "vs_baseline": {
            "verdict": source.get("verdict") or "not recorded",
            "why": "the study's paired verdict where it was tuned: the run is the same here"
            if spread is None
            else "the study's paired verdict where it was tuned: the run here ends as another "
            "seed would have there",
        },
        "problems": [],
        "neighbours": neighbours_status(recipe, {"problems": []}),  # not needed
        "source_verdict": source.get("verdict"),
        "samples": sum(_samples(r) for r in runs),
        "wall_s": sum(float(r.get("wall_s") or 0.0) for r in runs),
        "curve": fast["curve"],
        "fingerprint": next((r["fingerprint"] for r in runs if r.get("fingerprint")), None),
    }


def _probe(recipe: Recipe, steps: int | None) -> tuple[int, Any]:
    """The length checked (`steps`, else the length the study decided at) and the recipe's
    probe at it."""
    length = int(steps or recipe.probe.get("steps") or 200)
    return length, recipe.probe_config(steps=length)


def _not_comparable(recorded: Mapping[str, Any] | None, length: int) -> str | None:
    if not recorded or not recorded.get("step"):
        return "the recipe records no loss curve"
    if recorded.get("steps_run") != length:
        return (
            f"its recorded curve is {recorded.get('steps_run')} steps, not the {length} checked "
            "(exported before the study recorded the decided length's run, or --steps)"
        )
    return None


def _rel(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2g}"


def rerun(
    recipe: Recipe,
    *,
    seeds: int,
    steps: int | None,
    threads: int,
    timeout_s: float,
    say: Callable[[str], None],
    done: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Run the recipe and the baseline here; the paired verdict, the problems, the samples.
    `done`: the recipe's runs already made here at the first seeds (`reproduces`'s). When the
    recipe does not hold (and something runs here), its Pareto neighbours are tried
    (`try_neighbours`) against the same baseline runs."""
    length, cfg = _probe(recipe, steps)
    seed_list = [cfg.seed + i for i in range(seeds)]
    metrics = metrics_of(recipe)
    done = [r for r in done or [] if r.get("seed") in seed_list]
    defaults = is_baseline(recipe)
    arms = [(cfg, recipe.env, "recipe  ")]
    if not defaults:
        arms.append((baseline_config(recipe, length), recipe.env, "baseline"))
    # interleaved by seed: a change in this machine's load falls on both arms of a seed alike
    ran = run_interleaved(
        arms,
        seed_list,
        timeout_s=timeout_s,
        threads=threads,
        say=say,
        skip=[(0, r["seed"]) for r in done],
        shown=["final_loss", *recipe.achieved],
    )
    runs = sorted([*done, *ran[0]], key=lambda r: seed_list.index(r["seed"]))
    base_runs: list[dict[str, Any]] = ran[1] if not defaults else []
    base = summarize_seeds(base_runs, metrics) if not defaults else None
    judged = judge(recipe, runs, base, cfg, same=defaults)
    out: dict[str, Any] = {
        "steps": length,
        "run_steps": cfg.steps,
        "seeds": seed_list,
        "threads": threads,
        "recipe_result": judged["result"],
        "baseline_result": base,
        "fingerprint": next((r["fingerprint"] for r in runs if r.get("fingerprint")), None),
        "vs_baseline": judged["vs_baseline"],
        "problems": judged["problems"],
        **({"oom": judged["oom"]} if "oom" in judged else {}),
    }
    if runs and base_runs and all(_never_ran(r) for r in [*runs, *base_runs]):
        out["nothing_runs"] = nothing_runs(runs, base_runs)
    out["source_verdict"] = ((recipe.source or {}).get("vs_baseline") or {}).get("verdict")
    out["samples"] = sum(_samples(r) for r in [*runs, *base_runs])
    out["wall_s"] = sum(float(r.get("wall_s") or 0.0) for r in [*runs, *base_runs])
    out["curve"] = curve_check(recipe.recorded.get("curve"), runs[0] if runs else None)
    out["neighbours"] = neighbours_status(recipe, out)
    if out["neighbours"]["status"] == "to try":
        # the recipe is the baseline: its own runs are the baseline's
        against = base if base is not None else judged["result"]
        oom_mb = (out.get("oom") or {}).get("micro_batch")
        out["neighbours"] = try_neighbours(
            recipe, against, length, seed_list, timeout_s=timeout_s, threads=threads, say=say,
            oom_micro_batch=oom_mb, base_oom=ran_out_of_memory(base_runs if not defaults else runs),
        )  # fmt: skip
        out["samples"] += out["neighbours"]["samples"]
        out["wall_s"] += out["neighbours"]["wall_s"]
    return out


def judge(
    recipe: Recipe,
    runs: list[dict[str, Any]],
    base: Mapping[str, Any] | None,
    cfg: Any,
    *,
    same: bool = False,
) -> dict[str, Any]:
    """`runs` (the recipe's, or a neighbour's with its config `cfg`) judged as `autotune verify`
    judges a recipe: summarized on the recipe's metrics, the paired verdict against the
    baseline's runs (`base`; `same`: they are the baseline), the problems (`verify_problems`),
    running out of memory or failing on every seed first."""
    result = summarize_seeds(runs, metrics_of(recipe))
    compared = paired.compared_metrics(
        [
            {"metric": m, "direction": p.get("direction", "minimize")}
            for m, p in recipe.achieved.items()
        ]
    )
    vs = paired.compare(result, base, compared, same=same)
    problems = paired.verify_problems({"recipe_result": result, "vs_baseline": vs})
    out: dict[str, Any] = {"result": result, "vs_baseline": vs, "problems": problems}
    oom = out_of_memory(runs, cfg)
    failed = result["failed"]
    if oom is not None:
        out["oom"] = oom
        problems.insert(0, oom["why"])
    elif failed == len(runs):
        problems.insert(0, f"every seed failed ({failed} of {len(runs)})")
    return out


def neighbours_status(recipe: Recipe, holds: Mapping[str, Any]) -> dict[str, Any]:
    """Whether the recipe's Pareto neighbours (`source.neighbours`, recorded by export) are to
    be tried here (`status` "to try"), or why not: the recipe holds ("not needed"), nothing
    runs here ("not run"), the recipe records none ("not recorded": exported before autotune
    recorded them; "none": its study had no other candidate on the front)."""
    recorded = (recipe.source or {}).get("neighbours")
    out: dict[str, Any] = {
        "recorded": None if recorded is None else len(recorded),
        "tried": [],
        "held": None,
        "samples": 0,
        "probes": 0,
        "wall_s": 0.0,
    }
    if not holds.get("problems"):
        return {**out, "status": "not needed", "why": "the recipe holds here"}
    if holds.get("nothing_runs"):
        return {
            **out,
            "status": "not run",
            "why": "nothing runs here, the baseline included: no configuration can be judged",
        }
    if recorded is None:
        return {
            **out,
            "status": "not recorded",
            "why": "the recipe records no Pareto neighbours (exported before autotune "
            "recorded them): export it again from its study",
        }
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
    defaults at its own layout (`layout_baseline`), run beside it."""
    layouts = LayoutBaselines(recipe, length, seed_list) if base_oom else None
    out = neighbours_status(recipe, {"problems": ["not held"]})
    out["status"] = "tried"
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
            runs = run_local(cfg, n["env"], seed_list, timeout_s=timeout_s, threads=threads,
                             say=say, label=f"trial {n['trial']}", shown=shown)  # fmt: skip
        else:  # the baseline ran out of memory: the defaults at this neighbour's layout
            runs, at = layouts.run_with(cfg, n["env"], f"trial {n['trial']}", timeout_s=timeout_s,
                                        threads=threads, say=say, shown=shown)  # fmt: skip
            against, extra = at["summary"], at["fresh_runs"]
            entry["baseline_accum"] = at["accum_steps"]
        judged = judge(recipe, runs, against, cfg)
        if not judged["problems"] and judged["vs_baseline"]["verdict"] != "better":
            judged["problems"].append(not_better(judged["vs_baseline"]))
        holds = not judged["problems"]
        entry.update(
            status="holds" if holds else "does not hold",
            holds=holds,
            verdict=judged["vs_baseline"]["verdict"],
            vs_baseline=judged["vs_baseline"],
            problems=judged["problems"],
            result=judged["result"],
            samples=sum(_samples(r) for r in [*runs, *extra]),
            probes=len(runs) + len(extra),
            wall_s=sum(float(r.get("wall_s") or 0.0) for r in [*runs, *extra]),
        )
        out["tried"].append(entry)
        out["samples"] += entry["samples"]
        out["probes"] += entry["probes"]
        out["wall_s"] += entry["wall_s"]
        if holds:
            out["held"] = n["trial"]
    out["why"] = (
        f"trial {out['held']} holds here"
        if out["held"] is not None
        else "none of them holds here either"
    )
    return out


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


def _never_ran(run: Mapping[str, Any]) -> bool:
    """A run that trained no step: it failed, or ran out of memory before its first step (no
    summary: the workload's model or data did not fit)."""
    outcome = run.get("outcome")
    return outcome == Outcome.FAILED or (outcome == Outcome.OOM and not run.get("summary"))


def nothing_runs(runs: list[dict[str, Any]], base_runs: list[dict[str, Any]]) -> str:
    """Why nothing could be judged: the recipe and PyTorch's defaults both failed (or ran out
    of memory before their first step) on every seed here, so the cause is this machine (or
    how it is set up), not the recipe's knobs."""
    errors = [one_line(r.get("error") or "") for r in [*runs, *base_runs] if r.get("error")]
    cause = f": {errors[0]}" if errors else ""
    return (
        f"neither the recipe nor the baseline (PyTorch's defaults) trained a step on any seed "
        f"({len(runs)} and {len(base_runs)} runs){cause}"
    )


def out_of_memory(runs: list[dict[str, Any]], cfg: Any) -> dict[str, Any] | None:
    """The recipe's runs that ran out of memory here, with its micro-batch (what did not fit);
    None when none did."""
    oom = [r.get("seed") for r in runs if r.get("outcome") == Outcome.OOM]
    if not oom:
        return None
    accum = int(cfg.knobs.get("accum_steps") or 1)
    mb = int(cfg.micro_batch)
    return {
        "seeds": oom,
        "micro_batch": mb,
        "accum_steps": accum,
        "why": (
            f"it ran out of memory here on {len(oom)} of {len(runs)} seeds: its micro-batch of "
            f"{mb} (batch {mb * accum} / accum_steps {accum}) does not fit on this machine"
        ),
    }


def curve_check(
    recorded: Mapping[str, Any] | None, run: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The recorded loss curve against this machine's run at the same seed."""
    if not recorded:
        return {"status": "not recorded"}
    if (run or {}).get("outcome") == Outcome.OOM:  # its few steps say nothing of the curve
        return {"status": "no curve here", "why": "the run here ran out of memory"}
    summary = (run or {}).get("summary") or {}
    values = (summary.get("series") or {}).get(recorded.get("metric", "loss")) or []
    if not values:
        return {"status": "no curve here", "why": (run or {}).get("outcome")}
    if summary.get("seed") != recorded.get("seed"):
        return {"status": "other seed", "why": f"{summary.get('seed')} != {recorded.get('seed')}"}
    steps = [s for s in recorded["step"] if s < len(values)]
    if not steps:
        return {"status": "no common step"}
    rec = dict(zip(recorded["step"], recorded["value"], strict=True))
    nan = float("nan")
    result = compare_series(
        steps,
        [nan if rec[s] is None else rec[s] for s in steps],
        steps,
        [nan if values[s] is None else values[s] for s in steps],
        rtol=RTOL,
    )
    result["status"] = "compared"
    result["metric"] = recorded.get("metric", "loss")
    result["run_a"], result["run_b"] = "recorded", "here"
    return result


def _samples(run: Mapping[str, Any]) -> int:
    summary = run.get("summary") or {}
    seen = summary.get("samples_seen")
    if seen is not None:
        return int(seen)
    return int(summary.get("steps_run") or 0) * int(summary.get("samples_per_step") or 0)
