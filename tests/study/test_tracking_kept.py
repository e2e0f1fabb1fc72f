"""One study, one MLflow store: a study continued without --tracking-uri logs to the store its
study.json records, not to $MLFLOW_TRACKING_URI or a new ./mlflow.db (a review: a --resume of a
study on an MLflow server made ./mlflow.db with the whole study logged again and rewrote
study.json to point at it), and a --tracking-uri of another store is refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from assets import studies as h
from assets.cli import invoke, one_line_error

from autotune.errors import StudyError
from autotune.study import folder


def _recorded(study_dir: Path, name: str, uri: str) -> None:
    study_dir.mkdir(parents=True)
    meta = folder.meta_record(study_dir, name, "sqlite:///x.db", tracking_uri=uri)
    folder.write_json(folder.study_json(study_dir), meta)


def test_a_continued_study_keeps_its_recorded_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    recorded = "postgresql://mlflow:s3cret@db:5432/mlflow"
    _recorded(tmp_path / "s", "kept", recorded)
    uri, said = folder.tracking_uri(None, tmp_path / "s", "kept")
    assert uri == recorded  # with its password: study.json keeps it for this
    assert said is not None and "mlflow:***@db" in said and "s3cret" not in said
    assert "the default" in said
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:1")  # the study's store first
    uri, said = folder.tracking_uri(None, tmp_path / "s", "kept")
    assert uri == recorded and said is not None and "$MLFLOW_TRACKING_URI" in said
    # the same store given, its password left to libpq: used as given, nothing to say
    given = "postgresql://mlflow@db:5432/mlflow"
    assert folder.tracking_uri(given, tmp_path / "s", "kept") == (given, None)


def test_another_tracking_uri_for_a_continued_study_is_refused(tmp_path: Path) -> None:
    _recorded(tmp_path / "s", "kept", f"sqlite:///{tmp_path / 'a.db'}")
    with pytest.raises(StudyError) as e:
        folder.tracking_uri(f"sqlite:///{tmp_path / 'b.db'}", tmp_path / "s", "kept")
    assert "a.db" in str(e.value) and "drop --tracking-uri" in str(e.value)
    # the same file by another spelling is the same store
    same = f"sqlite:///{tmp_path / 's' / '..' / 'a.db'}"
    assert folder.tracking_uri(same, tmp_path / "s", "kept")[1] is None


def test_a_new_study_or_another_studys_record_uses_the_usual_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    default = f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"
    assert folder.tracking_uri(None, tmp_path / "none", "new") == (default, None)
    _recorded(tmp_path / "s", "other", f"sqlite:///{tmp_path / 'a.db'}")
    assert folder.tracking_uri(None, tmp_path / "s", "new") == (default, None)


@pytest.mark.integration
def test_a_rerun_without_tracking_uri_logs_to_the_studys_store(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    name = "one-store"
    space = h.write(tmp_path, h.mlp_space(name, trials=2, steps=20))
    store = f"sqlite:///{tmp_path / 'a.db'}"
    args = ["study", "--space", str(space)]
    first = h.autotune([*args, "--quiet", "--tracking-uri", store], tmp_path)
    assert first.returncode == 0, h.explain(first)
    again = h.autotune([*args, "--resume"], tmp_path)
    assert again.returncode == 0, h.explain(again)
    assert "MLflow: logging to the study's store" in again.stdout, again.stdout
    assert not (tmp_path / "mlflow.db").exists(), "the study moved to a new ./mlflow.db"
    study_json = tmp_path / "autotune-studies" / name / "study.json"
    assert json.loads(study_json.read_text())["tracking_uri"] == store
    client = MlflowClient(tracking_uri=store)
    experiment = client.get_experiment_by_name(name)
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    assert len([r for r in runs if r.data.tags.get("autotune.role") == "study"]) == 1
    assert len([r for r in runs if r.data.tags.get("mlflow.parentRunId")]) == 2  # no twice

    other = f"sqlite:///{tmp_path / 'b.db'}"
    with h._cwd(tmp_path):
        refused = invoke("study", "--space", space, "--resume", "--tracking-uri", other)
    one_line_error(refused, "a.db", "drop --tracking-uri")
    assert not (tmp_path / "b.db").exists()
