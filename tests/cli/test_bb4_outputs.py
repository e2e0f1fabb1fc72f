"""bb4 F13: a command's output path (`export -o`, `compare -o`, `migrate -o`'s files) that is
a FIFO, a symlink or a folder. A symlink is written through (its target replaced, the link
kept); anything else that is not a regular file is refused in one line naming what it is,
exit status 2, nothing written. Real SQLite studies and MLflow runs; the CLI in-process."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from assets.cli import invoke, one_line_error
from assets.logged import logged_outcome
from assets.studies import recorded_study
from typer.testing import Result

from autotune import tracking
from autotune.recipe import Recipe


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder holding study `bb` (3 of 3 trials finished), the working directory."""
    recorded_study(tmp_path, "bb", trials=3, finished=3)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _is_fifo(path: Path) -> bool:
    return stat.S_ISFIFO(os.lstat(path).st_mode)


# --------------------------------------------------------------------------------------------
# export -o
# --------------------------------------------------------------------------------------------


def test_export_to_a_fifo_is_refused_and_the_fifo_kept(here: Path) -> None:
    os.mkfifo(here / "pipe")
    for fmt in ("yaml", "env"):
        one_line_error(
            invoke("export", "bb", "-o", "pipe", "--format", fmt),
            "-o pipe: not a regular file (a FIFO); give a file path",
        )
        assert _is_fifo(here / "pipe"), "the FIFO was replaced"
    assert not list(here.glob(".*tmp")), "a temporary file was left behind"


def test_export_through_a_symlink_replaces_its_target_and_keeps_the_link(here: Path) -> None:
    (here / "real.yaml").write_text("old\n")
    (here / "link.yaml").symlink_to("real.yaml")
    result = invoke("export", "bb", "-o", "link.yaml")
    assert result.exit_code == 0, result.output
    assert (here / "link.yaml").is_symlink() and os.readlink(here / "link.yaml") == "real.yaml"
    assert Recipe.load(here / "real.yaml").name == Recipe.load(here / "link.yaml").name
    assert not list(here.glob(".*tmp"))
    # A dangling link: its target is made, the link kept.
    (here / "new.yaml").symlink_to("sub/made.yaml")
    (here / "sub").mkdir()
    result = invoke("export", "bb", "-o", "new.yaml", "--format", "env")
    assert result.exit_code == 0, result.output
    assert (here / "new.yaml").is_symlink() and "export" in (here / "sub" / "made.yaml").read_text()


def test_export_through_a_symlink_to_a_fifo_or_a_folder_is_refused(here: Path) -> None:
    os.mkfifo(here / "pipe")
    (here / "to_pipe").symlink_to("pipe")
    one_line_error(invoke("export", "bb", "-o", "to_pipe"), "-o to_pipe: not a regular file")
    assert (here / "to_pipe").is_symlink() and _is_fifo(here / "pipe")
    (here / "dir").mkdir()
    (here / "to_dir").symlink_to("dir")
    one_line_error(invoke("export", "bb", "-o", "to_dir"), "-o to_dir: is a folder")
    assert (here / "to_dir").is_symlink() and list((here / "dir").iterdir()) == []


def test_export_under_a_file_says_it_is_a_file_not_a_missing_folder(here: Path) -> None:
    # `-o r.yaml/x` with r.yaml a file said "folder r.yaml does not exist"
    (here / "r.yaml").write_text("a recipe\n")
    for out in ("r.yaml/x", "r.yaml/x/y.yaml"):
        line = one_line_error(invoke("export", "bb", "-o", out), f"-o {out}: r.yaml is a file")
        assert "does not exist" not in line
    one_line_error(invoke("export", "bb", "-o", "no/x"), "-o no/x: folder no does not exist")
    assert (here / "r.yaml").read_text() == "a recipe\n"


def test_export_of_a_trial_the_study_has_not_names_its_trials(here: Path) -> None:
    # `--pick 'trial 99'` of a 3-trial study said "not a candidate (not a feasible ...)"
    line = one_line_error(invoke("export", "bb", "--pick", "trial 99"), "no trial 99")
    assert "its trials are 0 to 2" in line and "not a candidate" not in line


# --------------------------------------------------------------------------------------------
# compare -o: as export -o
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Two logged trial runs with the same loss curve."""
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    client = tracking.connect(uri)
    experiment_id = tracking.ensure_experiment(client, "curves")
    parent = tracking.ensure_study_run(
        client, experiment_id, "curves", space_yaml="name: curves\n", params={}, tags={}
    )
    loss = [2.0 / (1 + i) for i in range(20)]
    ids = {
        name: tracking.log_trial(client, experiment_id, parent, "curves", logged_outcome(i, loss))
        for i, name in enumerate(("a", "b"))
    }
    return {"uri": uri, **ids}


def _compare(runs: dict[str, str], out: Path) -> Result:
    return invoke(
        "compare", runs["a"], runs["b"], "--tracking-uri", runs["uri"], "--no-log", "-o", out
    )


def test_compare_to_a_fifo_is_refused_and_the_fifo_kept(
    runs: dict[str, str], tmp_path: Path
) -> None:
    os.mkfifo(tmp_path / "pipe")
    one_line_error(
        _compare(runs, tmp_path / "pipe"),
        f"-o {tmp_path / 'pipe'}: not a regular file (a FIFO); give a file path",
    )
    assert _is_fifo(tmp_path / "pipe")
    # Refused before the store is looked for, as export refuses it before the study is read.
    missing = f"sqlite:///{tmp_path / 'none.db'}"
    result = invoke("compare", "x", "y", "--tracking-uri", missing, "-o", tmp_path / "pipe")
    one_line_error(result, "not a regular file (a FIFO)")
    assert not (tmp_path / "none.db").exists()


def test_compare_to_a_folder_is_refused_as_not_a_regular_file(
    runs: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "plots").mkdir()
    one_line_error(
        _compare(runs, tmp_path / "plots"),
        f"-o {tmp_path / 'plots'}: not a regular file (a folder)",
    )
    assert list((tmp_path / "plots").iterdir()) == []


def test_compare_through_a_symlink_writes_its_target(runs: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "real.png").write_bytes(b"old")
    (tmp_path / "link.png").symlink_to("real.png")
    result = _compare(runs, tmp_path / "link.png")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "link.png").is_symlink()
    assert (tmp_path / "real.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(tmp_path.glob(".*tmp"))


# --------------------------------------------------------------------------------------------
# migrate -o: the files it writes in the folder
# --------------------------------------------------------------------------------------------


def test_migrate_refuses_a_fifo_where_its_report_goes_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mig").mkdir()
    os.mkfifo(tmp_path / "mig" / "migration.md")
    one_line_error(
        invoke("migrate", "no-such-recipe.yaml", "-o", "mig"),
        "-o mig/migration.md: not a regular file (a FIFO)",
    )
    assert _is_fifo(tmp_path / "mig" / "migration.md")
