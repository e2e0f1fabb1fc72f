"""The reduced study of a recipe that does not transfer: its space (the source study's space file)
with every searched knob outside the re-tune plan fixed at the recipe's value, a share of the
space's trials, warm-started from the recipe; the new recipe records where it came from
(`source.migrated_from`)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from autotune import space as sp
from autotune.errors import RecipeError
from autotune.knobs import DDP_KNOBS
from autotune.recipe.file import Recipe

SHARE = 0.3  # of the space's trials


def reduced_overrides(
    space: sp.Space,
    recipe: Recipe,
    keep: list[str],
    share: float,
    oom_micro_batch: int | None = None,
    least: int | None = None,
) -> list[str]:
    """`--set` items: the searched knobs not in `keep` fixed at the recipe's values (a choice of
    the recipe's and its Pareto neighbours' values where they differ: `front_values`), the trials
    cut to `share` of the space's (rounded down; at least `least`, by default `least_trials`),
    the study named apart from the source's. `oom_micro_batch`: the recipe's micro-batch ran out
    of memory here, so the accumulation choices that give a micro-batch as large are dropped
    (`fitting_accum`)."""
    out = [f"name={space.name}-migrated"]
    searched = space.searched()
    fronts = front_values(recipe)
    for name in sorted(searched):
        if name in keep or name.isupper():
            continue
        value = recipe.knobs.get(name)
        if value is None:
            continue
        values = [value, *[v for v in fronts.get(name, []) if v != value]]
        if len(values) > 1:  # the recipe's value or one of its Pareto neighbours'
            choices = ", ".join(json.dumps(v) for v in dict.fromkeys(values))
            out.append(f"knobs.{name}={{choices: [{choices}]}}")
        else:
            out.append(f"knobs.{name}={value}")
    if oom_micro_batch and "accum_steps" in keep and "accum_steps" in searched:
        batch = _trial_batch(space, recipe, keep)
        fits = fitting_accum(searched["accum_steps"], batch, oom_micro_batch)
        if fits:
            out.append(f"knobs.accum_steps={{choices: [{', '.join(str(a) for a in fits)}]}}")
    least = least_trials(recipe) if least is None else least
    trials = max(least, math.floor(share * space.budget.trials + 1e-9))
    out.append(f"budget.trials={trials}")
    return out


def _trial_batch(space: sp.Space, recipe: Recipe, keep: list[str]) -> int:
    """The batch a re-tune trial runs: the space's `knobs.batch` where it fixes one, the
    recipe's where the space searched it and the re-tune does not (fixed above), else
    `probe.batch` (what a trial without one runs: `sp.probe_config`)."""
    value = space.knobs.get("batch")
    if isinstance(value, sp.Domain):
        value = None if "batch" in keep else recipe.knobs.get("batch")
    return int(value or space.probe.samples_per_step)


def least_trials(recipe: Recipe) -> int:
    """The fewest trials a re-tune runs, counted from the recipe: the baseline, the recipe's warm
    start and its Pareto neighbours (`with_neighbours`), and one configuration the sampler
    chooses. With fewer (2 of a 5-trial space) it ran only the baseline and the recipe: nothing
    was searched, yet the verdict named the knobs it had 're-tuned'. `warm_trials` counts them
    in the reduced space, as the study runs them."""
    return 3 + len((recipe.source or {}).get("neighbours") or [])


def warm_trials(space: sp.Space, warm: Any) -> int:
    """The fewest trials a re-tune of `space` warm-started from `warm` runs: the baseline, each
    warm-start configuration the study does not already run (`distinct_params`: a recipe that is
    PyTorch's defaults is the baseline again, two neighbours the same in this space one), and
    one configuration the sampler chooses. A tied recipe's re-tune counted the defaults twice:
    5 trials where 4 ran the same configurations and one sampled."""
    from autotune.study.objectives import grid_values
    from autotune.study.warmstart import distinct_params

    searched = space.searched()
    grid = grid_values(space, searched)  # as the driver enqueues them
    return 2 + len(distinct_params(warm.configs, searched, space.baseline_knobs(), grid))


def clamped(recipe: Recipe, searched: Mapping[str, sp.Domain]) -> list[str]:
    """The recipe's knobs its warm start moves into the re-tune's space (`warm_params` clamps a
    value outside a domain to its bound): `clip_norm 1e-06 -> 0.05`. The report says so: the
    re-tune did not start from the recipe's own value."""
    from autotune.study.warmstart import warm_params

    warm = warm_params({"knobs": recipe.knobs, "env": recipe.env}, searched)
    mine = {**recipe.knobs, **recipe.env}
    return [
        f"{name} {mine[name]!r} -> {value!r}"
        for name, value in warm.items()
        if isinstance(value, int | float) and not _same(mine.get(name), value)
    ]


def _same(a: Any, b: float) -> bool:
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-9)
    except (TypeError, ValueError):
        return False


