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
