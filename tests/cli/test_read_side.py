"""The read-side commands (show, export, studies, ui, audit --compare, compare, verify's options)
on damaged or missing study files and stores, and on out-of-range options: one line naming the
file, key or option, exit status 2, and nothing created or left half-written. Real SQLite
studies told without Ray (`recorded_study`); the commands through typer's CliRunner."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import pytest
from assets.cli import invoke, one_line_error
from assets.studies import mlp_space, recorded_study

from autotune import space as sp
from autotune import study as st
from autotune.errors import RecipeError
from autotune.study import export as ex
from autotune.study import folder


def files_under(root: Path) -> dict[str, str]:
    """Every file under `root` (relative path: its content's hash)."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder holding study `bb` (3 of 3 trials finished), the working directory."""
    recorded_study(tmp_path, "bb", trials=3, finished=3)
    monkeypatch.chdir(tmp_path)
    return tmp_path


# --------------------------------------------------------------------------------------------
# 1. A corrupt study.json
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("{garbage\n", "not valid JSON"),
        ("[1, 2]\n", "not a study record"),
        ('{"name": "bb"}\n', "no 'storage' in it"),
    ],
)
def test_a_corrupt_study_json_is_named_and_the_study_still_listed(
    here: Path, text: str, why: str
) -> None:
    meta = here / "autotune-studies" / "bb" / "study.json"
    meta.write_text(text)
    before = files_under(here)
    for args in (["show", "bb"], ["export", "bb", "-o", "r.yaml"], ["ui", "bb"]):
        one_line_error(invoke(*args), f"{meta.resolve()}: {why}")
    listed = invoke("studies", "--json")
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.stdout)
    assert [(r["name"], r["study_dir"]) for r in rows] == [("bb", str(meta.parent.resolve()))]
    assert rows[0]["error"].startswith(f"{meta.resolve()}: {why}")
    table = invoke("studies")
    assert table.exit_code == 0 and "no studies" not in table.stdout, table.output
    assert f"bb     ?       cannot read: {meta.resolve()}: {why}" in table.stdout
    assert files_under(here) == before, "a read-only command wrote something"


# --------------------------------------------------------------------------------------------
# 3. export -o a folder; the atomic writers leave no temporary file
# --------------------------------------------------------------------------------------------


def test_export_to_a_folder_is_refused_up_front(here: Path) -> None:
    (here / "out").mkdir()
    one_line_error(invoke("export", "bb", "-o", "out"), "-o out: is a folder")
    one_line_error(invoke("export", "bb", "-o", "out", "--format", "env"), "-o out: is a folder")
    assert list((here / "out").iterdir()) == []
    assert not list(here.glob(".*.tmp")), "a temporary file was left beside the target"
    written = invoke("export", "bb", "-o", "out/r.yaml")
    assert written.exit_code == 0, written.output
    assert [p.name for p in (here / "out").iterdir()] == ["r.yaml"]


def test_the_atomic_writers_remove_their_temporary_file_on_failure(
    here: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recipe = ex.recipe_from_study("bb")
    (here / "taken").mkdir()
    # The folder appears after the check (another process): the rename fails, the temporary goes.
    monkeypatch.setattr(ex, "check_output", lambda out: None)
    with pytest.raises(RecipeError, match="-o taken: cannot write it"):
        ex.write(recipe, "yaml", "taken")
    assert sorted(p.name for p in here.iterdir() if p.name.endswith(".tmp")) == []
    with pytest.raises(IsADirectoryError):
        folder.write_json(here / "taken", {"a": 1})
    assert not (here / "taken.tmp").exists()


# --------------------------------------------------------------------------------------------
# 7. Read-only commands create no store
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["missing", "empty", "not optuna"])
def test_read_only_commands_create_no_optuna_database(here: Path, damage: str) -> None:
    db = here / "autotune-studies" / "bb" / "optuna.db"
    db.unlink()
    why = {
        "missing": "no such database file",
        "empty": "the database file is empty",
        "not optuna": "not an Optuna storage",
    }[damage]
    if damage == "empty":
        db.touch()
    elif damage == "not optuna":  # another SQLite store (an MLflow one, say): not filled in
        with sqlite3.connect(db) as con:
            con.execute("CREATE TABLE runs (id TEXT)")
        con.close()
    before = files_under(here)
    for args in (["show", "bb"], ["export", "bb"], ["show", "bb", "--storage", f"sqlite:///{db}"]):
        one_line_error(invoke(*args), f"{db.resolve()}: {why}")
    rows = json.loads(invoke("studies", "--json").stdout)
    assert [r["name"] for r in rows] == ["bb"]
    assert rows[0]["error"].startswith(f"sqlite:///{db.resolve()}: {why}")
    assert files_under(here) == before, "a read-only command created or changed a store"


