"""A Pareto neighbour that holds after others were judged on the same seeds, judged again with
fresh seeds.

The neighbours are tried nearest first until one holds, each against the same baseline runs on
the recipe's seeds: the one that holds is the first of the j judged to read `better` there, and
each of them had its own chance of reading `better` by luck, which adds up over the j. With the
verdict's own code (`benchmarks/neighbour_selection.py`: 3 seeds, the final loss compared, none
of the neighbours better than PyTorch's defaults) one of 5 held in 10.5% of simulated
migrations, against 2.3% for one configuration. So a neighbour that reads `better` after j > 1
were judged runs again beside the defaults on as many fresh seeds (interleaved by seed), and it
holds only when the verdict over all the seeds is still `better` with no other problem: 4.7%
among 5 (3.9% among 3) in the same simulation, and the last of 5, better by 4 standard
deviations of a run's own noise, holds in 68% (64% before). A neighbour that does not is said
not to hold on fresh seeds, and the next is tried. (A study confirms its pick only where a
`better` shared over its candidates would not stand, `autotune.study.confirmed`: its candidates
are judged all at once, not one after another until one passes; here that rule would leave
6.3% among 5.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.migrate.judged import judge
from autotune.probe.config import ProbeConfig
from autotune.recipe.file import Recipe
from autotune.recipe.seeds import seeds_for, summarize_seeds
from autotune.recipe.verify import metrics_of, run_interleaved


@dataclass(frozen=True)
class BaseArm:
    """What a neighbour is paired against, to run again on fresh seeds: the defaults' config
    and environment, and their runs at the recipe's seeds."""

    cfg: ProbeConfig
    env: Mapping[str, str]
    runs: list[dict[str, Any]]


def fresh_seeds(seeds: Sequence[int]) -> list[int]:
    """As many seeds as `seeds`, after the last of them."""
    return seeds_for(int(seeds[-1]), len(seeds))


def confirm(
    recipe: Recipe,
    cfg: ProbeConfig,
    env: Mapping[str, str],
    runs: list[dict[str, Any]],
    base: BaseArm,
    seeds: Sequence[int],
    among: int,
    *,
    label: str,
    timeout_s: float,
    threads: int,
    say: Callable[[str], None],
    shown: Sequence[str],
) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    """Run the neighbour (`cfg`, `env`; its `runs` at `seeds`) and the defaults (`base`) on
    fresh seeds, interleaved; judge it over all the seeds. Returns `judge`'s result over them,
    the runs made now (both sides'), and what the entry records of it (`confirmation`)."""
    fresh = fresh_seeds(seeds)
    say(
        f"{label} reads better, judged after {among} neighbours on seeds {list(seeds)}: "
        f"run again beside the defaults on fresh seeds {fresh}"
    )
    ran = run_interleaved(
        [(cfg, env, label), (base.cfg, base.env, "baseline")],
        fresh,
        timeout_s=timeout_s,
        threads=threads,
        say=say,
        shown=shown,
    )
    every = summarize_seeds([*base.runs, *ran[1]], metrics_of(recipe))
    judged = judge(recipe, [*runs, *ran[0]], every, cfg)
    info = {
        "among": among,
        "chosen_on": list(seeds),
        "seeds": fresh,
        "first_verdict": "better",
        "verdict": judged["vs_baseline"]["verdict"],
    }
    return judged, [*ran[0], *ran[1]], info
