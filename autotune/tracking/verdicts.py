"""The screen's verdicts judged again, written onto the trial runs.

A trial run is logged when the trial finishes, with the feasibility Optuna was told then
(`autotune.feasible`). With several trials at once, a trial may finish before the baseline, and
its constraints relative to the baseline were then judged vacuously. Once the screen is over the
study judges every screened trial again (`autotune.study.attrs.SCREEN_FEASIBLE`); this module
brings the runs' tags in line with that verdict, so the MLflow UI and `autotune show` agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from autotune.tracking.runs import TAG_ROLE, child_runs, is_complete, trial_number
from autotune.tracking.values import bool_str

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

TAG_FEASIBLE = "autotune.feasible"
TAG_TOLD = "autotune.feasible_told"
"""Set only on a run whose verdict changed: what Optuna was told when the trial finished."""


def set_feasible(
    client: MlflowClient, experiment_id: str, parent_run_id: str, verdicts: Mapping[int, bool]
) -> list[int]:
    """Set `autotune.feasible` on each completely logged trial run of `parent_run_id` whose
    tag differs from `verdicts[number]`; return the numbers of the runs changed."""
    changed: list[int] = []
    for run in child_runs(client, experiment_id, parent_run_id):
        number = trial_number(run)
        if number is None or number not in verdicts or not is_complete(run):
            continue
        if run.data.tags.get(TAG_ROLE) != "trial":
            continue
        want = bool_str(verdicts[number])
        told = run.data.tags.get(TAG_FEASIBLE)
        if told == want:
            continue
        if told is not None and run.data.tags.get(TAG_TOLD) is None:
            client.set_tag(run.info.run_id, TAG_TOLD, told)
        client.set_tag(run.info.run_id, TAG_FEASIBLE, want)
        changed.append(number)
    return sorted(changed)
