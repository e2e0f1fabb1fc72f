"""A migration stopped before its report (Ctrl-C, an error) leaves no empty folder it made for
the report, and a Ctrl-C says so (a black-box review found `-o mig5/` left empty, no word)."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.migrate.output import make_out, removed_if_stopped


def test_a_stopped_check_removes_the_empty_folders_it_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "a" / "b"
    made = make_out(out)
    assert made == [tmp_path / "a", out] and out.is_dir()
    with pytest.raises(KeyboardInterrupt), removed_if_stopped(made):
        raise KeyboardInterrupt
    assert not (tmp_path / "a").exists()
    assert "migrate interrupted: no report written" in capsys.readouterr().err

    made = make_out(out)
    with pytest.raises(RuntimeError), removed_if_stopped(made):
        (out / "migration.md").write_text("half")  # something written stays, and its folder
        raise RuntimeError("boom")
    assert (out / "migration.md").exists()
    assert "interrupted" not in capsys.readouterr().err

    there = tmp_path / "there"
    there.mkdir()
    with pytest.raises(KeyboardInterrupt), removed_if_stopped(make_out(there)):
        raise KeyboardInterrupt
    assert there.is_dir()  # not made for it: kept


def earlier_migration(out: Path) -> None:
    """What a migration that re-tuned left in its folder (a review: the new report was written
    beside these, read as the new migration's)."""
    out.mkdir()
    for name in ("migration.md", "migration-curve.png", "recipe-retuned.yaml", "mlflow.db"):
        (out / name).write_text("earlier")
    (out / "retune" / "s-migrated").mkdir(parents=True)


def test_a_folder_with_an_earlier_migration_is_refused(tmp_path: Path) -> None:
    from assets.cli import invoke, one_line_error
    from assets.recipes import make_recipe

    path = make_recipe().save(tmp_path / "r.yaml")
    out = tmp_path / "reuse"
    earlier_migration(out)
    before = sorted(p.name for p in out.iterdir())
    one_line_error(invoke("migrate", path, "-o", out), "holds an earlier migration", "--force")
    assert sorted(p.name for p in out.iterdir()) == before


def test_force_removes_the_earlier_migrations_files_and_keeps_the_store(tmp_path: Path) -> None:
    from autotune.migrate.output import previous

    out = tmp_path / "reuse"
    earlier_migration(out)
    previous(out, force=True)
    # the report is replaced when the new one is written; the MLflow store may be the study's
    assert sorted(p.name for p in out.iterdir()) == ["migration.md", "mlflow.db"]


def test_an_interrupted_migration_is_carried_on(tmp_path: Path) -> None:
    """No report: the earlier run was stopped; the same command runs again into the folder."""
    from autotune.migrate.output import previous

    out = tmp_path / "again"
    earlier_migration(out)
    (out / "migration.md").unlink()
    previous(out, force=False)
    assert (out / "retune").exists()
