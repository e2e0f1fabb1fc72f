"""A copied study folder is listed, and offered, by the name commands accept: its folder's.

A black-box review: `cp -r autotune-studies/rvj autotune-studies/copy1`, then `autotune studies`
listed `rvj` (the recorded study name), `autotune show rvj` failed with "did you mean 'rvj'?;
studies here: rvj", and two copies were two identical `rvj` rows. `autotune show /abs/path`
named `./autotune-studies//abs/path`, a folder never looked at."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from assets import studies as h

from autotune import study as st
from autotune.errors import StudyError
from autotune.study import listing


def test_copies_are_listed_and_offered_by_their_folder_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = h.recorded_study(tmp_path / "a", "rvj", trials=3, finished=3)
    here = tmp_path / "b"
    for copy in ("copy1", "copy2"):
        shutil.copytree(original, here / "autotune-studies" / copy)
    monkeypatch.chdir(here)

    rows = [listing.describe(f) for f in listing.find_all()]
    assert [(r["name"], r.get("study"), r["finished"]) for r in rows] == [
        ("copy1", "rvj", 3),
        ("copy2", "rvj", 3),
    ]
    lines = listing.format_table(rows).splitlines()[1:]
    assert [line.split("  ")[0] for line in lines] == ["copy1 (study rvj)", "copy2 (study rvj)"]
    for row in rows:  # every listed name is one `show` accepts
        assert st.find_study(row["name"])[0].study_name == "rvj"
    with pytest.raises(StudyError) as e:
        st.find_study("rvj")
    assert "(did you mean 'copy1'?); studies here: copy1, copy2" in str(e.value)

    # a study in its own folder keeps its plain name
    (own,) = [listing.describe(f) for f in listing.find_all(tmp_path / "a" / "autotune-studies")]
    assert own["name"] == "rvj" and "study" not in own


def test_a_path_is_named_as_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for ref in (str(tmp_path / "gone"), "sub/gone"):
        with pytest.raises(StudyError) as e:
            st.find_study(ref)
        assert str(e.value).startswith(f"no study '{ref}': no such folder, and no --storage"), e
        assert "autotune-studies/" not in str(e.value)
