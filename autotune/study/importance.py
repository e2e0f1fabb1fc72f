"""Which knobs mattered: the parameter importances of a study's screen, per objective (Optuna's
PED-ANOVA evaluator), for the summary's MLflow artifacts and plot."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

from autotune.study.records import screen_feasible


def importances(study: Any, summary: Mapping[str, Any]) -> dict[str, dict[str, float]] | None:
    """Parameter importances per objective: Optuna's PED-ANOVA evaluator (which parameters
    matter for reaching the best values). Not fANOVA or mean decrease in impurity: those fit
    random forests with scikit-learn, whose import alone took 2 s at the end of every study."""
    import optuna

    judged = screen_feasible(study)
    complete = [
        t
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        if t.params and judged(t)
    ]
    if len(complete) < 3:
        return None
    out: dict[str, dict[str, float]] = {}
    for i, o in enumerate(summary["objectives"]):
        try:
            with warnings.catch_warnings():
                # It warns that it looks for low target values: a maximised one is negated.
                warnings.simplefilter("ignore", UserWarning)
                out[o["metric"]] = dict(
                    optuna.importance.get_param_importances(
                        study,
                        target=_value_getter(i, o.get("direction", "minimize")),
                        evaluator=optuna.importance.PedAnovaImportanceEvaluator(),
                        params=None,
                    )
                )
        except Exception:
            continue
    return out or None


def _value_getter(i: int, direction: str) -> Callable[[Any], float]:
    sign = -1.0 if direction == "maximize" else 1.0
    return lambda t: sign * float(t.values[i])
