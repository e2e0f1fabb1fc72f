"""What `autotune verify`, `autotune repro` and `autotune migrate` check of a recipe before any
probe runs or anything is logged: the file (`Recipe.load`), its workload resolved here
(`check_workload`), its probe on this machine's cores and the seconds a probe may take
(`check_timeout`). One place, so that a bad
recipe or option is refused by each command in the same line and with the same exit status."""

from __future__ import annotations

import math
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from autotune.errors import RecipeError, UsageError
from autotune.probe.steps import device_problem
from autotune.process.cores import check_fits_here
from autotune.recipe.file import Recipe
from autotune.recipe.script_hash import warn_if_script_changed
from autotune.recipe.values import env_problems, env_unwarned
from autotune.space.limits import MAX_TIMEOUT_S


def check_timeout(timeout_s: Any, flag: str = "--timeout") -> None:
    """Seconds per probe: a finite number > 0 and at most 30 days (as a space bounds
    `budget.trial_timeout_s`), a UsageError naming `flag` otherwise. A limit of 0, -1 or NaN
    fails every probe, and every failed probe reads as the recipe's failure; one of 1e10 s
    overflows the launcher's clock."""
    if not (
        isinstance(timeout_s, int | float)
        and not isinstance(timeout_s, bool)
        and math.isfinite(timeout_s)
        and 0 < timeout_s <= MAX_TIMEOUT_S
    ):
        raise UsageError(
            f"{flag} {timeout_s}: must be a finite number of seconds > 0 and at most "
            f"{MAX_TIMEOUT_S} (30 days)"
        )


def check_workload(recipe: Recipe, source: str) -> None:
    """Resolve the recipe's workload here, before any probe runs: a workload that cannot be
    found or built fails once, naming it and the recipe file, not once per seed. Resolving
    imports the workload's module: a recipe's workload is code that runs. A script edited
    since the recipe recorded it is warned of (`script_hash`), and run as it is now."""
    from autotune.errors import WorkloadError
    from autotune.probe.workload import resolve

    script = recipe.workload.get("script")
    if script:
        if not Path(script).is_file():
            raise WorkloadError(f"{source}: workload.script: {script}: no such file")
        warn_if_script_changed(recipe.workload)
        return
    try:
        resolve(recipe.workload["name"], recipe.workload.get("size", "tiny"))
    except WorkloadError as e:
        raise WorkloadError(f"{source}: workload: {e}") from None


def warn_of_env(recipe: Recipe, path: str | Path) -> None:
    """One warning line on stderr per variable of the recipe's `env:` that a space's `env:`
    would be warned of (`values.env_problems`: a misspelt NCCL/RCCL name, a value not among an
    enumerated variable's): the library ignores a name it does not know, so the runs would
    measure a setting the recipe does not make. A warning, as in a study: they run. The text
    `Recipe.load` warns of in a user's own code (a `RecipeEnvWarning`)."""
    for line in env_problems(recipe.env, str(path)):
        print(f"autotune: warning: {line}", file=sys.stderr)


def load_checked(path: str | Path, *, own_threads: bool = False) -> Recipe:
    """The recipe file at `path` as verify, repro and migrate take it: read by its own rules
    (`Recipe.load`: the file and key of a problem named), its workload resolved here
    (`check_workload`), its `env:` warned of as a space's is
    (`warn_of_env`) and its probe fitting this machine's cores (`cores.check_fits_here`:
    its ranks and threads) and its device (a GPU where torch sees none is refused), before any
    probe runs. `own_threads`: the command runs at this
    machine's threads, not the recipe's (migrate), so those are not checked."""
    with env_unwarned():  # said once, by `warn_of_env`, after the workload's check
        recipe = Recipe.load(path)
    check_workload(recipe, str(path))
    warn_of_env(recipe, path)
    cfg = recipe.probe_config()
    problem = device_problem(cfg.device)  # each probe would raise at its first step
    if problem is not None:
        raise RecipeError(f"{path}: probe.device: {problem}")
    cores = os.cpu_count() or 1
    if own_threads:
        cfg = replace(cfg, threads=None)
    elif cfg.threads and cfg.threads > cores and cfg.threads % cfg.world_size == 0:
        # A recipe made on a larger machine asks for more threads than this one has: it runs
        # (the loss does not depend on them), and its timings measure the sharing; the
        # command's comparison of throughput says the machines differ.
        print(
            f"warning: {path}: probe.threads {cfg.threads} is more than this machine's "
            f"{cores} CPU(s) (the recipe was made on a larger one): its timings here measure "
            "the sharing",
            file=sys.stderr,
        )
        cfg = replace(cfg, threads=None)
    check_fits_here(cfg, str(path), "world_size")
    return recipe
