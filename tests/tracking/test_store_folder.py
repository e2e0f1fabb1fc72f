"""bb4 F7: a local tracking store (SQLite file, file store) whose folder does not exist is
refused in one line naming the URI and the folder, and nothing is made: a typo in
`--tracking-uri sqlite:////nonexistent/dir/m.db` made /nonexistent/dir at the filesystem root
and exited 0. As an Optuna `--storage` in a missing folder is refused (`check_storage`)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from assets.cli import invoke, one_line_error
from assets.recipes import make_recipe
from assets.studies import mlp_space

from autotune import tracking
from autotune.errors import TrackingError


def _uris(missing: Path) -> list[str]:
    return [f"sqlite:///{missing / 'm.db'}", (missing / "mlruns").as_uri()]


@pytest.mark.parametrize("check", [tracking.check_uri, tracking.connect], ids=["check", "open"])
def test_a_store_in_a_missing_folder_is_refused_and_nothing_is_made(
    tmp_path: Path, check: object
) -> None:
    missing = tmp_path / "nonexistent" / "dir"
    for uri in _uris(missing):
        with pytest.raises(TrackingError) as info:
            check(uri)  # type: ignore[operator]
        message = str(info.value)
        assert uri in message and f"the folder {missing} does not exist" in message, message
        assert "\n" not in message
    assert list(tmp_path.iterdir()) == [], "a folder was made"


def test_at_the_filesystem_root_nothing_is_made() -> None:
    top = Path("/") / f"autotune-nonexistent-{uuid.uuid4().hex[:12]}"
    try:
        with pytest.raises(TrackingError, match=f"the folder {top}/dir does not exist"):
            tracking.connect(f"sqlite:///{top}/dir/m.db")
        assert not top.exists()
    finally:  # the old code made it: do not leave it behind
        for p in (top / "dir" / "mlruns", top / "dir" / "m.db", top / "dir", top):
            if p.is_file():
                p.unlink()
            elif p.is_dir():
                p.rmdir()


def test_a_file_in_the_way_is_named(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    with pytest.raises(TrackingError, match="afile is not a folder"):
        tracking.connect(f"sqlite:///{tmp_path}/afile/sub/m.db")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_a_store_in_a_folder_that_exists_is_still_made(tmp_path: Path) -> None:
    tracking.check_uri(f"sqlite:///{tmp_path}/m.db")
    tracking.check_uri((tmp_path / "mlruns").as_uri())  # the store's own folder is made
    client = tracking.connect(f"sqlite:///{tmp_path}/m.db")
    assert client.search_experiments() is not None
    assert (tmp_path / "m.db").is_file()


def test_verify_refuses_it_before_any_probe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    make_recipe().save(tmp_path / "r.yaml")
    uri = f"sqlite:///{tmp_path / 'no' / 'dir' / 'm.db'}"
    one_line_error(invoke("verify", "r.yaml", "--tracking-uri", uri), uri, "does not exist")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.yaml"], "something was made"


def test_migrate_refuses_it_and_removes_its_report_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    make_recipe().save(tmp_path / "r.yaml")
    uri = f"sqlite:///{tmp_path / 'no' / 'dir' / 'm.db'}"
    args = ["migrate", "r.yaml", "--no-audit", "-o", "out", "--tracking-uri", uri]
    one_line_error(invoke(*args), uri, f"the folder {tmp_path / 'no' / 'dir'} does not exist")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.yaml"], "something was made"


def test_study_refuses_it_before_anything_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    (tmp_path / "space.yaml").write_text(mlp_space("nofolder", trials=2))
    uri = f"sqlite:///{tmp_path / 'no' / 'dir' / 'm.db'}"
    result = invoke("study", "--space", "space.yaml", "--tracking-uri", uri)
    one_line_error(result, uri, "does not exist")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["space.yaml"], "something was made"
