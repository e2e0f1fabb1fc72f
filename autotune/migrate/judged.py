"""A configuration's runs here judged as `autotune verify` judges a recipe: the paired verdict
against the baseline's runs, the problems, running out of memory or failing on every seed; and
the samples they cost. Shared by the recipe's check (`holds`), its Pareto neighbours
(`neighbours`) and the recipe at a layout that fits (`layout`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune.errors import one_line
from autotune.probe.outcome import Outcome
from autotune.recipe import paired
from autotune.recipe.file import Recipe
from autotune.recipe.seeds import summarize_seeds
from autotune.recipe.verify import metrics_of


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


def never_ran(run: Mapping[str, Any]) -> bool:
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
    """The recipe's runs that ran out of memory here, with its micro-batch (what did not fit)
    and whether every one did before its first step; None when none did."""
    out = [r for r in runs if r.get("outcome") == Outcome.OOM]
    if not out:
        return None
    accum = int(cfg.knobs.get("accum_steps") or 1)
    mb = int(cfg.micro_batch)
    return {
        "seeds": [r.get("seed") for r in out],
        "micro_batch": mb,
        "accum_steps": accum,
        # every one before its first step (no summary): the model or its data did not fit
        "before_first_step": not any(r.get("summary") for r in out),
        "why": (
            f"it ran out of memory here on {len(out)} of {len(runs)} seeds: its micro-batch of "
            f"{mb} (batch {mb * accum} / accum_steps {accum}) does not fit on this machine"
        ),
    }


COST = ("samples", "probes", "wall_s")


def judged_entry(judged: Mapping[str, Any], runs: list[dict[str, Any]]) -> dict[str, Any]:
    """What a tried configuration's entry records of `judge`'s result (`judged`) and of the
    runs it cost (`runs`: its own and any baseline's run beside it)."""
    return {
        "holds": not judged["problems"],
        "verdict": judged["vs_baseline"]["verdict"],
        "vs_baseline": judged["vs_baseline"],
        "problems": judged["problems"],
        "result": judged["result"],
        "samples": sum(samples_of(r) for r in runs),
        "probes": len(runs),
        "wall_s": sum(float(r.get("wall_s") or 0.0) for r in runs),
    }


def add_cost(total: dict[str, Any], part: Mapping[str, Any], keys: tuple[str, ...] = COST) -> None:
    """Add what `part` cost (`keys` of it) to `total`."""
    for key in keys:
        total[key] += part[key]


def samples_of(run: Mapping[str, Any]) -> int:
    summary = run.get("summary") or {}
    seen = summary.get("samples_seen")
    if seen is not None:
        return int(seen)
    return int(summary.get("steps_run") or 0) * int(summary.get("samples_per_step") or 0)
