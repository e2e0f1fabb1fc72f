"""Does the recipe hold here: the recipe and the baseline re-run on this machine over the same
seeds at the decided length, judged by the paired verdict (`recipe.paired`, as `autotune
verify` judges), and the recipe's loss curve at its own seed against the one it recorded
(`repro.compare.compare_series`).

The seeds start at the recipe's probe seed (the seed its study ran every trial with), so the
first seed's curve is the recorded curve's twin: same seed, same data order, only the machine
differs. Threads: this machine's (its torch default, or `threads`), not the recipe's: the
thread count is part of what moved.

A recipe whose micro-batch ran out of memory in the full check runs first as the same batch in
more accumulation steps (`layout.try_layout`); one that does not hold (there, or at all) has its
Pareto neighbours tried (the study's other candidates on the front, `source.neighbours`,
recorded by export), nearest first, over the same seeds and against the same baseline runs,
until one holds (`neighbours.try_neighbours`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from autotune.migrate.judged import add_cost, judge, never_ran, nothing_runs, samples_of
from autotune.migrate.layout import try_layout
from autotune.migrate.layout_baseline import LayoutBaselines, ran_out_of_memory
from autotune.migrate.neighbour_confirm import BaseArm
from autotune.migrate.neighbours import neighbours_status, try_neighbours
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
    problems = carried_problems(source)
    status = neighbours_status(recipe, {"problems": []})  # not needed
    if problems:  # judged where it was tuned: no baseline ran here to judge a neighbour against
        why = "the study's verdict is carried over (no baseline ran here); `--full` runs them"
        status = {**status, "status": "not run", "why": why}
    return {
        **held,
        "steps": fast["steps"],
        "run_steps": fast["steps"],
        "seeds": [r.get("seed") for r in runs],
        "threads": threads,
        "recipe_is_baseline": is_baseline(recipe),  # the study's verdict is not its own
        "recipe_result": summarize_seeds(runs, metrics),
        "baseline_result": None,
        "vs_baseline": carried_verdict(
            source,
            "the run is the same here"
            if spread is None
            else "the run here ends as another seed would have there",
        ),
        "problems": problems,
        "neighbours": status,
        "source_verdict": source.get("verdict"),
        "samples": sum(samples_of(r) for r in runs),
        "wall_s": sum(float(r.get("wall_s") or 0.0) for r in runs),
        "curve": fast["curve"],
        "fingerprint": next((r["fingerprint"] for r in runs if r.get("fingerprint")), None),
    }


def carried_verdict(source_vs: Mapping[str, Any], here: str) -> dict[str, Any]:
    """The study's paired verdict against the baseline (`source.vs_baseline`), carried over by a
    cheap check whose run `here` says why it stands for this machine."""
    return {
        **{k: source_vs[k] for k in ("worse_on", "diverged") if k in source_vs},
        "verdict": source_vs.get("verdict") or "not recorded",
        "why": f"the study's paired verdict where it was tuned: {here}",
    }


def carried_problems(source_vs: Mapping[str, Any]) -> list[str]:
    """Why the recipe did not hold where it was tuned, by its study's paired verdict against the
    baseline (`source.vs_baseline`): a run that is the same here (or another seed of it) carries
    that verdict over, so a recipe that lost to the baseline there does not transfer here."""
    lost = paired.verify_problems({"recipe_result": {}, "vs_baseline": dict(source_vs)})
    return [f"where it was tuned, {p} (the study's verdict: {source_vs['verdict']})" for p in lost]


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
    layout_done: Mapping[int, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Run the recipe and the baseline here; the paired verdict, the problems, the samples.
    `done`: the recipe's runs already made here at the first seeds (`reproduces`'s);
    `layout_done`: its runs made at layouts that fit, by accumulation (`layout_spread`'s). When the
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
    out["source_verdict"] = ((recipe.source or {}).get("vs_baseline") or {}).get("verdict")
    out["samples"] = sum(samples_of(r) for r in [*runs, *base_runs])
    out["wall_s"] = sum(float(r.get("wall_s") or 0.0) for r in [*runs, *base_runs])
    out["curve"] = curve_check(recipe.recorded.get("curve"), runs[0] if runs else None)
    # the recipe is the baseline: its own runs are the baseline's
    base_oom = ran_out_of_memory(base_runs if not defaults else runs)
    layouts = LayoutBaselines(recipe, length, seed_list) if base_oom else None
    kw: dict[str, Any] = {"timeout_s": timeout_s, "threads": threads, "say": say}
    if "oom" in judged:  # first the same batch in more steps (`layout`)
        fit = base if not base_oom else None
        out["layout"] = try_layout(
            recipe, judged["oom"], length, seed_list, base=fit, layouts=layouts,
            done=layout_done, **kw,
        )  # fmt: skip
        add_cost(out, out["layout"], ("samples", "wall_s"))
    held_at_layout = (out.get("layout") or {}).get("held") is not None
    if runs and base_runs and not held_at_layout and all(never_ran(r) for r in [*runs, *base_runs]):
        out["nothing_runs"] = nothing_runs(runs, base_runs)
    out["neighbours"] = neighbours_status(recipe, out)
    if out["neighbours"]["status"] == "to try":
        against = base if base is not None else judged["result"]
        oom_mb = (out.get("oom") or {}).get("micro_batch")
        arm = BaseArm(arms[-1][0], recipe.env, base_runs if not defaults else runs)
        out["neighbours"] = try_neighbours(
            recipe, against, length, seed_list, oom_micro_batch=oom_mb, base_oom=base_oom,
            layouts=layouts, base_arm=arm, **kw,
        )  # fmt: skip
        add_cost(out, out["neighbours"], ("samples", "wall_s"))
    return out


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