def test_comparing_runs_creates_no_tracking_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    db = tmp_path / "mlflow.db"
    one_line_error(invoke("audit", "--compare", "x", "y"), f"{db}", "no such file", "no run 'x'")
    one_line_error(invoke("compare", "x", "y", "--no-log"), f"{db}", "no run 'x'")
    db.touch()
    one_line_error(invoke("audit", "--compare", "x", "y"), f"{db}", "an empty file")
    missing = tmp_path / "mlruns"
    one_line_error(
        invoke("audit", "--compare", "x", "y", "--tracking-uri", str(missing)), "no such folder"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlflow.db"]
    assert db.stat().st_size == 0


# --------------------------------------------------------------------------------------------
# 13, 14. Options out of range: ui --port, verify --steps
# --------------------------------------------------------------------------------------------


def test_ui_on_no_store_creates_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    one_line_error(invoke("ui"), f"{tmp_path / 'mlflow.db'}", "no such file", "autotune study")
    one_line_error(invoke("ui", "--tracking-uri", str(tmp_path / "mlruns")), "no such folder")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("port", ["99999", "0", "-1", "65536"])
def test_ui_port_out_of_range_names_the_option(
    port: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    one_line_error(invoke("ui", "--port", port), f"--port {port}: a port is a whole number")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("steps", ["5", "9", "0", "-3", "10000001", "99999999999"])
def test_verify_steps_bounded_as_probe_steps(steps: str, tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"  # --steps is checked before the recipe is read
    one_line_error(invoke("verify", missing, "--steps", steps), f"--steps {steps}", "10,000,000")


def test_verify_steps_at_the_bounds_go_on_to_the_recipe(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    for steps in ("10", "10000000"):
        one_line_error(invoke("verify", missing, "--steps", steps), "missing.yaml")


# --------------------------------------------------------------------------------------------
# 15. The plan shown after a resume with a larger budget
# --------------------------------------------------------------------------------------------


def test_show_after_a_resume_with_more_trials_counts_them_planned(here: Path) -> None:
    """A finished 3-trial study continued with budget.trials=4 (as `autotune study --set
    budget.trials=4` opens it: the stored space stays the first one) and a 4th trial told."""
    space = sp.loads(mlp_space("bb", trials=3), source="bb", overrides=["budget.trials=4"])
    study_dir = st.study_dir_for("bb", here)
    opts = st.StudyOptions(space=space, study_dir=study_dir)
    cond = sp.condition(space, platform="cpu")
    study = st.open_study(opts, st.open_storage(st.storage_url(opts, study_dir)), cond)
    trial = study.ask()
    st.suggest(trial, space, cond.searched)
    frozen = study._storage.get_trial(trial._trial_id)
    metrics = {"loss_cv": 0.01, "throughput": 90.0, "loss_drop": 0.5}
    knobs = {"lr": 0.003, **trial.params}
    result = {"outcome": "complete", "summary": {"metrics": metrics, "knobs": knobs}}
    st.tell(study, frozen, st.complete_outcome(space, frozen, result))

    shown = invoke("show", "bb")
    assert shown.exit_code == 0, shown.output
    assert "study bb: 4/4 trials — 4 complete" in shown.stdout, shown.stdout
    as_json = json.loads(invoke("show", "bb", "--json").stdout)
    assert as_json["trials"] == 4
    rows = json.loads(invoke("studies", "--json").stdout)
    assert [(r["finished"], r["total"]) for r in rows] == [(4, 4)]
