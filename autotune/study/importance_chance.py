"""Whether a knob's importance stands out from chance: a permutation test of PED-ANOVA's
importances.

PED-ANOVA ranks the knobs by how far the top 10% of the trials sit from the others in each knob.
With few trials that top is two or three trials, and some knob is always far from the rest by
chance: in the quick start (11 searched trials) `adam_eps` took 57% of the throughput's
importance, a knob that cannot change the speed. So each objective's raw importances are measured
against those of the same trials with the objective's values shuffled among them (the knobs kept
as they were): the chance p of a knob is the share of shuffles whose *largest* importance, any
knob's, reaches the knob's own (the max-T rule, so that the chance of one knob among several
standing out by luck stays at the level, whatever the number of knobs).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

#: Shuffles per objective: the smallest p they can show is 1 / (PERMUTATIONS + 1) = 0.025.
PERMUTATIONS = 39
#: A knob stands out from chance at a chance p at most this.
LEVEL = 0.05
_SEED = 0  # the same study gives the same answer


def chance_p(
    trials: Sequence[Any],
    directions: Sequence[Any],
    raw: Callable[[Any], dict[str, float]],
) -> dict[str, float]:
    """{knob: chance p} for the raw importances `raw(study)` gives `trials` (complete, feasible,
    with their params), against `PERMUTATIONS` shuffles of their values among them."""
    import optuna

    def study_of(values: Sequence[Sequence[float]]) -> Any:
        study = optuna.create_study(directions=list(directions))
        study.add_trials(
            [
                optuna.trial.create_trial(
                    params=t.params, distributions=t.distributions, values=list(v)
                )
                for t, v in zip(trials, values, strict=True)
            ]
        )
        return study

    values = [list(t.values) for t in trials]
    seen = raw(study_of(values))
    rng = np.random.default_rng(_SEED)
    largest = []
    for _ in range(PERMUTATIONS):
        order = rng.permutation(len(values))
        shuffled = raw(study_of([values[int(j)] for j in order]))
        largest.append(max(shuffled.values(), default=0.0))
    return {
        knob: (1 + sum(1 for m in largest if m >= value)) / (PERMUTATIONS + 1)
        for knob, value in seen.items()
    }
