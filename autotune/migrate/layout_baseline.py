"""The baseline at a neighbour's batch layout, when the recipe's baseline ran out of memory here.

A recipe whose micro-batch does not fit here has a baseline (PyTorch's defaults for the searched
knobs, at the recipe's layout) that does not fit either, and when the recipe is the defaults its
own runs are the baseline's. A Pareto neighbour at a smaller micro-batch paired against those
runs is "not compared" (no seed ran on both sides): "holds" would say only that it ran. The
defaults at the neighbour's own accumulation are the same arithmetic at a layout that fits (as
the re-tune's baseline is, `Space.baseline_knobs`): run over the same seeds, interleaved with the
neighbour's runs (a change in this machine's load falls on both), once per layout, they give the
neighbour a paired verdict against the defaults. Where the study searched the batch too, the
defaults keep their batch and take the accumulation that brings their micro-batch down to the
neighbour's (or below).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from autotune.migrate.neighbour_confirm import BaseArm
from autotune.probe.config import ProbeConfig
from autotune.probe.outcome import Outcome
from autotune.recipe.file import Recipe
from autotune.recipe.seeds import summarize_seeds
from autotune.recipe.verify import baseline_knobs, metrics_of, run_interleaved


def ran_out_of_memory(runs: list[dict[str, Any]]) -> bool:
    """Every one of `runs` (at least one) ended out of memory."""
    return bool(runs) and all(r.get("outcome") == Outcome.OOM for r in runs)


class LayoutBaselines:
    """The defaults at each neighbour's layout, run at most once per accumulation."""

    def __init__(self, recipe: Recipe, length: int, seeds: list[int]) -> None:
        self.recipe, self.length, self.seeds = recipe, length, seeds
        self.by_accum: dict[int, dict[str, Any]] = {}

    def accum(self, neighbour_cfg: ProbeConfig) -> int:
        """The defaults' accumulation at the neighbour's micro-batch: their batch over it."""
        batch = int(baseline_knobs(self.recipe)["batch"])
        return max(1, math.ceil(batch / max(1, int(neighbour_cfg.micro_batch))))

    def config(self, neighbour_cfg: ProbeConfig) -> ProbeConfig:
        """The defaults at the neighbour's micro-batch (or below)."""
        knobs = {**baseline_knobs(self.recipe), "accum_steps": self.accum(neighbour_cfg)}
        return self.recipe.probe_config(knobs=knobs, steps=self.length).for_baseline()

    def arm(self, neighbour_cfg: ProbeConfig) -> BaseArm:
        """The defaults at the neighbour's layout with their runs (`run_with` ran them)."""
        runs = self.by_accum[self.accum(neighbour_cfg)]["runs"]
        return BaseArm(self.config(neighbour_cfg), self.recipe.env, runs)

    def run_with(
        self,
        neighbour_cfg: ProbeConfig,
        env: Mapping[str, str],
        label: str,
        *,
        timeout_s: float,
        threads: int,
        say: Callable[[str], None],
        shown: list[str],
        done: list[dict[str, Any]] | None = None,
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The neighbour's runs over the seeds, and the baseline at its layout (its
        `accum_steps`, its `summary`, its `runs`, and `fresh_runs`: those made now, none when
        the layout was run for an earlier neighbour), both interleaved by seed. `done`: the
        neighbour's runs already made (at some of the seeds), not run again."""
        accum = self.accum(neighbour_cfg)
        new = accum not in self.by_accum
        arms = [(neighbour_cfg, env, label)]
        if new:
            arms.append((self.config(neighbour_cfg), self.recipe.env, f"baseline (accum {accum})"))
        made = list(done or [])
        skip = [(0, int(r["seed"])) for r in made]
        ran = run_interleaved(
            arms, self.seeds, timeout_s=timeout_s, threads=threads, say=say, shown=shown, skip=skip
        )
        if new:
            summary = summarize_seeds(ran[1], metrics_of(self.recipe))
            self.by_accum[accum] = {"accum_steps": accum, "summary": summary, "runs": ran[1]}
        runs = sorted([*made, *ran[0]], key=lambda r: self.seeds.index(r["seed"]))
        return runs, {**self.by_accum[accum], "fresh_runs": ran[1] if new else []}
