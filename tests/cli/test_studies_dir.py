"""`autotune studies --study-dir DIR` of a folder that does not exist is a user error (a
black-box review: "no studies under /nonexist", exit 0)."""

from __future__ import annotations

from pathlib import Path

from assets.cli import invoke, one_line_error


def test_studies_under_a_folder_that_does_not_exist_is_a_user_error(tmp_path: Path) -> None:
    """A typo in --study-dir is named, not answered "no studies under ..." with exit 0."""
    one_line_error(invoke("studies", "--study-dir", tmp_path / "nope"), "nope", "no such folder")
    (tmp_path / "f").write_text("")
    one_line_error(invoke("studies", "--study-dir", tmp_path / "f"), "not a folder")
    empty = tmp_path / "empty"
    empty.mkdir()
    result = invoke("studies", "--study-dir", empty)
    assert result.exit_code == 0 and "no studies under" in result.stdout
