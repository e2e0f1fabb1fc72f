"""The study's importances import Optuna's evaluators without scikit-learn (~1.1 s of a study's
end), and leave scikit-learn importable for anyone else in the process."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

_SCRIPT = """
import json, sys
import optuna
from autotune import study as st
from autotune.study.importance import optuna_importance

optuna.logging.set_verbosity(optuna.logging.WARNING)
study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
for _ in range(30):
    t = study.ask()
    a, b = t.suggest_float("clip_norm", 0.1, 5.0), t.suggest_int("warmup_steps", 0, 100)
    t.set_user_attr("autotune.feasible", True)
    study.tell(t, a)
imp = st.importances(study, {"objectives": [{"metric": "loss_cv", "direction": "minimize"}]})
after = "sklearn" in sys.modules
mark_left = "sklearn.ensemble" in sys.modules
import sklearn.ensemble  # importable as ever
print(json.dumps({"imp": imp, "sklearn_after": after, "mark_left": mark_left,
                  "again": optuna_importance() is sys.modules["optuna.importance"]}))
"""


@pytest.mark.integration
def test_importances_are_computed_without_importing_scikit_learn() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=120, check=True
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["sklearn_after"] is False and got["mark_left"] is False and got["again"] is True
    assert list(got["imp"]["loss_cv"]) == ["clip_norm"]  # the warm-up is within chance
