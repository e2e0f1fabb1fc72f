"""Which knobs mattered: the parameter importances of a study's screen, per objective (Optuna's
PED-ANOVA evaluator), for the summary's MLflow artifacts and plot."""

from __future__ import annotations

import math
import sys
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from autotune.study.importance_chance import LEVEL, chance_p
from autotune.study.records import screen_feasible

#: An objective's importances, or why there are none (`unranked`): a name per searched knob.
Importances = dict[str, dict[str, float] | str]

#: How Optuna says it fell back to equal importances (too few trials, or its top trials are
#: all its trials): a result drawn as a ranking would read as a finding.
_FALLBACK = "importances will be equal"

#: PED-ANOVA compares the knobs of the top 10% of the trials with all of them. With one top
#: trial (fewer than 11 trials) that is how far one trial's knobs sit from the others': the
#: same numbers whichever objective picked it, no ranking of the knobs.
_TOP_QUANTILE = 0.1
_MIN_TOP = 2


def unranked(metric: str) -> str:
    """What the importances say of an objective the evaluator could not rank the knobs for."""
    return f"too few trials to rank the knobs for {metric}"


def importances(study: Any, summary: Mapping[str, Any]) -> Importances | None:
    """Parameter importances per objective: Optuna's PED-ANOVA evaluator (which parameters
    matter for reaching the best values). Not fANOVA or mean decrease in impurity: those fit
    random forests with scikit-learn, whose import alone took 2 s at the end of every study.

    Only the feasible trials are ranked over (one that broke a constraint holds a stand-in).
    An objective the evaluator could not rank (fewer than 3 feasible trials, a top 10% of one
    trial, or Optuna's fallback to equal importances) gets the sentence `unranked` instead of
    numbers; None when nothing was searched."""
    import optuna

    evaluators = optuna_importance()

    judged = screen_feasible(study)
    complete = [
        t
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        if t.params and judged(t)
    ]
    if not complete:
        return None
    # A trial that broke a constraint holds a stand-in value, not a measurement: the knobs are
    # ranked over the feasible trials alone (a study of those, in memory).
    study = optuna.create_study(directions=study.directions)
    study.add_trials(complete)
    out: Importances = {}
    for i, o in enumerate(summary["objectives"]):
        metric = o["metric"]
        if len(complete) < 3 or _top_count(study, i) < _MIN_TOP:
            out[metric] = unranked(metric)
            continue
        try:
            with warnings.catch_warnings(record=True) as said:
                # It warns that it looks for low target values (a maximised one is negated),
                # and when it falls back to equal importances: that is read from `said`.
                warnings.simplefilter("always", UserWarning)
                found = dict(
                    evaluators.get_param_importances(
                        study,
                        target=_value_getter(i, o.get("direction", "minimize")),
                        evaluator=evaluators.PedAnovaImportanceEvaluator(
                            target_quantile=_TOP_QUANTILE
                        ),
                        params=None,
                    )
                )
        except Exception:
            continue
        fell_back = any(_FALLBACK in str(w.message).lower() for w in said)
        if fell_back or _all_equal(found):
            out[metric] = unranked(metric)
            continue
        out[metric] = _beyond_chance(study, complete, i, o, found, evaluators)
    return out or None


def _beyond_chance(
    study: Any,
    complete: list[Any],
    i: int,
    objective: Mapping[str, Any],
    found: dict[str, float],
    evaluators: Any,
) -> dict[str, float] | str:
    """The knobs of `found` (shares of the total importance) whose importance stands out from
    chance (`importance_chance`), or a sentence saying that none does."""
    getter = _value_getter(i, objective.get("direction", "minimize"))

    def raw(of: Any) -> dict[str, float]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the target's direction; `normalize` experimental
            return dict(
                evaluators.get_param_importances(
                    of,
                    target=getter,
                    evaluator=evaluators.PedAnovaImportanceEvaluator(target_quantile=_TOP_QUANTILE),
                    normalize=False,
                )
            )

    p = chance_p(complete, study.directions, raw)
    kept = {knob: share for knob, share in found.items() if p.get(knob, 1.0) <= LEVEL}
    if kept:
        return kept
    metric = objective["metric"]
    return (
        f"no knob stands out from chance for {metric} ({len(complete)} trials; the likeliest, "
        f"{min(p, key=lambda k: p[k])}, chance p {min(p.values()):.2f})"
    )


def _top_count(study: Any, i: int) -> int:
    """How many trials the evaluator's top quantile (its default 10%) holds for objective `i`:
    it counts the complete trials with a finite value, as Optuna does."""
    import optuna

    trials = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    n = sum(1 for t in trials if t.values and math.isfinite(float(t.values[i])))
    return math.ceil(_TOP_QUANTILE * n)


def _all_equal(found: Mapping[str, float]) -> bool:
    """Equal importances of several knobs: Optuna's normalisation of all-zero ones (no regime
    had enough trials), not a measurement."""
    values = list(found.values())
    return len(values) > 1 and max(values) - min(values) <= 1e-12


def _value_getter(i: int, direction: str) -> Callable[[Any], float]:
    sign = -1.0 if direction == "maximize" else 1.0
    return lambda t: sign * float(t.values[i])


def optuna_importance() -> Any:
    """`optuna.importance`, imported without scikit-learn. Its package imports the fANOVA
    evaluator, which imports `sklearn.ensemble` under Optuna's `try_import` (an ImportError is
    kept for when fANOVA is used): ~1.1 s of the study's end, for an evaluator this module never
    uses. The import runs with `sklearn.ensemble` marked absent, and the mark is removed after,
    so scikit-learn imports as before for anyone else (fANOVA in this process would say
    scikit-learn is missing). If Optuna ever imports it outright, it is imported as it was."""
    if "optuna.importance" in sys.modules or "sklearn.ensemble" in sys.modules:
        import optuna.importance

        return optuna.importance
    sys.modules["sklearn.ensemble"] = None  # type: ignore[assignment]
    try:
        import optuna.importance
    except ImportError:  # not under try_import: import it whole
        del sys.modules["sklearn.ensemble"]
        sys.modules.pop("optuna.importance", None)
        import optuna.importance
    finally:
        if "sklearn.ensemble" in sys.modules and sys.modules["sklearn.ensemble"] is None:
            del sys.modules["sklearn.ensemble"]
    return optuna.importance
