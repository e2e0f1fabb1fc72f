"""A study started again under a name used before (its folder removed, as the README says to
start afresh) logs to MLflow runs of its own: a review found its trials nested under the old
study's parent run beside the old study's numbers."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from assets import studies as h

pytestmark = pytest.mark.integration


def test_a_new_study_of_an_old_name_gets_its_own_parent_run(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    name = "reused"
    space = h.write(tmp_path, h.mlp_space(name, trials=2, steps=20))
    uri = h.sqlite_uri(tmp_path)
    args = ["study", "--space", str(space), "--quiet", "--tracking-uri", uri]
    first = h.autotune(args, tmp_path)
    assert first.returncode == 0, h.explain(first)
    shutil.rmtree(tmp_path / "autotune-studies" / name)
    second = h.autotune([*args, "--set", "knobs.lr=0.1"], tmp_path)
    assert second.returncode == 0, h.explain(second)

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(name)
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id], order_by=["attributes.start_time ASC"])
    parents = [r.info.run_id for r in runs if r.data.tags.get("autotune.role") == "study"]
    assert len(parents) == 2, "the second study continued the first one's run"
    lrs = []
    for parent in parents:
        children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent]
        assert len(children) == 2, (parent, [c.info.run_name for c in children])
        lrs.append({float(c.data.params["lr"]) for c in children})
    assert lrs[1] == {0.1} and 0.1 not in lrs[0], lrs  # each study's trials under its own run
