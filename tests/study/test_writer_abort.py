"""A study's MLflow runs ended KILLED while the writer's thread is logging trials (the watch of
Ray ends the driver at once on a SIGTERM to its whole process group, `signals.on_abort`): the
trial run the thread was writing is not left RUNNING, and the thread writes nothing after it
(a CI run found `trial-0002` RUNNING after such a stop: created just after the runs were ended,
then cut by the exit). Real SQLite MLflow store."""

from __future__ import annotations

import time
from pathlib import Path

from assets.logged import logged_outcome

from autotune.study import writer as w
from autotune.tracking.runs import TAG_STUDY


def _runs(client: object, experiment: str) -> list[tuple[str, str]]:
    found = client.search_runs([experiment], max_results=1000)  # type: ignore[attr-defined]
    return sorted((r.info.run_name, r.info.status) for r in found)


def test_runs_ended_while_trials_are_logged_leave_none_running_and_stop_the_writes(
    tmp_path: Path,
) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.create_experiment("abort")
    parent = client.create_run(experiment, run_name="study", tags={TAG_STUDY: "abort"})
    writer = w.MlflowWriter(client, experiment, parent.info.run_id, "abort", tmp_path)
    curve = [1.0 / (1 + s) for s in range(400)]  # a series long enough that a write takes a while
    for n in range(40):
        writer.log(logged_outcome(n, curve))
    deadline = time.monotonic() + 60
    while len(_runs(client, experiment)) < 3:  # the thread is writing its second trial or later
        assert time.monotonic() < deadline, "the writer logged nothing in 60 s"
        time.sleep(0.01)
    writer.end_killed()
    ended = _runs(client, experiment)
    assert [r for r in ended if r[1] == "RUNNING"] == [], ended
    assert ("study", "KILLED") in ended
    time.sleep(1.5)
    assert _runs(client, experiment) == ended  # nothing written after the runs were ended
    assert 0 < writer.not_logged() < 40  # what was queued and not written: --resume logs it
