"""Black-box findings bb4 F8, F10, F11, F14 on the read side and the study's up-front checks:
`show` of a study whose baseline has not finished (stopped in its first seconds) or whose
driver runs now, `export` of a study where nothing finished, a malformed `--address` port, and
study folders that are moved or copied (their own optuna.db) or whose study.json is a link to a
device. Real SQLite Optuna studies told through the study's own code (`recorded_study`), the
real driver lock; the commands through typer's CliRunner."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from assets.cli import invoke, one_line_error
from assets.studies import mlp_space, recorded_study

from autotune import study as st
from autotune.errors import StudyError
from autotune.study import driver, folder, session


def files_under(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def show(*args: str) -> Any:
    result = invoke("show", *args)
    assert result.exit_code == 0, (result.output, result.exception)
    assert "Traceback" not in result.output
    return result


def load(name: str) -> Any:
    study, _, _, _ = st.find_study(name)
    return study


# --------------------------------------------------------------------------------------------
# F8: a study stopped before its baseline finished
# --------------------------------------------------------------------------------------------


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_show_of_a_study_whose_baseline_never_started_says_so(here: Path) -> None:
    recorded_study(here, "early", trials=3, finished=0)  # the baseline enqueued, not run
    before = files_under(here)
    text = show("early").stdout
    assert "study early: 0/3 trials — 0 complete, 0 diverged, 0 out of memory, 0 failed\n" in text
    assert (
        "baseline (trial 0, PyTorch defaults): has not finished (not started yet); run the "
        "study's `autotune study` command again (or add --resume) to resume it"
    ) in text
    assert "every trial" not in text and "decided at" not in text
    assert "no trial has finished yet" in text
    summary = json.loads(show("early", "--json").stdout)
    assert summary["baseline"] is None
    assert summary["baseline_unfinished"] == "not started"
    assert summary["in_progress"] is False and summary["driver"] is None
    assert summary["counts"]["failed"] == 0, "a trial that never ran is not a failure"
    assert files_under(here) == before, "show wrote something"


def test_show_of_a_study_interrupted_while_its_baseline_ran(here: Path) -> None:
    recorded_study(here, "cut", trials=3, finished=0)
    load("cut").ask()  # the baseline taken by a driver that then stopped: RUNNING
    text = show("cut").stdout
    assert "0/3 trials — 0 complete, 0 diverged, 0 out of memory, 0 failed, 1 interrupted" in text
    assert (
        "baseline (trial 0, PyTorch defaults): has not finished (interrupted while running)" in text
    )
    assert "every trial" not in text
    assert json.loads(show("cut", "--json").stdout)["baseline_unfinished"] == "interrupted"


def test_export_of_a_study_where_nothing_finished_says_it_was_interrupted(here: Path) -> None:
    recorded_study(here, "early", trials=3, finished=0)
    line = one_line_error(invoke("export", "early", "-o", "r.yaml"), "none has finished yet")
    assert "failed" not in line and "every trial" not in line, line
    assert "resume" in line
    assert not (here / "r.yaml").exists()


def test_export_of_an_interrupted_study_speaks_of_its_finished_trials(here: Path) -> None:
    # The baseline finished and broke the constraint it is its own reference for: no candidate;
    # trial 1 was running when the driver stopped.
    bad = [{"loss_cv": 0.1, "throughput": 100.0, "loss_drop": -1.0}]
    recorded_study(here, "half", trials=3, finished=1, metrics=bad)
    load("half").ask()
    result = invoke("export", "half", "-o", "r.yaml")
    line = one_line_error(result, "every finished trial (1) diverged, failed or broke")
    text = show("half").stdout
    assert "no feasible trial: every finished trial (1) diverged" in text, (line, text)


# --------------------------------------------------------------------------------------------
# F11: a study whose driver runs now
# --------------------------------------------------------------------------------------------


def test_show_of_a_study_whose_driver_runs_says_in_progress(here: Path) -> None:
    study_dir = recorded_study(here, "live", trials=4, finished=0)
    load("live").ask()  # the baseline, running
    lock = folder.lock_file(study_dir)
    with session.driver_lock(study_dir):
        note = lock.read_text()
        assert session.driver_running(study_dir) == note
        text = show("live").stdout
        summary = json.loads(show("live", "--json").stdout)
    assert lock.read_text() == note, "show changed the lock file"
    assert "0/4 trials — 0 complete, 0 diverged, 0 out of memory, 0 failed, 1 running" in text
    assert f"in progress: its driver ({note}) is running it" in text
    assert "baseline (trial 0, PyTorch defaults): running" in text
    assert "interrupted" not in text and "every trial" not in text, text
    assert "no feasible trial yet (0 finished): the study is in progress" in text
    assert summary["in_progress"] is True and summary["driver"] == note
    assert summary["baseline_unfinished"] == "running"
    # The driver gone (its lock released): the same trial was interrupted.
    assert session.driver_running(study_dir) is None
    after = show("live").stdout
    assert "1 interrupted" in after and "in progress" not in after
    assert json.loads(show("live", "--json").stdout)["in_progress"] is False


def test_show_while_the_driver_runs_says_the_pick_may_change(here: Path) -> None:
    study_dir = recorded_study(here, "going", trials=4, finished=3)
    load("going").ask()
    with session.driver_lock(study_dir):
        text = show("going").stdout
    assert "in progress: its driver (pid " in text and "the pick may change" in text
    assert "1 running" in text and "pick (balanced" in text


def test_a_driver_waits_out_a_reader_of_its_lock(tmp_path: Path) -> None:
    """`driver_running` holds the lock shared for an instant: a driver starting then is not
    told that another driver runs the study."""
    import fcntl

    study_dir = tmp_path / "s"
    study_dir.mkdir()
    lock = folder.lock_file(study_dir)
    lock.write_text("")
    fd = os.open(lock, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # a reader, mid-test
    import threading

    threading.Timer(0.2, lambda: os.close(fd)).start()
    with session.driver_lock(study_dir):
        assert session.driver_running(study_dir) is not None
    assert session.driver_running(tmp_path / "none") is None, "no lock file: not running"


# --------------------------------------------------------------------------------------------
# F10: a malformed --address port
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("address", ["notahost:xyz", "127.0.0.1:99999", "ray://127.0.0.1:x1"])
def test_a_malformed_address_port_is_one_line(here: Path, address: str) -> None:
    space = here / "space.yaml"
    space.write_text(mlp_space("addr", trials=2))
    line = one_line_error(
        invoke("study", "--space", space, "--address", address, "--tracking-uri", "sqlite:///m.db"),
        "cannot reach the Ray cluster",
        address,
        "port is not a whole number from 1 to 65535",
    )
    assert "ValueError" not in line
    assert sorted(p.name for p in here.iterdir()) == ["space.yaml"], "something was made"


def test_a_malformed_storage_port_is_one_line(here: Path) -> None:
    space = here / "space.yaml"
    space.write_text(mlp_space("db", trials=2))
    url = "postgresql://u:secret@db.example:70000/x"
    result = invoke("study", "--space", space, "--storage", url, "--tracking-uri", "sqlite:///m.db")
    line = one_line_error(result, "cannot reach the Optuna storage", "port is not a whole number")
    assert "secret" not in line


# --------------------------------------------------------------------------------------------
# F14: a study folder is self-contained
# --------------------------------------------------------------------------------------------


class _Run:
    """What `_write_study_json` reads of the study's MLflow writer."""

    experiment_id = "1"
    parent = "abc"


