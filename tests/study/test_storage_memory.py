"""An SQLite storage in memory is refused before anything is made: the study it would hold
ends with the command, and `show`/`export` then found nothing (a review ran a whole study on
`sqlite:///:memory:` and was told to `autotune show` it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.errors import StudyError
from autotune.study.storage import check_storage


@pytest.mark.parametrize(
    "url", ["sqlite:///:memory:", "sqlite://", "sqlite:///file:x?mode=memory&uri=true"]
)
def test_an_sqlite_storage_in_memory_is_refused(tmp_path: Path, url: str) -> None:
    with pytest.raises(StudyError, match=r"in memory lives only as long as this command"):
        check_storage(url, tmp_path / "s")
    assert list(tmp_path.iterdir()) == []


def test_an_sqlite_file_is_not(tmp_path: Path) -> None:
    check_storage(f"sqlite:///{tmp_path / 'o.db'}", tmp_path / "s")
