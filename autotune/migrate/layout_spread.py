"""The cheap check at a layout that fits: a probe at the recipe's seed, before the full check
re-runs the recipe and the baseline over the seeds.

A recipe whose micro-batch ran out of memory here (its cheap check's run, at its own seed, ended
`oom`) cannot reproduce its recorded run, but the same batch in more accumulation steps is the
same arithmetic at a smaller micro-batch (`layout`): the rounding of the sums moves, a workload
that draws its data per micro-batch draws other samples, and a layer that computes over the
micro-batch (batch norm) trains differently; not a run that reproduces, then. So that run,
at the recipe's seed, is judged as a run whose numerics moved is (`spread.within_spread`): when
it ends within the spread of the recipe's verified seeds where it was tuned, the recipe trains
at that layout as another seed would have there, the study's paired verdict against the
baseline stands, and the verdict is `transfers with these changes: accum_steps A -> B` on that
one probe (one more for each smaller layout tried while the one before ran out of memory too,
up to `MAX_LAYOUTS`), where the full check runs the recipe over the seeds, the baseline beside
it, then the layout over the seeds again (benchmarks/RESULTS.md, Migration). When it does not
(or the recipe records no spread to judge by, or lost to the baseline where it was tuned), the
full check runs and reuses the probes made.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from autotune.migrate.holds import carried_problems, carried_verdict, curve_check
from autotune.migrate.judged import out_of_memory, samples_of
from autotune.migrate.layout import MAX_LAYOUTS, fitting_accums
from autotune.migrate.neighbours import neighbours_status
from autotune.migrate.spread import recorded_seeds, within_spread
from autotune.probe.outcome import Outcome
from autotune.recipe.file import Recipe
from autotune.recipe.seeds import summarize_seeds
from autotune.recipe.verify import is_baseline, metrics_of, run_local

PATH = "layout_spread"  # `holds["path"]` of a recipe that held this way


def at_layout(
    recipe: Recipe,
    fast: dict[str, Any],
    *,
    threads: int,
    timeout_s: float,
    say: Callable[[str], None],
) -> tuple[dict[str, Any] | None, dict[int, dict[str, Any]]]:
    """`fast`: the cheap check's result (`holds.reproduces`), its run out of memory. The holds
    of a recipe that held at a layout that fits on one probe (see the module), or None; and the
    runs made, by accumulation, for the full check to reuse. A layout that ran but ended past
    the spread adds why to `fast["why"]` (the report's "why the cheap check did not stand")."""
    length = int(fast["steps"])
    cfg = recipe.probe_config(steps=length)
    oom = out_of_memory(list(fast["runs"]), cfg)
    _, no_spread = recorded_seeds(recipe, length)
    source_vs = dict((recipe.source or {}).get("vs_baseline") or {})
    if oom is None or no_spread is not None or carried_problems(source_vs):
        return None, {}
    batch = oom["micro_batch"] * oom["accum_steps"]
    tried: list[dict[str, Any]] = []
    made: dict[int, dict[str, Any]] = {}
    for accum in fitting_accums(batch, oom["accum_steps"], oom["micro_batch"])[:MAX_LAYOUTS]:
        lcfg = recipe.probe_config(knobs={**recipe.knobs, "accum_steps": accum}, steps=length)
        say(
            f"the recipe ran out of memory here: the same batch of {batch} in {accum} steps, "
            f"seed {lcfg.seed}, against its verified seeds' spread"
        )
        (run,) = run_local(lcfg, recipe.env, [lcfg.seed], timeout_s=timeout_s, threads=threads,
                           say=say, label=f"recipe (accum {accum})",
                           shown=["final_loss", *recipe.achieved])  # fmt: skip
        made[accum] = run
        entry = _entry(recipe, run, accum, int(lcfg.micro_batch))
        if run.get("outcome") == Outcome.OOM:
            entry["problems"] = [f"micro-batch {lcfg.micro_batch} ran out of memory here too"]
            tried.append(entry)
            continue
        spread = within_spread(recipe, run, length)
        if not spread["within"]:
            fast["why"] += f"; at accum_steps {accum} not within its verified seeds' spread: "
            fast["why"] += spread["why"]
            return None, made
        entry.update(holds=True, problems=[], spread=spread)
        tried.append(entry)
        return _held(recipe, fast, oom, batch, tried, threads, source_vs), made
    return None, made


def _entry(recipe: Recipe, run: dict[str, Any], accum: int, micro_batch: int) -> dict[str, Any]:
    """A tried layout's entry, as `layout.try_layout` records one (one run, no baseline)."""
    oom = run.get("outcome") == Outcome.OOM
    return {
        "accum_steps": accum,
        "micro_batch": micro_batch,
        "against": "the spread of its verified seeds where it was tuned",
        "holds": False,
        "verdict": "ran out of memory" if oom else "not within the spread",
        "vs_baseline": {"verdict": "not compared"},
        "problems": [],
        "result": summarize_seeds([run], metrics_of(recipe)),
        "run": run,
        "samples": samples_of(run),
        "probes": 1,
        "wall_s": float(run.get("wall_s") or 0.0),
        "out_of_memory": oom,
    }


def _held(
    recipe: Recipe,
    fast: Mapping[str, Any],
    oom: dict[str, Any],
    batch: int,
    tried: list[dict[str, Any]],
    threads: int,
    source_vs: dict[str, Any],
) -> dict[str, Any]:
    """What `holds.rerun` reports, for a recipe that held at the last of `tried` by its
    verified seeds' spread: the study's paired verdict stands; the problem is the memory."""
    held = tried[-1]
    vs = carried_verdict(
        source_vs, "the same batch in more steps ends here as another seed would have there"
    )
    # the defaults are their own baseline: the study's verdict is their first choice's, not theirs
    held["verdict"] = "not compared" if is_baseline(recipe) else vs["verdict"]
    held["vs_baseline"] = vs
    runs = [*fast["runs"], *(e.pop("run") for e in tried)]
    layout = {
        "from_accum": oom["accum_steps"],
        "batch": batch,
        "tried": tried,
        "held": held["accum_steps"],
        "samples": sum(e["samples"] for e in tried),
        "probes": len(tried),
        "wall_s": sum(e["wall_s"] for e in tried),
        "why": f"it holds at accum_steps {held['accum_steps']}: {held['spread']['why']}",
    }
    out: dict[str, Any] = {
        "path": PATH,
        "reproduced": None,
        "not_reproduced": fast["why"],
        "spread": held["spread"],
        "steps": fast["steps"],
        "run_steps": fast["steps"],
        "seeds": [r.get("seed") for r in fast["runs"]],
        "threads": threads,
        "recipe_is_baseline": is_baseline(recipe),  # the study's verdict is not its own
        "recipe_result": summarize_seeds(list(fast["runs"]), metrics_of(recipe)),
        "baseline_result": None,
        "vs_baseline": vs,
        "problems": [oom["why"]],
        "oom": oom,
        "layout": layout,
        "source_verdict": source_vs.get("verdict"),
        "samples": sum(samples_of(r) for r in runs),
        "wall_s": sum(float(r.get("wall_s") or 0.0) for r in runs),
        # the layout's run at the recorded seed: its curve against the recorded one shows how
        # far the layout moved it (a workload that draws its data per micro-batch draws others)
        "curve": {
            **curve_check(recipe.recorded.get("curve"), runs[-1]),
            "layout": f"accum_steps {held['accum_steps']}",  # not the recipe's own layout
        },
        "fingerprint": next((r["fingerprint"] for r in runs if r.get("fingerprint")), None),
    }
    out["neighbours"] = neighbours_status(recipe, out)  # not needed: it held at the layout
    return out