def written_by_driver(study_dir: Path, name: str) -> None:
    """study.json as the driver writes it (the default storage, in the folder)."""
    opts = st.StudyOptions(space=None, study_dir=study_dir)  # type: ignore[arg-type]
    url = st.storage_url(opts, study_dir)
    driver._write_study_json(study_dir, name, url, "sqlite:///m.db", _Run())  # type: ignore[arg-type]


def corrupt(db: Path) -> None:
    db.write_bytes(db.read_bytes()[:5000])


@pytest.mark.parametrize("format_", ["now", "before storage_file"])
def test_a_copied_study_folder_reads_its_own_database(here: Path, format_: str) -> None:
    root = here / "autotune-studies"
    study_dir = recorded_study(here, "orig", trials=3, finished=3)
    if format_ == "now":
        written_by_driver(study_dir, "orig")
        meta = json.loads(folder.study_json(study_dir).read_text())
        assert meta["storage_file"] == "optuna.db"
        assert meta["storage"] == f"sqlite:///{study_dir.resolve() / 'optuna.db'}"
    shutil.copytree(study_dir, root / "copy")
    corrupt(root / "copy" / "optuna.db")
    own = (root / "copy" / "optuna.db").resolve()
    one_line_error(invoke("show", "copy"), f"sqlite:///{own}")
    one_line_error(invoke("export", "copy", "-o", "r.yaml"), f"sqlite:///{own}")
    rows = {r["name"] + str(r.get("error") is not None): r for r in _studies()}
    assert rows["origFalse"]["finished"] == 3
    assert f"sqlite:///{own}" in rows["copyTrue"]["error"], "the copy is listed as unreadable"
    # Its database whole again: the copy reads as the study it is a copy of.
    (root / "copy" / "optuna.db").write_bytes((study_dir / "optuna.db").read_bytes())
    assert "study orig: 3/3 trials" in show("copy").stdout
    (root / "copy" / "optuna.db").write_bytes(b"")
    one_line_error(invoke("show", "copy"), str(own), "the database file is empty")


