"""Importances the evaluator could not rank are said to be so, not drawn as equal bars."""

from __future__ import annotations

from collections.abc import Callable

from autotune import study as st

OBJECTIVES = {
    "objectives": [
        {"metric": "noise_per_drop", "direction": "minimize"},
        {"metric": "throughput", "direction": "maximize"},
    ]
}


def _study(n: int, values: Callable[[float, int], list[float]]) -> object:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        directions=["minimize", "maximize"], sampler=optuna.samplers.RandomSampler(seed=0)
    )
    for _ in range(n):
        t = study.ask()
        clip, accum = t.suggest_float("clip_norm", 0.1, 5.0), t.suggest_int("accum_steps", 1, 8)
        t.set_user_attr("autotune.feasible", True)
        study.tell(t, values(clip, accum))
    return study


def test_equal_values_are_too_few_to_rank_not_equal_importances() -> None:
    """Optuna's fallback: every trial in its top quantile ("importances will be equal")."""
    study = _study(24, lambda clip, accum: [clip, 1000.0])  # throughput the same for every trial
    imp = st.importances(study, OBJECTIVES)
    assert imp is not None
    assert imp["throughput"] == "too few trials to rank the knobs for throughput"
    ranked = imp["noise_per_drop"]
    assert isinstance(ranked, dict) and ranked["clip_norm"] > 0.5
    assert "accum_steps" not in ranked  # it does not stand out from chance


def test_a_top_quantile_of_one_trial_is_too_few_to_rank() -> None:
    """7 trials: PED-ANOVA's top 10% is one trial, whose knobs' distance from the others would
    read as a ranking whatever the objective."""
    study = _study(7, lambda clip, accum: [clip, 1000.0 / accum])
    imp = st.importances(study, OBJECTIVES)
    assert imp == {
        "noise_per_drop": "too few trials to rank the knobs for noise_per_drop",
        "throughput": "too few trials to rank the knobs for throughput",
    }


def test_trials_that_broke_a_constraint_do_not_rank_the_knobs() -> None:
    """A trial that broke a constraint holds a stand-in value, not a measurement: the knobs are
    ranked over the feasible trials only. Here the feasible trials' noise depends on the clip
    alone; the infeasible ones (every accumulation of 6 or more) hold a large stand-in, which
    counted in made the throughput, the same for every feasible trial, look decided by the
    accumulation (0.99 of its importance)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        directions=["minimize", "maximize"], sampler=optuna.samplers.RandomSampler(seed=1)
    )
    for _ in range(80):
        t = study.ask()
        clip, accum = t.suggest_float("clip_norm", 0.1, 5.0), t.suggest_int("accum_steps", 1, 8)
        feasible = accum < 5
        t.set_user_attr("autotune.feasible", feasible)
        study.tell(t, [clip if feasible else 1e6, 1000.0 if feasible else 0.0])
    imp = st.importances(study, OBJECTIVES)
    assert imp is not None
    noise = imp["noise_per_drop"]
    assert isinstance(noise, dict), noise
    assert "clip_norm" in noise and "accum_steps" not in noise, noise
    assert imp["throughput"] == "too few trials to rank the knobs for throughput"


def test_a_knob_that_ranks_first_by_chance_is_not_a_finding() -> None:
    """11 trials whose objective is noise: PED-ANOVA still ranks some knob first (its top 10%
    is two trials, far from the rest in some knob by chance); the permutation test says that
    none stands out. With 40 trials of an objective the clip sets, the clip stands out."""
    import numpy as np

    rng = np.random.default_rng(3)
    noise = _study(11, lambda clip, accum: [float(rng.lognormal()), float(rng.lognormal())])
    imp = st.importances(noise, OBJECTIVES)
    assert imp is not None
    for metric in ("noise_per_drop", "throughput"):
        said = imp[metric]
        assert isinstance(said, str) and said.startswith("no knob stands out from chance"), said
    signal = _study(40, lambda clip, accum: [clip, 1000.0 / accum])
    imp = st.importances(signal, OBJECTIVES)
    assert imp is not None
    assert list(imp["noise_per_drop"]) == ["clip_norm"], imp
    assert list(imp["throughput"]) == ["accum_steps"], imp
