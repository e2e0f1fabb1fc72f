"""Which knobs mattered: the parameter importances of a study's screen, per objective (Optuna's
PED-ANOVA evaluator), for the summary's MLflow artifacts and plot."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from autotune.study.records import screen_feasible


def importances(study: Any, summary: Mapping[str, Any]) -> dict[str, dict[str, float]] | None:
    """Parameter importances per objective: Optuna's PED-ANOVA evaluator (which parameters
    matter for reaching the best values). Not fANOVA or mean decrease in impurity: those fit
    random forests with scikit-learn, whose import alone took 2 s at the end of every study."""
    import optuna

    evaluators = optuna_importance()

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
                    evaluators.get_param_importances(
                        study,
                        target=_value_getter(i, o.get("direction", "minimize")),
                        evaluator=evaluators.PedAnovaImportanceEvaluator(),
                        params=None,
                    )
                )
        except Exception:
            continue
    return out or None


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