@pytest.mark.parametrize("format_", ["now", "before storage_file"])
def test_a_moved_study_folder_still_reads(here: Path, format_: str) -> None:
    study_dir = recorded_study(here, "mv", trials=3, finished=2)
    if format_ == "now":
        written_by_driver(study_dir, "mv")
    elsewhere = here / "elsewhere" / "autotune-studies"
    elsewhere.mkdir(parents=True)
    study_dir.rename(elsewhere / "mv")
    os.chdir(here / "elsewhere")
    assert "study mv: 2/3 trials" in show("mv").stdout
    [row] = _studies()
    assert row["finished"] == 2 and str(elsewhere / "mv") in row["storage"]


def test_a_storage_outside_the_folder_is_read_where_it_is(here: Path) -> None:
    """A user's --storage (here an SQLite file named optuna.db, outside the folder) keeps its
    URL: a copy of the folder reads the study there."""
    (here / "db").mkdir()
    url = f"sqlite:///{here / 'db' / 'optuna.db'}"
    study_dir = recorded_study(here, "ext", trials=3, finished=2, storage=url)
    record = folder.meta_record(study_dir, "ext", url)
    assert record["storage_file"] is None
    folder.study_json(study_dir).write_text(json.dumps(record))
    shutil.copytree(study_dir, here / "autotune-studies" / "ext2")
    for name in ("ext", "ext2"):
        assert "study ext: 2/3 trials" in show(name).stdout
        assert folder.read_meta(here / "autotune-studies" / name)["storage"] == url


def test_a_study_json_linked_to_a_device_is_listed_as_unreadable(here: Path) -> None:
    recorded_study(here, "good", trials=3, finished=1)
    bad = here / "autotune-studies" / "zero"
    bad.mkdir()
    (bad / "study.json").symlink_to("/dev/zero")
    gone = here / "autotune-studies" / "dangling"
    gone.mkdir()
    (gone / "study.json").symlink_to(here / "nothing.json")
    rows = {r["name"]: r for r in _studies()}
    assert sorted(rows) == ["dangling", "good", "zero"]
    assert "not a regular file" in rows["zero"]["error"], rows["zero"]
    assert "cannot read it" in rows["dangling"]["error"]
    assert "error" not in rows["good"]
    table = invoke("studies")
    assert table.exit_code == 0 and "zero" in table.stdout and "cannot read" in table.stdout


def test_read_meta_refuses_a_study_json_too_large_to_be_one(tmp_path: Path) -> None:
    folder.study_json(tmp_path).write_text(" " * (folder.META_MAX_BYTES + 1))
    with pytest.raises(StudyError, match="larger than 1024 KiB"):
        folder.read_meta(tmp_path)


def _studies() -> list[dict[str, Any]]:
    listed = invoke("studies", "--json")
    assert listed.exit_code == 0, listed.output
    return json.loads(listed.stdout)
