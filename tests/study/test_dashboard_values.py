"""What optuna-dashboard plots for trials without a finite objective: real Optuna storage, the
driver's own record and tell (`complete_outcome`, `tell`), and optuna-dashboard's own API (the
trials and values its browser code draws the history and Pareto plots from). Nothing mocked."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any
from wsgiref.util import setup_testing_defaults

import pytest

from autotune import space as sp
from autotune import study as at
from autotune.study import attrs as ua
from autotune.study.records import observed_metrics

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

SPACE = sp.loads(
    """\
name: stand-ins
workload: mlp
knobs:
  lr: {low: 1.0e-4, high: 1.0e-1, log: true}
"""
)

NAN = float("nan")
# (outcome, noise_per_drop, throughput, loss_drop): the baseline first, two that did not learn
# (no finite noise_per_drop) or diverged (nothing finite). The last did not learn on the
# training loss but passes every constraint on the held-out one (loss_drop 0.46): told a
# stand-in all the same, it is infeasible too.
TRIALS = [
    ("complete", 0.20, 1000.0, 0.40),
    ("complete", 0.12, 900.0, 0.50),
    ("diverged", NAN, NAN, NAN),
    ("complete", 0.35, 1100.0, 0.30),
    ("complete", NAN, 1050.0, 0.0),
    ("complete", NAN, 1020.0, 0.46),
]


def test_stand_ins_lie_just_past_the_worst_value_observed() -> None:
    seen = [{"noise_per_drop": 0.2, "throughput": 1000.0}, {"noise_per_drop": 0.4}]
    noise, throughput = at.stand_ins(SPACE, seen)
    assert noise == pytest.approx(0.4 + 0.1 * 0.4)  # the worst's size beats the span (0.2)
    assert throughput == pytest.approx(1000.0 - 0.1 * 1000.0)
    spread = [{"noise_per_drop": 0.9}, {"noise_per_drop": 2.9}]  # |worst| 2.9 > span 2.0
    assert at.stand_ins(SPACE, spread)[0] == pytest.approx(2.9 + 0.29)
    wide = [{"noise_per_drop": -5.0}, {"noise_per_drop": 1.0}]  # span 6 > |worst| 1
    assert at.stand_ins(SPACE, wide)[0] == pytest.approx(1.0 + 0.6)
    assert at.stand_ins(SPACE, []) == [1.0, -1.0]  # nothing observed yet
    assert at.stand_ins(SPACE, [{"noise_per_drop": 0.0, "throughput": NAN}]) == [1.0, -1.0]
    values = at.values_of(SPACE, {"noise_per_drop": NAN, "throughput": 5.0}, [7.0, -7.0])
    assert values == [7.0, 5.0]


def _app_json(app: Any, path: str) -> Any:
    out: dict[str, Any] = {}

    def start(status: str, headers: list[tuple[str, str]], exc: Any = None) -> None:
        out["status"] = status

    environ: dict[str, Any] = {"PATH_INFO": path, "wsgi.errors": io.StringIO()}
    setup_testing_defaults(environ)
    body = b"".join(app(environ, start))
    why = environ["wsgi.errors"].getvalue()
    assert out["status"].startswith("200"), (out["status"], body[:500], why[-2000:])
    return json.loads(body)


def test_the_dashboard_plots_infeasible_trials_on_the_measured_scale(tmp_path: Path) -> None:
    import optuna
    from optuna_dashboard import wsgi

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.create_study(
        study_name="stand-ins", storage=storage, directions=at.directions(SPACE)
    )
    at.name_metrics(study, SPACE)
    for i, (outcome, noise, throughput, drop) in enumerate(TRIALS):
        trial = study.ask()
        if i == 0:
            trial.set_user_attr(ua.BASELINE, True)
        frozen = study._storage.get_trial(trial._trial_id)
        metrics = {"noise_per_drop": noise, "throughput": throughput, "loss_drop": drop}
        result = {"outcome": outcome, "summary": {"metrics": metrics}}
        fill = at.stand_ins(SPACE, observed_metrics(study))
        record = at.complete_outcome(SPACE, frozen, result, None, fill)
        at.tell(study, frozen, record)

    app = wsgi(storage)
    summaries = _app_json(app, "/api/studies")["study_summaries"]
    (sid,) = [s["study_id"] for s in summaries if s["study_name"] == "stand-ins"]
    trials = _app_json(app, f"/api/studies/{sid}")["trials"]
    assert [t["state"] for t in trials] == ["Complete"] * len(TRIALS)
    measured = [t for t, row in zip(trials, TRIALS, strict=True) if math.isfinite(row[1])]
    stood_in = [t for t, row in zip(trials, TRIALS, strict=True) if not math.isfinite(row[1])]
    assert len(stood_in) == 3
    noise = [t["values"][0] for t in measured]
    throughput = [t["values"][1] for t in measured]
    for t in stood_in:
        value, rate = t["values"]
        assert isinstance(value, float) and math.isfinite(value), t["values"]
        # Past every value measured before it, by a margin, yet on the measured scale: the
        # plot's axis reaches at most 1.5 x the largest measured value (1e12 before).
        before = [m["values"][0] for m in measured if m["number"] < t["number"]]
        assert max(before) < value <= 1.5 * max(noise), (value, noise)
        assert isinstance(rate, float) and math.isfinite(rate)
        assert rate <= max(throughput) and rate >= 0.5 * min(throughput), (rate, throughput)
        # The dashboard greys it out: its constraints (the list it reads) say infeasible.
        assert t["constraints"] and max(t["constraints"]) > 0, t
    for t in measured:
        assert t["constraints"] and max(t["constraints"]) <= 0, t
    # Optuna's own view: infeasible by the named constraints too, values finite.
    for frozen in study.get_trials():
        assert all(math.isfinite(v) for v in frozen.values)
        feasible = all(c <= 0 for c in frozen.constraints.values())
        assert feasible == frozen.user_attrs[ua.FEASIBLE]
        assert feasible == math.isfinite(TRIALS[frozen.number][1])
