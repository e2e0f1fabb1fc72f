"""The seeds a user may set (probe.seed, sampler.seed, a recipe's seed, the CLI's --seed): the
range every consumer of a seed accepts, with the seeds verification derives from it."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator

#: The most seeds a verification adds to a seed (seed + 1, ..., seed + n): verify.seeds and
#: `autotune verify --seeds`.
MAX_VERIFY_SEEDS = 100
#: The largest seed a user sets. NumPy, Optuna's samplers and the HF and Lightning seeding
#: take 0 ... 2**32 - 1 (torch takes more); verification adds up to MAX_VERIFY_SEEDS to it.
MAX_SEED = 2**32 - 1 - MAX_VERIFY_SEEDS


def seed_problem(value: int) -> str | None:
    """Why `value` cannot be a seed (one line naming the range), or None when it can."""
    if 0 <= value <= MAX_SEED:
        return None
    return (
        f"a seed is a whole number from 0 to {MAX_SEED} (NumPy's seeds end at 2**32 - 1 and "
        f"verification adds up to {MAX_VERIFY_SEEDS}), got {value}"
    )


def _check_seed(value: int) -> int:
    problem = seed_problem(value)
    if problem:
        raise ValueError(problem)
    return value


Seed = Annotated[int, AfterValidator(_check_seed)]
"""A seed field of a space or recipe: 0 ... MAX_SEED."""