def front_values(recipe: Recipe) -> dict[str, list[Any]]:
    """Per knob, the values the recipe's Pareto neighbours (`source.neighbours`) give it, nearest
    neighbour first: a re-tune keeps a portable knob at the recipe's value or one of these, so a
    trade-off the source study found on its front can be chosen again at the new layout (a
    neighbour that failed here at the recipe's micro-batch may hold at a smaller one)."""
    out: dict[str, list[Any]] = {}
    for n in (recipe.source or {}).get("neighbours") or []:
        for name, value in (n.get("knobs") or {}).items():
            if value is not None and value not in out.setdefault(name, []):
                out[name].append(value)
    return out


def fitting_accum(domain: sp.Domain, batch: int, oom_micro_batch: int) -> list[int]:
    """The accumulation steps of `domain` that divide `batch` into a micro-batch smaller than
    the one that ran out of memory; empty when none does (the re-tune keeps the domain)."""
    if domain.is_choice:
        values = [int(c) for c in domain.choices]
    else:
        step = int(domain.step or 1)
        values = list(range(int(domain.low or 1), int(domain.high or 1) + 1, step))
    return [a for a in values if a >= 1 and max(1, batch // a) < oom_micro_batch]


def with_neighbours(warm: Any, recipe: Recipe, first: int | None = None) -> Any:
    """The recipe's warm start, then its Pareto neighbours' configurations, nearest first (tried
    after the baseline and the recipe, as far as the re-tune's trials go; a value outside the
    reduced space, such as the micro-batch that failed, is left to the sampler). `first`: the
    trial to try before the others (a tied recipe's first choice, `tie.retune_plan`)."""
    neighbours = sorted(
        (recipe.source or {}).get("neighbours") or [], key=lambda n: n.get("trial") != first
    )
    extra = [
        {"knobs": dict(n["knobs"]), "env": dict(n.get("env") or {}),
         "label": f"Pareto neighbour trial {n['trial']}"
         + (" (the study's first choice)" if n.get("trial") == first else "")}
        for n in neighbours
    ]  # fmt: skip
    return replace(warm, configs=[*warm.configs, *extra]) if extra else warm


def unfit(
    space_ref: str, recipe: Recipe, plan: Mapping[str, Any], share: float = SHARE
) -> str | None:
    """Why the re-tune `plan` cannot run in the space `space_ref` here (None when it can): the
    recipe's micro-batch ran out of memory (`oom_micro_batch`) and no trial of the reduced space
    runs a smaller one (a space that fixes `accum_steps` at the recipe's layout, or searches only
    accumulations that leave the micro-batch as large): each trial would run out of memory
    again, spending the trials' time to say what the check already said. Not said where
    something else in the space can make a trial fit: `probe.oom_retry` (a trial out of memory
    runs again at half the micro-batch) or a searched DDP knob (`gradient_as_bucket_view`
    saves a copy of the gradients)."""
    oom = plan.get("oom_micro_batch")
    if not oom:
        return None
    source = sp.load(space_ref)
    reduced = sp.load(space_ref, reduced_overrides(source, recipe, list(plan["knobs"]), share, oom))
    least = reduced.smallest_micro_batch(trials=True)
    if least < int(oom) or reduced.probe.oom_retry or set(DDP_KNOBS) & set(reduced.searched()):
        return None
    accum = source.knobs.get("accum_steps")
    shown = (
        "searched over values that leave it as large"
        if isinstance(accum, sp.Domain)
        else f"fixed at {accum if accum is not None else 1}"
    )
    return (
        f"every trial of the space {space_ref} runs a micro-batch of {least} or more "
        f"(accum_steps {shown}) and a micro-batch of {oom} ran out of memory here, so each "
        "would run out of memory again; a space whose accum_steps divides the batch into a "
        f"micro-batch smaller than {oom} can re-tune it"
    )


def retune(
    recipe: Recipe,
    recipe_path: str | Path,
    plan: Mapping[str, Any],
    space_ref: str,
    *,
    out_dir: Path,
    tracking_uri: str | None,
    say: Callable[[str], None],
    share: float = SHARE,
) -> dict[str, Any]:
    """Run the reduced study here and export its recipe next to the report. When nothing in
    it held here (no feasible trial to export), the result says why (`failed`) and has no
    recipe."""
    from autotune import study as st
    from autotune.study.export import recipe_from_study

    source = sp.load(space_ref)
    keep, oom = list(plan["knobs"]), plan.get("oom_micro_batch")
    first = (plan.get("tie") or {}).get("first_choice")
    warm = with_neighbours(st.load_warm_start(str(recipe_path)), recipe, first)
    # the trials counted as the study will run them, in the reduced space (the trials aside)
    trial_less = sp.load(space_ref, reduced_overrides(source, recipe, keep, share, oom))
    least = warm_trials(trial_less, warm)
    overrides = reduced_overrides(source, recipe, keep, share, oom, least)
    if int(plan.get("verify_seeds") or 0) > source.verify.seeds:  # a tie's (`tie.retune_plan`)
        overrides.append(f"verify.seeds={int(plan['verify_seeds'])}")
    space = sp.load(space_ref, overrides)
    moved = clamped(recipe, space.searched())
    say(f"re-tuning {', '.join(sorted(space.searched()))} over {space.budget.trials} trial(s)")
    result = st.run(
        st.StudyOptions(
            space=space,
            study_dir=out_dir / "retune" / space.name,
            tracking_uri=tracking_uri or f"sqlite:///{(out_dir / 'mlflow.db').resolve()}",
            quiet=True,
            warm_start=warm,
        )
    )
    if result.interrupted:  # Ctrl-C or SIGTERM: no verdict from a study cut short, no report
        raise KeyboardInterrupt
    searched = sorted(space.searched())
    compute = (result.summary or {}).get("compute") or {}
    try:
        new = recipe_from_study(str(result.study_dir))
    except RecipeError as e:  # nothing held here: said as the migration's verdict, not raised
        return {
            "recipe": None,
            "failed": str(e),
            "name": None,
            "searched": searched,
            "trials": space.budget.trials,
            "source_trials": source.budget.trials,
            "samples": compute.get("total"),
            "overrides": overrides,
            "knobs": {},
            "clamped": moved,
        }
    migrated: dict[str, Any] = {
        "recipe": recipe.name,
        "fingerprint_hash": recipe.fingerprint_hash,
        "re_tuned": searched,
        "trials": space.budget.trials,
        "source_trials": source.budget.trials,
        "why": {
            **{k: "the recipe's or a Pareto neighbour's value" for k in searched},
            **dict(plan.get("why") or {}),
        },
    }
    new = Recipe.from_dict(
        {**new.to_dict(), "source": {**new.source, "migrated_from": migrated}},
        source="re-tuned recipe",
    )
    path = new.save(out_dir / "recipe-retuned.yaml")
    vs = new.source.get("vs_baseline") or {}
    return {
        "recipe": str(path),
        "name": new.name,
        "trial": new.source.get("trial"),
        "first_choice": new.source.get("first_choice"),
        # the re-tune's own pick is PyTorch's defaults (chosen, or kept by a tie)
        "defaults": bool(new.source.get("defaults") or new.source.get("baseline")),
        "vs_baseline": {"verdict": vs.get("verdict"), "seeds": list(vs.get("seeds") or [])},
        "searched": searched,
        "trials": space.budget.trials,
        "source_trials": source.budget.trials,
        "samples": compute.get("total"),
        "overrides": overrides,
        "knobs": {k: new.knobs.get(k) for k in searched},
        "clamped": moved,
    }
