"""Where a study keeps the passwords of its stores (black-box review: `study.json` was mode 0644
and the Optuna attribute `autotune.mlflow` held the tracking URI with its password, readable by
anyone who opens the storage, optuna-dashboard included). The attribute keeps the URI redacted;
study.json keeps it whole for its owner alone (0600), and export from the study's folder still
reaches the study's MLflow runs through it."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from assets import studies as h

from autotune.tracking import redact

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy"),
    pytest.mark.filterwarnings("ignore:For backward compatibility, 'str' dtypes"),
]


def test_the_stores_password_is_the_owners_alone(tmp_path: Path) -> None:
    import optuna

    pg = h.pg_base()
    password = urlsplit(pg).password
    if not password:
        pytest.skip("AUTOTUNE_TEST_PG names no password")
    storage, tracking = f"{pg}/autotune_optuna", f"{pg}/autotune_mlflow"
    name = f"secret-{uuid.uuid4().hex[:10]}"
    space = h.write(tmp_path, h.mlp_space(name, trials=2, steps=10))
    args = ["study", "--space", str(space), "--storage", storage, "--tracking-uri", tracking]
    result = h.autotune(args, tmp_path, token=h.new_token(), timeout=300)
    assert result.returncode == 0, h.explain(result)

    attrs = optuna.load_study(study_name=name, storage=storage).user_attrs
    assert attrs["autotune.mlflow"]["uri"] == redact(tracking)
    assert f":{password}@" not in json.dumps(attrs), "a password in the Optuna storage"
    meta = tmp_path / "autotune-studies" / name / "study.json"
    assert meta.stat().st_mode & 0o777 == 0o600
    assert json.loads(meta.read_text())["tracking_uri"] == tracking  # its owner's, whole

    # From the study's folder, export finds the trial's MLflow run through study.json.
    out = h.autotune(["export", name, "-o", "r.yaml"], tmp_path, timeout=120)
    assert out.returncode == 0, h.explain(out)
    mlflow_src = yaml.safe_load((tmp_path / "r.yaml").read_text())["source"]["mlflow"]
    assert mlflow_src["trial_run_id"], mlflow_src
    assert mlflow_src["tracking_uri"] == redact(tracking)
